"""The sidecar's artifact requests over its real HTTP server, a real ``Worker`` and a real
S3 server (a loopback SeaweedFS); the Lease a dict (FakeApi), as in test_artifacts.py.

Covers ``PUT /v1/artifacts/<key>`` (a 20 MiB body streamed through in parts: 201 with its
size and sha256; again: 200, its body not read), ``GET`` (the bytes, their sha256 in a
header; ``Range: bytes=<from>-`` a 206 of the rest), and what is refused with nothing
stored: a body cut short by a killed client, a chunked body, a length over the bound, a
range of another form, an artifact not committed (404).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import bounds
from agentrun.objectstore import ObjectStore
from agentrun.worker import _journal as journal
from agentrun.worker import _keeper as keeper
from agentrun.worker import _renewer as renewer
from agentrun.worker._context import Context
from agentrun.worker._sdk import Worker
from agentrun.worker._sidecar import CheckIns, Sidecar
from tests.support.actors.sidecarhttp import serving
from tests.support.s3fixtures import endpoint
from tests.unit.worker.test_records import FakeApi, lease

MIB = 1024 * 1024
PREFIX = "agentrun/ns/uid"
__all__ = ["endpoint"]  # a fixture taken from tests/support/s3fixtures.py



@pytest.fixture
def served(endpoint: str) -> Iterator[tuple[tuple[str, int], ObjectStore]]:
    bucket = f"sa-{uuid.uuid4().hex[:12]}"
    objects = ObjectStore(endpoint=endpoint, bucket=bucket, credentials=lambda: None)
    objects.ensure_bucket()
    api: Any = FakeApi(lease(1))
    context = Context(namespace="ns", run="r", run_uid="uid", slot="s", node="n", attempt=1,
                      fencing_token=1, lease="s-1", config_dir=Path("/nonexistent"), pinned={})
    worker = Worker(context=context, api=api, journal=journal.Location(
        endpoint=endpoint, bucket=bucket, prefix=PREFIX), keeper=keeper.Keeper(
        renewer=renewer.Renewer(api=api, namespace="ns", lease="s-1", identity="s-1")))
    with serving(Sidecar(worker=worker, check_ins=CheckIns(window_seconds=30))) as (_, at):
        yield at, objects


def request(at: tuple[str, int], method: str, path: str, *, body: Any = None,
            headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection(*at, timeout=60)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        answer = connection.getresponse()
        return answer.status, dict(answer.getheaders()), answer.read()
    finally:
        connection.close()


def chunks(size: int) -> Iterator[bytes]:
    for start in range(0, size, MIB):
        yield hashlib.sha256(str(start).encode()).digest() * (min(MIB, size - start) // 32)


def test_an_artifact_streams_in_and_out_and_resumes_from_an_offset(
        served: tuple[tuple[str, int], ObjectStore]) -> None:
    at, _ = served
    size = 20 * MIB
    whole = b"".join(chunks(size))
    status, _, body = request(at, "PUT", "/v1/artifacts/weights", body=chunks(size),
                              headers={"Content-Length": str(size)})
    assert status == 201, body
    shown = json.loads(body)
    assert shown == {"key": "weights", "size": size,
                     "sha256": hashlib.sha256(whole).hexdigest()}
    status, _, body = request(at, "PUT", "/v1/artifacts/weights", body=b"x" * 10,
                              headers={"Content-Length": "10"})
    assert status == 200 and json.loads(body) == shown  # committed: skipped, body unread
    status, headers, body = request(at, "GET", "/v1/artifacts/weights")
    assert status == 200 and body == whole and headers["X-Agentrun-Sha256"] == shown["sha256"]
    status, headers, body = request(at, "GET", "/v1/artifacts/weights",
                                    headers={"Range": f"bytes={size - 5 * MIB}-"})
    assert status == 206 and body == whole[size - 5 * MIB:]
    assert headers["Content-Range"] == f"bytes {size - 5 * MIB}-{size - 1}/{size}"


def test_a_body_cut_short_stores_nothing(served: tuple[tuple[str, int], ObjectStore]) -> None:
    at, objects = served
    size = 12 * MIB
    with socket.create_connection(at) as client:  # a main container killed mid-send
        client.sendall(f"PUT /v1/artifacts/cut HTTP/1.1\r\nHost: x\r\n"
                       f"Content-Length: {size}\r\n\r\n".encode())
        client.sendall(b"y" * (9 * MIB))
        client.shutdown(socket.SHUT_WR)
        answer = b""
        while part := client.recv(65536):
            answer += part
    assert b" 400 " in answer.split(b"\r\n", 1)[0] and b"ended at byte" in answer, answer[:300]
    assert request(at, "GET", "/v1/artifacts/cut")[0] == 404
    assert objects.list(PREFIX + "/") == [] and objects.abort_uploads(PREFIX + "/") == 0


@pytest.mark.parametrize(("method", "headers", "status", "says"), [
    ("PUT", {"Transfer-Encoding": "chunked"}, 400, "with a Content-Length"),
    ("PUT", {"Content-Length": str(bounds.ARTIFACT_BYTES + 1)}, 400, "Content-Length"),
    ("PUT", {"Content-Length": "9" * 5000}, 400, "Content-Length"),
    ("GET", {"Range": "bytes=0-10"}, 404, "not committed"),
    ("DELETE", {}, 405, "use GET or PUT"),
])
def test_bad_artifact_requests_say_why_and_store_nothing(
        served: tuple[tuple[str, int], ObjectStore], method: str, headers: dict[str, str],
        status: int, says: str) -> None:
    at, objects = served
    body = b"0\r\n\r\n" if headers.get("Transfer-Encoding") else None
    got, _, answer = request(at, method, "/v1/artifacts/k", body=body, headers=headers)
    assert got == status and says in answer.decode(), answer
    assert objects.list(PREFIX + "/") == []


def test_a_range_of_another_form_is_refused(
        served: tuple[tuple[str, int], ObjectStore]) -> None:
    at, _ = served
    assert request(at, "PUT", "/v1/artifacts/k", body=b"abc",
                   headers={"Content-Length": "3"})[0] == 201
    got, _, answer = request(at, "GET", "/v1/artifacts/k", headers={"Range": "bytes=0-1"})
    assert got == 400 and b"only bytes=<from>-" in answer
    got, _, answer = request(at, "GET", "/v1/artifacts/k", headers={"Range": "bytes=3-"})
    assert got == 400 and b"past the end of the artifact's 3 bytes" in answer


def test_bytes_that_do_not_match_the_digest_are_never_served_whole(
        served: tuple[tuple[str, int], ObjectStore]) -> None:
    at, objects = served
    size = 3 * MIB
    assert request(at, "PUT", "/v1/artifacts/k", body=b"a" * size,
                   headers={"Content-Length": str(size)})[0] == 201
    objects.put(f"{PREFIX}/s/1/artifact/k", b"b" * size)  # the same size, other bytes
    with pytest.raises(http.client.IncompleteRead):
        request(at, "GET", "/v1/artifacts/k")
