"""Artifacts: files and streams too large for a step's result, streamed into the journal.

Terms:

- an *artifact* is bytes of any size up to :data:`~agentrun.api.bounds.ARTIFACT_BYTES`
  (a model checkpoint, a dataset, a rendered report) that a step produces. It is stored
  as one object, ``<run prefix>/<slot>/<attempt>/artifact/<key>``, by a streamed upload
  (multipart past one part: :meth:`agentrun.objectstore.ObjectStore.put_stream`) that
  never holds more than one part (:data:`PART_BYTES`) in memory, and computes the
  content's sha256 and size as it goes;
- its *record* (kind ``artifact``: the object's URI, size and sha256) is committed like a
  step's, durable on return (an artifact costs too much to redo to be left staged), so
  "skip if committed" holds for artifacts as for steps.

Why one object per attempt and key, not content-addressed like payloads: a stream's digest
is known only at its end, and renaming after the fact would copy gigabytes. The name is
still written once (``If-None-Match``): the same attempt storing the same key again (a
retry after its record's commit failed) finds it taken and verifies the content by its
digest before committing to it. A stale attempt's late upload is under its own attempt's
name, which no trusted head reaches: the journal's fencing holds unchanged.

Reading (:class:`Artifact`): a stream of chunks (:meth:`Artifact.open`) whose sha256 is
checked at its end, resumed by the store client after a cut connection (ranged reads
pinned to the object's ETag); :meth:`Artifact.download` writes a file through ``<path>.part``
and resumes from what an earlier, interrupted download left there.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from agentrun import objectstore as s3
from agentrun.api import bounds
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker._journal import Journal, JournalRefused, JournalUnavailable

PART_BYTES = 8 * 1024 * 1024  # the one part held in memory while uploading
CHUNK_BYTES = 1024 * 1024  # what a reader holds at a time
Source = str | os.PathLike[str] | s3.Readable


class _Bounded:
    """``source`` read through, refusing past :data:`bounds.ARTIFACT_BYTES` (the upload
    is then aborted by the store client: nothing is left)."""

    def __init__(self, source: s3.Readable) -> None:
        self.source, self.read_so_far = source, 0

    def read(self, size: int, /) -> bytes:
        data = self.source.read(size)
        self.read_so_far += len(data)
        if self.read_so_far > bounds.ARTIFACT_BYTES:
            raise records.RecordError(f"an artifact is at most {bounds.ARTIFACT_BYTES} bytes; "
                                      "this stream is longer: nothing was stored")
        return data


@dataclass(kw_only=True)
class _Outage:
    """A stream's outage told to the journal's report (the slot shows it) while it lasts,
    and cleared once the store answers again: only one this stream told, since a commit
    of the same journal may be failing meanwhile (its own outage, its own to clear)."""

    journal: Journal
    what: str
    told_one: bool = False

    def told(self, failure: str) -> None:
        self.told_one = True
        self.journal.tell(f"{self.what}: {failure}")

    def over(self) -> None:
        if self.told_one:
            self.told_one = False
            self.journal.tell(None)


@dataclass(frozen=True, kw_only=True)
class Artifact:
    """A committed artifact: ``size`` bytes whose sha256 is ``sha256``, at ``uri``."""

    key: str
    uri: str
    size: int
    sha256: str
    journal: Journal

    @property
    def _object(self) -> str:
        return self.uri.removeprefix(f"s3://{self.journal.objects.bucket}/")

    def open(self, *, offset: int = 0) -> Iterator[bytes]:
        """Its bytes from ``offset`` on, a chunk at a time. Read from the start, they are
        checked against the committed sha256 at the end (:class:`records.RecordError` if
        they are not the committed ones: replaced or damaged in the store); from an offset,
        against the committed size and the object's ETag only (the bytes before are the
        reader's, as :meth:`download` does with its ``.part`` file)."""
        if not 0 <= offset <= self.size:
            raise records.RecordError(f"artifact {self.key}: offset {offset} is not within "
                                      f"its {self.size} bytes")
        return self._chunks(offset=offset, digest=hashlib.sha256() if offset == 0 else None)

    def _chunks(self, *, offset: int, digest: hashlib._Hash | None) -> Iterator[bytes]:
        try:
            telling = _Outage(journal=self.journal, what=f"reading artifact {self.key}")
            download = self.journal.objects.get_stream(
                self._object, offset=offset, chunk_bytes=CHUNK_BYTES,
                retries=s3.retries_within(self.journal.retry_seconds),
                within=self.journal.retry_seconds, told=telling.told)
        except s3.S3Unavailable as error:
            raise JournalUnavailable(f"reading artifact {self.key}: {error}") from None
        except s3.S3Error as error:
            raise records.RecordError(f"artifact {self.key}: cannot read {self.uri}: "
                                      f"{error}") from None
        with download:
            if download.size != self.size:
                raise records.RecordError(f"artifact {self.key}: {self.uri} holds "
                                          f"{download.size} bytes, not the {self.size} committed")
            try:
                for chunk in download:
                    if digest is not None:
                        digest.update(chunk)
                    telling.over()
                    yield chunk
            except s3.S3Unavailable as error:
                raise JournalUnavailable(f"reading artifact {self.key}: {error}") from None
            except s3.S3Error as error:
                raise records.RecordError(f"artifact {self.key}: {error}") from None
        if digest is not None and digest.hexdigest() != self.sha256:
            raise records.RecordError(f"artifact {self.key}: {self.uri} does not match its "
                                      "digest (changed or damaged)")

    def download(self, path: str | os.PathLike[str]) -> Path:
        """Write it to ``path`` (through ``<path>.part``, renamed once verified); bytes an
        interrupted download left in ``<path>.part`` are kept and the rest fetched."""
        target = Path(path)
        partial = target.with_name(target.name + ".part")
        digest = hashlib.sha256()
        kept = 0
        if partial.exists():
            with partial.open("rb") as found:
                while chunk := found.read(CHUNK_BYTES):
                    if kept + len(chunk) > self.size:
                        break
                    digest.update(chunk)
                    kept += len(chunk)
        try:
            with partial.open("r+b" if partial.exists() else "wb") as out:
                out.truncate(kept)
                out.seek(kept)
                for chunk in self._chunks(offset=kept, digest=digest):
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
        except records.RecordError:
            partial.unlink(missing_ok=True)  # not these bytes (another file's .part?): next
            raise                            # time from the start, never this mismatch again
        partial.replace(target)
        return target


@dataclass(kw_only=True)
class Artifacts:
    """The artifacts of one attempt over its ``steps`` (the prefix) and ``journal``."""

    steps: prefix.Steps
    journal: Journal

    def _name(self, key: str, *, attempt: int) -> str:
        return f"{self.journal.prefix}/{self.journal.slot}/{attempt}/artifact/{key}"

    def _own(self, record: records.Record) -> bool:
        """Whether ``record``'s URI is this slot's journal's artifact of its key."""
        pattern = (re.escape(self.journal.uri(f"{self.journal.prefix}/{self.journal.slot}/"))
                   + bounds.ATTEMPT_NUMBER_PATH + "/artifact/" + re.escape(record.key))
        return record.ref is not None and re.fullmatch(pattern, record.ref) is not None

    def artifact(self, key: str, source: Source) -> Artifact:
        """Skip if committed (and still stored, whole), else stream ``source`` (a path, or
        anything with ``read(n)``) into the journal and commit its record, durably."""
        records.check_step_key(key)
        found = self.steps.prefix.get(key)
        if found is not None and self._stored(found):
            self.steps.done.append(key)
            return self._of(found)
        if found is not None:
            self.steps.repeated.append(key)
        attempt = self.steps.prefix.attempt
        name = self._name(key, attempt=attempt)
        if isinstance(source, str | os.PathLike):
            with open(source, "rb") as opened:
                size = os.fstat(opened.fileno()).st_size
                streamed = self._put(name, opened, part_bytes=s3.part_bytes_for(
                    size, least=PART_BYTES) if size <= bounds.ARTIFACT_BYTES else PART_BYTES)
        else:
            streamed = self._put(name, source, part_bytes=PART_BYTES)
        record = records.Record(attempt=attempt, digest=streamed.sha256, key=key,
                                kind=records.Kind.ARTIFACT, ref=self.journal.uri(name),
                                size=streamed.size)
        if not streamed.written:  # this attempt stored this key before: the same bytes?
            for _ in self._of(record).open():
                pass  # read to its end: the digest is checked there
        self.steps.commit(record, durable=True)
        return self._of(record)

    def committed(self, key: str) -> Artifact | None:
        """The artifact committed under ``key`` and still stored, else None."""
        found = self.steps.prefix.get(key)
        return self._of(found) if found is not None and self._stored(found) else None

    def _put(self, name: str, source: IO[bytes] | s3.Readable, *,
             part_bytes: int) -> s3.Streamed:
        telling = _Outage(journal=self.journal, what=f"storing artifact {name}")
        try:
            streamed = self.journal.objects.put_stream(
                name, _Bounded(source), part_bytes=part_bytes, if_none_match=True,
                retries=s3.retries_within(self.journal.retry_seconds),
                within=self.journal.retry_seconds, told=telling.told)
        except s3.S3Unavailable as error:
            raise JournalUnavailable(f"storing artifact {name}: {error}") from None
        except s3.S3Error as error:
            raise records.RecordError(f"cannot store artifact {name}: {error}") from None
        telling.over()
        return streamed

    def _stored(self, record: records.Record) -> bool:
        """Whether a committed artifact is still there at its size (its digest is checked
        when it is read: reading gigabytes to decide a skip would cost what it saves). A
        store that does not answer for the journal's retry is raised
        (:class:`JournalUnavailable`), never taken for "not stored"."""
        if record.kind is not records.Kind.ARTIFACT or not self._own(record):
            return False
        name = self._of(record)._object
        try:  # a store that does not answer: waited for as a commit would be
            head = self.journal.retrying(f"reading artifact {record.key}",
                                         lambda: self.journal.objects.head(name))
        except s3.S3Error as error:
            if error.status == 404 or error.code == "NoSuchKey":
                return False
            raise JournalRefused(f"reading artifact {record.key}: {error}") from None
        return head.size == record.size

    def _of(self, record: records.Record) -> Artifact:
        assert record.ref is not None
        return Artifact(key=record.key, uri=record.ref, size=record.size, sha256=record.digest,
                        journal=self.journal)
