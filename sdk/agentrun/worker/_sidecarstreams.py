"""The sidecar's artifact requests: bodies streamed through, never held whole.

``PUT /v1/artifacts/<key>`` (a ``Content-Length`` body of up to
:data:`~agentrun.api.bounds.ARTIFACT_BYTES`) streams the body into the journal as it
arrives (:meth:`Sidecar.put_artifact`: one part in memory); ``GET /v1/artifacts/<key>``
streams a committed artifact out, ``Range: bytes=<from>-`` (206) resuming a read that was
cut. Pure parts (:func:`content_length`, :func:`range_start`) are decided here; the server
(:mod:`agentrun.worker._sidecarserver`) only moves the bytes.

Why a body must have a length: the upload's size bound is then checked before a byte is
stored, and a body that ends early (a main container killed mid-send) is told from one
that is whole, so a cut body is never committed as an artifact.
"""

from __future__ import annotations

import re

from agentrun import objectstore as s3
from agentrun.api import bounds
from agentrun.worker._sidecarsessions import BadRequest

PATH_PREFIX = "/v1/artifacts/"
_RANGE = re.compile(r"bytes=(?P<start>[0-9]{1,20})-")


def content_length(value: str | None, *, chunked: bool) -> int:
    """The body's length from its header; :class:`BadRequest` unless it is one."""
    if chunked or value is None:
        raise BadRequest("send an artifact with a Content-Length (not chunked): its size is "
                         "checked before anything is stored")
    if (len(value) > 20 or not value.isascii() or not value.isdigit()
            or int(value) > bounds.ARTIFACT_BYTES):
        raise BadRequest(f"an artifact is 0..{bounds.ARTIFACT_BYTES} bytes, not "
                         f"Content-Length {value[:30]!r}")
    return int(value)


def range_start(value: str | None, *, size: int) -> int | None:
    """Where a ranged GET starts (``bytes=<from>-`` only), None without a Range header;
    :class:`BadRequest` for any other form or a start past the end."""
    if value is None:
        return None
    found = _RANGE.fullmatch(value.strip())
    if found is None:
        raise BadRequest(f"Range {value[:60]!r}: only bytes=<from>- is served (resuming a read)")
    start = int(found["start"])
    if start >= size:  # nothing left to send (an empty artifact has no range at all)
        raise BadRequest(f"Range starts at {start}, at or past the end of the artifact's "
                         f"{size} bytes")
    return start


class Body:
    """A request body of ``length`` bytes read through from ``stream``: ``read(n)`` as a
    file's; :class:`BadRequest` when it ends early or stalls (nothing is then committed:
    the upload is aborted)."""

    def __init__(self, stream: s3.Readable, length: int) -> None:
        self.stream, self.left, self.length = stream, length, length

    def read(self, size: int, /) -> bytes:
        if self.left == 0:
            return b""
        want = min(size, self.left)
        try:
            data = self.stream.read(want)
        except OSError as error:  # a read timeout: the client stopped sending
            raise BadRequest(f"the body stopped at byte {self.length - self.left} of "
                             f"{self.length}: {error}") from None
        if not data:
            raise BadRequest(f"the body ended at byte {self.length - self.left} of "
                             f"{self.length}: nothing was committed")
        self.left -= len(data)
        return data

    @property
    def whole(self) -> bool:
        return self.left == 0
