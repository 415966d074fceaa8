"""The S3 client against a real store: SeaweedFS on loopback (tests/support/s3server.py),
anonymous for the operations, then with its SigV4 verifier switched on, which accepts our
signature and refuses a wrong secret: the signing proven against a verifier not our own.

Covers: a round trip (a 9 MiB object, a key with spaces and non-ASCII), write-once put,
a bounded get, 404's code, a listing across continuation tokens (a thousand keys and
more, and small pages), delete and delete_prefix, ensure_bucket twice, and "unreachable"
told from an answer. Streams have their own file (test_s3_streams.py); only their
signing is checked here, with the verifier on.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentrun.objectstore import Credentials, ObjectStore, S3Error, S3Unavailable
from tests.support.s3fixtures import endpoint, store
from tests.support.s3server import ACCESS_KEY, SECRET_KEY, free_ports, running_s3

__all__ = ["endpoint", "store"]  # fixtures taken from tests/support/s3fixtures.py


def test_round_trip_of_a_large_object_and_an_awkward_key(store: ObjectStore) -> None:
    large = os.urandom(9 * 1024 * 1024)
    awkward = "runs/a b/été ☃ +=&?%#~/step (1).json"
    assert store.put("large", large) and store.put(awkward, b'{"ok": true}')
    assert store.get("large", limit=len(large)) == large
    assert store.get(awkward, limit=100) == b'{"ok": true}'
    assert store.exists(awkward) and not store.exists("runs/a b/été")
    assert store.list("runs/") == [awkward]


def test_write_once_keeps_the_first_content(store: ObjectStore) -> None:
    assert store.put("once", b"first", if_none_match=True) is True
    assert store.put("once", b"second", if_none_match=True) is False
    assert store.get("once", limit=100) == b"first"


def test_get_reads_limit_plus_one_of_a_larger_object(store: ObjectStore) -> None:
    store.put("big", b"0123456789" * 100_000)
    assert store.get("big", limit=5) == b"012345"
    assert store.get("big", limit=5) == b"012345"  # the connection given up, not reused dirty


def test_a_missing_key_is_404_no_such_key(store: ObjectStore) -> None:
    with pytest.raises(S3Error) as raised:
        store.get("absent", limit=10)
    assert (raised.value.status, raised.value.code) == (404, "NoSuchKey")
    assert not isinstance(raised.value, S3Unavailable)


def test_a_listing_follows_continuation_tokens(store: ObjectStore) -> None:
    keys = [f"many/{index:05d}" for index in range(1100)]
    for key in keys:
        store.put(key, b"x")
    store.put("other/0", b"x")
    assert store.list("many/") == keys  # the store's pages are 1000 at most: two requests
    assert store.list("many/", page=7, limit=30) == keys[:30]
    assert store.list("many/", page=7) == keys  # 158 pages of 7
    assert store.list("none/") == []


def test_delete_and_delete_prefix(store: ObjectStore) -> None:
    for key in ["a/1", "a/2", "a/b/3", "ab", "c"]:
        store.put(key, b"x")
    store.delete("c")
    store.delete("c")  # gone already: fine
    assert not store.exists("c")
    assert store.delete_prefix("a/") == 3
    assert store.list("a") == ["ab"]
    assert store.delete_prefix("a/") == 0


def test_ensure_bucket_is_idempotent(store: ObjectStore) -> None:
    store.put("kept", b"x")
    store.ensure_bucket()
    store.ensure_bucket()
    assert store.get("kept", limit=1) == b"x"


def test_nothing_listening_is_unavailable_status_0() -> None:
    (port,) = free_ports(1)
    nowhere = ObjectStore(endpoint=f"http://127.0.0.1:{port}", bucket="bucket", timeout=2,
                          credentials=lambda: None)
    with pytest.raises(S3Unavailable) as raised:
        nowhere.exists("k")
    assert (raised.value.status, raised.value.code) == (0, "")


def failing_after(data: bytes) -> Iterator[bytes]:
    yield data
    raise OSError("source gone")


def test_sigv4_accepted_by_a_real_verifier_and_a_wrong_secret_refused(tmp_path: Path) -> None:
    with running_s3(tmp_path, auth=True) as url:
        right = Credentials(ACCESS_KEY, SECRET_KEY)
        signed = ObjectStore(endpoint=url, bucket="signed", credentials=lambda: right)
        signed.ensure_bucket()
        key = "a b/été+1"
        assert signed.put(key, b"payload") and signed.put(key, b"x", if_none_match=True) is False
        assert signed.get(key, limit=10) == b"payload" and signed.list("a b/") == [key]
        # Multipart requests sign their queries (uploads=, partNumber, uploadId) too.
        large = os.urandom(6 * 1024 * 1024)
        streamed = signed.put_stream("a b/large", io.BytesIO(large), part_bytes=5 * 1024 * 1024)
        assert streamed.parts == 2 and signed.head("a b/large").etag == streamed.etag
        assert b"".join(signed.get_stream("a b/large", offset=1)) == large[1:]
        with pytest.raises(OSError, match="source gone"):
            signed.put_stream("a b/failed", failing_after(large), part_bytes=5 * 1024 * 1024)
        assert signed.abort_uploads("a b/") == 0  # the failed upload was aborted, signed
        assert signed.delete_prefix("a b/") == 2

        wrong = Credentials(ACCESS_KEY, SECRET_KEY + "x")
        forged = ObjectStore(endpoint=url, bucket="signed", credentials=lambda: wrong)
        anonymous = ObjectStore(endpoint=url, bucket="signed", credentials=lambda: None)
        for refused in (forged, anonymous):
            with pytest.raises(S3Error) as raised:
                refused.put("k", b"data")
            assert raised.value.status == 403, raised.value
        assert not signed.exists("k")
