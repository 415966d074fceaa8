"""Streams without a request: how a stream is cut into parts, what S3 is sent and answers
for a multipart upload, and the headers of a ranged read (pure, so tested without a store).

Terms. A *part*: the bytes of one UploadPart, numbered from 1; every part but the last is
exactly ``part_bytes`` long (S3: 5 MiB to 5 GiB, the last any size, 10,000 parts at
most). An *upload*: one multipart upload, named by the ``UploadId`` the store gives it,
holding its parts until CompleteMultipartUpload makes them one object or
AbortMultipartUpload drops them; until then they take storage and are seen by
ListMultipartUploads only, never by a listing of keys (hence ``abort_uploads``).
"""

from __future__ import annotations

import hashlib
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeAlias, runtime_checkable

from agentrun.objectstore._client import (
    ETAG_CHARS,
    S3Error,
    S3Unavailable,
    local,
    parse_xml,
    texts,
)

MIB = 1024 * 1024
MIN_PART_BYTES = 5 * MIB  # S3's least part but the last (SeaweedFS too: EntityTooSmall)
MAX_PART_BYTES = 5 * 1024 * MIB
MAX_PARTS = 10_000
PART_BYTES = 8 * MIB  # 78 GiB in 10,000 parts; more wants part_bytes_for(size)
CHUNK_BYTES = MIB  # what a ranged read hands over at a time
# What one GET of a stream asks for, at most: SeaweedFS 4.48 (the bundled store, 1 GiB
# of memory) buffers an open-ended read of a large object ahead of its reader and is
# OOM-killed serving 2 GiB; a bounded range costs it one window (measured: 2 GiB read
# in 64 MiB windows in 2.8 s, open-ended killed it after 40 MiB).
WINDOW_BYTES = 64 * MIB
ANSWER_BYTES = 1024 * 1024  # an Initiate or Complete answer: a few hundred bytes
_RETRYABLE_CODES = frozenset({"InternalError", "SlowDown", "ServiceUnavailable"})
_MD5 = re.compile(r'"?([0-9a-f]{32})"?')
_RANGE = re.compile(r"bytes ([0-9]{1,19})-([0-9]{1,19})/([0-9]{1,19}|\*)")
_UNSATISFIED = re.compile(r"bytes \*/([0-9]{1,19})")


@runtime_checkable
class Readable(Protocol):
    """A binary stream: ``read(n)`` gives at most ``n`` bytes, ``b""`` only at its end."""

    def read(self, size: int, /) -> bytes: ...


Source: TypeAlias = "Readable | Iterable[bytes] | bytes"
Part: TypeAlias = "bytes | bytearray"


@dataclass(frozen=True)
class Streamed:
    """What ``put_stream`` stored: ``size`` bytes whose sha256 is ``sha256`` (hex), as read
    from the source, so a reader can check what it gets back; the store's ``etag`` (as
    :class:`Head`'s; "" when nothing was written); ``parts``: 0 for a single PUT, else how
    many. ``written``: False only with ``if_none_match`` when the key existed (the stored
    object left as it was, the streamed bytes dropped)."""

    size: int
    sha256: str
    etag: str
    parts: int
    written: bool = True


def check_part_bytes(part_bytes: int) -> int:
    """``part_bytes`` if S3 takes parts of that size, else a ``ValueError`` saying why."""
    if not MIN_PART_BYTES <= part_bytes <= MAX_PART_BYTES:
        raise ValueError(f"part_bytes {part_bytes}: S3 parts are {MIN_PART_BYTES} (5 MiB) to "
                         f"{MAX_PART_BYTES} (5 GiB) bytes")
    return part_bytes


def part_bytes_for(size: int, *, least: int = PART_BYTES) -> int:
    """The part size to stream ``size`` bytes in: ``least`` unless that needs over
    :data:`MAX_PARTS` parts, then the smallest whole number of MiB that does not."""
    check_part_bytes(least)
    needed = -(-size // MAX_PARTS)
    chosen = max(least, -(-needed // MIB) * MIB)
    if chosen > MAX_PART_BYTES:
        raise ValueError(f"{size} bytes: over {MAX_PARTS} parts of 5 GiB, past what S3 stores")
    return chosen


def too_many_parts(part_bytes: int) -> ValueError:
    return ValueError(
        f"the stream is over {MAX_PARTS} parts of {part_bytes} bytes "
        f"({MAX_PARTS * part_bytes} bytes), S3's most; pass a larger part_bytes "
        f"(part_bytes_for(size) picks one)")


def split(source: Source, part_bytes: int) -> Iterator[Part]:
    """``source``'s bytes as parts of ``part_bytes``, the last shorter and never empty.

    A reader is read until it answers ``b""`` (a short read is not its end: pipes and
    sockets give what they have); chunks of an iterable, of any size, are joined and cut.
    Each part is a new object, and the generator keeps none once it has handed it over:
    a caller that drops each part before asking for the next holds one part at a time.
    """
    if isinstance(source, bytes):
        return _joined_parts((source,), part_bytes)  # bytes would iterate as ints
    if isinstance(source, Readable):
        return _read_parts(source.read, part_bytes)
    return _joined_parts(source, part_bytes)


def _read_parts(read: Callable[[int], bytes], part_bytes: int) -> Iterator[Part]:
    while True:
        part: Part = read(part_bytes)
        if not part:
            return
        if len(part) < part_bytes:  # a short read: go on until full or the end
            part = bytearray(part)
            while len(part) < part_bytes and (more := read(part_bytes - len(part))):
                part += more
        last = len(part) < part_bytes
        yield part
        del part
        if last:
            return


def _joined_parts(chunks: Iterable[bytes], part_bytes: int) -> Iterator[Part]:
    part = bytearray()
    for chunk in chunks:
        with memoryview(chunk) as whole, whole.cast("B") as view:
            at = 0
            while at < len(view):
                take = min(part_bytes - len(part), len(view) - at)
                part += view[at:at + take]
                at += take
                if len(part) == part_bytes:
                    yield part
                    part = bytearray()
    if part:
        yield part


def complete_body(etags: Sequence[str]) -> bytes:
    """CompleteMultipartUpload's request: each part's number and the ETag its upload got."""
    request = ET.Element("CompleteMultipartUpload")
    for number, etag in enumerate(etags, start=1):
        part = ET.SubElement(request, "Part")
        ET.SubElement(part, "PartNumber").text = str(number)
        ET.SubElement(part, "ETag").text = etag
    body: bytes = ET.tostring(request, encoding="utf-8")
    return body


def _bounded(value: str, *, name: str, what: str) -> str:
    if not value or len(value) > ETAG_CHARS:
        raise S3Error(status=200, code="",
                      message=f"{what}: {'no' if not value else 'an over-long'} {name}")
    return value


def upload_id(body: bytes, *, what: str) -> str:
    """The ``UploadId`` of CreateMultipartUpload's answer."""
    return _bounded(next(iter(texts(parse_xml(body, what=what), "UploadId")), ""),
                    name="UploadId", what=what)


def completed_etag(body: bytes, *, what: str) -> str:
    """The object's ETag from CompleteMultipartUpload's answer. S3 may answer 200 and
    then fail (the status is sent before the parts are joined): an ``<Error>`` body is
    the error it says, :class:`S3Unavailable` for those S3 says to retry."""
    root = parse_xml(body, what=what)
    if local(root.tag) == "Error":
        code = next(iter(texts(root, "Code")), "")
        error = S3Unavailable if code in _RETRYABLE_CODES else S3Error
        raise error(status=200, code=code,
                    message=f"{what}: {next(iter(texts(root, 'Message')), '') or code}")
    return _bounded(next(iter(texts(root, "ETag")), ""), name="ETag", what=what)


def listed_uploads(body: bytes, *, what: str) -> tuple[list[tuple[str, str]], bool]:
    """ListMultipartUploads' answer: each upload's (key, upload id), and whether the
    store says more follow (``IsTruncated``)."""
    root = parse_xml(body, what=what)
    found = []
    for node in root:
        if local(node.tag) == "Upload":
            fields = {local(child.tag): child.text or "" for child in node}
            found.append((_bounded(fields.get("Key", ""), name="Key", what=what),
                          _bounded(fields.get("UploadId", ""), name="UploadId", what=what)))
    return found, texts(root, "IsTruncated") == ["true"]


def multipart_etag(etags: Sequence[str]) -> str:
    """The ETag S3 gives the object these parts make (the md5 of their md5s, ``-`` and
    their count: AWS's rule, which SeaweedFS, MinIO and Ceph follow); "" when a part's
    ETag is not an md5 (an encrypting store), so no object is ever mistaken for ours."""
    digests = [_MD5.fullmatch(etag) for etag in etags]
    if not digests or not all(digests):
        return ""
    joined = b"".join(bytes.fromhex(match.group(1)) for match in digests if match)
    return f'"{hashlib.md5(joined, usedforsecurity=False).hexdigest()}-{len(etags)}"'


def same_etag(one: str, other: str) -> bool:
    """Two ETags name the same object: quotes aside (stores differ in sending them)."""
    return bool(one) and one.strip('"') == other.strip('"')


def read_headers(position: int, etag: str | None, *, window: int) -> dict[str, str]:
    """A read's headers for the ``window`` bytes from byte ``position`` (``Range``: the
    answer is a 206 of those, or fewer at the object's end; a 416 past it, as for an
    empty object), and ``If-Match`` whenever the object read is pinned by its ETag."""
    headers = {"Range": f"bytes={position}-{position + window - 1}"}
    return headers | ({"If-Match": etag} if etag else {})


def content_range(value: str, *,
                  what: str) -> tuple[int | None, int | None, int | None]:
    """``Content-Range``'s first and last byte and the object's size: ``bytes a-b/size``
    (a 206), ``bytes */size`` (a 416: no bytes); a size of ``*`` is None."""
    if match := _RANGE.fullmatch(value):
        total = match.group(3)
        return int(match.group(1)), int(match.group(2)), None if total == "*" else int(total)
    if match := _UNSATISFIED.fullmatch(value):
        return None, None, int(match.group(1))
    raise S3Error(status=206, code="", message=f"{what}: Content-Range {value[:80]!r} unread")
