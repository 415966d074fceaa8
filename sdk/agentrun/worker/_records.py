"""Durable records: write-once annotations on the attempt's own Lease.

A *record* is one small JSON document stored as the annotation
``record.agentrun.dev/<key>`` of the Lease of the attempt that wrote it (where and why:
docs/design/workers-and-records.md). It carries its key, its kind, the attempt
number (provenance: admission checks that it is the Lease's own), the sha256 of its
payload, and the payload itself (inline, when its canonical JSON is at most
:data:`~agentrun.api.bounds.INLINE_PAYLOAD_BYTES`) or a reference (a URI in a
:class:`PayloadStore`, fsspec's ``file://`` on a mounted volume built in). A record is
*committed* once the API server accepted the annotation; it never changes or goes
(admission), and the operator's tombstone seals the Lease, so nothing is added after
the attempt ended.

The encoding and decoding (canonical JSON, :func:`decode`, :func:`on_lease`) are the one
codec of :mod:`agentrun.api.records`, shared with the operator; they are re-exported here.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import IO, Any, Protocol

from agentrun import rest
from agentrun.api import bounds
from agentrun.api.records import (  # re-exported: the SDK's callers use them from here
    DEEP,
    JSON,
    PREFIX,
    Kind,
    Record,
    RecordError,
    bound_to,
    canonical,
    check_key,
    check_step_key,
    decode,
    digest,
    encode,
    on_lease,
    text_nesting,
    written_by,
)
from agentrun.core.attempts import observations

__all__ = ["DEEP", "JSON", "PREFIX", "Kind", "Record", "RecordError", "bound_to", "canonical",
           "check_key",
           "check_step_key", "decode", "digest", "encode", "on_lease", "text_nesting",
           "written_by"]


class PayloadStore(Protocol):
    """Where payloads too large to be inline go, content-addressed by sha256."""

    def put(self, *, sha256: str, data: bytes) -> str:
        """Store ``data`` (whose sha256 is ``sha256``) and return its URI."""

    def get(self, uri: str, *, size: int) -> bytes:
        """The bytes stored at ``uri``, at most ``size`` of them (the caller verifies
        their digest); :class:`RecordError` if ``uri`` is not this store's or holds
        more."""


@contextmanager
def _regular(fs: Any, path: str, *, uri: str) -> Iterator[IO[bytes]]:
    """``path`` of ``fs`` open for reading if it is a regular file, else
    :class:`RecordError`. A local name is opened without blocking and checked on the open
    descriptor: a FIFO's ``open`` would wait for a writer and a device's bytes may never
    end, and a check before opening could be raced by a swap of the name."""
    from fsspec.implementations.local import LocalFileSystem

    if not isinstance(fs, LocalFileSystem):  # an object store has no FIFOs nor devices
        with fs.open(path, "rb") as found:
            yield found
        return
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RecordError(f"{uri[:200]} is not a regular file (a FIFO, a device, a "
                          "directory): a payload is read only from one")
    with os.fdopen(fd, "rb") as found:
        yield found


class FsspecStore:
    """A payload store under ``base`` (any fsspec URL; ``file:///mnt/records`` built in,
    object stores through fsspec's backends installed beside it). Each payload is the file
    ``<base>/sha256/<digest>``: the same content always has the same name, so a payload
    written twice (two attempts) is the same file; one found damaged (a write cut short
    by a kill) is written again, and one that is not a regular file is replaced. It reads
    only its own names (a record's URI is whatever a predecessor wrote: another scheme,
    another path, a device), only regular files, and never more bytes than the record
    says."""

    def __init__(self, base: str) -> None:
        if importlib.util.find_spec("fsspec") is None:
            raise RecordError("FsspecStore needs fsspec, the SDK's `fsspec` extra: "
                              "pip install 'agentrun-worker[fsspec]'")
        self.base = base.rstrip("/")
        self._own = re.compile(re.escape(self.base) + r"/sha256/[0-9a-f]{64}")

    def put(self, *, sha256: str, data: bytes) -> str:
        import fsspec  # only a worker that stores by reference needs it loaded

        uri = f"{self.base}/sha256/{sha256}"
        fs, path = fsspec.core.url_to_fs(uri)
        if fs.exists(path):
            try:
                with _regular(fs, path, uri=uri) as found:
                    if digest(found.read(len(data) + 1)) == sha256:
                        return uri  # already there, intact (one cut short is written again)
            except RecordError:  # a FIFO, a device: written through, it could block too
                fs.rm_file(path)
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        with fs.open(path, "wb") as out:
            out.write(data)
        return uri

    def get(self, uri: str, *, size: int) -> bytes:
        import fsspec

        if not self._own.fullmatch(uri):
            raise RecordError(f"{uri[:200]} is not this store's: a payload is read only "
                              f"from {self.base}/sha256/<sha256>")
        fs, path = fsspec.core.url_to_fs(uri)
        with _regular(fs, path, uri=uri) as found:
            data: bytes = found.read(size + 1)
        if len(data) > size:
            raise RecordError(f"{uri} holds more than the {size} bytes its record says")
        return data


def storable(*, key: str, payload: JSON, store: PayloadStore | None) -> bytes:
    """``payload``'s canonical bytes if record ``key`` can hold it (inline, or by reference
    in ``store``); else :class:`RecordError` says why. Writes nothing."""
    data = canonical(payload)
    if len(data) > bounds.PAYLOAD_BYTES:
        raise RecordError(f"record {key}: the payload is {len(data)} bytes; a record holds "
                          f"at most {bounds.PAYLOAD_BYTES} (store it elsewhere and record "
                          "its URI and sha256)")
    if len(data) > bounds.INLINE_PAYLOAD_BYTES and store is None:
        raise RecordError(f"record {key}: the payload is {len(data)} bytes, more than the "
                          f"{bounds.INLINE_PAYLOAD_BYTES} kept inline, and no payload store "
                          "is configured (give the worker one, e.g. a file:// volume)")
    return data


def make(*, key: str, kind: Kind, attempt: int, payload: JSON,
         store: PayloadStore | None = None) -> Record:
    """A record of ``payload``: inline if small enough, else put in ``store`` by reference."""
    data = storable(key=key, payload=payload, store=store)
    sha = digest(data)
    if len(data) <= bounds.INLINE_PAYLOAD_BYTES:
        return Record(attempt=attempt, digest=sha, inline=payload, key=check_key(key),
                      kind=kind, size=len(data))
    assert store is not None  # storable() refuses a large payload with nowhere to go
    uri = store.put(sha256=sha, data=data)
    return Record(attempt=attempt, digest=sha, key=check_key(key), kind=kind, ref=uri,
                  size=len(data))


def payload(record: Record, *, store: PayloadStore | None) -> JSON:
    """The record's payload, verified against its digest (fetched from ``store`` by
    reference, at most the record's ``size``). Raises :class:`RecordError` when it cannot
    be had intact, whatever the reference holds, so a step is repeated, never crashed on."""
    if record.ref is None:
        return record.inline
    if record.kind is Kind.ARTIFACT:  # bytes of any size, never read whole: worker.artifact
        raise RecordError(f"record {record.key} is an artifact ({record.size} bytes): read "
                          "it with worker.artifact, as a stream")
    if store is None:
        raise RecordError(f"record {record.key} is stored by reference ({record.ref}) and "
                          "no payload store is configured to read it")
    try:
        data = store.get(record.ref, size=record.size)
    except OSError as error:
        raise RecordError(f"record {record.key}: cannot read {record.ref}: {error}") from None
    if digest(data) != record.digest:
        raise RecordError(f"record {record.key}: the payload at {record.ref} does not match "
                          "its digest (changed or damaged)")
    if text_nesting(data) > bounds.PAYLOAD_DEPTH:
        raise RecordError(f"record {record.key}: the payload at {record.ref}: {DEEP}")
    try:
        return json.loads(data)
    except ValueError as error:  # not JSON, not UTF-8
        raise RecordError(f"record {record.key}: the payload at {record.ref} is not JSON: "
                          f"{bounds.clip(str(error), limit=200)}") from None


class StoreUnavailable(RecordError):
    """The payload store did not answer for as long as it was retried: nothing is known
    about what it holds, so nothing may be concluded (a committed step is not "missing")."""


class RecordConflict(RecordError):
    """The key is already committed with other content (write-once: it stays as it is)."""


class RecordRefused(RecordError):
    """The API server refused the record (admission: not the holder, or the Lease is
    tombstoned; its message names the policy): the lease is no longer this attempt's."""


class RecordLimit(RecordError):
    """The attempt's Lease holds as many records as an attempt may commit
    (:data:`~agentrun.api.bounds.MAX_RECORDS`; an effect's intent also needs room for its
    outcome). Found on the Lease as read, before anything is sent: the lease is fine, but
    this attempt can commit no more records."""


CONFLICT_RETRIES = 5  # 409s in a row before giving up (each one a fresh read)


@dataclass(kw_only=True)
class LeaseRecords:
    """Records on the attempt's own Lease ``namespace``/``lease``, through ``api``.

    A commit reads the Lease and adds the annotation by a merge patch that carries the
    ``resourceVersion`` read, so it lands only on the state it was decided on; a 409
    (someone wrote in between: a renewal, another record) re-reads and tries again while
    the key is still free. Committing the same content twice is a no-op (the retry after
    a lost answer); other content under a committed key raises :class:`RecordConflict`.
    While the Lease as read is still this attempt's (held by it, not tombstoned), the
    count admission allows is checked on it (exact: the patch lands on that version or not
    at all), so a full Lease is :class:`RecordLimit`, never mistaken for a refusal that
    means the lease is lost (:class:`RecordRefused`, which admission's answer decides).
    An effect's intent is committed only with room left for its outcome: the call it
    announces must be recordable.
    """

    api: rest.Rest
    namespace: str
    lease: str
    attempt: int

    @property
    def path(self) -> str:
        return rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                               namespace=self.namespace, name=self.lease)

    def read(self) -> dict[str, Record]:
        found, _ = on_lease(self.api.request("GET", self.path))
        return found

    def stage(self, record: Record) -> Record:
        """A record on the Lease is durable once written: staging is committing."""
        return self.commit(record)

    def flush(self) -> None:
        """Nothing is ever staged here (:meth:`stage` commits)."""

    def close(self) -> None:
        """Nothing to end: every record was durable on return."""

    def commit(self, record: Record) -> Record:
        if record.attempt != self.attempt:
            raise RecordError(f"record {record.key} is of attempt {record.attempt}; this "
                              f"worker is attempt {self.attempt}")
        value = encode(record)
        for _ in range(CONFLICT_RETRIES):
            lease = self.api.request("GET", self.path)
            metadata = lease.get("metadata") or {}
            existing = (metadata.get("annotations") or {}).get(record.annotation)
            if existing is not None:
                if existing == value:
                    return record
                raise RecordConflict(f"record {record.key} is already committed by attempt "
                                     f"{self.attempt} with other content; records are "
                                     "write-once: use a new key")
            held = sum(1 for name in metadata.get("annotations") or {}
                       if name.startswith(PREFIX))
            needed = 2 if record.kind is Kind.EFFECT_INTENT else 1  # the outcome's room
            view = observations.lease_view(lease)
            ours = not view.tombstoned and view.holder == self.lease  # else admission says
            if ours and held + needed > bounds.MAX_RECORDS:
                raise RecordLimit(
                    f"record {record.key} not committed: Lease {self.lease} holds {held} "
                    f"records, and an attempt commits at most {bounds.MAX_RECORDS}"
                    f"{' (an effect needs two: intent and outcome)' if needed > 1 else ''}; "
                    "nothing was sent. Commit fewer, larger records (one step's result can "
                    "hold many values)")
            body = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                                 "annotations": {record.annotation: value}}}
            try:
                self.api.request("PATCH", self.path, body=body, content_type=rest.MERGE_PATCH)
            except rest.ApiError as error:
                if error.status == 409:
                    continue
                if error.status in (403, 422):
                    raise RecordRefused(f"record {record.key} refused: "
                                        f"{bounds.clip(error.message)}") from None
                raise
            return record
        raise RecordError(f"record {record.key}: the Lease changed under each of "
                          f"{CONFLICT_RETRIES} attempts to commit it; try again")
