"""The token bucket: burst first, then qps; shared safely by threads."""

from __future__ import annotations

import threading

import pytest

from agentrun.rest import throttle


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_burst_is_free_then_each_token_waits_one_qps_interval() -> None:
    clock = Clock()
    bucket = throttle.Bucket(qps=10, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(bucket.reserve(), 3) for _ in range(3)] == [0.1, 0.2, 0.3]
    clock.now += 1.0  # refills 10, but never above the burst, after paying the deficit
    assert bucket.reserve() == 0.0
    clock.now += 100.0
    assert [bucket.reserve() for _ in range(4)][-1] > 0  # the 4th after a rest waits


def test_threads_share_one_bucket_without_losing_a_token() -> None:
    clock = Clock()
    bucket = throttle.Bucket(qps=100, burst=1, clock=clock)
    delays: list[float] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(250):
            delay = bucket.reserve()
            with lock:
                delays.append(delay)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert bucket.taken == 1000
    # No time passed: every reservation after the first waits its own, distinct slot.
    assert sorted(round(d * 100) for d in delays) == list(range(1000))


@pytest.mark.parametrize(("qps", "burst"), [(0, 1), (-1, 5), (5, 0)])
def test_a_bucket_refuses_nonsense(qps: float, burst: int) -> None:
    with pytest.raises(ValueError, match="qps > 0 and burst >= 1"):
        throttle.Bucket(qps=qps, burst=burst)
