"""The S3 client without a store: its SigV4 signature is AWS's (published vectors, and
requests whose signatures botocore computed), keys and queries are encoded as SigV4 says,
credentials follow a rotated Secret, and what a store answers becomes a bounded error.

The signatures below other than AWS's ``get-vanilla`` were computed by botocore 1.44.8's
``S3SigV4Auth`` (in a throwaway venv, never this project's) for the same requests at the
same instant: a second, independent implementation agreeing to the hex digit.
"""

from __future__ import annotations

import hashlib
import io
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import pytest
import urllib3

from agentrun import objectstore as s3

AWS = s3.Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY")
WHEN = "20150830T123600Z"
EMPTY = hashlib.sha256(b"").hexdigest()


def test_get_vanilla_of_the_aws_sigv4_test_suite() -> None:
    header = s3.authorization(
        method="GET", path="/", query={}, payload_sha256=EMPTY, credentials=AWS,
        headers={"Host": "example.amazonaws.com", "X-Amz-Date": WHEN},
        region="us-east-1", service="service", amz_date=WHEN)
    assert header == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        "SignedHeaders=host;x-amz-date, "
        "Signature=5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")


def s3_headers(payload: bytes) -> dict[str, str]:
    return {"host": "127.0.0.1:8333", "x-amz-content-sha256": hashlib.sha256(payload).hexdigest(),
            "x-amz-date": WHEN}


@pytest.mark.parametrize(("method", "path", "query", "payload", "signature"), [
    ("PUT", "/bucket/a%20b/%C3%A9t%C3%A9~x.txt", {}, b"hello",
     "e8c4cbc24039e98aef81d5824d2e0eecb23bdb5284a4c6da3cc2e73069d12124"),
    ("GET", "/bucket", {"list-type": "2", "prefix": "a b/", "max-keys": "3",
                        "continuation-token": "x+y="}, b"",
     "3f342737bb1fc21e3fd8b4d91ab12734dc9e7c774bbf1c6e2dd917d2c131bf7b"),
])
def test_s3_requests_signed_as_botocore_signs_them(
        method: str, path: str, query: dict[str, str], payload: bytes, signature: str) -> None:
    headers = s3_headers(payload)
    header = s3.authorization(method=method, path=path, query=query, headers=headers,
                              payload_sha256=headers["x-amz-content-sha256"], credentials=AWS,
                              region="us-east-1", service="s3", amz_date=WHEN)
    assert header.endswith(f"SignedHeaders=host;x-amz-content-sha256;x-amz-date, "
                           f"Signature={signature}")


def test_keys_and_queries_encoded_as_sigv4_says() -> None:
    store = s3.ObjectStore(endpoint="http://127.0.0.1:8333", bucket="bucket",
                           credentials=lambda: None)
    assert store._path("a b/été~x.txt") == "/bucket/a%20b/%C3%A9t%C3%A9~x.txt"
    assert store._path("x/y+z=&?#%") == "/bucket/x/y%2Bz%3D%26%3F%23%25"
    assert store._path("dir//./../k") == "/bucket/dir//./../k"  # S3 keeps them: so do we
    assert s3.canonical_query({"prefix": "a/b c", "delete": "", "A": "~"}) == (
        "A=~&delete=&prefix=a%2Fb%20c")
    with pytest.raises(ValueError, match="never empty"):
        store._path("")


@pytest.mark.parametrize("endpoint", ["ftp://h", "http://h/base", "h:80", "http://h?x=1"])
def test_an_endpoint_is_scheme_host_and_port_only(endpoint: str) -> None:
    with pytest.raises(ValueError, match="endpoint"):
        s3.ObjectStore(endpoint=endpoint, bucket="bucket", credentials=lambda: None)


def write_secret(directory: Path, *, access: str, secret: str, version: str) -> None:
    """Lay out a Secret as the kubelet does: files are links through ``..data``, a link
    to a timestamped folder, swapped atomically on rotation."""
    folder = directory / f"..{version}"
    folder.mkdir()
    (folder / "accessKeyId").write_text(access + "\n")
    (folder / "secretAccessKey").write_text(secret)
    (directory / "..data.tmp").symlink_to(folder.name)
    os.replace(directory / "..data.tmp", directory / "..data")
    for name in ("accessKeyId", "secretAccessKey"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


def test_credentials_follow_a_rotated_secret(tmp_path: Path) -> None:
    write_secret(tmp_path, access="AK1", secret="S1", version="v1")
    current = s3.credentials_from(str(tmp_path))
    assert current() == s3.Credentials("AK1", "S1")
    assert current() == s3.Credentials("AK1", "S1")
    write_secret(tmp_path, access="AK2", secret="S2", version="v2")
    assert current() == s3.Credentials("AK2", "S2")


def test_credentials_reread_when_a_file_is_rewritten_in_place(tmp_path: Path) -> None:
    (tmp_path / "accessKeyId").write_text("AK1")
    (tmp_path / "secretAccessKey").write_text("S1")
    current = s3.credentials_from(str(tmp_path))
    assert current() == s3.Credentials("AK1", "S1")
    (tmp_path / "secretAccessKey").write_text("S2-longer")  # another size, another mtime
    assert current() == s3.Credentials("AK1", "S2-longer")


def test_no_directory_means_unsigned() -> None:
    assert s3.credentials_from(None)() is None


@pytest.mark.parametrize(("content", "error"), [
    ("k" * (s3.KEY_FILE_BYTES + 1), "over 4096 bytes"), (" \n", "blank")])
def test_a_key_file_is_bounded_and_not_blank(tmp_path: Path, content: str, error: str) -> None:
    (tmp_path / "accessKeyId").write_text("AK")
    (tmp_path / "secretAccessKey").write_text(content)
    with pytest.raises(ValueError, match=error):
        s3.credentials_from(str(tmp_path))()


def test_the_secret_is_never_shown() -> None:
    assert "EXAMPLEKEY" not in repr(AWS) and "AKIDEXAMPLE" in repr(AWS)


class Body(io.BytesIO):
    """A response body that counts the bytes read off it."""

    taken = 0

    def read(self, size: int | None = -1, /) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


@dataclass
class Answers:
    """A pool standing in for the store: each request recorded, answered in turn."""

    answers: list[tuple[int, bytes | Body]]
    sent: list[dict[str, Any]] = field(default_factory=list)
    bodies: list[Body] = field(default_factory=list)

    def connection_from_url(self, url: str) -> Answers:
        return self

    def urlopen(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
        self.sent.append({"method": method, "url": url, **kwargs})
        status, body = self.answers.pop(0)
        self.bodies.append(body if isinstance(body, Body) else Body(body))
        return urllib3.HTTPResponse(body=self.bodies[-1], status=status,
                                    preload_content=False)


def answering(*answers: tuple[int, bytes | Body]) -> tuple[s3.ObjectStore, Answers]:
    pool = Answers(list(answers))
    store = s3.ObjectStore(endpoint="http://store:9000", bucket="bucket", timeout=2.5,
                           credentials=lambda: AWS, pool=cast(urllib3.PoolManager, pool))
    return store, pool


def test_a_request_signs_its_payload_digest_with_timeouts_and_no_retries() -> None:
    store, pool = answering((200, b""))
    assert store.put("k", b"data")
    sent = pool.sent[0]
    headers = sent["headers"]
    assert headers["x-amz-content-sha256"] == hashlib.sha256(b"data").hexdigest()
    assert headers["host"] == "store:9000" and headers["content-length"] == "4"
    assert "SignedHeaders=host;x-amz-content-sha256;x-amz-date," in headers["authorization"]
    assert sent["retries"] is False and sent["redirect"] is False
    assert sent["timeout"].connect_timeout == 2.5 and sent["timeout"].read_timeout == 2.5


def test_write_once_put_is_false_when_the_object_exists() -> None:
    store, pool = answering((412, b"<Error><Code>PreconditionFailed</Code></Error>"))
    assert store.put("k", b"data", if_none_match=True) is False
    assert pool.sent[0]["headers"]["If-None-Match"] == "*"


def test_a_store_error_says_its_code_in_a_bounded_message() -> None:
    body = b"<Error><Code>AccessDenied</Code><Message>" + b"m" * 10_000 + b"</Message></Error>"
    store, _ = answering((403, body))
    with pytest.raises(s3.S3Error) as raised:
        store.get("k", limit=10)
    assert type(raised.value) is s3.S3Error
    assert (raised.value.status, raised.value.code) == (403, "AccessDenied")
    assert len(raised.value.message) <= s3.MESSAGE_CHARS + 1
    assert len(str(raised.value)) < s3.MESSAGE_CHARS + 40


def test_a_5xx_is_unavailable_even_without_s3_xml() -> None:
    store, _ = answering((503, b"<html>bad gateway</html"))
    with pytest.raises(s3.S3Unavailable) as raised:
        store.exists("k")
    assert (raised.value.status, raised.value.code) == (503, "")
    assert "bad gateway" in raised.value.message


def test_get_reads_no_more_than_limit_plus_one() -> None:
    store, pool = answering((200, b"x" * 1000))
    assert store.get("k", limit=10) == b"x" * 11
    assert pool.bodies[0].taken == 11 and pool.bodies[0].closed  # the rest never read


class Cut(Body):
    """A body whose connection breaks after its first bytes."""

    def read(self, size: int | None = -1, /) -> bytes:
        if self.taken:
            raise ConnectionResetError("reset by peer")
        return super().read(3)


def test_a_body_cut_short_is_unavailable_not_a_urllib3_error() -> None:
    store, pool = answering((200, Cut(b"0123456789")))
    with pytest.raises(s3.S3Unavailable, match=r"GET k: .*reset by peer") as raised:
        store.get("k", limit=100)
    assert raised.value.status == 0 and pool.bodies[0].closed


def test_a_listing_that_is_not_xml_is_an_error_of_its_own() -> None:
    store, _ = answering((200, b"<ListBucketResult><Contents><Key>cut"))
    with pytest.raises(s3.S3Error, match="LIST p: not S3's XML") as raised:
        store.list("p")
    assert type(raised.value) is s3.S3Error and raised.value.status == 200
