"""A ranged read that resumes: :class:`Download`, what ``ObjectStore.get_stream`` returns."""

from __future__ import annotations

from types import TracebackType

import urllib3

from agentrun.objectstore import _parts as parts
from agentrun.objectstore._client import Client, S3Error, S3Unavailable, byte_count, header
from agentrun.objectstore._patience import Patience


class Download:
    """An object's bytes from an offset on, a chunk at a time: an iterator of ``bytes``
    (each at most ``chunk_bytes``; one held at a time), to be read to its end or closed
    (``with`` does): a body left half read holds its connection until then.

    ``size``: the object's whole size, not what is left after the offset; ``etag``: the
    object's, as its first answer gave it (or as the caller pinned it); ``position``: the
    offset of the next byte to be handed over (``size`` once all were).

    Windows: each GET asks for ``window_bytes`` from ``position`` (``Range: bytes=<p>-<q>``,
    see ``parts.WINDOW_BYTES`` for why never open-ended); a window read whole is followed
    by the next, pinned to the first answer's ETag, on the same kept-alive connection.

    Resuming: a body cut short (a reset, a read timeout, an end before its length) is
    asked for again from ``position`` with ``If-Match: <etag>``: an object replaced
    meanwhile is ``S3Error`` PreconditionFailed (412), never the rest of another object
    after the start of this one (an answer whose ETag or size differs is refused the same
    way, should a store ignore ``If-Match``). At most ``patience.retries`` attempts in a
    row that deliver nothing (a cut, or a request for a resume or the next window that got
    no answer), and none begun past ``patience.within`` seconds of them, waiting as
    ``patience`` says before each (and telling it); a chunk delivered starts the count
    and the outage's clock again; then :class:`S3Unavailable`. A store that ignores
    ``Range`` altogether answers the first request with the whole object (a 200), which
    is read as one window.
    """

    def __init__(self, store: Client, key: str, *, offset: int, chunk_bytes: int,
                 window_bytes: int, etag: str | None, patience: Patience) -> None:
        self._store, self.key, self.position, self.etag = store, key, offset, etag or ""
        self._chunk, self._window, self._patience = chunk_bytes, window_bytes, patience
        self._failures = 0
        self._since = 0.0  # when the failures in a row began (on the patience's clock)
        self._tried = patience.clock()  # when the latest request or read began
        self._response: urllib3.BaseHTTPResponse | None = None
        self._end = offset  # the byte after the current answer's last one
        self.size: int | None = None
        while True:  # the first window: a request that got no answer is asked again
            try:
                self._tried = self._patience.clock()
                self._open()
                break
            except S3Unavailable as error:
                if self._gives_up():
                    raise
                self._patience.wait(self._failures - 1, str(error))
        self._failures = 0

    def __iter__(self) -> Download:
        return self

    def __next__(self) -> bytes:
        assert self.size is not None  # known once the first answer came
        while self.position < self.size:
            if self._response is not None and self.position == self._end:
                self.close()  # this window read whole: its connection back to the pool
                self._open_next()
                continue
            if self._response is None:
                self._resume()
                continue
            try:
                self._tried = self._patience.clock()
                chunk = self._response.read(min(self._chunk, self._end - self.position),
                                            decode_content=False)
            except (urllib3.exceptions.HTTPError, OSError) as error:
                self._cut(str(error))
                continue
            if not chunk:
                self._cut(f"the body ended at byte {self.position} of {self.size}")
                continue
            self.position += len(chunk)
            self._failures = 0
            return chunk
        self.close()
        raise StopIteration

    def close(self) -> None:
        """Give the connection back (to the pool if the body was read to its end)."""
        response, self._response = self._response, None
        if response is not None:
            if self.position != self._end:
                response.close()  # unread bytes: the connection cannot be reused
            response.release_conn()

    def __enter__(self) -> Download:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _cut(self, reason: str) -> None:
        """The body stopped at ``position``: count it, give up as ``patience`` says,
        else wait before the resume."""
        self.close()
        if self._gives_up():
            raise S3Unavailable(status=0, code="", message=(
                f"GET {self.key}: cut at byte {self.position} of {self.size}, "
                f"{self._failures} times in a row: {reason}"))
        self._patience.wait(self._failures - 1, f"GET {self.key}: cut at byte "
                                                f"{self.position}: {reason}")

    def _gives_up(self) -> bool:
        """Count a failure in a row; whether the patience is spent."""
        self._failures += 1
        if self._failures == 1:  # an outage, dated from its first failed try's start
            self._since = self._tried
        return self._patience.gives_up(self._failures - 1, since=self._since)

    def _resume(self) -> None:
        if not self.etag:  # nothing to pin the object by: the rest could be another's
            raise S3Unavailable(status=0, code="", message=(
                f"GET {self.key}: cut at byte {self.position}, and no ETag to resume with"))
        self._open_next()

    def _open_next(self) -> None:
        """The window from :attr:`position`; a request that got no answer is a cut."""
        try:
            self._tried = self._patience.clock()
            self._open()
        except S3Unavailable as error:
            self._cut(str(error))

    def _open(self) -> None:
        """Ask for the bytes from ``position`` and check the answer is for them: its
        first byte, the same ETag and size as before."""
        what = f"GET {self.key} from byte {self.position}"
        response = self._store._request("GET", self.key, headers=parts.read_headers(
            self.position, self.etag, window=self._window))
        status = response.status
        if status == 416 and self.size is None and self._at_end(response, what=what):
            return
        # a 200 only from the start: a store that ignored the range sends the whole object
        if status != 206 and (status != 200 or self.position):
            if status not in (200, 206):
                self._store._answer(response, ok=(), what=what)  # raises the error it is
            response.close()
            response.release_conn()
            raise S3Error(status=status, code="", message=f"{what}: a {status}, not 206")
        try:
            self._check(response, what=what)
        except S3Error:
            response.close()
            response.release_conn()
            raise
        self._response = response

    def _at_end(self, response: urllib3.BaseHTTPResponse, *, what: str) -> bool:
        """Whether a 416 says :attr:`position` is the object's very end (nothing to read:
        an empty object, or an offset at its size), and then the size known. Its
        ``Content-Range: bytes */<size>`` says so; without one (RFC 9110 only says SHOULD:
        Ceph RGW leaves it out for an empty object) a 416 from byte 0 is an empty object."""
        try:
            value = response.headers.get("content-range")
            total = (parts.content_range(value, what=what)[2] if value
                     else 0 if self.position == 0 else None)
            if total != self.position:
                return False  # past the end: the error it is (InvalidRange) is raised
            Client._read(response, parts.ANSWER_BYTES, what=what)
        except BaseException:
            response.close()
            response.release_conn()
            raise
        self.size = self._end = total
        return True

    def _check(self, response: urllib3.BaseHTTPResponse, *, what: str) -> None:
        etag = header(response, "etag", what=what)
        if response.status == 206:
            start, last, total = parts.content_range(
                header(response, "content-range", what=what), what=what)
            if start != self.position or last is None or total is None or last < start \
                    or last >= min(total, start + self._window):
                raise S3Error(status=206, code="", message=(
                    f"{what}: answered bytes {start}-{last} of {total}"))
            end = last + 1
            length = response.headers.get("content-length")
            if length is not None and byte_count(length, what=what) != end - start:
                raise S3Error(status=206, code="", message=(
                    f"{what}: answered bytes {start}-{last} in a body of {length}"))
        else:
            total = end = byte_count(header(response, "content-length", what=what),
                                     what=what)
        changed = self.etag and not parts.same_etag(self.etag, etag)
        if changed or (self.size is not None and total != self.size):
            raise S3Error(status=412, code="PreconditionFailed", message=(
                f"{what}: the object changed (ETag {etag}, {total} bytes; read as "
                f"{self.etag}, {self.size} bytes)"))
        self.size, self.etag, self._end = total, self.etag or etag, end
