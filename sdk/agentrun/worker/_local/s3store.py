"""The fake S3's storage: a bucket is a directory, an object a file, an upload a folder.

A bucket's name is an S3 one (anything else is refused: no name leaves the store's
folder). A key's ``/``-separated pieces become nested directories (each piece percent-encoded, a
directory named ``<piece>.d`` and the object ``<last piece>.o``), so the journal can be
read with ``ls`` and a key ``a`` never collides with a key ``a/b``. Beside each object
its ``.m`` holds its ETag. One lock orders every change and every look at an object's
ETag, so a conditional write (``If-None-Match: *``) is decided and made as one act, as S3
decides it; reading an object's bytes needs no lock (a replaced file stays whole for a
reader that opened it). Files are written under ``tmp/`` and renamed into place.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import threading
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote, unquote

from agentrun.worker._local import settings

BUCKET_NAME = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")  # and no ".." in it
MIN_PART_BYTES = 5 * 1024 * 1024  # S3's least part but the last
CHUNK_BYTES = 1024 * 1024


class S3Failure(Exception):
    """S3's answer no: its HTTP status, its ``<Code>`` and a message."""

    def __init__(self, status: int, code: str, message: str, *,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


@dataclass(frozen=True)
class Stored:
    """An object as stored: where its bytes are, its size and its quoted ETag."""

    path: Path
    size: int
    etag: str
    modified: float


def md5_etag(data: bytes) -> str:
    return f'"{hashlib.md5(data, usedforsecurity=False).hexdigest()}"'


class Store:
    """Buckets under ``root``; every method raises :class:`S3Failure` as S3 answers."""

    def __init__(self, *, root: Path) -> None:
        self.root = root
        self._lock = threading.Lock()

    # -- names ---------------------------------------------------------------------------

    def _named(self, bucket: str) -> Path:
        """The bucket's folder: only an S3 bucket name is one (a name such as ``..`` or
        ``a/b`` would be a folder outside the store)."""
        if not BUCKET_NAME.fullmatch(bucket) or ".." in bucket:
            raise S3Failure(400, "InvalidBucketName", f"{bucket!r} is not an S3 bucket name "
                            "(3 to 63 of a-z, 0-9, '.' and '-', from and to a letter or digit)")
        return self.root / bucket

    def _bucket(self, bucket: str) -> Path:
        path = self._named(bucket)
        if not path.is_dir():
            raise S3Failure(404, "NoSuchBucket", f"the bucket {bucket} does not exist")
        return path

    def _object(self, bucket: str, key: str) -> Path:
        # Each piece is percent-encoded (no "/" is left in it) and given a suffix, so no
        # piece is "." or "..": a key's file is always inside the bucket's "o" folder.
        pieces = [quote(piece, safe="") for piece in key.split("/")]
        if not key or any(len(piece) > settings.MAX_SEGMENT_CHARS for piece in pieces):
            raise S3Failure(400, "KeyTooLongError", f"the local harness keeps a key's "
                            f"'/'-separated pieces to {settings.MAX_SEGMENT_CHARS} characters")
        folder = self._bucket(bucket) / "o"
        for piece in pieces[:-1]:
            folder /= f"{piece}.d"
        return folder / f"{pieces[-1]}.o"

    def _staged(self, bucket: str) -> Path:
        folder = self._bucket(bucket) / "tmp"
        folder.mkdir(exist_ok=True)
        return folder / uuid.uuid4().hex

    # -- buckets -------------------------------------------------------------------------

    def has_bucket(self, bucket: str) -> bool:
        return self._named(bucket).is_dir()

    def create_bucket(self, bucket: str) -> None:
        with self._lock:
            if self.has_bucket(bucket):
                raise S3Failure(409, "BucketAlreadyOwnedByYou", f"{bucket} is yours already")
            (self._named(bucket) / "o").mkdir(parents=True)

    # -- objects -------------------------------------------------------------------------

    def head(self, bucket: str, key: str) -> Stored:
        with self._lock:
            return self._head(bucket, key)

    def _head(self, bucket: str, key: str) -> Stored:
        path = self._object(bucket, key)
        try:
            meta = json.loads(path.with_suffix(".m").read_text())
            stat = path.stat()
        except FileNotFoundError:
            raise S3Failure(404, "NoSuchKey", f"no such key: {key}") from None
        return Stored(path=path, size=stat.st_size, etag=str(meta["etag"]),
                      modified=stat.st_mtime)

    def open(self, bucket: str, key: str) -> tuple[Stored, BinaryIO]:
        """The object's description and its bytes, opened under the lock (so they agree)."""
        with self._lock:
            found = self._head(bucket, key)
            return found, found.path.open("rb")

    def put(self, bucket: str, key: str, data: bytes, *, if_none_match: bool) -> str:
        """Store ``data``; ``if_none_match``: only if ``key`` is absent (else 412)."""
        staged = self._staged(bucket)
        staged.write_bytes(data)
        return self._place(bucket, key, staged, md5_etag(data), if_none_match=if_none_match)

    def _place(self, bucket: str, key: str, staged: Path, etag: str, *,
               if_none_match: bool) -> str:
        with self._lock:
            path = self._object(bucket, key)
            if if_none_match and path.exists():
                staged.unlink()
                raise S3Failure(412, "PreconditionFailed", f"{key} exists (If-None-Match: *)")
            path.parent.mkdir(parents=True, exist_ok=True)
            meta = staged.with_suffix(".m")
            meta.write_text(json.dumps({"etag": etag, "key": key}))
            os.replace(meta, path.with_suffix(".m"))
            os.replace(staged, path)
            return etag

    def copy(self, bucket: str, key: str, *, source_bucket: str, source: str) -> str:
        found, reader = self.open(source_bucket, source)
        staged = self._staged(bucket)
        with reader, staged.open("wb") as writer:
            shutil.copyfileobj(reader, writer, CHUNK_BYTES)
        return self._place(bucket, key, staged, found.etag, if_none_match=False)

    def delete(self, bucket: str, key: str) -> None:
        with self._lock:
            path = self._object(bucket, key)
            for each in (path, path.with_suffix(".m")):
                each.unlink(missing_ok=True)
            top = self._bucket(bucket) / "o"
            folder = path.parent
            while folder != top and not any(folder.iterdir()):
                folder.rmdir()
                folder = folder.parent

    def keys(self, bucket: str, prefix: str) -> list[str]:
        """Every key under ``prefix``, in S3's order (their UTF-8 bytes')."""
        top = self._bucket(bucket) / "o"
        start, found = top, []
        for piece in prefix.split("/")[:-1]:  # the folders the prefix names whole
            start /= f"{quote(piece, safe='')}.d"
        for folder, _, files in os.walk(start):
            pieces = [unquote(part[:-2]) for part in Path(folder).relative_to(top).parts]
            found += [key for name in files if name.endswith(".o")
                      and (key := "/".join([*pieces, unquote(name[:-2])])).startswith(prefix)]
        return sorted(found, key=lambda key: key.encode())

    # -- multipart uploads ---------------------------------------------------------------

    def _upload(self, bucket: str, upload: str) -> Path:
        folder = self._bucket(bucket) / "u" / upload
        if not upload.isalnum() or not folder.is_dir():
            raise S3Failure(404, "NoSuchUpload", f"no such upload: {upload}")
        return folder

    def start_upload(self, bucket: str, key: str) -> str:
        self._object(bucket, key)  # the key's checks, now
        upload = uuid.uuid4().hex
        folder = self._bucket(bucket) / "u" / upload
        folder.mkdir(parents=True)
        (folder / "key").write_text(key)
        return upload

    def put_part(self, bucket: str, key: str, upload: str, number: int, data: bytes) -> str:
        folder = self._upload(bucket, upload)
        if (folder / "key").read_text() != key or not 1 <= number <= 10_000:
            raise S3Failure(400, "InvalidArgument", f"part {number} of upload {upload} is "
                            "not of this key, or not numbered 1..10000")
        etag = md5_etag(data)
        staged = folder / f"{number}.tmp"
        staged.write_bytes(data)
        (folder / f"{number}.etag").write_text(etag)
        os.replace(staged, folder / str(number))
        return etag

    def complete(self, bucket: str, key: str, upload: str, etags: list[tuple[int, str]], *,
                 if_none_match: bool) -> str:
        """Join the parts listed (in ascending order, each with the ETag its upload got,
        all but the last at least 5 MiB) into ``key``: the ETag S3 gives such an object."""
        folder = self._upload(bucket, upload)
        numbers = [number for number, _ in etags]
        if not numbers or numbers != sorted(set(numbers)):
            raise S3Failure(400, "InvalidPartOrder", "the parts are not in ascending order")
        digests = []
        for number, etag in etags:
            part = folder / str(number)
            sent = folder / f"{number}.etag"
            if not part.is_file() or sent.read_text().strip('"') != etag.strip('"'):
                raise S3Failure(400, "InvalidPart", f"part {number} was not uploaded as listed")
            if number != numbers[-1] and part.stat().st_size < MIN_PART_BYTES:
                raise S3Failure(400, "EntityTooSmall", f"part {number} is under 5 MiB")
            digests.append(bytes.fromhex(etag.strip('"')))
        staged = self._staged(bucket)
        with staged.open("wb") as writer:
            for number in numbers:
                with (folder / str(number)).open("rb") as reader:
                    shutil.copyfileobj(reader, writer, CHUNK_BYTES)
        whole = hashlib.md5(b"".join(digests), usedforsecurity=False).hexdigest()
        etag = self._place(bucket, key, staged, f'"{whole}-{len(numbers)}"',
                           if_none_match=if_none_match)
        shutil.rmtree(folder, ignore_errors=True)
        return etag

    def abort(self, bucket: str, upload: str) -> None:
        self._bucket(bucket)
        with self._lock, contextlib.suppress(S3Failure):  # gone already: what it wants
            shutil.rmtree(self._upload(bucket, upload))

    def uploads(self, bucket: str, prefix: str) -> Iterator[tuple[str, str]]:
        """The incomplete uploads under ``prefix``: (key, upload id), by key."""
        folder = self._bucket(bucket) / "u"
        found: Iterable[Path] = sorted(folder.iterdir()) if folder.is_dir() else ()
        pairs = [((path / "key").read_text(), path.name) for path in found
                 if (path / "key").is_file()]
        return iter(sorted(pair for pair in pairs if pair[0].startswith(prefix)))
