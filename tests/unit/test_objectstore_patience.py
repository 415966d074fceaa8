"""A stream's patience (``objectstore/_patience.py``) with a clock the test moves: each
failure told before its wait, an outage given up by its count or its seconds (each try's
own time counted), ``within`` passed through a stream's requests, ``retries_within``.
"""

from __future__ import annotations

import io

import pytest

from agentrun import objectstore as s3
from agentrun.objectstore import _patience
from tests.support.s3pool import Clock, answering


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


def test_retries_within_ride_out_an_outage_of_that_long() -> None:
    assert s3.retries_within(0) == 0
    assert s3.retries_within(3.5) == 3  # 0.5 + 1 + 2: the default
    assert s3.retries_within(300) == 41  # 0.5 + 1 + 2 + 4, then 8 s each: 7.5 + 37 x 8
    assert s3.retries_within(1, backoff=0.25) == 3  # 0.25 + 0.5 + 1
    for bad in ({"seconds": -1}, {"seconds": 86_401}, {"seconds": 1, "backoff": 0}):
        with pytest.raises(ValueError, match="retries_within"):
            s3.retries_within(**bad)
