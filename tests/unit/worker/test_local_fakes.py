"""The local harness's fakes (``agentrun.worker._local``): the Lease API and the S3 store.

Tested as the SDK meets them, through its own clients (the Lease API's conflicts, the S3
calls ``agentrun.objectstore`` makes), and with raw requests for what a client of the SDK
never sends: names that would leave the store's folder, bodies over the real services'
bounds, malformed input (an answer that says what, never a dropped connection), and a
``Host`` that is not the fake's own (a DNS-rebound page).
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun import objectstore, rest
from agentrun.worker._local import kubeapi, s3api, servers, settings
from agentrun.worker._local.leases import Leases
from agentrun.worker._local.s3store import S3Failure, Store

TIMEOUT_SECONDS = 10.0  # a raw request's answer (a fake that waits for a body fails)
LEASES = "/apis/coordination.k8s.io/v1/namespaces/local/leases"


def raw(serving: servers.Serving, method: str, path: str, *, body: bytes | None = None,
        headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One request as sent (``headers`` may name a Content-Length it does not send)."""
    port = serving.server.server_address[1]
    connection = http.client.HTTPConnection(settings.HOST, port, timeout=TIMEOUT_SECONDS)
    try:
        connection.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        sent = {"Host": f"{settings.HOST}:{port}", **(headers or {})}
        if body is not None:
            sent.setdefault("Content-Length", str(len(body)))
        for name, value in sent.items():
            connection.putheader(name, value)
        connection.endheaders(body)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.fixture
def api_server(tmp_path: Path) -> Iterator[servers.Serving]:
    serving = servers.serve(kubeapi.handler(leases=Leases(path=tmp_path / "leases.json"),
                                            token="t"), name="test-api")
    try:
        yield serving
    finally:
        serving.stop()


@pytest.fixture
def api(api_server: servers.Serving) -> rest.Rest:
    return rest.Rest(rest.Connection(server=api_server.url, authorization=lambda: "Bearer t"))


@pytest.fixture
def s3_server(tmp_path: Path) -> Iterator[servers.Serving]:
    serving = servers.serve(s3api.handler(store=Store(root=tmp_path / "s3")), name="test-s3")
    try:
        yield serving
    finally:
        serving.stop()


@pytest.fixture
def store(s3_server: servers.Serving) -> objectstore.ObjectStore:
    client = objectstore.ObjectStore(endpoint=s3_server.url, bucket="bucket",
                                     credentials=lambda: objectstore.Credentials("k", "s"))
    client.ensure_bucket()
    return client


# -- through the SDK's own clients -----------------------------------------------------------

def test_the_lease_api_refuses_stale_writes_as_the_api_server_does(api: rest.Rest) -> None:
    made = api.request("POST", LEASES, body={"metadata": {
        "name": "s-1", "labels": {"agentrun.dev/slot": "s", "agentrun.dev/attempt": "1"}},
        "spec": {"holderIdentity": "s-1"}})
    with pytest.raises(rest.ApiError) as exists:
        api.request("POST", LEASES, body=made)
    assert exists.value.status == 409
    renewed = api.request("PUT", f"{LEASES}/s-1", body={**made, "spec": {
        "holderIdentity": "s-1", "renewTime": "2024-01-01T00:00:00.000000Z"}})
    assert renewed["metadata"]["resourceVersion"] != made["metadata"]["resourceVersion"]
    with pytest.raises(rest.ApiError) as stale:  # under the version read before the renewal
        api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH, body={
            "metadata": {"resourceVersion": made["metadata"]["resourceVersion"],
                         "annotations": {"a": "1"}}})
    assert stale.value.status == 409
    patched = api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH,
                          body={"metadata": {"annotations": {"a": "1", "b": "2"}}})
    cleared = api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH,
                          body={"metadata": {"annotations": {"a": None}}})
    assert patched["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert cleared["metadata"]["annotations"] == {"b": "2"}
    listed = api.request("GET", LEASES, query={"labelSelector": "agentrun.dev/slot=s,"
                                               "agentrun.dev/attempt"})
    assert [item["metadata"]["name"] for item in listed["items"]] == ["s-1"]
    assert api.request("GET", LEASES, query={"labelSelector": "agentrun.dev/slot=t"}
                       )["items"] == []
    assert api.get(f"{LEASES}/s-2") is None


def test_the_lease_api_wants_the_token(api: rest.Rest) -> None:
    stranger = rest.Rest(rest.Connection(server=api.connection.server))
    with pytest.raises(rest.ApiError) as refused:
        stranger.request("GET", LEASES)
    assert refused.value.status == 401


def test_the_store_writes_once_and_reads_ranges(store: objectstore.ObjectStore) -> None:
    assert store.put("a/b", b"first", if_none_match=True)
    assert not store.put("a/b", b"other", if_none_match=True)
    assert store.get("a/b", limit=100) == b"first"
    assert store.head("a/b").size == 5
    assert b"".join(store.get_stream("a/b", offset=2, window_bytes=2)) == b"rst"
    with pytest.raises(objectstore.S3Error) as missing:
        store.get("a/c", limit=10)
    assert missing.value.code == "NoSuchKey"


def test_the_store_lists_by_prefix_across_pages_and_deletes(
        store: objectstore.ObjectStore) -> None:
    for key in ("p/1", "p/2/x", "p/3", "q/1", "a"):
        store.put(key, key.encode())
    assert store.list("p/", page=2) == ["p/1", "p/2/x", "p/3"]
    assert store.list("", page=1) == ["a", "p/1", "p/2/x", "p/3", "q/1"]
    assert store.delete_prefix("p/") == 3
    assert store.list("") == ["a", "q/1"]


def test_the_store_joins_a_multipart_upload_once(store: objectstore.ObjectStore) -> None:
    data = bytes(range(256)) * (objectstore.MIN_PART_BYTES // 256 * 2 + 3)
    put = store.put_stream("big", data, part_bytes=objectstore.MIN_PART_BYTES,
                           if_none_match=True)
    assert (put.parts, put.size, put.written) == (3, len(data), True)
    assert store.head("big").etag == put.etag
    assert b"".join(store.get_stream("big")) == data
    again = store.put_stream("big", data, part_bytes=objectstore.MIN_PART_BYTES,
                             if_none_match=True)
    assert not again.written
    assert store.uploads("big") == []  # the refused upload was aborted


# -- the store's folder: no name leaves it ---------------------------------------------------

@pytest.mark.parametrize(("method", "path", "headers"), [
    ("PUT", "/%2E%2E/escaped", {}),
    ("PUT", "/../escaped", {}),
    ("PUT", "/%2E%2E", {}),
    ("PUT", "/%2E/escaped", {}),
    ("PUT", "/Bucket/escaped", {}),
    ("HEAD", "/%2E%2E", {}),
    ("GET", "/%2E%2E?list-type=2", {}),
    ("POST", "/%2E%2E/escaped?uploads", {}),
    ("PUT", "/bucket/copied", {"x-amz-copy-source": "/%2E%2E/s3/bucket/o/a.o"}),
    ("DELETE", "/%2E%2E/escaped?uploadId=u", {}),
])
def test_a_bucket_name_that_is_not_an_s3_one_is_refused(
        store: objectstore.ObjectStore, s3_server: servers.Serving, tmp_path: Path,
        method: str, path: str, headers: dict[str, str]) -> None:
    store.put("a", b"a")
    before = sorted(tmp_path.rglob("*"))
    status, answer = raw(s3_server, method, path, body=b"x", headers=headers)
    assert status == 400, answer
    assert method == "HEAD" or b"InvalidBucketName" in answer
    assert sorted(tmp_path.rglob("*")) == before  # nothing written, in the store or beside


def test_a_malformed_target_is_answered(s3_server: servers.Serving) -> None:
    status, answer = raw(s3_server, "GET", "//[x/escaped")
    assert status == 400
    assert b"<Code>InvalidBucketName</Code>" in answer


@pytest.mark.parametrize("bucket", [".", "..", "a..b", "-ab", "ab-", "a", "a/b", "x" * 64])
def test_the_store_takes_only_s3_bucket_names(tmp_path: Path, bucket: str) -> None:
    store = Store(root=tmp_path / "s3")
    for call in (store.create_bucket, store.has_bucket, lambda name: store.keys(name, "")):
        with pytest.raises(S3Failure) as refused:
            call(bucket)
        assert refused.value.code == "InvalidBucketName"
    assert not (tmp_path / "s3").exists()


def test_a_key_of_dots_stays_in_its_bucket(store: objectstore.ObjectStore,
                                           tmp_path: Path) -> None:
    keys = ["../../../escaped", "./x/../y", "..", "a/./..", "/lead", "%2E%2E/z"]
    for key in keys:
        assert store.put(key, key.encode(), if_none_match=True)
    objects = tmp_path / "s3" / "bucket" / "o"
    files = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert all(path.resolve().is_relative_to(objects.resolve()) for path in files), files
    assert store.list("") == sorted(keys, key=str.encode)
    assert [store.get(key, limit=100) for key in keys] == [key.encode() for key in keys]


# -- bounds, malformed input and the Host ----------------------------------------------------

def test_the_lease_api_wants_the_token_before_the_body(api_server: servers.Serving) -> None:
    # The body is announced and never sent: a fake that read it first would wait for it.
    status, answer = raw(api_server, "POST", LEASES, headers={"Content-Length": "1024"})
    assert status == 401
    assert json.loads(answer)["reason"] == "Unauthorized"


def test_the_lease_api_bounds_a_request_and_a_lease(api_server: servers.Serving,
                                                    api: rest.Rest) -> None:
    status, answer = raw(api_server, "POST", LEASES, headers={
        "Authorization": "Bearer t", "Content-Length": str(settings.MAX_LEASE_REQUEST_BYTES + 1)})
    assert (status, json.loads(answer)["code"]) == (413, 413)
    big = "x" * settings.MAX_LEASE_OBJECT_BYTES  # under the request's bound, over etcd's
    with pytest.raises(rest.ApiError) as refused:
        api.request("POST", LEASES, body={"metadata": {"name": "s-1"}, "spec": {"pad": big}})
    assert refused.value.status == 422
    assert api.get(f"{LEASES}/s-1") is None


@pytest.mark.parametrize("metadata", [
    {"name": "s-1", "annotations": ["a"]}, {"name": "s-1", "labels": "a"},
    {"name": "s-1", "annotations": {"a": 1}}, "s-1", ["s-1"]])
def test_a_malformed_lease_is_a_400(api: rest.Rest, metadata: object) -> None:
    with pytest.raises(rest.ApiError) as refused:
        api.request("POST", LEASES, body={"metadata": metadata, "spec": {}})
    assert refused.value.status == 400


def test_a_disk_error_is_a_500_that_says_so(tmp_path: Path) -> None:
    leases = Leases(path=tmp_path / "gone" / "leases.json")  # its folder does not exist
    serving = servers.serve(kubeapi.handler(leases=leases, token="t"), name="test-api")
    try:
        status, answer = raw(serving, "POST", LEASES, body=json.dumps(
            {"metadata": {"name": "s-1"}}).encode(), headers={"Authorization": "Bearer t"})
    finally:
        serving.stop()
    assert status == 500
    assert "FileNotFoundError" in json.loads(answer)["message"]
    assert leases.list("local")["items"] == []  # the failed write changed nothing


def test_a_store_disk_error_is_a_500(store: objectstore.ObjectStore, tmp_path: Path) -> None:
    (tmp_path / "s3" / "bucket" / "tmp").write_text("in the way of the staging folder")
    with pytest.raises(objectstore.S3Error) as failed:
        store.put("a", b"a")
    assert (failed.value.status, failed.value.code) == (500, "InternalError")


@pytest.mark.parametrize("token", ["a", "_w==", "%%%"])
def test_a_bad_continuation_token_is_a_400(store: objectstore.ObjectStore,
                                           s3_server: servers.Serving, token: str) -> None:
    status, answer = raw(s3_server, "GET",
                         f"/bucket?list-type=2&continuation-token={token}")
    assert status == 400, answer
    assert b"continuation token" in answer


def test_an_invalid_range_is_ignored_and_max_keys_0_is_not_truncated(
        store: objectstore.ObjectStore, s3_server: servers.Serving) -> None:
    store.put("a", b"abcdef")
    serving = s3_server
    assert raw(serving, "GET", "/bucket/a", headers={"Range": "bytes=2-1"}) == (200, b"abcdef")
    assert raw(serving, "GET", "/bucket/a", headers={"Range": "bytes=2-3"}) == (206, b"cd")
    assert raw(serving, "GET", "/bucket/a", headers={"Range": "bytes=-2"}) == (206, b"ef")
    assert raw(serving, "GET", "/bucket/a", headers={"Range": "bytes=6-"})[0] == 416
    status, answer = raw(serving, "GET", "/bucket?list-type=2&max-keys=0")
    assert status == 200
    assert b"<IsTruncated>false</IsTruncated>" in answer
    assert b"NextContinuationToken" not in answer


@pytest.mark.parametrize("host", ["evil.example", "evil.example:{port}", "127.0.0.1:1",
                                  "localhost", ""])
def test_a_request_for_another_host_is_refused(api_server: servers.Serving,
                                               s3_server: servers.Serving, host: str) -> None:
    for serving, path in ((api_server, LEASES), (s3_server, "/bucket?list-type=2")):
        port = serving.server.server_address[1]
        status, _ = raw(serving, "GET", path, headers={
            "Host": host.format(port=port), "Authorization": "Bearer t"})
        assert status == 403
    for serving in (api_server, s3_server):
        port = serving.server.server_address[1]
        assert raw(serving, "HEAD", "/nothing", headers={"Host": f"LOCALHOST:{port}"}
                   )[0] != 403
