"""Streams against a real store: SeaweedFS on loopback (tests/support/s3server.py), and
faults put at the connection level by a TCP proxy cutting at a byte count
(tests/support/faults/cutproxy.py), never a stand-in for the client.

Covers: a 40 MiB file in 5 MiB parts read back whole and its sha256 checked; a part cut
mid-upload retried; an upload that cannot finish aborted, whether the store, the source
or the part count stopped it; write-once streams; a read cut mid-body resumed (RST and
FIN), and refused when the object changed meanwhile; reads from an offset, the end and
past it; head; a killed writer's upload listed by uploads, removed by abort_uploads and by
delete_prefix; and the memory a 200 MiB stream takes, measured in a process of its own.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrun.objectstore import MIN_PART_BYTES, ObjectStore, S3Error, S3Unavailable
from agentrun.objectstore import _parts as parts
from tests.support.faults.cutproxy import CutProxy
from tests.support.s3fixtures import endpoint, store

MIB = 1024 * 1024
ROOT = Path(__file__).resolve().parents[2]
__all__ = ["endpoint", "store"]  # fixtures taken from tests/support/s3fixtures.py



@pytest.fixture
def proxy(endpoint: str) -> Iterator[CutProxy]:
    host, port = endpoint.removeprefix("http://").split(":")
    with CutProxy((host, int(port))) as made:
        yield made


def through(proxy: CutProxy, store: ObjectStore) -> ObjectStore:
    """The same bucket, reached through the proxy."""
    return ObjectStore(endpoint=proxy.url, bucket=store.bucket, credentials=lambda: None)


def sha256_of(chunks: Iterator[bytes]) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def test_a_40_mib_file_in_5_mib_parts_reads_back_whole(store: ObjectStore,
                                                       tmp_path: Path) -> None:
    data = os.urandom(40 * MIB + 1234)  # eight full parts and a short ninth
    (tmp_path / "artifact").write_bytes(data)
    with open(tmp_path / "artifact", "rb") as file:
        streamed = store.put_stream("runs/r/artifact", file, part_bytes=MIN_PART_BYTES)
    assert (streamed.size, streamed.sha256, streamed.parts) == (
        len(data), hashlib.sha256(data).hexdigest(), 9)
    head = store.head("runs/r/artifact")
    assert (head.size, head.etag) == (len(data), streamed.etag) and streamed.etag.endswith('-9"')
    with store.get_stream("runs/r/artifact", chunk_bytes=MIB) as download:
        assert download.size == len(data) and download.etag == streamed.etag
        assert sha256_of(download) == streamed.sha256
        assert download.position == len(data)
    # in windows that straddle the parts (never one open-ended GET: parts.WINDOW_BYTES),
    # from an offset inside one
    with store.get_stream("runs/r/artifact", offset=3 * MIB + 7,
                          window_bytes=7 * MIB + 3) as download:
        assert sha256_of(download) == hashlib.sha256(data[3 * MIB + 7:]).hexdigest()
    assert store.abort_uploads("runs/") == 0  # the completed upload is no upload


def test_small_content_is_one_put_and_chunks_of_any_size_are_cut_into_parts(
        store: ObjectStore) -> None:
    small = store.put_stream("small", io.BytesIO(b"hello"))
    assert (small.size, small.parts, small.sha256) == (5, 0, hashlib.sha256(b"hello").hexdigest())
    assert store.get("small", limit=10) == b"hello" and store.head("small").etag == small.etag
    chunks = [os.urandom(size) for size in (1, 3 * MIB, 7 * MIB + 5, 0, 333)]
    streamed = store.put_stream("chunks", iter(chunks), part_bytes=MIN_PART_BYTES)
    assert streamed.parts == 3 and streamed.sha256 == hashlib.sha256(b"".join(chunks)).hexdigest()
    assert sha256_of(store.get_stream("chunks")) == streamed.sha256
    assert store.put_stream("empty", iter([])).size == 0 and store.get("empty", limit=1) == b""
    empty = store.get_stream("empty")  # a window asked of nothing: no bytes, size 0
    assert (list(empty), empty.size) == ([], 0)


def test_a_part_cut_mid_upload_is_sent_again(store: ObjectStore, proxy: CutProxy) -> None:
    data = os.urandom(12 * MIB)
    proxy.arm(direction="up", after=7 * MIB)  # in the second part's body
    streamed = through(proxy, store).put_stream("cut", io.BytesIO(data),
                                                part_bytes=MIN_PART_BYTES, backoff=0.01)
    assert proxy.cuts == 1 and proxy.accepted >= 2
    assert streamed.parts == 3 and streamed.sha256 == hashlib.sha256(data).hexdigest()
    assert sha256_of(store.get_stream("cut")) == streamed.sha256
    assert store.abort_uploads("cut") == 0


def test_an_upload_that_cannot_finish_is_aborted(store: ObjectStore, proxy: CutProxy) -> None:
    proxy.arm(direction="up", after=7 * MIB)
    with pytest.raises(S3Unavailable):
        through(proxy, store).put_stream("gone", io.BytesIO(os.urandom(12 * MIB)),
                                         part_bytes=MIN_PART_BYTES, retries=0)
    assert proxy.cuts == 1 and not store.exists("gone")
    assert store.abort_uploads("gone") == 0  # aborted by the writer: none left


def test_a_failing_source_aborts_its_upload(store: ObjectStore) -> None:
    def failing() -> Iterator[bytes]:
        yield os.urandom(6 * MIB)
        raise OSError("the disk went away")

    with pytest.raises(OSError, match="the disk went away"):
        store.put_stream("failed", failing(), part_bytes=MIN_PART_BYTES)
    assert not store.exists("failed") and store.abort_uploads("failed") == 0


def test_a_stream_over_the_part_count_is_refused_and_aborted(
        store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(parts, "MAX_PARTS", 2)  # 10,000 real parts would be 50 GB
    with pytest.raises(ValueError, match=r"over 2 parts of 5242880 bytes .*part_bytes_for"):
        store.put_stream("many", io.BytesIO(bytes(11 * MIB)), part_bytes=MIN_PART_BYTES)
    assert not store.exists("many") and store.abort_uploads("many") == 0


@pytest.mark.parametrize("size", [100, 6 * MIB], ids=["one-put", "multipart"])
def test_write_once_streams_keep_the_first_content(store: ObjectStore, size: int) -> None:
    first = store.put_stream("once", io.BytesIO(b"1" * size), if_none_match=True,
                             part_bytes=MIN_PART_BYTES)
    second = store.put_stream("once", io.BytesIO(b"2" * size), if_none_match=True,
                              part_bytes=MIN_PART_BYTES)
    assert first.written and not second.written and second.etag == ""
    assert second.sha256 == hashlib.sha256(b"2" * size).hexdigest()  # what was offered
    assert store.head("once").etag == first.etag
    assert store.get("once", limit=1) == b"11" and store.abort_uploads("once") == 0


@pytest.mark.parametrize("how", ["rst", "fin"])
def test_a_read_cut_mid_body_resumes_where_it_stopped(
        store: ObjectStore, proxy: CutProxy, how: str) -> None:
    data = os.urandom(12 * MIB)
    store.put_stream("read", io.BytesIO(data), part_bytes=MIN_PART_BYTES)
    proxy.arm(direction="down", after=5 * MIB, how=how)
    download = through(proxy, store).get_stream("read", offset=1000, chunk_bytes=256 * 1024,
                                                backoff=0.01)
    assert sha256_of(download) == hashlib.sha256(data[1000:]).hexdigest()
    assert proxy.cuts == 1 and proxy.accepted == 2 and download.position == len(data)


def test_a_resumed_read_of_a_changed_object_is_refused(store: ObjectStore,
                                                       proxy: CutProxy) -> None:
    store.put_stream("moving", io.BytesIO(os.urandom(24 * MIB)), part_bytes=MIN_PART_BYTES)
    download = through(proxy, store).get_stream("moving", chunk_bytes=MIB, backoff=0.01)
    assert len(next(download)) == MIB
    store.put("moving", b"replaced")
    assert proxy.cut_all() == 1
    with pytest.raises(S3Error) as raised:
        for _ in download:
            pass
    assert (raised.value.status, raised.value.code) == (412, "PreconditionFailed")
    assert MIB <= download.position < 24 * MIB


def test_reads_from_an_offset_the_end_and_past_it(store: ObjectStore) -> None:
    store.put("ten", b"0123456789")
    etag = store.head("ten").etag
    assert b"".join(store.get_stream("ten", offset=3, chunk_bytes=2)) == b"3456789"
    at_end = store.get_stream("ten", offset=10)
    assert (list(at_end), at_end.size) == ([], 10)
    with pytest.raises(S3Error) as raised:
        store.get_stream("ten", offset=11)
    assert (raised.value.status, raised.value.code) == (416, "InvalidRange")
    assert b"".join(store.get_stream("ten", etag=etag)) == b"0123456789"
    with pytest.raises(S3Error) as raised:
        store.get_stream("ten", etag='"0123456789abcdef0123456789abcdef"')
    assert (raised.value.status, raised.value.code) == (412, "PreconditionFailed")
    with pytest.raises(S3Error) as raised:
        store.get_stream("absent")
    assert (raised.value.status, raised.value.code) == (404, "NoSuchKey")


def test_head_says_size_and_etag_and_no_such_key(store: ObjectStore) -> None:
    store.put("k", b"12345")
    head = store.head("k")
    assert head.size == 5 and head.etag.strip('"') == hashlib.md5(b"12345").hexdigest()
    with pytest.raises(S3Error) as raised:
        store.head("absent")
    assert (raised.value.status, raised.value.code) == (404, "NoSuchKey")


KILLED_WRITER = """
import sys
from agentrun.objectstore import ObjectStore
def source():
    yield bytes(5 * 1024 * 1024)  # one part, sent once the next is asked for
    print("part 1 stored", flush=True)
    sys.stdin.read()  # held here until killed
store = ObjectStore(endpoint=sys.argv[1], bucket=sys.argv[2], credentials=lambda: None)
store.put_stream(sys.argv[3], source(), part_bytes=5 * 1024 * 1024)
"""


def killed_mid_upload(store: ObjectStore, key: str) -> None:
    """A writer process killed (SIGKILL) with one part stored: its upload is left."""
    writer = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, store.endpoint,
                               store.bucket, key], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "part 1 stored\n"
    finally:
        writer.send_signal(signal.SIGKILL)
        writer.communicate(timeout=30)


def test_a_killed_writers_uploads_are_aborted_by_prefix(store: ObjectStore) -> None:
    for key in ["runs/a/1", "runs/a/2", "runs/b/1"]:
        killed_mid_upload(store, key)
    assert store.list("runs/") == []  # no key shows them
    assert sorted(key for key, _ in store.uploads("runs/")) == ["runs/a/1", "runs/a/2",
                                                                 "runs/b/1"]
    assert [key for key, _ in store.uploads("runs/b/")] == ["runs/b/1"]
    assert len(store.uploads("runs/", limit=1)) == 1
    for bad in ({"prefix": ""}, {"prefix": "runs/", "limit": 0},
                {"prefix": "runs/", "limit": 1001}):
        with pytest.raises(ValueError, match=r"want a prefix and 1\.\.1000"):
            store.uploads(**bad)
    assert store.abort_uploads("runs/a/", page=1) == 2  # two rounds of a page of one
    assert store.abort_uploads("runs/a/") == 0
    assert store.abort_uploads("runs/") == 1
    with pytest.raises(ValueError, match="blank"):
        store.abort_uploads("")


def test_delete_prefix_also_aborts_uploads(store: ObjectStore) -> None:
    killed_mid_upload(store, "runs/a/artifact")
    store.put("runs/a/journal", b"x")
    store.put("runs/b/journal", b"x")
    assert store.delete_prefix("runs/a/") == 1
    assert store.abort_uploads("runs/") == 0 and store.list("runs/") == ["runs/b/journal"]


MEASURED = """
import hashlib, json, sys
from agentrun.objectstore import ObjectStore
def peak_kib():  # VmHWM: the most resident memory since the last reset
    status = open("/proc/self/status").read()
    return int(status.split("VmHWM:")[1].split()[0])
def reset_peak():  # "5" to clear_refs: the peak starts again from what is resident now
    with open("/proc/self/clear_refs", "w") as file:
        file.write("5")
endpoint, bucket, mode = sys.argv[1:]
store = ObjectStore(endpoint=endpoint, bucket=bucket, credentials=lambda: None)
store.put_stream("warm", iter([b"x"]))  # a connection pooled, lazy imports done
b"".join(store.get_stream("warm"))
block = bytes(range(256)) * 4096  # 1 MiB
def source():
    for index in range(200):
        yield block[index:] + block[:index]  # 200 MiB, no two chunks alike
reset_peak()
before = peak_kib()
digest = hashlib.sha256()
if mode == "put":
    streamed = store.put_stream("big", source(), part_bytes=5 * 1024 * 1024)
    size, sha256 = streamed.size, streamed.sha256
else:
    download = store.get_stream("big", chunk_bytes=1024 * 1024)
    for chunk in download:
        digest.update(chunk)
    size, sha256 = download.size, digest.hexdigest()
print(json.dumps({"growth": peak_kib() - before, "size": size, "sha256": sha256}))
"""


def measured(store: ObjectStore, mode: str) -> dict[str, Any]:
    run = subprocess.run([sys.executable, "-c", MEASURED, store.endpoint, store.bucket, mode],
                         cwd=ROOT, capture_output=True, text=True, timeout=240, check=True)
    seen: dict[str, Any] = json.loads(run.stdout)
    return seen


def test_a_200_mib_stream_takes_a_few_parts_of_memory(store: ObjectStore) -> None:
    """Each way in a process of its own, its peak resident memory (VmHWM) reset after
    start-up: growth is what the stream itself took."""
    put, get = measured(store, "put"), measured(store, "get")
    assert put["size"] == get["size"] == 200 * MIB and put["sha256"] == get["sha256"]
    print(f"peak RSS growth: put {put['growth']} KiB, get {get['growth']} KiB")
    # 200 MiB through each way: a 5 MiB part or a 1 MiB chunk, and the buffers around them
    assert put["growth"] < 24 * 1024 and get["growth"] < 8 * 1024
