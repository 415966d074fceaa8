"""The whole-object client: credentials, SigV4, one signed request and the bounded
reading of its answer, and the operations on whole objects (put, get, head, list, delete).

What the package says of the store (path-style, SigV4 with the payload's sha256, no
retries here) holds here; streaming and multipart uploads build on this in
:mod:`agentrun.objectstore._streams`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import cast

import urllib3

KEY_FILE_BYTES = 4096  # an access key or secret is tens of bytes; more is not a key file
MESSAGE_CHARS = 300  # an error's message is clipped: a store's body never floods a log
_ERROR_BODY_BYTES = 64 * 1024
LIST_BODY_BYTES = 16 * 1024 * 1024  # 1000 keys of 1 KiB each, escaped, fit many times
_BATCH = 1000  # DeleteObjects' own maximum
ETAG_CHARS = 1024  # an ETag is a quoted md5 (with "-<parts>" after a multipart upload)
_COUNT_DIGITS = 19  # a byte count in a header: up to 10**19 - 1, past any object's size


@dataclass(frozen=True)
class Head:
    """What HEAD says of an object: its ``size`` in bytes and its ``etag``, as the store
    quotes it. An ETag is the content's md5 after a single PUT but not after a multipart
    upload (nor with some encryption): equal ETags mean the same object, which is all a
    reader may rely on."""

    size: int
    etag: str


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret (the secret never shown by ``repr``: logs stay clean)."""

    access_key: str
    secret_key: str = field(repr=False)


class S3Error(Exception):
    """The store answered no: its HTTP ``status``, S3's ``<Code>`` (or ``""``) and a message
    clipped to :data:`MESSAGE_CHARS` (it may quote a body the store chose)."""

    def __init__(self, *, status: int, code: str, message: str) -> None:
        self.status, self.code = status, code
        self.message = message if len(message) <= MESSAGE_CHARS else (
            message[:MESSAGE_CHARS] + "…")
        super().__init__(f"S3 {status} {code or '-'}: {self.message}")


class S3Unavailable(S3Error):
    """No answer (connection refused, timeout: ``status`` 0) or a 5xx: worth retrying."""


def credentials_from(directory: str | None) -> Callable[[], Credentials | None]:
    """Credentials read from ``accessKeyId`` and ``secretAccessKey`` in ``directory`` (a
    mounted Kubernetes Secret), read again whenever either file's identity or mtime
    changes: the kubelet rotates a Secret by swapping a symlink, and a running worker must
    sign with the new keys. ``None``: always ``None`` (unsigned, for an anonymous store).
    A missing file is an ``OSError``; one over :data:`KEY_FILE_BYTES` or blank a
    ``ValueError``."""
    if directory is None:
        return lambda: None
    paths = (os.path.join(directory, "accessKeyId"), os.path.join(directory, "secretAccessKey"))
    seen: tuple[object, Credentials | None] = (None, None)

    def current() -> Credentials | None:
        nonlocal seen
        stamp = tuple((s.st_dev, s.st_ino, s.st_mtime_ns, s.st_size)
                      for s in map(os.stat, paths))
        if stamp != seen[0] or seen[1] is None:
            # Stamped before reading: a swap in between is seen (and read) on the next call.
            seen = (stamp, Credentials(*(_key_file(path) for path in paths)))
        return seen[1]

    return current


def _key_file(path: str) -> str:
    with open(path, "rb") as file:
        data = file.read(KEY_FILE_BYTES + 1)
    if len(data) > KEY_FILE_BYTES:
        raise ValueError(f"{path}: over {KEY_FILE_BYTES} bytes, not an S3 key")
    text = data.decode("utf-8", errors="strict").strip()
    if not text:
        raise ValueError(f"{path}: blank, not an S3 key")
    return text


def _quote(text: str, *, safe: str = "") -> str:
    """SigV4's URI encoding: all but ``A-Za-z0-9-_.~`` percent-encoded as UTF-8 (exactly
    what ``quote`` always leaves alone), plus ``safe``."""
    return urllib.parse.quote(text, safe=safe)


def canonical_query(query: dict[str, str]) -> str:
    return "&".join(sorted(f"{_quote(name)}={_quote(value)}" for name, value in query.items()))


def authorization(*, method: str, path: str, query: dict[str, str], headers: dict[str, str],
                  payload_sha256: str, credentials: Credentials, region: str, service: str,
                  amz_date: str) -> str:
    """The ``Authorization`` header of SigV4 signing every header in ``headers`` (which
    must hold ``host`` and ``x-amz-date``); ``path`` is already URI-encoded."""
    values = {name.lower(): " ".join(value.split()) for name, value in headers.items()}
    signed = ";".join(sorted(values))
    canonical = "\n".join([method, path, canonical_query(query),
                           "".join(f"{name}:{values[name]}\n" for name in sorted(values)),
                           signed, payload_sha256])
    scope = f"{amz_date[:8]}/{region}/{service}/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope,
                         hashlib.sha256(canonical.encode()).hexdigest()])
    key = ("AWS4" + credentials.secret_key).encode()
    for part in scope.split("/"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    return (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
            f"SignedHeaders={signed}, Signature={signature}")


def local(tag: str) -> str:
    """An XML tag without its namespace: stores differ in whether they declare S3's."""
    return tag.rpartition("}")[2]


def texts(root: ET.Element, name: str) -> list[str]:
    return [node.text or "" for node in root.iter() if local(node.tag) == name]


def header(response: urllib3.BaseHTTPResponse, name: str, *, what: str) -> str:
    """A header's value ("" if absent), at most :data:`ETAG_CHARS` characters (the store
    chose it: an over-long one is an error, never a value passed on)."""
    value = str(response.headers.get(name, ""))
    if len(value) > ETAG_CHARS:
        raise S3Error(status=response.status, code="",
                      message=f"{what}: a {name} header of {len(value)} characters")
    return value


def byte_count(text: str, *, what: str) -> int:
    """A count of bytes from a header: ASCII digits only (``int`` would also take signs,
    spaces, ``_`` and other scripts' digits) and at most :data:`_COUNT_DIGITS` of them."""
    if not (text.isascii() and text.isdigit()) or len(text) > _COUNT_DIGITS:
        raise S3Error(status=200, code="", message=f"{what}: {text[:40]!r} is not a byte count")
    return int(text)


def parse_xml(body: bytes, *, what: str) -> ET.Element:
    """An answer's XML; leading whitespace skipped (AWS keeps a long CompleteMultipartUpload
    alive with it); a body that is not XML is an :class:`S3Error` of status 200."""
    try:
        return ET.fromstring(body.lstrip())
    except ET.ParseError as error:  # e.g. cut at the bound: an answer, but not a usable one
        raise S3Error(status=200, code="", message=f"{what}: not S3's XML: {error}") from None


class Client:
    """One bucket of an S3-compatible store at ``endpoint`` (``http[s]://host[:port]``), its
    whole objects (the streams are :class:`agentrun.objectstore.ObjectStore`'s)."""

    def __init__(self, *, endpoint: str, bucket: str, region: str = "us-east-1",
                 credentials: Callable[[], Credentials | None], timeout: float = 10.0,
                 pool: urllib3.PoolManager | None = None) -> None:
        parts = urllib.parse.urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.netloc or parts.path.strip("/") \
                or parts.query or parts.fragment:
            raise ValueError(f"S3 endpoint {endpoint!r}: want http[s]://host[:port]")
        if len(bucket) < 3 or "/" in bucket:
            raise ValueError(f"S3 bucket {bucket!r}: 3 characters or more, no '/'")
        self.endpoint, self.bucket, self.region = f"{parts.scheme}://{parts.netloc}", bucket, region
        self._host, self._credentials = parts.netloc, credentials
        self._timeout = urllib3.Timeout(connect=timeout, read=timeout)
        self._pool = pool if pool is not None else urllib3.PoolManager()

    def _path(self, key: str | None) -> str:
        if key is None:
            return f"/{_quote(self.bucket)}"
        if not key:
            raise ValueError("an S3 key is never empty")
        return f"/{_quote(self.bucket)}/{_quote(key, safe='/')}"

    def _request(self, method: str, key: str | None, *, query: dict[str, str] | None = None,
                 body: bytes | bytearray = b"", headers: dict[str, str] | None = None
                 ) -> urllib3.BaseHTTPResponse:
        """Send one signed request; the response unread (the caller bounds what it reads)."""
        path, query = self._path(key), query or {}
        sent = {"host": self._host, "x-amz-content-sha256": hashlib.sha256(body).hexdigest(),
                "x-amz-date": datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")}
        extra = headers or {}
        sent |= {name: value for name, value in extra.items()
                 if name in ("content-md5", "x-amz-copy-source")}  # signed, as S3 wants
        credentials = self._credentials()
        if credentials is not None:
            sent["authorization"] = authorization(
                method=method, path=path, query=query, headers=sent, credentials=credentials,
                payload_sha256=sent["x-amz-content-sha256"], region=self.region, service="s3",
                amz_date=sent["x-amz-date"])
        sent |= extra
        if method in ("PUT", "POST"):
            sent["content-length"] = str(len(body))
        target = path + (f"?{canonical_query(query)}" if query else "")
        # A part is a bytearray (never copied into bytes): urllib3 sends any buffer as it is.
        sending = cast(bytes, body) or None
        try:  # the connection pool's urlopen: PoolManager.request would drop "." segments
            return self._pool.connection_from_url(self.endpoint).urlopen(
                method, target, body=sending, headers=sent, retries=False,
                redirect=False, timeout=self._timeout, preload_content=False)
        except (urllib3.exceptions.HTTPError, OSError) as error:
            raise S3Unavailable(status=0, code="",
                                message=f"{method} {target}: {error}") from error

    @staticmethod
    def _read(response: urllib3.BaseHTTPResponse, most: int, *, what: str) -> bytes:
        """At most ``most`` bytes of the body; a body not read to its end closes the
        connection rather than returning it to the pool unread (or reading it all)."""
        chunks, size = [], 0
        try:
            while size < most:
                chunk = response.read(most - size, decode_content=False)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size >= most:
                response.close()
        except (urllib3.exceptions.HTTPError, OSError) as error:  # a body cut or stalled
            response.close()
            raise S3Unavailable(status=0, code="", message=f"{what}: {error}") from error
        finally:
            response.release_conn()
        return b"".join(chunks)

    def _answer(self, response: urllib3.BaseHTTPResponse, *, ok: tuple[int, ...], what: str,
                most: int = _ERROR_BODY_BYTES) -> bytes:
        """The body (``most`` bytes at most) if the status is one of ``ok``; else the error
        the answer is, with S3's ``<Code>`` when its body has one."""
        if response.status in ok:
            return self._read(response, most, what=what)
        body = self._read(response, _ERROR_BODY_BYTES, what=what)
        code, message = "", body.decode("utf-8", errors="replace").strip()
        try:
            root = ET.fromstring(body)
            code = next(iter(texts(root, "Code")), "")
            message = next(iter(texts(root, "Message")), "") or message
        except ET.ParseError:
            pass  # not S3's XML (a proxy's page, a HEAD's empty body): the text as it is
        error = S3Unavailable if response.status >= 500 else S3Error
        raise error(status=response.status, code=code,
                    message=f"{what}: {message or response.reason or ''}")

    def put(self, key: str, data: bytes, *, if_none_match: bool = False) -> bool:
        """Write ``key``; ``if_none_match``: only if absent (write-once), ``False`` if it
        exists already (412), its content kept."""
        headers = {"If-None-Match": "*"} if if_none_match else {}
        response = self._request("PUT", key, body=data, headers=headers)
        self._answer(response, ok=(200, 412) if if_none_match else (200,), what=f"PUT {key}")
        return response.status == 200

    def copy(self, source: str, key: str, *, source_bucket: str | None = None) -> None:
        """Copy ``source`` (a key of ``source_bucket``, by default this one) to ``key``
        inside the store (CopyObject:
        no byte passes through this process; S3 copies at most 5 GiB in one request). An
        error may come as a 200 whose body is ``<Error>``: that is an error too."""
        what = f"COPY {source} to {key}"
        origin = f"/{_quote(source_bucket or self.bucket)}/{_quote(source, safe='/')}"
        response = self._request("PUT", key, headers={"x-amz-copy-source": origin})
        body = self._answer(response, ok=(200,), what=what)
        try:
            root = ET.fromstring(body)
        except ET.ParseError:
            return
        if local(root.tag) == "Error":
            code = next(iter(texts(root, "Code")), "")
            raise S3Unavailable(status=500, code=code, message=f"{what}: " + next(
                iter(texts(root, "Message")), code))

    def get(self, key: str, *, limit: int) -> bytes:
        """``key``'s bytes, at most ``limit + 1`` of them read (so the caller can tell an
        object over ``limit``); 404: ``S3Error`` with code ``NoSuchKey``."""
        return self._answer(self._request("GET", key), ok=(200,), what=f"GET {key}",
                            most=limit + 1)

    def exists(self, key: str) -> bool:
        response = self._request("HEAD", key)
        self._answer(response, ok=(200, 404), what=f"HEAD {key}")
        return response.status == 200

    def head(self, key: str) -> Head:
        """``key``'s size and ETag, not its bytes; absent: ``S3Error`` with code
        ``NoSuchKey`` (a HEAD's 404 has no body to name it: the code is put here)."""
        what = f"HEAD {key}"
        response = self._request("HEAD", key)
        self._answer(response, ok=(200, 404), what=what)
        if response.status == 404:
            raise S3Error(status=404, code="NoSuchKey", message=f"{what}: no such key")
        return Head(size=byte_count(header(response, "content-length", what=what), what=what),
                    etag=header(response, "etag", what=what))

    def list(self, prefix: str, *, limit: int = 10000, page: int = 1000) -> list[str]:
        """The keys under ``prefix``, in the store's order, at most ``limit`` of them;
        ``page``: keys asked for a request (tests force continuations with a small one)."""
        keys: list[str] = []
        query = {"list-type": "2", "prefix": prefix}
        while len(keys) < limit:
            query["max-keys"] = str(min(page, limit - len(keys)))
            what = f"LIST {prefix}"
            root = parse_xml(self._answer(self._request("GET", None, query=query), ok=(200,),
                                          what=what, most=LIST_BODY_BYTES), what=what)
            keys += [child.text or "" for node in root if local(node.tag) == "Contents"
                     for child in node if local(child.tag) == "Key"]
            token = next(iter(texts(root, "NextContinuationToken")), "")
            if texts(root, "IsTruncated") != ["true"] or not token:
                break
            query["continuation-token"] = token
        return keys[:limit]

    def delete(self, key: str) -> None:
        """Remove ``key`` (absent is fine: the outcome wanted is the same)."""
        self._answer(self._request("DELETE", key), ok=(200, 204, 404), what=f"DELETE {key}")

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under ``prefix`` (DeleteObjects, a thousand a request); how
        many. A blank prefix is refused: it would empty the bucket."""
        if not prefix:
            raise ValueError("delete_prefix wants a prefix: a blank one empties the bucket")
        count, what = 0, f"DELETE {prefix}*"
        while keys := self.list(prefix, limit=_BATCH):
            request = ET.Element("Delete")
            ET.SubElement(request, "Quiet").text = "true"
            for key in keys:
                ET.SubElement(ET.SubElement(request, "Object"), "Key").text = key
            body = ET.tostring(request, encoding="utf-8")
            md5 = base64.b64encode(hashlib.md5(body, usedforsecurity=False).digest()).decode()
            response = self._request("POST", None, query={"delete": ""}, body=body,
                                     headers={"content-md5": md5})
            answer = parse_xml(self._answer(response, ok=(200,), what=what,
                                            most=LIST_BODY_BYTES), what=what)
            if errors := [node for node in answer if local(node.tag) == "Error"]:
                raise S3Error(status=200, code=next(iter(texts(errors[0], "Code")), ""),
                              message=f"{what}: {len(errors)} keys not deleted")
            count += len(keys)
        return count

    def bucket_exists(self) -> bool:
        """HEAD the bucket: True (200), False (404); any other answer is the error it is
        (a 403: the credentials, or their absence, refused)."""
        head = self._request("HEAD", None)
        self._answer(head, ok=(200, 404), what=f"HEAD bucket {self.bucket}")
        return head.status == 200

    def ensure_bucket(self) -> None:
        """Create the bucket unless it exists (ours already: fine, so twice is harmless)."""
        what = f"bucket {self.bucket}"
        head = self._request("HEAD", None)
        self._answer(head, ok=(200, 404), what=f"HEAD {what}")
        if head.status == 200:
            return
        body = b""
        if self.region != "us-east-1":  # AWS: any other region is named in the request
            config = ET.Element("CreateBucketConfiguration",
                                xmlns="http://s3.amazonaws.com/doc/2006-03-01/")
            ET.SubElement(config, "LocationConstraint").text = self.region
            body = ET.tostring(config, encoding="utf-8")
        try:
            self._answer(self._request("PUT", None, body=body), ok=(200,), what=f"PUT {what}")
        except S3Error as error:
            if error.code != "BucketAlreadyOwnedByYou":  # another creator won the race: ours
                raise
