"""Uploads without a store: how a stream is cut into parts and which part sizes S3 takes,
the multipart XML both ways (a 200 that is an error included), the ETag a multipart upload
gets (a vector from SeaweedFS 4.48), and, against a stand-in pool answering in turn
(tests/support/s3pool.py), the decisions an upload makes on what a store answers.
"""

from __future__ import annotations

import hashlib
import io

import pytest

from agentrun import objectstore as s3
from agentrun.objectstore import _parts as parts
from tests.support.s3pool import Answer, answering

MIB = 1024 * 1024


NS = 'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"'


@pytest.mark.parametrize("size", [0, 5 * MIB - 1, 5 * 1024 * MIB + 1, -1])
def test_part_sizes_s3_refuses_are_refused_with_the_bounds(size: int) -> None:
    with pytest.raises(ValueError, match=rf"part_bytes {size}: S3 parts are 5242880 \(5 MiB\) "
                                         r"to 5368709120 \(5 GiB\) bytes"):
        parts.check_part_bytes(size)
    assert parts.check_part_bytes(5 * MIB) == 5 * MIB
    assert parts.check_part_bytes(5 * 1024 * MIB) == 5 * 1024 * MIB


def test_a_bad_part_size_is_refused_before_any_request() -> None:
    store, pool = answering()
    with pytest.raises(ValueError, match="part_bytes 1024"):
        store.put_stream("k", io.BytesIO(b"data"), part_bytes=1024)
    assert pool.sent == []


@pytest.mark.parametrize(("size", "chosen"), [
    (0, 8 * MIB), (78 * 1024 * MIB, 8 * MIB), (100 * 1024 * MIB, 11 * MIB),
    (10_000 * 5 * 1024 * MIB, 5 * 1024 * MIB)])
def test_part_bytes_for_a_size_fits_it_in_ten_thousand_parts(size: int, chosen: int) -> None:
    assert parts.part_bytes_for(size) == chosen
    assert -(-size // chosen) <= parts.MAX_PARTS


def test_a_size_past_ten_thousand_parts_of_5_gib_is_refused() -> None:
    with pytest.raises(ValueError, match="over 10000 parts of 5 GiB"):
        parts.part_bytes_for(10_000 * 5 * 1024 * MIB + 1)


class Trickle(io.RawIOBase):
    """A reader that gives at most 3 bytes a read, as a pipe may."""

    def __init__(self, data: bytes) -> None:
        self.data = io.BytesIO(data)

    def read(self, size: int = -1, /) -> bytes:
        return self.data.read(min(size, 3))


@pytest.mark.parametrize(("source", "expected"), [
    (Trickle(b"abcdefghijk"), [b"abcd", b"efgh", b"ijk"]),
    (io.BytesIO(b"abcdefgh"), [b"abcd", b"efgh"]),
    (io.BytesIO(b""), []),
    (iter([b"a", b"", b"bcdefghij", b"k"]), [b"abcd", b"efgh", b"ijk"]),
    (iter([b"abcd"]), [b"abcd"]),
    (iter([bytearray(b"ab"), memoryview(b"cdefg")]), [b"abcd", b"efg"]),
    (b"abcdef", [b"abcd", b"ef"]),
])
def test_a_stream_is_cut_into_full_parts_and_a_shorter_last(source: parts.Source,
                                                            expected: list[bytes]) -> None:
    assert [bytes(part) for part in parts.split(source, 4)] == expected


def test_the_multipart_xml_both_ways() -> None:
    body = parts.complete_body(['"aa"', '"bb"'])
    assert body.endswith(b"<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>"
                         b"\"aa\"</ETag></Part><Part><PartNumber>2</PartNumber><ETag>\"bb\""
                         b"</ETag></Part></CompleteMultipartUpload>")
    created = f"<InitiateMultipartUploadResult {NS}><UploadId>u-1</UploadId>".encode()
    assert parts.upload_id(created + b"</InitiateMultipartUploadResult>", what="w") == "u-1"
    done = (f"  \n<CompleteMultipartUploadResult {NS}><ETag>&#34;ab-2&#34;</ETag>"
            "</CompleteMultipartUploadResult>").encode()  # AWS's keep-alive whitespace first
    assert parts.completed_etag(done, what="w") == '"ab-2"'
    listing = (f"<ListMultipartUploadsResult {NS}><IsTruncated>true</IsTruncated>"
               "<Upload><Key>a b</Key><UploadId>1</UploadId><Initiated>x</Initiated></Upload>"
               "<Upload><Key>c</Key><UploadId>2</UploadId></Upload>"
               "</ListMultipartUploadsResult>").encode()
    assert parts.listed_uploads(listing, what="w") == ([("a b", "1"), ("c", "2")], True)


@pytest.mark.parametrize(("code", "kind"), [("AccessDenied", s3.S3Error),
                                            ("InternalError", s3.S3Unavailable)])
def test_a_200_completion_whose_body_is_an_error_is_that_error(
        code: str, kind: type[s3.S3Error]) -> None:
    body = f"<Error><Code>{code}</Code><Message>m</Message></Error>".encode()
    with pytest.raises(s3.S3Error) as raised:
        parts.completed_etag(body, what="COMPLETE k")
    assert type(raised.value) is kind and (raised.value.status, raised.value.code) == (200, code)


@pytest.mark.parametrize("body", [b"<R><UploadId></UploadId></R>",
                                  b"<R><UploadId>" + b"u" * 1025 + b"</UploadId></R>",
                                  b"<R><UploadId>cut"])
def test_an_upload_id_missing_over_long_or_cut_is_an_error(body: bytes) -> None:
    with pytest.raises(s3.S3Error, match="CREATE k"):
        parts.upload_id(body, what="CREATE k")


def test_the_multipart_etag_is_the_md5_of_the_parts_md5s() -> None:
    # Two parts' ETags and the object's, as SeaweedFS 4.48 answered them.
    etags = ['"162373ae339ef11ad25bfa376b8812a9"', '"7aea2552dfe7eb84b9443b6fc9ba6e01"']
    assert parts.multipart_etag(etags) == '"3452fc6e122e5676a1a1338069621a46-2"'
    assert parts.multipart_etag(['"not-an-md5"']) == "" and parts.multipart_etag([]) == ""
    assert parts.same_etag('"ab"', "ab") and not parts.same_etag("", "")


CREATED: Answer = (200, b"<InitiateMultipartUploadResult><UploadId>u1</UploadId>"
                        b"</InitiateMultipartUploadResult>", {})


PART_ETAG = '"' + hashlib.md5(bytes(5 * MIB)).hexdigest() + '"'


PART: Answer = (200, b"", {"ETag": PART_ETAG})


def test_a_completion_answered_200_with_an_error_aborts_and_raises() -> None:
    store, pool = answering(CREATED, PART, (200, b"<Error><Code>AccessDenied</Code></Error>",
                                            {}), (204, b"", {}))
    with pytest.raises(s3.S3Error) as raised:
        store.put_stream("k", io.BytesIO(bytes(5 * MIB)), part_bytes=5 * MIB)
    assert (raised.value.status, raised.value.code) == (200, "AccessDenied")
    assert [(sent["method"], sent["url"]) for sent in pool.sent] == [
        ("POST", "/bucket/k?uploads="), ("PUT", "/bucket/k?partNumber=1&uploadId=u1"),
        ("POST", "/bucket/k?uploadId=u1"), ("DELETE", "/bucket/k?uploadId=u1")]


def test_a_completion_unanswered_then_gone_is_ours_when_the_etag_says_so() -> None:
    ours = parts.multipart_etag([PART_ETAG])
    store, pool = answering(
        CREATED, PART, ConnectionResetError("reset"),
        (404, b"<Error><Code>NoSuchUpload</Code></Error>", {}),
        (200, b"", {"ETag": ours, "Content-Length": str(5 * MIB)}))
    streamed = store.put_stream("k", io.BytesIO(bytes(5 * MIB)), part_bytes=5 * MIB,
                                backoff=0)
    assert (streamed.etag, streamed.parts, streamed.written) == (ours, 1, True)
    assert pool.sent[-1]["method"] == "HEAD" and pool.answers == []


def test_a_part_without_an_answer_is_sent_again_then_the_upload_aborted() -> None:
    store, pool = answering(CREATED, ConnectionResetError("reset"), PART,
                            ConnectionResetError("reset"), ConnectionResetError("reset"),
                            (204, b"", {}))
    with pytest.raises(s3.S3Unavailable, match=r"partNumber=2.*: reset"):
        store.put_stream("k", iter([bytes(10 * MIB), b"x"]), part_bytes=5 * MIB, retries=1,
                         backoff=0)
    assert [sent["url"].partition("?")[2] for sent in pool.sent] == [
        "uploads=", *["partNumber=1&uploadId=u1"] * 2, *["partNumber=2&uploadId=u1"] * 2,
        "uploadId=u1"]
    assert pool.sent[-1]["method"] == "DELETE"


def test_head_of_a_missing_key_is_no_such_key() -> None:
    store, _ = answering((404, b"", {}), (200, b"", {"Content-Length": "12", "ETag": '"e"'}))
    with pytest.raises(s3.S3Error) as raised:
        store.head("k")
    assert (raised.value.status, raised.value.code) == (404, "NoSuchKey")
    assert store.head("k") == s3.Head(size=12, etag='"e"')
