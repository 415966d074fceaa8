"""Streams: objects written and read a part or a chunk at a time, never whole in memory
(a worker's artifacts run to gigabytes), and the uploads a killed writer leaves.

Unlike the rest of the client, these requests are retried here (``_patience``): the
caller cannot retry them, since a stream's source is read once. A part is retried from
memory (the part just read is still held), a cut read resumes at the byte after the last
one handed over, pinned by ``If-Match`` to the object it started on.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable

from agentrun.objectstore import _parts as parts
from agentrun.objectstore._client import (
    LIST_BODY_BYTES,
    Client,
    S3Error,
    S3Unavailable,
    header,
)
from agentrun.objectstore._download import Download
from agentrun.objectstore._parts import PART_BYTES, Source, Streamed
from agentrun.objectstore._patience import BACKOFF, RETRIES, Patience, retrying

_UPLOADS_PAGE = 1000  # ListMultipartUploads' own maximum on AWS
_UPLOADS_LIMIT = 100_000
_ABSENT = ("NoSuchKey", "NoSuchUpload")


class ObjectStore(Client):
    """One bucket of an S3-compatible store: whole objects (:class:`Client`) and streams."""

    def put_stream(self, key: str, source: Source, *, part_bytes: int = PART_BYTES,
                   if_none_match: bool = False, retries: int = RETRIES,
                   backoff: float = BACKOFF, within: float | None = None,
                   told: Callable[[str], object] | None = None) -> Streamed:
        """Write ``key`` from ``source`` (a binary stream's ``read(n)``, or an iterable of
        bytes chunks), one part of ``part_bytes`` in memory at a time; the whole content's
        size and sha256, computed as it went by.

        Content shorter than a part: one PUT. Otherwise a multipart upload, its parts
        numbered in order (exactly ``part_bytes`` is an upload of one part); a stream
        over :data:`MAX_PARTS` parts is a ``ValueError`` (``part_bytes_for(size)`` picks a
        part size that fits), and so is a ``part_bytes`` S3 refuses (5 MiB to 5 GiB),
        before any request. Each request is retried (see the module; ``within`` and
        ``told``: as :class:`Patience` says); an upload that
        cannot finish, for any reason (the store, the source, too many parts), is
        aborted, best effort, and the error raised: no parts are left to take storage.
        What does leave an upload: a writer killed outright, and a CreateMultipartUpload
        that got no answer yet made one (the retry makes another);
        :meth:`abort_uploads` removes those.

        ``if_none_match``: only if ``key`` is absent (``If-None-Match: *`` on the PUT or on
        CompleteMultipartUpload, checked as the object is made; SeaweedFS 4.48 honours
        both, AWS S3 since 2024); present: ``written`` False and the store unchanged.
        An attempt that got no answer may have made the object: a later 412 (or a
        NoSuchUpload, the upload gone with its completion) is then taken as ours when
        the object's ETag is the one these parts make (:func:`parts.multipart_etag`).
        """
        parts.check_part_bytes(part_bytes)
        patience = Patience(retries=retries, backoff=backoff, within=within, told=told)
        digest, size = hashlib.sha256(), 0
        pieces = parts.split(source, part_bytes)
        part = next(pieces, b"")
        digest.update(part)
        size += len(part)
        if len(part) < part_bytes:
            etag, written = self._put_whole(key, part, if_none_match=if_none_match,
                                            patience=patience)
            return Streamed(size=size, sha256=digest.hexdigest(), etag=etag, parts=0,
                            written=written)
        what = f"UPLOAD {key}"
        upload = retrying(lambda: parts.upload_id(self._answer(
            self._request("POST", key, query={"uploads": ""}), ok=(200,), what=what,
            most=parts.ANSWER_BYTES), what=what), patience=patience)
        etags: list[str] = []
        try:
            while part:
                if len(etags) == parts.MAX_PARTS:
                    raise parts.too_many_parts(part_bytes)
                etags.append(self._put_part(key, upload, len(etags) + 1, part,
                                            patience=patience))
                del part  # dropped before the next is read: one part in memory
                part = next(pieces, b"")
                digest.update(part)
                size += len(part)
            etag, written = self._complete(key, upload, etags, if_none_match=if_none_match,
                                           patience=patience)
            if not written:
                self._abort(key, upload)  # its parts are kept until aborted
        except BaseException:
            self._abort(key, upload)
            raise
        return Streamed(size=size, sha256=digest.hexdigest(), etag=etag, parts=len(etags),
                        written=written)

    def _put_whole(self, key: str, data: parts.Part, *, if_none_match: bool,
                   patience: Patience) -> tuple[str, bool]:
        what, unanswered = f"PUT {key}", list[bool]()
        headers = {"If-None-Match": "*"} if if_none_match else {}

        def put() -> tuple[str, bool]:
            response = self._request("PUT", key, body=data, headers=headers)
            self._answer(response, ok=(200, 412) if if_none_match else (200,), what=what)
            return header(response, "etag", what=what), response.status == 200

        etag, written = retrying(put, patience=patience, unanswered=unanswered)
        if not written and unanswered:  # a PUT that got no answer may have been ours
            ours = f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'
            if self._made(key, ours):
                return ours, True
        return (etag if written else ""), written

    def _put_part(self, key: str, upload: str, number: int, part: parts.Part, *,
                  patience: Patience) -> str:
        what = f"UPLOAD {key} part {number}"

        def put() -> str:
            response = self._request("PUT", key, body=part,
                                     query={"partNumber": str(number), "uploadId": upload})
            self._answer(response, ok=(200,), what=what)
            if not (etag := header(response, "etag", what=what)):
                raise S3Error(status=200, code="", message=f"{what}: no ETag")
            return etag

        return retrying(put, patience=patience)

    def _complete(self, key: str, upload: str, etags: list[str], *, if_none_match: bool,
                  patience: Patience) -> tuple[str, bool]:
        what, unanswered = f"COMPLETE {key}", list[bool]()
        body = parts.complete_body(etags)
        headers = {"If-None-Match": "*"} if if_none_match else {}

        def complete() -> str:
            response = self._request("POST", key, query={"uploadId": upload}, body=body,
                                     headers=headers)
            return parts.completed_etag(self._answer(response, ok=(200,), what=what,
                                                     most=parts.ANSWER_BYTES), what=what)

        try:
            return retrying(complete, patience=patience,
                            unanswered=unanswered), True
        except S3Error as error:
            refused = if_none_match and error.code == "PreconditionFailed"
            if not (refused or error.code == "NoSuchUpload") or isinstance(error, S3Unavailable):
                raise
            ours = parts.multipart_etag(etags)
            if unanswered and self._made(key, ours):
                return ours, True
            if refused:
                return "", False
            raise

    def _made(self, key: str, etag: str) -> bool:
        """Whether ``key`` is the object of ``etag`` (a HEAD; unknown counts as not)."""
        try:
            return parts.same_etag(etag, self.head(key).etag)
        except S3Error:
            return False

    def _abort(self, key: str, upload: str) -> None:
        """Drop an upload's parts, best effort: the error that led here is the one told."""
        with contextlib.suppress(S3Error):
            self._answer(self._request("DELETE", key, query={"uploadId": upload}),
                         ok=(200, 204, 404), what=f"ABORT {key}")

    def get_stream(self, key: str, *, offset: int = 0, chunk_bytes: int = parts.CHUNK_BYTES,
                   window_bytes: int = parts.WINDOW_BYTES, etag: str | None = None,
                   retries: int = RETRIES, backoff: float = BACKOFF,
                   within: float | None = None,
                   told: Callable[[str], object] | None = None) -> Download:
        """``key``'s bytes from ``offset`` on, as a :class:`Download`: an iterator of
        chunks of ``chunk_bytes`` at most, one in memory at a time, which knows the
        object's ``size`` and ``etag``; each request asks for ``window_bytes``. The
        first request is made here (a missing key is ``S3Error`` NoSuchKey now, not at
        the first chunk); ``etag``: only that object (else S3Error PreconditionFailed);
        ``offset`` at the object's end: no chunks. A body cut short is read again from
        the byte after the last one handed over (see :class:`Download`; ``within`` and
        ``told``: as :class:`Patience` says)."""
        if offset < 0 or chunk_bytes < 1 or window_bytes < 1:
            raise ValueError(f"get_stream: offset {offset}, chunk_bytes {chunk_bytes}, "
                             f"window_bytes {window_bytes}: want offset >= 0 and the "
                             "others >= 1")
        return Download(self, key, offset=offset, chunk_bytes=chunk_bytes,
                        window_bytes=window_bytes, etag=etag,
                        patience=Patience(retries=retries, backoff=backoff, within=within,
                                          told=told))

    def abort_uploads(self, prefix: str, *, limit: int = _UPLOADS_LIMIT,
                      page: int = _UPLOADS_PAGE) -> int:
        """Abort every incomplete multipart upload under ``prefix`` (a writer killed
        mid-upload leaves its parts taking storage, seen by no listing of keys); how many,
        at most ``limit``; ``page``: uploads listed a request (tests force rounds with a
        small one). An upload still being written is aborted too: its writer's next part
        or completion fails (NoSuchUpload), so call this when none may write.

        Each round lists the first page of uploads (no markers) and aborts them all, until
        a listing is empty, as :meth:`delete_prefix` does with keys: SeaweedFS 4.48 orders
        uploads by upload id and reads ``key-marker`` unlike AWS, so paging by markers
        would skip some there. An upload listed again after its abort is an error, not a
        loop. A blank prefix is refused: it would reach every writer in the bucket."""
        if not prefix:
            raise ValueError("abort_uploads wants a prefix: a blank one reaches every writer")
        count, what, last = 0, f"LIST UPLOADS {prefix}", set[tuple[str, str]]()
        while count < limit:
            found, more = self._uploads(prefix, page=min(page, limit - count))
            if again := last.intersection(found):
                raise S3Error(status=200, code="", message=(
                    f"{what}: {len(again)} uploads listed again after their abort"))
            for key, upload in found[:limit - count]:
                self._answer(self._request("DELETE", key, query={"uploadId": upload}),
                             ok=(200, 204, 404), what=f"ABORT {key}")
            count, last = count + len(found[:limit - count]), set(found)
            if not found or not more:
                break
        return count

    def uploads(self, prefix: str, *, limit: int = _UPLOADS_PAGE) -> list[tuple[str, str]]:
        """The incomplete multipart uploads under ``prefix`` (key, upload id), at most
        ``limit`` (1..1000: one listing) of them."""
        if not prefix or not 1 <= limit <= _UPLOADS_PAGE:
            raise ValueError(f"uploads: prefix {prefix!r}, limit {limit}: want a prefix and "
                             f"1..{_UPLOADS_PAGE}")
        return self._uploads(prefix, page=limit)[0]

    def _uploads(self, prefix: str, *, page: int) -> tuple[list[tuple[str, str]], bool]:
        """One listing of the first ``page`` uploads under ``prefix``; whether more are."""
        what = f"LIST UPLOADS {prefix}"
        query = {"uploads": "", "prefix": prefix, "max-uploads": str(page)}
        answer = self._answer(self._request("GET", None, query=query), ok=(200,),
                              what=what, most=LIST_BODY_BYTES)
        return parts.listed_uploads(answer, what=what)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under ``prefix`` and first abort its incomplete uploads (so a
        run's deleted journal leaves nothing, the parts of a killed writer included);
        how many keys. Uploads first: one completed meanwhile is then a key, deleted
        with the rest. A store without multipart uploads (501 NotImplemented) has none
        to leave; any other refusal is raised (the credentials need
        ``s3:ListBucketMultipartUploads`` and ``s3:AbortMultipartUpload`` on AWS)."""
        if not prefix:
            raise ValueError("delete_prefix wants a prefix: a blank one empties the bucket")
        try:
            self.abort_uploads(prefix)
        except S3Error as error:
            if error.status != 501 and error.code != "NotImplemented":
                raise
        return super().delete_prefix(prefix)
