"""``steps.next_step`` for an attempt: Claiming, Active, and a property over any world.

Covers, each by the exact step type and its key content:
- Claiming: the Lease (holder = the pod's name, duration from the pinned spec), then the
  Pod (the run's pinned snapshots mounted, the attempt number as fencing token), then
  Active with the attempt record and the Claimed Event; an object under the attempt's
  name that is not this attempt's (labels, owner or content) waits under NameSquatted,
  spending nothing; no readable pinned spec ends the attempt as ClaimFailed (RetryWait,
  or AwaitingReassignment once exhausted);
- Active: the attempt table of docs/design/states.md: wait while the lease is held (until
  its observed expiry, or the start deadline before the first renewal), fence a live pod
  whose lease is not held, wait for a terminating pod, end as Succeeded, Failed, Lost or
  StartTimeout with the AttemptEnded Event; the run's retry policy decides exhaustion;
- a property over generated worlds (hypothesis, bounded, derandomized): a Pod or Lease is
  created only while Claiming, and no status write raises attemptCount by more than one
  (or lowers it).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentrun.api import names
from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.attempts import attemptobjects
from agentrun.core.base import events
from agentrun.core.base.actions import Create, DeletePod, Wait, WriteStatus
from agentrun.core.machine import transitions
from agentrun.core.policies.stamping import Stamping
from agentrun.core.slots import attemptlife, inputs, squats, steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

# --- Claiming ----------------------------------------------------------------------------------


def test_claiming_without_a_lease_creates_the_lease() -> None:
    world = f.world(f.claiming(2, owner="alice"), attempt=f.objects(2, pod=None, lease=None))
    step = expect(steps.next_step(world), Create)
    assert (step.claim, step.point) == (True, "claim-lease")
    body = step.body
    assert (body["kind"], body["metadata"]["name"]) == ("Lease", f.worker(2))
    assert body["spec"] == {"holderIdentity": f.worker(2), "leaseDurationSeconds": f.LEASE_SECONDS}
    assert body["metadata"]["labels"][names.ATTEMPT_LABEL] == "2"
    assert body["metadata"]["annotations"][names.OWNER_ACTOR_ANNOTATION] == "alice"
    assert attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=2)


def test_claiming_with_a_lease_and_no_pod_creates_the_pod_with_the_runs_snapshots() -> None:
    world = f.world(f.claiming(1), attempt=f.objects(1, pod=None, lease=f.lease(1)))
    step = expect(steps.next_step(world), Create)
    assert (step.claim, step.point) == (True, "claim-pod")
    body = step.body
    assert (body["kind"], body["metadata"]["name"]) == ("Pod", f.worker(1))
    assert body["spec"]["restartPolicy"] == "Never"
    mounted = {v["configMap"]["name"] for v in body["spec"]["volumes"] if "configMap" in v}
    assert mounted == set(f.pins().snapshot_names().values())
    env = {e["name"]: e.get("value") for e in body["spec"]["containers"][0]["env"]}
    assert env[names.ENV_FENCING_TOKEN] == "1"
    assert names.OWNER_ACTOR_ANNOTATION not in body["metadata"]["annotations"]


@pytest.mark.parametrize(("owner", "claim_id", "says"), [
    (None, False, None),  # automatic, in a run without a verified creator
    (f.CREATOR, False, None),  # automatic: the run's creator's
    (f.CREATOR, True, ", owner alice"),  # the creator's claim command
    ("bob", False, ", owner bob"),  # bob reopened it (a reassignment, an answer)
])
def test_claiming_with_both_objects_records_the_attempt_as_active(
        owner: str | None, claim_id: bool, says: str | None) -> None:
    lease = f.lease(1)
    if claim_id:
        lease["metadata"]["annotations"][names.CLAIM_ID] = "c1"
    world = f.world(f.claiming(1, owner=owner), now=f.T0 + f.seconds(2),
                    attempt=f.objects(1, pod=f.pod(1, "Pending"), lease=lease))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "active"
    status = step.status
    assert (status.state, status.active_worker, status.pending_worker) == (
        SlotState.ACTIVE, f.worker(1), None)
    record = status.attempts[-1]
    assert (record.number, record.pod_uid, record.owner_actor, record.started_at) == (
        1, "uid-pod-1", owner, f.T0 + f.seconds(2))
    assert status.next_owner_actor is None
    # At most one Event per pod on a first claim: none for an automatic claim (its status
    # says it), one for a claim a person asked for (a claim command, or another person).
    assert step.event == (None if says is None else events.Event(
        type="Normal", reason="Claimed",
        message=f"attempt 1 claimed: pod and lease {f.worker(1)} from LaunchSpec cpu-spec@1"
                + says))


def _foreign_pod() -> dict[str, Any]:
    pod = f.pod(1)
    pod["spec"]["containers"][0]["image"] = "attacker/miner:1"
    return pod


def _stranger_lease() -> dict[str, Any]:
    lease = f.lease(1)
    lease["metadata"]["ownerReferences"] = []
    return lease


@pytest.mark.parametrize(("objects", "kind"), [
    (f.objects(1, pod=None, lease=f.lease(1, attempt_label=7)), "Lease"),
    (f.objects(1, pod=f.pod(1, attempt_label=7), lease=f.lease(1)), "Pod"),
    (f.objects(1, pod=_foreign_pod(), lease=f.lease(1)), "Pod"),
    (f.objects(1, pod=None, lease=_stranger_lease()), "Lease"),
], ids=["lease-other-attempt", "pod-other-attempt", "pod-other-content", "lease-no-owner"])
def test_a_squatted_name_waits_under_name_squatted_and_spends_no_attempt(
        objects: object, kind: str) -> None:
    step = expect(steps.next_step(f.world(f.claiming(1), attempt=objects)), WriteStatus)
    status = step.status
    assert (status.state, status.pending_worker, status.attempt_count) == (
        SlotState.CLAIMING, f.worker(1), 1)
    squatted = f.condition(status, squats.NAME_SQUATTED)
    assert (squatted.status, squatted.reason) == ("True", "NameSquatted")
    assert f"a {kind} named {f.worker(1)} exists that the operator did not create" \
        in squatted.message
    assert f"kubectl -n {f.NS} delete {kind.lower()} {f.worker(1)}" in squatted.message
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Warning", "NameSquatted")
    # Said once: the next look only waits, and looks again soon.
    again = f.world(status, attempt=objects)
    assert expect(steps.next_step(again), Wait).until == f.T0 + squats.SQUAT_WAIT


@pytest.mark.parametrize("objects", [
    f.objects(1, pod=None, lease=f.lease(1, owner_uid="uid-old-slot")),
    f.objects(1, pod=f.pod(1, owner_uid="uid-old-slot"), lease=f.lease(1)),
], ids=["lease", "pod"])
def test_a_leftover_of_an_earlier_same_name_slot_is_waited_out_not_counted(
        objects: object) -> None:
    """A run deleted and recreated: its old slot's objects are still being collected."""
    step = expect(steps.next_step(f.world(f.claiming(1), attempt=objects)), Wait)
    assert step.until == f.T0 + attemptlife.GONE_WAIT
    assert "garbage-collected" in step.message


@pytest.mark.parametrize(("error", "says"), [
    ("snapshot 'x' does not hold the pinned spec", "snapshot 'x' does not hold the pinned spec"),
    (None, "no launch spec is pinned to build the pod from"),
])
def test_claiming_without_a_readable_pinned_spec_fails_the_claim(error: str | None,
                                                                 says: str) -> None:
    world = f.world(f.claiming(1), launch_spec=None, launch_spec_error=error,
                    attempt=f.objects(1, pod=None, lease=None))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "claim-failed"
    assert step.status.attempts[-1].outcome is Outcome.CLAIM_FAILED
    assert step.event is not None
    assert step.event.message == f"attempt {f.worker(1)} could not be created: {says}"
    assert step.status.attempts[-1].reason == step.event.message


# --- Active: the attempt table ------------------------------------------------------------------


def active_world(*, pod: dict[str, Any] | None, lease: dict[str, Any] | None, now_s: float,
                 observed_s: float | None = None, **kwargs: Any) -> World:
    observation = f.observed(f.T0 + f.seconds(observed_s)) if observed_s is not None else None
    return f.world(f.active(1), now=f.T0 + f.seconds(now_s), observation=observation,
                   attempt=f.objects(1, pod=pod, lease=lease), **kwargs)


def test_a_held_lease_waits_until_its_observed_expiry() -> None:
    world = active_world(pod=f.pod(1), lease=f.lease(1, renew_time="r"), now_s=100,
                         observed_s=90)
    step = expect(steps.next_step(world), Wait)
    assert step.until == f.T0 + f.seconds(90 + f.LEASE_SECONDS)


def test_before_the_first_renewal_the_wait_ends_at_the_start_deadline() -> None:
    world = active_world(pod=f.pod(1, "Pending"), lease=f.lease(1), now_s=30)
    step = expect(steps.next_step(world), Wait)
    assert step.until == f.T0 + f.seconds(f.START_DEADLINE)


def test_a_restarted_operator_counts_the_start_deadline_from_its_first_sight_at_the_latest(
) -> None:
    """The claim time was written on another machine's clock, maybe behind ours: a pod
    still starting is not killed for it; the deadline counts from when we first saw it."""
    world = active_world(pod=f.pod(1, "Pending"), lease=f.lease(1),
                         now_s=f.START_DEADLINE + 5)
    seen = f.T0 + f.seconds(f.START_DEADLINE)
    step = expect(steps.next_step(dataclasses.replace(world, first_seen=seen)), Wait)
    assert step.until == seen + f.seconds(f.START_DEADLINE)
    # Seen before the claim time (our clock behind): the claim time still counts.
    early = dataclasses.replace(world, first_seen=f.T0 - f.seconds(60))
    assert isinstance(steps.next_step(early), DeletePod)


@pytest.mark.parametrize(("deadline", "until_s"), [(110, 110), (200, 90 + f.LEASE_SECONDS)])
def test_an_active_wait_ends_at_the_lease_expiry_or_the_runs_deadline_if_sooner(
        deadline: int, until_s: int) -> None:
    """Nothing else wakes an Active slot whose lease is renewed: its wait must end at the
    run's deadline (to fail it then) when that comes first."""
    world = active_world(pod=f.pod(1), lease=f.lease(1, renew_time="r"), now_s=100,
                         observed_s=90, run=f.agent_run(deadline=deadline))  # started at T0
    assert expect(steps.next_step(world), Wait).until == f.T0 + f.seconds(until_s)


@pytest.mark.parametrize(("pod", "lease", "observed_s"), [
    (f.pod(1, "Running"), f.lease(1, renew_time="r"), 0),
    (f.pod(1, "Pending"), None, None),
], ids=["expired", "missing"])
def test_a_live_pod_whose_lease_is_not_held_is_deleted(
        pod: dict[str, Any], lease: dict[str, Any] | None, observed_s: float | None) -> None:
    step = expect(steps.next_step(active_world(pod=pod, lease=lease, now_s=100,
                                               observed_s=observed_s)), DeletePod)
    assert (step.name, step.uid) == (f.worker(1), "uid-pod-1")
    assert "deleting the pod to fence the attempt" in step.message


def test_a_terminating_pod_with_an_expired_lease_is_waited_for() -> None:
    world = active_world(pod=f.pod(1, "Running", deleting=True),
                         lease=f.lease(1, renew_time="r"), now_s=100, observed_s=0)
    step = expect(steps.next_step(world), Wait)
    assert "waiting until it is gone" in step.message
    assert step.until is None


def test_a_failed_pod_with_an_expired_lease_ends_the_attempt_failed() -> None:
    world = active_world(pod=f.pod(1, "Failed", exit_code=3), lease=f.lease(1, renew_time="r"),
                         now_s=100, observed_s=0)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "attempt-ended"
    status = step.status
    assert (status.state, status.active_worker, status.prior_worker) == (
        SlotState.RETRY_WAIT, None, f.worker(1))
    assert status.retry_at == f.T0 + f.seconds(110)
    record = status.attempts[-1]
    assert (record.outcome, record.exit_code, record.ended_at) == (
        Outcome.FAILED, 3, f.T0 + f.seconds(100))
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Warning", "AttemptEnded")
    assert step.event.message.startswith(f"attempt {f.worker(1)} ended Failed:")


def test_a_succeeded_pod_ends_the_attempt_and_the_slot_succeeded() -> None:
    world = active_world(pod=f.pod(1, "Succeeded", exit_code=0),
                         lease=f.lease(1, renew_time="r", holder=False), now_s=50, observed_s=40)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.state is SlotState.SUCCEEDED
    assert step.status.attempts[-1].outcome is Outcome.SUCCEEDED
    assert f.condition(step.status, transitions.SUCCEEDED).status == "True"
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Normal", "AttemptEnded")


@pytest.mark.parametrize(("phase", "outcome", "state"), [
    ("Succeeded", Outcome.SUCCEEDED, SlotState.SUCCEEDED),
    ("Failed", Outcome.FAILED, SlotState.RETRY_WAIT)])
def test_a_finished_pod_whose_worker_released_its_lease_ends_the_attempt_at_once(
        phase: str, outcome: Outcome, state: SlotState) -> None:
    """Not a lease duration later: its worker's last write said it let go."""
    world = active_world(pod=f.pod(1, phase, exit_code=0 if phase == "Succeeded" else 1),
                         lease=f.lease(1, renew_time="r", released=True), now_s=41,
                         observed_s=40)
    step = expect(steps.next_step(world), WriteStatus)
    assert (step.status.state, step.status.attempts[-1].outcome) == (state, outcome)
    assert step.status.attempts[-1].reason is not None
    assert step.status.attempts[-1].reason.endswith("the lease is released")


@pytest.mark.parametrize("pod", [f.pod(1), None], ids=["running", "gone"])
def test_a_pod_not_exited_whose_worker_released_its_lease_is_waited_for_until_its_expiry(
        pod: dict[str, Any] | None) -> None:
    """Released while its pod still runs (the worker ending), or with the pod gone without
    exiting (force-deleted: it may still run on a lost node): held until the lease would
    have expired, looked at again then; a running pod is fenced, a gone one ends Lost."""
    released = f.lease(1, renew_time="r", released=True)
    step = expect(steps.next_step(active_world(pod=pod, lease=released, now_s=41,
                                               observed_s=40)), Wait)
    assert step.until == f.T0 + f.seconds(40 + f.LEASE_SECONDS)
    assert "the lease is held" in step.message
    late = steps.next_step(active_world(pod=pod, lease=released, now_s=40 + f.LEASE_SECONDS,
                                        observed_s=40))
    if pod is not None:
        assert "deleting the pod" in expect(late, DeletePod).message
    else:
        assert expect(late, WriteStatus).status.attempts[-1].outcome is Outcome.LOST


def test_a_pod_gone_after_the_lease_expired_ends_the_attempt_lost() -> None:
    world = active_world(pod=None, lease=f.lease(1, renew_time="r"), now_s=100, observed_s=0)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.LOST
    assert step.event is not None and step.event.type == "Warning"


def test_a_worker_that_never_renewed_by_the_start_deadline_ends_start_timeout() -> None:
    world = active_world(pod=None, lease=f.lease(1), now_s=f.START_DEADLINE)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.START_TIMEOUT
    assert step.status.state is SlotState.RETRY_WAIT


def test_the_runs_retry_policy_decides_exhaustion() -> None:
    world = active_world(pod=f.pod(1, "Failed"), lease=None, now_s=10,
                         run=f.agent_run(max_attempts=1))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.retry_at is None
    assert f.condition(step.status, transitions.AWAITING_REASSIGNMENT).status == "True"


def test_the_world_reads_the_pending_else_the_active_else_the_prior_attempt() -> None:
    def reads(status: SlotStatus) -> tuple[str | None, str | None]:
        found = inputs.reads_for(f.slot(status), max_active=False)
        return found.worker, found.next_worker
    assert reads(f.claiming(2)) == (f.worker(2), None)
    assert reads(f.active(3)) == (f.worker(3), None)
    # An open slot that may claim also reads attempt n+1: its Lease says a claim is under way.
    assert reads(f.retry_wait(attempts_used=2)) == (f.worker(2), f.worker(3))
    assert reads(f.ready()) == (None, f.worker(1))


# --- a property over generated worlds -------------------------------------------------------------

PHASES = st.sampled_from([None, "Pending", "Running", "Succeeded", "Failed", "Unknown"])


@st.composite
def any_world(draw: st.DrawFn) -> World:
    state = draw(st.sampled_from(list(SlotState)))
    n = draw(st.integers(min_value=1, max_value=4))
    retry_at = draw(st.sampled_from([None, f.T0, f.T0 + f.seconds(500)]))
    status = {
        SlotState.PENDING: SlotStatus(),
        SlotState.READY: f.ready(),
        SlotState.CLAIMING: f.claiming(n, owner=draw(st.sampled_from([None, "alice"]))),
        SlotState.ACTIVE: f.active(n, owner=draw(st.sampled_from([None, "alice"]))),
        SlotState.RETRY_WAIT: f.retry_wait(attempts_used=n, retry_at=retry_at),
        SlotState.SUCCEEDED: f.finished(SlotState.SUCCEEDED),
        SlotState.FAILED: f.finished(SlotState.FAILED),
    }[state]
    if draw(st.booleans()):
        status = transitions.hold(status, reason="held", now=f.T0)
    worker = inputs.reads_for(f.slot(status), max_active=False).worker
    attempt = None
    if worker is not None:
        number = int(worker.removeprefix(f"{f.SLOT}-"))
        phase = draw(PHASES)
        pod = None if phase is None else f.pod(
            number, phase, deleting=draw(st.booleans()),
            attempt_label=draw(st.sampled_from([None, 99])))
        lease = draw(st.sampled_from([None, "held", "renewed", "tombstoned"]))
        attempt = f.objects(number, pod=pod, lease=None if lease is None else f.lease(
            number, renew_time="r" if lease != "held" else None,
            outcome="Failed" if lease == "tombstoned" else None))
    kind = draw(st.sampled_from([None, "claim", "reassign", "hold", "release", "give-up"]))
    annotations = None if kind is None else f.command(
        kind, draw(st.sampled_from(["req-1", " "])),
        actor=draw(st.sampled_from([None, "alice", "bob"])), reason="because", run=f.RUN,
        worker_class="cpu")
    if kind in ("claim", "hold", "release"):
        annotations = {k: v for k, v in (annotations or {}).items()
                       if not k.endswith(("-run", "-worker-class"))
                       and not (kind != "hold" and k.endswith("-reason"))}
    return f.world(
        status, annotations=annotations,
        run=f.agent_run(claim_policy=draw(st.sampled_from(["Automatic", "Manual"])),
                        suspend=draw(st.booleans()),
                        deadline=draw(st.sampled_from([None, 100, 10_000]))),
        now=f.T0 + f.seconds(draw(st.sampled_from([0, 50, 130, 1000]))),
        depends_on=draw(st.sampled_from([[], ["fetch"]])),
        dependencies={"fetch": draw(st.sampled_from(list(SlotState)))},
        launch_specs=draw(st.sampled_from([(), (f.CPU_SPEC,)])),
        snapshots=draw(st.sampled_from([frozenset(), frozenset({f.PINNED.snapshot})])),
        launch_spec=draw(st.sampled_from([None, f.CPU_SPEC.spec])),
        attempt=attempt,
        observation=draw(st.sampled_from([None, f.observed(f.T0),
                                          f.observed(f.T0 + f.seconds(120))])),
        stamping=draw(st.sampled_from([f.IN_FORCE, Stamping(epoch=None, problem="none")])),
    )


@settings(max_examples=300, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(any_world())
def test_only_a_claiming_slot_creates_attempt_objects_and_attempts_grow_by_one(
        world: World) -> None:
    step = steps.next_step(world)
    before = world.slot.status
    if isinstance(step, Create) and step.body["kind"] in ("Pod", "Lease"):
        assert before.state is SlotState.CLAIMING
        assert step.claim
    if isinstance(step, WriteStatus):
        assert before.attempt_count <= step.status.attempt_count <= before.attempt_count + 1
