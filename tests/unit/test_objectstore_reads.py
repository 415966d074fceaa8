"""Reads without a store, against a stand-in pool answering in turn (tests/support/
s3pool.py): a read's bounded windows and their headers, what an answer must be to be read
(its range, its ETag, its body), a 416 at the end or of an empty object, a cut read resumed
from the next byte and given up as its patience says.
"""

from __future__ import annotations

import pytest

from agentrun import objectstore as s3
from agentrun.objectstore import _parts as parts
from tests.support.s3pool import Answer, Clock, Cut, answering


def test_a_read_asks_for_a_bounded_window_pinned_by_its_etag() -> None:
    assert parts.read_headers(0, None, window=4) == {"Range": "bytes=0-3"}
    assert parts.read_headers(7, '"e"', window=1) == {"Range": "bytes=7-7", "If-Match": '"e"'}
    assert parts.content_range("bytes 7-9/10", what="w") == (7, 9, 10)
    assert parts.content_range("bytes */10", what="w") == (None, None, 10)
    assert parts.content_range("bytes 0-9/*", what="w") == (0, 9, None)
    for bad in ("bytes -1-9/10", "bytes 7-9/\u0661\u0660", "items 0-1/2", "bytes 1-2/" + "9" * 20):
        with pytest.raises(s3.S3Error, match="Content-Range"):
            parts.content_range(bad, what="w")


def test_a_store_ignoring_the_range_is_refused_not_read_from_its_start() -> None:
    store, _ = answering((200, b"0123456789", {"Content-Length": "10", "ETag": '"e"'}))
    with pytest.raises(s3.S3Error, match="a 200, not 206"):
        store.get_stream("k", offset=4)


def test_a_cut_read_resumes_from_the_next_byte_with_if_match() -> None:
    store, pool = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                            (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"e"'}))
    download = store.get_stream("k", chunk_bytes=4, backoff=0)
    assert b"".join(download) == b"0123456789" and download.position == 10
    assert pool.sent[1]["headers"]["Range"] == f"bytes=3-{3 + s3.WINDOW_BYTES - 1}"
    assert pool.sent[1]["headers"]["If-Match"] == '"e"'


def test_a_cut_read_is_told_before_it_resumes() -> None:
    told: list[str] = []
    store, _ = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                         (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"e"'}))
    download = store.get_stream("k", chunk_bytes=4, backoff=0, told=told.append)
    assert b"".join(download) == b"0123456789"
    assert len(told) == 1 and told[0].startswith("GET k: cut at byte 3"), told


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


@pytest.mark.parametrize(("first", "then", "window", "chunk", "at"), [
    # the next window, read on the same ETag, answered for another object
    ((206, b"0123", {"Content-Range": "bytes 0-3/10", "ETag": '"e"'}),
     (206, b"4567", {"Content-Range": "bytes 4-7/10", "ETag": '"f"'}), 4, 4, 4),
    # a resume after a cut, answered for another object
    ((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
     (206, b"3456789", {"Content-Range": "bytes 3-9/10", "ETag": '"f"'}), 1024, 4, 3)])
def test_bytes_of_another_object_are_refused_never_read_on(
        first: Answer, then: Answer, window: int, chunk: int, at: int) -> None:
    store, _ = answering(first, then)
    download = store.get_stream("k", chunk_bytes=chunk, window_bytes=window, backoff=0)
    with pytest.raises(s3.S3Error) as raised:
        b"".join(download)
    assert (raised.value.status, raised.value.code) == (412, "PreconditionFailed")
    assert download.position == at


def test_resumes_without_progress_are_bounded() -> None:
    store, pool = answering((200, Cut(b"0123456789"), {"Content-Length": "10", "ETag": '"e"'}),
                            *[ConnectionResetError("refused")] * 3)
    download = store.get_stream("k", chunk_bytes=4, retries=2, backoff=0)
    with pytest.raises(s3.S3Unavailable, match="cut at byte 3 of 10, 3 times in a row"):
        b"".join(download)
    assert len(pool.sent) == 3


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
