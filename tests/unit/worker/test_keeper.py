"""The lease keeper's decisions, step by step, on an injected monotonic clock.

A scripted API stands in for the server (the real one is in
``tests/integration/test_worker_keeper.py``): each GET answers the Lease (or an error),
each PUT succeeds or fails as scripted, and either may take time on the fake clock.

Covers: the renewal cadence (a third of the lease; 409 re-reads after a second); the
lapse point is the PUT's *send* time plus the duration minus the margin, not the answer's;
before the first renewal and past the lapse point ``ensure_live`` raises ``LeaseLapsed``
and the lapse is told once; 5xx, 401, 409 and timeouts retry and never lose the lease,
even through an outage of many lease durations; a later renewal resumes; a tombstone,
another holder, 404 and 403 lose it for good (``LeaseLost``, told once, no more writes);
stop is final, also from a callback (its release: ``test_lease_release.py``); a failing
callback does not stop the keeper; the
SDK's ``Worker`` does not start on a lease it cannot renew. Two tests run the threads.
"""

from __future__ import annotations

import copy
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import urllib3

from agentrun import rest
from agentrun.worker import _keeper as keeper
from agentrun.worker import _renewer as renewer
from agentrun.worker import _sdk as sdk
from agentrun.worker._context import Context
from agentrun.worker._keeper import LeaseLapsed, LeaseLost
from agentrun.worker._renewals import Standing

POD = "slot-a-1"
DURATION = 10  # interval 10/3 s, margin 2 s: a renewal sent at t vouches until t + 8


def lease(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": POD, "namespace": "ns", "resourceVersion": "7"},
            "spec": {"holderIdentity": POD, "leaseDurationSeconds": DURATION, **spec}}


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


Answer = dict[str, Any] | Exception


@dataclass
class ScriptedApi:
    """GETs answer ``reading`` (or raise it); PUTs pop ``puts`` (None: success). Each
    request advances the clock by ``takes`` seconds *before* it answers."""

    clock: Clock
    reading: Answer = field(default_factory=lease)
    puts: list[Exception | None] = field(default_factory=list)
    takes: float = 0.0
    sent: list[tuple[str, float, Any]] = field(default_factory=list)  # method, send time, body

    def request(self, method: str, path: str, *, body: Any = None) -> Any:
        assert path.endswith(f"/namespaces/ns/leases/{POD}")
        self.sent.append((method, self.clock.now, copy.deepcopy(body)))
        self.clock.now += self.takes
        if method == "GET":
            if isinstance(self.reading, Exception):
                raise self.reading
            return copy.deepcopy(self.reading)
        failure = self.puts.pop(0) if self.puts else None
        if failure is not None:
            raise failure
        return body


def error(status: int) -> rest.ApiError:
    return rest.ApiError(status, '{"reason": "x", "message": "scripted"}')


@dataclass
class Told:
    calls: list[tuple[str, str]] = field(default_factory=list)

    def __call__(self, what: str) -> Callable[[str], None]:
        return lambda reason: self.calls.append((what, reason))


def make(clock: Clock, api: ScriptedApi, told: Told | None = None) -> keeper.Keeper:
    kept = keeper.Keeper(renewer=renewer.Renewer(
        api=api, namespace="ns", lease=POD, identity=POD,  # type: ignore[arg-type]
        monotonic=clock))
    if told is not None:  # the callbacks, without the threads start() would run
        kept._on_lapse, kept._on_resume, kept._on_lost = (
            told("lapse"), told("resume"), told("lost"))
    return kept


@pytest.fixture
def clock() -> Clock:
    return Clock()


def started(clock: Clock, api: ScriptedApi, told: Told | None = None) -> keeper.Keeper:
    kept = make(clock, api, told)
    assert kept.first_renewal(timeout=1).verdict == "Renew"
    return kept


def test_before_the_first_renewal_no_effect_starts(clock: Clock) -> None:
    kept = make(clock, ScriptedApi(clock))
    assert kept.standing() is Standing.STARTING
    with pytest.raises(LeaseLapsed, match="not been renewed yet") as raised:
        kept.ensure_live()
    assert not isinstance(raised.value, LeaseLost)


def test_a_renewal_writes_renew_time_under_the_version_read_and_sets_the_cadence(
        clock: Clock) -> None:
    api = ScriptedApi(clock)
    kept = started(clock, api)
    kept.ensure_live()
    assert [m for m, _, _ in api.sent] == ["GET", "PUT"]
    body = api.sent[1][2]
    assert body["metadata"]["resourceVersion"] == "7" and "renewTime" in body["spec"]
    assert kept.renew() == pytest.approx(DURATION / 3)


def test_the_lapse_point_counts_from_the_send_time_minus_the_margin(clock: Clock) -> None:
    api = ScriptedApi(clock, takes=3.0)  # each request answers 3 s after it was sent
    kept = started(clock, api)
    sent = api.sent[1][1]
    assert clock.now == sent + 3.0
    clock.now = sent + 8 - 0.001
    kept.ensure_live()
    assert kept.poll() == pytest.approx(0.001)
    clock.now = sent + 8
    with pytest.raises(LeaseLapsed, match="may have lapsed"):
        kept.ensure_live()
    with pytest.raises(LeaseLapsed):
        kept.check()
    with pytest.raises(LeaseLapsed), kept.guard():
        pytest.fail("the guarded effect must not start")


@pytest.mark.parametrize(("failure", "failure_reason"), [
    (error(500), "renewal failed (status 500)"), (error(503), "renewal failed (status 503)"),
    (error(401), "renewal failed (status 401)"), (error(429), "renewal failed (status 429)"),
    (OSError("timed out"), "renewal failed (no answer)"),
    (urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),  # type: ignore[arg-type]
     "renewal failed (no answer)"),
])
def test_failures_pause_then_a_renewal_resumes(clock: Clock, failure: Exception,
                                               failure_reason: str) -> None:
    told = Told()
    api = ScriptedApi(clock)
    kept = started(clock, api, told)
    start = clock.now
    api.reading = failure
    for _ in range(30):  # an outage of many lease durations
        clock.now += DURATION / 3
        assert kept.renew() == pytest.approx(DURATION / 3)
        kept.poll()
    assert kept.standing() is Standing.LAPSED
    assert told.calls == [("lapse", "no successful renewal for 10.0s (lease duration 10s); "
                                    f"last failure: {failure_reason}")]
    with pytest.raises(LeaseLapsed) as raised:
        kept.ensure_live()
    assert not isinstance(raised.value, LeaseLost)
    assert clock.now - start > 10 * DURATION
    api.reading = lease()
    assert kept.renew() is not None
    kept.ensure_live()
    assert told.calls[1:] == [("resume", "a renewal succeeded again")]
    clock.now += 8
    kept.poll()
    assert told.calls[2:] == [("lapse", "no successful renewal for 8.0s (lease duration 10s); "
                                        "last failure: none yet (a request is still waiting "
                                        "for its answer)")]


def test_a_failed_write_keeps_the_last_lapse_point(clock: Clock) -> None:
    api = ScriptedApi(clock)
    kept = started(clock, api)
    sent = api.sent[1][1]
    clock.now = sent + 5
    api.puts = [error(500)]
    kept.renew()
    clock.now = sent + 8
    assert kept.standing() is Standing.LAPSED  # the failed write vouches for nothing


def test_a_conflict_rereads_after_a_second_and_loses_nothing(clock: Clock) -> None:
    told = Told()
    api = ScriptedApi(clock, puts=[error(409)])
    kept = started(clock, api, told)  # the first PUT succeeded; the 409 is the next one
    api.puts = [error(409)]
    assert kept.renew() == pytest.approx(1.0)
    kept.ensure_live()
    assert told.calls == []


@pytest.mark.parametrize(("reading", "put", "reason"), [
    (lease(holderIdentity=None), None, "tombstoned"),
    ({**lease(), "metadata": {"name": POD, "resourceVersion": "8",
                              "annotations": {"agentrun.dev/outcome": "Lost"}}},
     None, "tombstoned"),
    (lease(holderIdentity="slot-a-2"), None, "held by 'slot-a-2'"),
    (error(404), None, "no longer exists"),
    (error(403), None, "may not renew"),
    (lease(), error(403), "may not renew"),  # the admission policy's refusal
])
def test_a_lost_lease_stops_the_keeper_for_good(
        clock: Clock, reading: Answer, put: Exception | None, reason: str) -> None:
    told = Told()
    api = ScriptedApi(clock)
    kept = started(clock, api, told)
    api.reading, api.puts = reading, [put] if put else []
    assert kept.renew() is None
    assert len(told.calls) == 1
    assert told.calls[0][0] == "lost" and reason in told.calls[0][1]
    with pytest.raises(LeaseLost, match=reason):
        kept.ensure_live()
    sent = len(api.sent)
    api.reading = lease()
    assert kept.renew() is None and len(api.sent) == sent  # never writes again
    assert kept.poll() is None and len(told.calls) == 1


def test_a_first_renewal_of_a_lease_not_ours_is_lost(clock: Clock) -> None:
    kept = make(clock, ScriptedApi(clock, reading=lease(holderIdentity="slot-a-2")))
    assert kept.first_renewal(timeout=1).verdict == "Stop"
    with pytest.raises(LeaseLost):
        kept.ensure_live()


def test_a_first_renewal_retries_until_its_timeout(clock: Clock) -> None:
    api = ScriptedApi(clock, reading=error(500), takes=0.6)
    kept = make(clock, api)
    assert kept.first_renewal(timeout=1).verdict == "Retry"
    assert len(api.sent) == 2  # 0.6 s each: the second ends past the timeout
    assert kept.standing() is Standing.STARTING


def test_stop_is_final(clock: Clock) -> None:
    kept = started(clock, ScriptedApi(clock))
    kept.stop()
    with pytest.raises(LeaseLost, match="stopped"):
        kept.ensure_live()
    assert kept.renew() is None


def test_a_failing_callback_does_not_stop_the_keeper(clock: Clock) -> None:
    api = ScriptedApi(clock)
    kept = started(clock, api)

    def broken(_reason: str) -> None:
        raise RuntimeError("the agent's bug")

    kept._on_lapse = broken
    clock.now += 9
    assert kept.poll() is None
    assert kept.renew() is not None
    kept.ensure_live()


def test_the_threads_tell_a_lapse_on_time_and_a_resume() -> None:
    """Real time: a 2 s lease (margin 1 s), renewals failing, then passing again."""
    api = ScriptedApi(Clock(), reading=lease(leaseDurationSeconds=2))
    kept = keeper.Keeper(renewer=renewer.Renewer(
        api=api, namespace="ns", lease=POD, identity=POD))  # type: ignore[arg-type]
    assert kept.first_renewal(timeout=5).verdict == "Renew"
    lapsed, resumed = threading.Event(), threading.Event()
    api.reading = error(503)
    kept.start(on_lapse=lambda _: lapsed.set(), on_resume=lambda _: resumed.set())
    try:
        assert lapsed.wait(timeout=10)
        with pytest.raises(LeaseLapsed):
            kept.ensure_live()
        assert not kept.wait_live(timeout=0.01)
        api.reading = lease(leaseDurationSeconds=2)
        assert kept.wait_live(timeout=10)
        assert resumed.wait(timeout=10)
        kept.ensure_live()
    finally:
        kept.stop()
    with pytest.raises(LeaseLost):
        kept.ensure_live()


def test_stop_from_a_callback_does_not_deadlock() -> None:
    """``on_lost`` calling ``stop()`` (as a worker exiting would) on the keeper's thread."""
    api = ScriptedApi(Clock(), reading=lease(leaseDurationSeconds=2))
    kept = keeper.Keeper(renewer=renewer.Renewer(
        api=api, namespace="ns", lease=POD, identity=POD))  # type: ignore[arg-type]
    assert kept.first_renewal(timeout=5).verdict == "Renew"
    done = threading.Event()

    def lost(_reason: str) -> None:
        kept.stop()
        done.set()

    api.reading = lease(holderIdentity=None)
    kept.start(on_lost=lost)
    assert done.wait(timeout=10)
    with pytest.raises(LeaseLost, match="tombstoned"):
        kept.ensure_live()
    kept.stop()


def context() -> Context:
    return Context(namespace="ns", run="r", run_uid="uid-r", slot="slot-a", node="n", attempt=1,
                   fencing_token=1, lease=POD, config_dir=Path("/etc/agentrun/config"),
                   pinned={})


@pytest.mark.parametrize(("reading", "raised", "says"), [
    (lease(holderIdentity="slot-a-2"), LeaseLost, "held by 'slot-a-2'"),
    (error(503), LeaseLapsed, r"no renewal within 0s: renewal failed \(status 503\)"),
])
def test_the_sdk_worker_does_not_start_on_a_lease_it_cannot_renew(
        clock: Clock, reading: Answer, raised: type[Exception], says: str) -> None:
    api = ScriptedApi(clock, reading=reading, takes=0.3)
    worker = sdk.Worker(context=context(), api=api, keeper=make(clock, api))  # type: ignore[arg-type]
    with pytest.raises(raised, match=says):
        worker.start(timeout=0.2)
    assert not worker.keeper._threads  # nothing runs in the background


def test_the_sdk_worker_keeps_the_lease_while_in_use(clock: Clock) -> None:
    api = ScriptedApi(clock)
    worker = sdk.Worker(context=context(), api=api, keeper=make(clock, api))  # type: ignore[arg-type]
    with worker:
        worker.keeper.ensure_live()
        assert [m for m, _, _ in api.sent] == ["GET", "PUT"]
    with pytest.raises(LeaseLost, match="stopped"):
        worker.keeper.ensure_live()


def test_an_ssl_failure_is_a_retry(clock: Clock) -> None:
    """urllib3 raises its SSLError for a connection cut during the handshake, as the
    integration test's proxy does: no answer, so a retry."""
    api = ScriptedApi(clock)
    kept = started(clock, api)
    api.reading = urllib3.exceptions.SSLError("EOF occurred in violation of protocol")
    assert kept.renew() == pytest.approx(DURATION / 3)
    kept.ensure_live()


def test_sigterm_ends_an_sdk_worker_unless_it_handles_sigterm_itself() -> None:
    """A worker that is PID 1 ignores a default-action SIGTERM; the SDK's handler exits."""
    previous = signal.getsignal(signal.SIGTERM)
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        assert sdk.exit_on_sigterm() is True
        with pytest.raises(SystemExit) as ended:
            os.kill(os.getpid(), signal.SIGTERM)  # handled before the next bytecode
        assert ended.value.code == 143
        own = signal.signal(signal.SIGTERM, lambda *_: None)  # a worker's own handler
        assert own is not signal.SIG_DFL
        assert sdk.exit_on_sigterm() is False
        done: list[bool] = []
        thread = threading.Thread(target=lambda: done.append(sdk.exit_on_sigterm()))
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        thread.start()
        thread.join()
        assert done == [False]  # only the main thread may install it
    finally:
        signal.signal(signal.SIGTERM, previous)
