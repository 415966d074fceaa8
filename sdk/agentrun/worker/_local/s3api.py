"""A minimal S3 API over :class:`s3store.Store`: what :mod:`agentrun.objectstore` sends.

Path-style addressing (``/<bucket>/<key>``). Served: PUT (``If-None-Match: *``: 412
when the key exists; ``x-amz-copy-source``: a copy), GET (``Range``: a 206 of those bytes,
416 past the end, ignored when malformed; ``If-Match``: 412 for another object), HEAD,
DELETE, ListObjectsV2 (``prefix``, ``max-keys`` up to 1000, ``continuation-token``),
DeleteObjects, the multipart upload's five calls, and a bucket's HEAD and PUT. A bucket's
name must be an S3 one (400 InvalidBucketName). Any SigV4 signature is
accepted (and none): the harness is no security boundary, only its payload digest
(``x-amz-content-sha256``) is checked, as S3 checks it, so a client that signs other
bytes than it sends is caught here and not in production.
"""

from __future__ import annotations

import base64
import hashlib
import re
import xml.etree.ElementTree as ET
from datetime import UTC, datetime
from email.utils import formatdate
from typing import cast
from urllib.parse import unquote

from agentrun.worker._local import servers, settings
from agentrun.worker._local.s3store import CHUNK_BYTES, S3Failure, Store

_RANGE = re.compile(r"bytes=([0-9]*)-([0-9]*)")
_NAMESPACE = "http://s3.amazonaws.com/doc/2006-03-01/"
_UNCHECKED = ("UNSIGNED-PAYLOAD", "STREAMING-")


def _xml(root: str, fields: list[tuple[str, object]]) -> bytes:
    """An answer's XML: ``fields`` are (tag, text) or (tag, list of such, a child)."""
    top = ET.Element(root, xmlns=_NAMESPACE)

    def add(parent: ET.Element, items: list[tuple[str, object]]) -> None:
        for tag, value in items:
            node = ET.SubElement(parent, tag)
            if isinstance(value, list):
                add(node, value)
            else:
                node.text = str(value)
    add(top, fields)
    return cast(bytes, ET.tostring(top, encoding="utf-8", xml_declaration=True))


def _local(tag: str) -> str:
    return tag.rpartition("}")[2]


class S3Handler(servers.Handler):
    """One request to the fake S3 (:func:`handler` binds the store)."""

    store: Store

    def refuse(self, status: int, reason: str, message: str, *,
               headers: dict[str, str] | None = None) -> None:
        self.answer(status, b"" if self.command == "HEAD" else _xml("Error", [
            ("Code", reason), ("Message", message), ("Resource", self.route[0])]),
            content_type="application/xml", headers=headers)

    def serve(self) -> None:
        path, query = self.route
        bucket, _, key = path.lstrip("/").partition("/")
        data = self.body()
        if data is None:
            return
        try:
            claimed = self.headers.get("x-amz-content-sha256") or ""
            if claimed and not claimed.startswith(_UNCHECKED) and claimed != hashlib.sha256(
                    data).hexdigest():
                raise S3Failure(400, "XAmzContentSHA256Mismatch", "the body's sha256 is "
                                "not the one signed (x-amz-content-sha256)")
            if not bucket:
                raise S3Failure(400, "InvalidRequest", "path-style requests only: "
                                "/<bucket>/<key>")
            if key:
                self._on_object(bucket, key, query, data)
            else:
                self._on_bucket(bucket, query, data)
        except S3Failure as failure:
            self.refuse(failure.status, failure.code, failure.message,
                        headers=failure.headers)
        except OSError as error:  # the disk's: said as S3 says its own trouble
            self.refuse(500, "InternalError", f"the local store failed: {error}")

    def _ok(self, data: bytes = b"", **headers: str) -> None:
        self.answer(200, data, content_type="application/xml", headers=headers)

    def _on_bucket(self, bucket: str, query: dict[str, str], data: bytes) -> None:
        verb = self.command
        if verb == "HEAD":
            self.answer(200 if self.store.has_bucket(bucket) else 404)
        elif verb == "PUT":
            self.store.create_bucket(bucket)
            self._ok()
        elif verb == "GET" and "uploads" in query:
            self._list_uploads(bucket, query)
        elif verb == "GET" and query.get("list-type") == "2":
            self._list(bucket, query)
        elif verb == "POST" and "delete" in query:
            self._delete_many(bucket, data)
        else:
            raise S3Failure(501, "NotImplemented", f"{verb} on a bucket with "
                            f"{sorted(query)} is not served by the local harness "
                            "(ListObjectsV2, DeleteObjects, ListMultipartUploads are)")

    def _on_object(self, bucket: str, key: str, query: dict[str, str], data: bytes) -> None:
        verb, upload = self.command, query.get("uploadId")
        once = self.headers.get("If-None-Match") == "*"
        if verb == "PUT" and upload is not None:
            number = query.get("partNumber", "")
            if not (number.isascii() and number.isdigit()):
                raise S3Failure(400, "InvalidArgument", "partNumber is not a number")
            self._ok(ETag=self.store.put_part(bucket, key, upload, int(number), data))
        elif verb == "PUT" and (source := self.headers.get("x-amz-copy-source")):
            source_bucket, _, source_key = source.lstrip("/").partition("/")
            etag = self.store.copy(bucket, key, source_bucket=unquote(source_bucket),
                                   source=unquote(source_key))
            self._ok(_xml("CopyObjectResult", [("ETag", etag)]))
        elif verb == "PUT":
            self._ok(ETag=self.store.put(bucket, key, data, if_none_match=once))
        elif verb == "POST" and "uploads" in query:
            self._ok(_xml("InitiateMultipartUploadResult", [
                ("Bucket", bucket), ("Key", key),
                ("UploadId", self.store.start_upload(bucket, key))]))
        elif verb == "POST" and upload is not None:
            etag = self.store.complete(bucket, key, upload, self._parts(data),
                                       if_none_match=once)
            self._ok(_xml("CompleteMultipartUploadResult", [
                ("Bucket", bucket), ("Key", key), ("ETag", etag)]))
        elif verb == "DELETE":
            if upload is not None:
                self.store.abort(bucket, upload)
            else:
                self.store.delete(bucket, key)
            self.answer(204)
        elif verb in ("GET", "HEAD"):
            self._read(bucket, key)
        else:
            raise S3Failure(501, "NotImplemented", f"{verb} {sorted(query)} is not served")

    @staticmethod
    def _parts(data: bytes) -> list[tuple[int, str]]:
        try:
            root = ET.fromstring(data)
        except ET.ParseError as error:
            raise S3Failure(400, "MalformedXML", str(error)) from None
        found = []
        for part in root:
            fields = {_local(child.tag): (child.text or "").strip() for child in part}
            if not re.fullmatch(r"[0-9]{1,5}", fields.get("PartNumber", "")):
                raise S3Failure(400, "MalformedXML", "a part without its PartNumber")
            found.append((int(fields["PartNumber"]), fields.get("ETag", "")))
        return found

    def _read(self, bucket: str, key: str) -> None:
        found, reader = self.store.open(bucket, key)
        with reader:
            wanted = self.headers.get("If-Match")
            if wanted is not None and wanted.strip('"') != found.etag.strip('"'):
                raise S3Failure(412, "PreconditionFailed", f"{key} is not {wanted}")
            first, last, status = 0, found.size - 1, 200
            headers = {"ETag": found.etag, "Accept-Ranges": "bytes",
                       "Last-Modified": formatdate(found.modified, usegmt=True)}
            asked = self._range(self.headers.get("Range") or "", found.size)
            if asked is not None:
                (first, last), status = asked, 206
                headers["Content-Range"] = f"bytes {first}-{last}/{found.size}"
            length = last - first + 1
            self.answer(status, content_type="application/octet-stream", headers=headers,
                        length=length)
            if self.command == "HEAD":
                return
            reader.seek(first)
            while length > 0 and (chunk := reader.read(min(CHUNK_BYTES, length))):
                self.wfile.write(chunk)
                length -= len(chunk)

    @staticmethod
    def _range(asked: str, size: int) -> tuple[int, int] | None:
        """The bytes a ``Range`` header asks for; None for none, or for one that is not
        ``bytes=a-b`` with a <= b (ignored, as S3 and RFC 9110 ignore it: the whole)."""
        match = _RANGE.fullmatch(asked.strip())
        if match is None or not (match[1] or match[2]) or (
                match[1] and match[2] and int(match[2]) < int(match[1])):
            return None
        first = max(size - int(match[2]), 0) if not match[1] else int(match[1])
        if first >= size or (not match[1] and int(match[2]) == 0):
            raise S3Failure(416, "InvalidRange", f"{asked} of a {size}-byte object",
                            headers={"Content-Range": f"bytes */{size}"})
        return first, min(int(match[2]) if match[1] and match[2] else size - 1, size - 1)

    def _list(self, bucket: str, query: dict[str, str]) -> None:
        prefix = query.get("prefix", "")
        most = query.get("max-keys", str(settings.LIST_PAGE_MAX))
        if not (most.isascii() and most.isdigit()):
            raise S3Failure(400, "InvalidArgument", "max-keys is not a number")
        token = query.get("continuation-token")
        try:
            after = base64.b64decode(token.encode(), altchars=b"-_", validate=True).decode(
            ) if token else query.get("start-after", "")
        except ValueError:  # not base64, or not UTF-8 in it
            raise S3Failure(400, "InvalidArgument", "The continuation token provided is "
                            "incorrect") from None
        keys = [key for key in self.store.keys(bucket, prefix) if key.encode() > after.encode()]
        page = keys[:min(int(most), settings.LIST_PAGE_MAX)]
        more = len(keys) > len(page) and bool(page)  # max-keys=0: no page, no token
        contents: list[tuple[str, object]] = []
        for key in page:
            found = self.store.head(bucket, key)
            stamp = datetime.fromtimestamp(found.modified, UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            contents.append(("Contents", [("Key", key), ("LastModified", stamp),
                                          ("ETag", found.etag), ("Size", found.size),
                                          ("StorageClass", "STANDARD")]))
        fields: list[tuple[str, object]] = [
            ("Name", bucket), ("Prefix", prefix), ("KeyCount", len(page)), ("MaxKeys", most),
            ("IsTruncated", "true" if more else "false"), *contents]
        if more and page:
            fields.append(("NextContinuationToken",
                           base64.urlsafe_b64encode(page[-1].encode()).decode()))
        self._ok(_xml("ListBucketResult", fields))

    def _list_uploads(self, bucket: str, query: dict[str, str]) -> None:
        most = query.get("max-uploads", str(settings.LIST_PAGE_MAX))
        limit = min(int(most), settings.LIST_PAGE_MAX) if most.isascii() and most.isdigit(
        ) else 0
        found = list(self.store.uploads(bucket, query.get("prefix", "")))
        uploads: list[tuple[str, object]] = [("Upload", [("Key", key), ("UploadId", upload)])
                                             for key, upload in found[:limit]]
        self._ok(_xml("ListMultipartUploadsResult", [
            ("Bucket", bucket), ("MaxUploads", limit),
            ("IsTruncated", "true" if len(found) > limit else "false"), *uploads]))

    def _delete_many(self, bucket: str, data: bytes) -> None:
        try:
            root = ET.fromstring(data)
        except ET.ParseError as error:
            raise S3Failure(400, "MalformedXML", str(error)) from None
        quiet = any(_local(node.tag) == "Quiet" and (node.text or "") == "true" for node in root)
        deleted: list[tuple[str, object]] = []
        for node in root:
            if _local(node.tag) == "Object":
                key = next((child.text or "" for child in node if _local(child.tag) == "Key"), "")
                self.store.delete(bucket, key)
                deleted.append(("Deleted", [("Key", key)]))
        self._ok(_xml("DeleteResult", [] if quiet else deleted))


def handler(*, store: Store) -> type[S3Handler]:
    """The handler class bound to ``store``."""
    return cast(type[S3Handler], type("LocalS3Api", (S3Handler,), {"store": store}))
