"""Streams without a store: how a stream is cut into parts and which part sizes S3 takes,
the multipart XML both ways (a 200 that is an error included), the ETag a multipart upload
gets (a vector from SeaweedFS 4.48), a ranged read's headers, and, against a stand-in pool
answering in turn, the decisions a stream makes on what a store answers.
"""

from __future__ import annotations

import hashlib
import io
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import urllib3

from agentrun import objectstore as s3
from agentrun.objectstore import _parts as parts
from agentrun.objectstore import _patience

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


def test_a_read_asks_for_a_bounded_window_pinned_by_its_etag() -> None:
    assert parts.read_headers(0, None, window=4) == {"Range": "bytes=0-3"}
    assert parts.read_headers(7, '"e"', window=1) == {"Range": "bytes=7-7", "If-Match": '"e"'}
    assert parts.content_range("bytes 7-9/10", what="w") == (7, 9, 10)
    assert parts.content_range("bytes */10", what="w") == (None, None, 10)
    assert parts.content_range("bytes 0-9/*", what="w") == (0, 9, None)
    for bad in ("bytes -1-9/10", "bytes 7-9/\u0661\u0660", "items 0-1/2", "bytes 1-2/" + "9" * 20):
        with pytest.raises(s3.S3Error, match="Content-Range"):
            parts.content_range(bad, what="w")


Answer = tuple[int, bytes | io.BytesIO, dict[str, str]]


@dataclass
class Pool:
    """A pool standing in for the store: each request recorded, answered in turn with a
    status, a body and headers, or by raising (a connection that broke)."""

    answers: list[Answer | OSError]
    sent: list[dict[str, Any]] = field(default_factory=list)

    def connection_from_url(self, url: str) -> Pool:
        return self

    def urlopen(self, method: str, url: str, **kwargs: Any) -> urllib3.HTTPResponse:
        self.sent.append({"method": method, "url": url, **kwargs})
        answer = self.answers.pop(0)
        if isinstance(answer, OSError):
            raise answer
        status, body, headers = answer
        return urllib3.HTTPResponse(
            body=io.BytesIO(body) if isinstance(body, bytes) else body, status=status,
            headers=headers, preload_content=False, request_method=method)


def answering(*answers: Answer | OSError) -> tuple[s3.ObjectStore, Pool]:
    pool = Pool(list(answers))
    store = s3.ObjectStore(endpoint="http://store:9000", bucket="bucket",
                           credentials=lambda: None, pool=cast(urllib3.PoolManager, pool))
    return store, pool


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


def test_a_store_ignoring_the_range_is_refused_not_read_from_its_start() -> None:
    store, _ = answering((200, b"0123456789", {"Content-Length": "10", "ETag": '"e"'}))
    with pytest.raises(s3.S3Error, match="a 200, not 206"):
        store.get_stream("k", offset=4)


class Cut(io.BytesIO):
    """A body whose connection breaks after its first 3 bytes."""

    def read(self, size: int | None = -1, /) -> bytes:
        if self.tell():
            raise ConnectionResetError("reset by peer")
        return super().read(3)


def test_a_cut_read_resumes_from_the_next_byte_with_if_match() -> None:
    store, pool = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                            (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"e"'}))
    download = store.get_stream("k", chunk_bytes=4, backoff=0)
    assert b"".join(download) == b"0123456789" and download.position == 10
    assert pool.sent[1]["headers"]["Range"] == f"bytes=3-{3 + s3.WINDOW_BYTES - 1}"
    assert pool.sent[1]["headers"]["If-Match"] == '"e"'


def test_each_failure_is_told_before_its_wait_and_the_last_is_raised() -> None:
    told: list[str] = []
    failures = iter([s3.S3Unavailable(status=503, code="SlowDown", message="one"),
                     s3.S3Unavailable(status=0, code="", message="two")])

    def call() -> str:
        for failure in failures:
            raise failure
        return "done"

    def down() -> str:
        raise s3.S3Unavailable(status=0, code="", message="three")

    patience = s3.Patience(retries=2, backoff=0.001, told=told.append)
    assert _patience.retrying(call, patience=patience) == "done"
    assert [t.split(": ")[-1] for t in told] == ["one", "two"]
    with pytest.raises(s3.S3Unavailable, match="three"):
        _patience.retrying(down, patience=s3.Patience(retries=0, told=told.append))
    assert len(told) == 2  # no wait after the last try: nothing more told


def test_a_cut_read_is_told_before_it_resumes() -> None:
    told: list[str] = []
    store, _ = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                         (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"e"'}))
    download = store.get_stream("k", chunk_bytes=4, backoff=0, told=told.append)
    assert b"".join(download) == b"0123456789"
    assert len(told) == 1 and told[0].startswith("GET k: cut at byte 3"), told


class Clock:
    """A monotonic clock the test moves: each try takes ``per_try`` seconds, each wait
    what it asks (nothing really sleeps)."""

    def __init__(self, *, per_try: float) -> None:
        self.now, self.per_try, self.waits = 100.0, per_try, list[float]()

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.waits.append(seconds)
        self.now += seconds


@pytest.mark.parametrize("per_try", [10.0, 40.0])
def test_an_outage_is_given_up_within_its_seconds_each_tries_time_counted(
        per_try: float) -> None:
    """41 retries wait 300 s in all; against a store whose every try takes a timeout,
    ``within`` still gives up after about 300 s of outage, not 41 timeouts later."""
    clock, tries = Clock(per_try=per_try), [0]

    def timing_out() -> str:
        tries[0] += 1
        clock.now += clock.per_try
        raise s3.S3Unavailable(status=0, code="", message="timed out")

    patience = s3.Patience(retries=s3.retries_within(300), within=300, clock=clock,
                           sleep=clock.sleep)
    with pytest.raises(s3.S3Unavailable, match="timed out"):
        _patience.retrying(timing_out, patience=patience)
    # dated from the first try's start (100): no try begun past 300 s of outage, and none
    # given up while one more would still have begun within it
    lasted = clock.now - 100.0
    last_wait = patience.pause(tries[0] - 1)
    assert 300 - clock.per_try - last_wait < lasted - clock.per_try <= 300, (lasted, tries)
    assert tries[0] < 41
    assert s3.Patience(retries=41).gives_up(40, since=0) is False  # without within: count
    assert s3.Patience(retries=41).gives_up(41, since=0) is True


def test_a_cut_read_gives_up_within_its_seconds() -> None:
    clock = Clock(per_try=0.0)
    cut = (200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'})
    store, pool = answering(cut, *[ConnectionResetError("refused")] * 50)
    download = s3.Download(store, "k", offset=0, chunk_bytes=4, window_bytes=s3.WINDOW_BYTES,
                           etag=None, patience=s3.Patience(retries=50, backoff=1, within=10,
                                                           clock=clock, sleep=clock.sleep))
    with pytest.raises(s3.S3Unavailable, match="4 times in a row"):
        b"".join(download)
    assert clock.waits == [1, 2, 4]  # after the cut and two unanswered resumes; 7 + 8 > 10
    assert len(pool.sent) == 1 + 3  # the first answer, then three resumes that got none


def test_a_later_outage_of_a_read_is_dated_from_its_own_start() -> None:
    """Progress starts the outage's clock again. Each read takes 2 s; two outages (a cut
    read, an unanswered resume) of 5 s each, with within=8: dated from the first outage,
    the second would be past it and given up."""
    clock = Clock(per_try=0.0)

    class Slow(Cut):
        def read(self, size: int | None = -1, /) -> bytes:
            clock.now += 2
            return super().read(size)

    store, _ = answering(
        (200, Slow(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
        ConnectionResetError("one"),
        (206, Slow(b"3456789"), {"Content-Range": "bytes 3-9/10", "ETag": '"e"'}),
        ConnectionResetError("two"),
        (206, b"6789", {"Content-Range": "bytes 6-9/10", "ETag": '"e"'}))
    download = s3.Download(store, "k", offset=0, chunk_bytes=3, window_bytes=s3.WINDOW_BYTES,
                           etag=None, patience=s3.Patience(retries=50, backoff=1, within=8,
                                                           clock=clock, sleep=clock.sleep))
    assert b"".join(download) == b"0123456789" and clock.waits == [1, 2, 1, 2]


@pytest.mark.parametrize("stream", ["get", "put"])
def test_within_is_passed_to_a_streams_requests(stream: str) -> None:
    store, pool = answering(*[ConnectionResetError("down")] * 1000)
    def call() -> object:
        if stream == "get":
            return store.get_stream("k", retries=999, backoff=0.001, within=0.02)
        return store.put_stream("k", io.BytesIO(b"x"), retries=999, backoff=0.001,
                                within=0.02)

    with pytest.raises(s3.S3Unavailable, match="down"):
        call()
    assert len(pool.sent) < 100  # given up by the seconds, not the 1,000 tries


def test_the_first_window_unanswered_is_asked_again_then_given_up() -> None:
    told: list[str] = []
    store, pool = answering(ConnectionResetError("down"),
                            (200, b"0123", {"Content-Length": "4", "ETag": '"e"'}))
    download = store.get_stream("k", backoff=0, told=told.append)
    assert b"".join(download) == b"0123" and len(pool.sent) == 2 and len(told) == 1
    store, pool = answering(*[ConnectionResetError("down")] * 3)
    with pytest.raises(s3.S3Unavailable, match="down"):
        store.get_stream("k", retries=2, backoff=0)
    assert len(pool.sent) == 3


def test_retries_within_ride_out_an_outage_of_that_long() -> None:
    assert s3.retries_within(0) == 0
    assert s3.retries_within(3.5) == 3  # 0.5 + 1 + 2: the default
    assert s3.retries_within(300) == 41  # 0.5 + 1 + 2 + 4, then 8 s each: 7.5 + 37 x 8
    assert s3.retries_within(1, backoff=0.25) == 3  # 0.25 + 0.5 + 1
    for bad in ({"seconds": -1}, {"seconds": 86_401}, {"seconds": 1, "backoff": 0}):
        with pytest.raises(ValueError, match="retries_within"):
            s3.retries_within(**bad)


@pytest.mark.parametrize("bad", [{"offset": -1}, {"chunk_bytes": 0}, {"window_bytes": 0}])
def test_a_read_of_no_bytes_at_a_time_is_refused_before_any_request(bad: dict[str, int]) -> None:
    store, pool = answering()
    with pytest.raises(ValueError, match="want offset >= 0 and the others >= 1"):
        store.get_stream("k", **bad)  # type: ignore[arg-type]
    assert pool.sent == []


def test_a_large_object_is_read_a_window_at_a_time_on_one_etag() -> None:
    """Never open-ended (a store buffering ahead of its reader runs out of memory): each
    window asked for, the next from the byte after, pinned to the first answer's ETag."""
    store, pool = answering(
        (206, b"0123", {"Content-Range": "bytes 0-3/10", "ETag": '"e"'}),
        (206, b"4567", {"Content-Range": "bytes 4-7/10", "ETag": '"e"'}),
        (206, b"89", {"Content-Range": "bytes 8-9/10", "ETag": '"e"'}))
    download = store.get_stream("k", chunk_bytes=3, window_bytes=4, backoff=0)
    assert b"".join(download) == b"0123456789" and download.size == 10
    assert [(sent["headers"]["Range"], sent["headers"].get("If-Match"))
            for sent in pool.sent] == [("bytes=0-3", None), ("bytes=4-7", '"e"'),
                                       ("bytes=8-11", '"e"')]


@pytest.mark.parametrize("answer", [
    (206, b"012345", {"Content-Range": "bytes 0-5/10", "ETag": '"e"'}),  # past the window
    (206, b"1234", {"Content-Range": "bytes 1-4/10", "ETag": '"e"'}),  # not from its start
    (206, b"0123", {"Content-Range": "bytes 0-3/*", "ETag": '"e"'})])  # no size
def test_a_window_answered_for_other_bytes_is_refused(answer: Answer) -> None:
    store, _ = answering(answer)
    with pytest.raises(s3.S3Error, match="answered bytes"):
        store.get_stream("k", window_bytes=4, backoff=0)


def test_an_empty_object_is_read_though_its_416_says_no_content_range() -> None:
    """RFC 9110 only says SHOULD: Ceph RGW leaves Content-Range out for an empty object."""
    for headers in ({"Content-Range": "bytes */0"}, {}):
        store, _ = answering((416, b"<Error><Code>InvalidRange</Code></Error>", headers))
        empty = store.get_stream("k")
        assert (list(empty), empty.size) == ([], 0)


def test_a_416_past_the_end_or_unreadable_is_raised_as_what_it_is() -> None:
    store, _ = answering((416, b"<Error><Code>InvalidRange</Code></Error>", {}))
    with pytest.raises(s3.S3Error) as raised:  # from byte 3, no size said: not "the end"
        store.get_stream("k", offset=3)
    assert (raised.value.status, raised.value.code) == (416, "InvalidRange")
    store, _ = answering((416, b"", {"Content-Range": "bytes 0-/x"}))
    with pytest.raises(s3.S3Error, match="Content-Range"):
        store.get_stream("k")


def test_a_window_whose_body_is_not_its_range_is_refused() -> None:
    store, _ = answering((206, b"01234", {"Content-Range": "bytes 0-3/10", "ETag": '"e"',
                                          "Content-Length": "5"}))
    with pytest.raises(s3.S3Error, match="in a body of 5"):
        store.get_stream("k", window_bytes=4)


def test_a_window_of_the_next_object_is_refused() -> None:
    store, _ = answering((206, b"0123", {"Content-Range": "bytes 0-3/10", "ETag": '"e"'}),
                         (206, b"4567", {"Content-Range": "bytes 4-7/10", "ETag": '"f"'}))
    download = store.get_stream("k", window_bytes=4, backoff=0)
    with pytest.raises(s3.S3Error) as raised:
        b"".join(download)
    assert (raised.value.status, raised.value.code) == (412, "PreconditionFailed")
    assert download.position == 4


def test_a_resume_answered_for_another_object_is_refused() -> None:
    store, _ = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                         (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"f"'}))
    download = store.get_stream("k", chunk_bytes=4, backoff=0)
    with pytest.raises(s3.S3Error) as raised:
        b"".join(download)
    assert (raised.value.status, raised.value.code) == (412, "PreconditionFailed")
    assert download.position == 3


def test_resumes_without_progress_are_bounded() -> None:
    store, pool = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                            *[ConnectionResetError("refused")] * 3)
    download = store.get_stream("k", chunk_bytes=4, retries=2, backoff=0)
    with pytest.raises(s3.S3Unavailable, match="cut at byte 3 of 10, 3 times in a row"):
        b"".join(download)
    assert len(pool.sent) == 3
