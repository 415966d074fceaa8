"""The ended-attempt truth table (docs/design/states.md) and lease expiry under clock skew."""

from __future__ import annotations

from datetime import datetime

import pytest

from agentrun.api.slots import Outcome
from agentrun.core.attempts import ending, observations
from agentrun.core.attempts.observations import LeaseStatus, LeaseView, PodPhase, PodView
from tests.unit.core import corefakes as f

# The table, as written in docs/design/states.md: (pod, lease) -> (ended, delete the pod).
# "renewed" lets expiry be a lost lease (True) or a start timeout (False).
NO, FENCE, YES = (False, False), (False, True), (True, False)
TABLE = {
    ("Pending", "Held"): NO, ("Pending", "Expired"): FENCE,
    ("Pending", "Released"): NO, ("Pending", "Missing"): FENCE,
    ("Running", "Held"): NO, ("Running", "Expired"): FENCE,
    ("Running", "Released"): NO, ("Running", "Missing"): FENCE,
    ("Unknown", "Held"): NO, ("Unknown", "Expired"): NO,
    ("Unknown", "Released"): NO, ("Unknown", "Missing"): NO,
    ("Terminating", "Held"): NO, ("Terminating", "Expired"): NO,
    ("Terminating", "Released"): NO, ("Terminating", "Missing"): NO,
    ("Succeeded", "Held"): NO, ("Succeeded", "Expired"): YES,
    ("Succeeded", "Released"): YES, ("Succeeded", "Missing"): YES,
    ("Failed", "Held"): NO, ("Failed", "Expired"): YES,
    ("Failed", "Released"): YES, ("Failed", "Missing"): YES,
    ("Gone", "Held"): NO, ("Gone", "Expired"): YES,
    ("Gone", "Released"): YES, ("Gone", "Missing"): YES,
}
# Outcomes: pod Succeeded -> Succeeded; Failed -> Failed; gone -> Lost, or StartTimeout
# when it went after the start deadline passed with no renewal ever seen (deleted for it).
# A lease never renewed is not "held" ("renewed within its duration, as observed"):
# in its start-deadline window, a pod that finished or is gone ends at once.
OUTCOMES = {
    ("Succeeded", True): "Succeeded", ("Succeeded", False): "Succeeded",
    ("Failed", True): "Failed", ("Gone", True): "Lost",
}


@pytest.mark.parametrize(("pod", "lease"), sorted(TABLE))
@pytest.mark.parametrize("renewed", [True, False])
def test_truth_table(pod: str, lease: str, renewed: bool) -> None:
    """docs/design/states.md: when an attempt has ended, and when to fence it."""
    verdict = ending.judge(pod=PodView(phase=PodPhase(pod), exit_code=3),
                           lease=LeaseStatus(lease), renewed=renewed)
    ended, delete = TABLE[(pod, lease)]
    assert ending.is_terminal(pod=PodPhase(pod), lease=LeaseStatus(lease)) is ended
    if lease == "Held" and not renewed and pod in ("Succeeded", "Failed", "Gone"):
        ended, delete = YES  # never renewed: the start deadline's window, not a held lease
    assert (verdict.ended, verdict.delete_pod) == (ended, delete)
    assert verdict.message
    if ended:
        start_timeout = lease == "Expired" and not renewed and pod == "Gone"
        want = "StartTimeout" if start_timeout else OUTCOMES[(pod, True)]
        assert verdict.outcome == Outcome(want)
        assert verdict.exit_code == 3
    else:
        assert verdict.outcome is None


def test_table_is_complete() -> None:
    """Every pod phase and lease status has a cell."""
    assert len(TABLE) == len(PodPhase) * len(LeaseStatus) == 28


def lease(renew_time: str | None, *, duration: int = 30, tombstoned: bool = False) -> LeaseView:
    return LeaseView(exists=True, holder=None if tombstoned else "pod", renew_time=renew_time,
                     duration_seconds=duration, tombstoned=tombstoned)


def status_at(now: datetime, obs: observations.LeaseObservation | None, view: LeaseView,
              *, deadline: int = 300) -> LeaseStatus:
    return observations.lease_status(observation=obs, lease=view, now=now, claimed_at=f.T0,
                                     start_deadline_seconds=deadline,
                                     lease_duration_seconds=view.duration_seconds or 30)


@pytest.mark.parametrize("skew_minutes", [-10, +10, 0])
def test_lease_expiry_is_judged_only_by_observed_renewals(skew_minutes: int) -> None:
    """Lease state is an input to runtime ownership admissibility: a worker whose clock is
    ten minutes ahead of or behind the operator's is judged only by observed renewals."""
    def stamp(worker_seconds: int) -> str:
        moment = f.T0 + f.seconds(skew_minutes * 60 + worker_seconds)
        return moment.strftime("%Y-%m-%dT%H:%M:%S.000000Z")

    obs = None
    # The worker renews every 10 s of the operator's clock for two minutes: held throughout.
    for tick in range(0, 120, 10):
        now = f.T0 + f.seconds(tick)
        view = lease(stamp(tick))
        obs = observations.observe(previous=obs, lease=view, now=now)
        assert status_at(now, obs, view) is LeaseStatus.HELD
    # It stops renewing: held for the lease duration after the last *observed* change, no
    # matter how far its renewTime is from our clock, then expired.
    last = lease(stamp(110))
    for tick, want in [(125, "Held"), (139, "Held"), (140, "Expired"), (900, "Expired")]:
        now = f.T0 + f.seconds(tick)
        obs = observations.observe(previous=obs, lease=last, now=now)
        assert status_at(now, obs, last) is LeaseStatus(want), tick


def test_operator_restart_starts_a_new_observation() -> None:
    """The operator's memory is lost on restart; the lease gets a full duration again."""
    view = lease("2000-01-01T00:00:00Z")  # a renewTime decades old by our clock
    now = f.T0 + f.seconds(1000)
    obs = observations.observe(previous=None, lease=view, now=now)
    assert obs is not None and obs.observed_at == now
    assert status_at(now + f.seconds(29), obs, view) is LeaseStatus.HELD
    assert status_at(now + f.seconds(30), obs, view) is LeaseStatus.EXPIRED


def test_start_deadline_governs_until_the_first_renewal() -> None:
    """A pod not running and renewing within startDeadlineSeconds is deleted: StartTimeout."""
    view = lease(None)
    assert observations.observe(previous=None, lease=view, now=f.T0) is None
    assert status_at(f.T0 + f.seconds(299), None, view) is LeaseStatus.HELD
    assert status_at(f.T0 + f.seconds(300), None, view) is LeaseStatus.EXPIRED
    running = ending.judge(pod=PodView(phase=PodPhase.PENDING), lease=LeaseStatus.EXPIRED,
                             renewed=False)
    assert running.delete_pod and not running.ended
    gone = ending.judge(pod=PodView(phase=PodPhase.GONE), lease=LeaseStatus.EXPIRED,
                          renewed=False)
    assert gone.ended and gone.outcome is Outcome.START_TIMEOUT


def test_blind_time_never_counts_toward_the_start_deadline() -> None:
    """A worker cannot make its first renewal against a paused API server: the time the
    operator was blind moves the start deadline as it moves a renewed lease's expiry."""
    view = lease(None)

    def status(tick: int, *, blind: int) -> LeaseStatus:
        return observations.lease_status(observation=None, lease=view,
                                         now=f.T0 + f.seconds(tick), claimed_at=f.T0,
                                         start_deadline_seconds=60, lease_duration_seconds=30,
                                         blind=f.seconds(blind))
    assert status(60, blind=0) is LeaseStatus.EXPIRED
    assert status(99, blind=40) is LeaseStatus.HELD
    assert status(100, blind=40) is LeaseStatus.EXPIRED


def test_released_and_missing_leases() -> None:
    """A tombstoned lease is released; an absent one is missing; neither is ever held."""
    assert status_at(f.T0, None, lease("x", tombstoned=True)) is LeaseStatus.RELEASED
    assert status_at(f.T0, None, observations.MISSING_LEASE) is LeaseStatus.MISSING


def test_a_lease_its_holder_released_is_released_once_its_pod_exited() -> None:
    """Released by its holder (its worker's last write as it ended): once its pod exited
    (Succeeded or Failed) the attempt ends at once; before that, or with its pod gone
    without exiting (force-deleted: it may still run on a lost node), it is held for as
    long as it would have been, then expired, like any lease."""
    view = observations.lease_view({
        "metadata": {"annotations": {"agentrun.dev/released": "2026-12-06T12:00:00Z"}},
        "spec": {"holderIdentity": "pod", "renewTime": "r", "leaseDurationSeconds": 30}})
    assert view.tombstoned and view.released
    obs = observations.observe(previous=None, lease=view, now=f.T0)

    def status(tick: int, *, exited: bool, seen: bool = True) -> LeaseStatus:
        return observations.lease_status(
            observation=obs if seen else None, lease=view, now=f.T0 + f.seconds(tick),
            claimed_at=f.T0, start_deadline_seconds=300, lease_duration_seconds=30,
            pod_finished=exited)
    assert status(0, exited=True) is status(29, exited=True) is LeaseStatus.RELEASED
    assert status(0, exited=False) is status(29, exited=False) is LeaseStatus.HELD
    assert status(30, exited=True) is status(30, exited=False) is LeaseStatus.EXPIRED
    # never renewed as far as this operator saw: the start deadline bounds it instead
    assert status(299, exited=True, seen=False) is LeaseStatus.RELEASED
    assert status(300, exited=True, seen=False) is LeaseStatus.EXPIRED
    for phase, outcome in ((PodPhase.SUCCEEDED, Outcome.SUCCEEDED),
                           (PodPhase.FAILED, Outcome.FAILED)):
        assert phase in ending.EXITED
        ended = ending.judge(pod=PodView(phase=phase, exit_code=0), lease=LeaseStatus.RELEASED,
                             renewed=True)
        assert ended.ended and ended.outcome is outcome
        assert ended.message.endswith("the lease is released")
    assert PodPhase.GONE not in ending.EXITED
    # the operator's tombstone over it: released for good, whatever the pod
    ended_too = observations.lease_view({
        "metadata": {"annotations": {"agentrun.dev/released": "t", "agentrun.dev/outcome": "x"}},
        "spec": {"holderIdentity": "pod"}})
    assert ended_too.tombstoned and not ended_too.released
    assert observations.lease_status(
        observation=obs, lease=ended_too, now=f.T0, claimed_at=f.T0,
        start_deadline_seconds=300, lease_duration_seconds=30) is LeaseStatus.RELEASED


def test_reading_pods_and_leases() -> None:
    """Pod and Lease dicts as the API returns them become views."""
    assert observations.pod_view(None).phase is PodPhase.GONE
    running = observations.pod_view({"metadata": {"uid": "u"}, "status": {"phase": "Running"}})
    assert running == PodView(phase=PodPhase.RUNNING, uid="u")
    deleting = observations.pod_view({"metadata": {"deletionTimestamp": "t"},
                                      "status": {"phase": "Running"}})
    assert deleting.phase is PodPhase.TERMINATING
    finished = observations.pod_view({
        "metadata": {"deletionTimestamp": "t"},
        "status": {"phase": "Failed", "containerStatuses": [
            {"state": {"terminated": {"exitCode": 0}}},
            {"state": {"terminated": {"exitCode": 2}}}]}})
    assert (finished.phase, finished.exit_code) == (PodPhase.FAILED, 2)
    assert observations.pod_view({"status": {"phase": "Weird"}}).phase is PodPhase.UNKNOWN
    assert observations.lease_view(None) == observations.MISSING_LEASE
    held = observations.lease_view({"spec": {"holderIdentity": "p", "renewTime": "r",
                                             "leaseDurationSeconds": 30}})
    assert held == LeaseView(exists=True, holder="p", renew_time="r", duration_seconds=30)
    tomb = observations.lease_view({"metadata": {"annotations": {"agentrun.dev/outcome": "Lost"}},
                                    "spec": {"holderIdentity": "p"}})
    assert tomb.tombstoned
    assert observations.lease_view({"spec": {}}).tombstoned
