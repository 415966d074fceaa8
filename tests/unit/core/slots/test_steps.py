"""``steps.next_step`` up to an attempt: run gone, finished slots, deadline, Pending, Ready.

Covers, each by the exact step type and its key content:
- a slot whose run is gone waits; the first status write records observedGeneration;
- a finished slot fences its last attempt (deletes a live pod, tombstones the lease with
  the attempt record's outcome, end time, owner actor and launch spec), then waits;
- the run's deadline fails any open slot (DeadlineExceeded), and the Wait of a Pending,
  Ready or RetryWait slot is capped at that deadline unless it is earlier;
- Pending: a failed dependency fails the slot, an unmet one is waited for, a missing
  LaunchSpec sets LaunchSpecSelected False once (then waits), a serving spec is
  snapshotted and then the slot is Ready;
- Ready/RetryWait: the prior attempt is fenced first; then claim (Automatic), or wait for
  a claim command (Manual), a resume (suspend), retryAt, a release (held) or a person
  (exhausted), never for a time already past.

Attempts (Claiming, Active, and a property over generated worlds) are in
``test_steps_attempts.py``; commands in ``test_steps_commands.py``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.base import events, naming
from agentrun.core.base.actions import Create, DeletePod, Tombstone, Wait, WriteStatus
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions
from agentrun.core.slots import inputs, specsnapshots, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

# --- run gone, observed generation -------------------------------------------------------


def test_a_slot_whose_run_is_gone_waits_even_with_a_pending_command() -> None:
    step = expect(steps.next_step(f.world(f.ready(), run=None,
                                          annotations=f.command("hold", reason="x"))), Wait)
    assert "run is gone" in step.message
    assert step.until is None


def test_a_slot_that_waits_gets_its_first_status_with_the_observed_generation() -> None:
    step = expect(steps.next_step(f.world(generation=3, depends_on=["other"])), WriteStatus)
    assert step.point == "observed"
    assert step.event is None
    assert step.status == SlotStatus(observed_generation=3)


def test_a_slot_with_work_to_do_writes_no_status_of_its_own_first() -> None:
    """The observed generation rides on the next status write (here: the claim's)."""
    world = f.world(generation=3, snapshots=frozenset({f.PINNED_RUN_SNAPSHOT}),
                    next_attempt=f.objects(1))
    decision = steps.decide(world)
    claim = expect(decision.step, Create)
    assert claim.point == "claim-lease"
    assert decision.world.slot.status.observed_generation == 3


def test_a_pending_command_carries_the_observed_generation_in_its_ledger_write() -> None:
    world = f.world(f.ready(), generation=3, annotations=f.command("hold", "  "))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.point == "command-ledger"
    assert step.status.observed_generation == 3


# --- a finished slot: fence, tombstone, then nothing --------------------------------------


@pytest.mark.parametrize("state", [SlotState.SUCCEEDED, SlotState.FAILED])
@pytest.mark.parametrize("phase", ["Pending", "Running"])
def test_a_finished_slot_deletes_a_live_prior_pod(state: SlotState, phase: str) -> None:
    world = f.world(f.finished(state), attempt=f.objects(1, pod=f.pod(1, phase), lease=f.lease(1)))
    step = expect(steps.next_step(world), DeletePod)
    assert (step.name, step.uid, step.point) == (f.worker(1), "uid-pod-1", "delete-pod")
    assert "fencing attempt" in step.message


@pytest.mark.parametrize("pod", [None, f.pod(1, "Succeeded"), f.pod(1, "Running", deleting=True)],
                         ids=["gone", "succeeded", "terminating"])
def test_a_finished_slot_tombstones_its_lease_from_the_attempt_record(
        pod: dict[str, Any] | None) -> None:
    world = f.world(f.finished(SlotState.SUCCEEDED), now=f.T0 + f.seconds(600),
                    attempt=f.objects(1, pod=pod, lease=f.lease(1, renew_time="r1")))
    step = expect(steps.next_step(world), Tombstone)
    assert (step.name, step.point) == (f.worker(1), "tombstone")
    assert step.annotations == {
        names.OUTCOME_ANNOTATION: "Succeeded",
        names.ENDED_AT_ANNOTATION: "2030-01-01T12:01:00Z",  # the record's, not now
        names.OWNER_ACTOR_ANNOTATION: "alice",
        names.LAUNCH_SPEC_ANNOTATION: "cpu-spec@1",
    }


def test_a_tombstone_of_an_automatic_attempt_names_no_owner_actor() -> None:
    world = f.world(f.finished(SlotState.FAILED, owner=None),
                    attempt=f.objects(1, pod=None, lease=f.lease(1, holder=False)))
    step = expect(steps.next_step(world), Tombstone)
    assert names.OWNER_ACTOR_ANNOTATION not in step.annotations
    assert step.annotations[names.OUTCOME_ANNOTATION] == "GaveUp"


def test_a_tombstone_without_an_attempt_record_says_lost_now() -> None:
    now = f.T0 + f.seconds(90)
    world = f.world(f.finished(SlotState.FAILED, record=False), now=now,
                    attempt=f.objects(1, pod=None, lease=f.lease(1)))
    step = expect(steps.next_step(world), Tombstone)
    assert step.annotations == {names.OUTCOME_ANNOTATION: "Lost",
                                names.ENDED_AT_ANNOTATION: "2030-01-01T12:01:30Z"}


@pytest.mark.parametrize("attempt", [
    f.objects(1, pod=f.pod(1, "Succeeded"), lease=f.lease(1, holder=False, outcome="Succeeded")),
    f.objects(1, pod=None, lease=None),
    None,
    f.objects(2, pod=f.pod(2, "Running"), lease=f.lease(2)),  # not the prior attempt
], ids=["tombstoned", "both-gone", "not-read", "other-attempt"])
def test_a_finished_slot_with_its_attempt_fenced_waits(attempt: object) -> None:
    world = f.world(f.finished(SlotState.SUCCEEDED), attempt=attempt)
    step = expect(steps.next_step(world), Wait)
    assert step.message == "the slot has Succeeded"
    assert step.until is None


def test_a_finished_slot_without_any_attempt_waits() -> None:
    status = SlotStatus(state=SlotState.FAILED)
    assert expect(steps.next_step(f.world(status)), Wait).message == "the slot has Failed"


# --- the run's deadline ---------------------------------------------------------------------

OPEN = {
    "Pending": (SlotStatus(), None),
    "Ready": (f.ready(), None),
    "RetryWait": (f.retry_wait(retry_at=f.T0 + f.seconds(900)),
                  f.objects(1, pod=None, lease=f.lease(1, outcome="Failed"))),
    "Claiming": (f.claiming(1), f.objects(1, pod=None, lease=None)),
    "Active": (f.active(1), f.objects(1, pod=f.pod(1), lease=f.lease(1, renew_time="r"))),
}


@pytest.mark.parametrize("state", list(OPEN))
def test_a_passed_deadline_fails_an_open_slot(state: str) -> None:
    status, attempt = OPEN[state]
    world = f.world(status, run=f.agent_run(deadline=600), now=f.T0 + f.seconds(600),
                    attempt=attempt, observation=f.observed(f.T0 + f.seconds(590)))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.state is SlotState.FAILED
    succeeded = f.condition(step.status, transitions.SUCCEEDED)
    assert (succeeded.status, succeeded.reason) == ("False", "DeadlineExceeded")
    assert step.event == events.Event(
        type="Warning", reason="DeadlineExceeded",
        message="the run's activeDeadlineSeconds (600) has passed")
    if state in ("Claiming", "Active"):  # the live attempt is closed, then fenced
        assert step.status.prior_worker == f.worker(1)
        assert step.status.attempts[-1].outcome is Outcome.GAVE_UP


def test_a_deadline_counts_only_from_the_runs_start_time() -> None:
    world = f.world(f.ready(), run=f.agent_run(deadline=1, start_time=None, claim_policy="Manual"),
                    now=f.T0 + f.seconds(10_000))
    assert expect(steps.next_step(world), Wait).until is None
    assert inputs.deadline(world) is None
    assert inputs.deadline(f.world(run=None)) is None


LIMIT = f.T0 + f.seconds(600)


@pytest.mark.parametrize(("status", "run", "kwargs", "until"), [
    pytest.param(SlotStatus(), f.agent_run(deadline=600), {"depends_on": ["fetch"]}, LIMIT,
                 id="pending-dependency"),
    pytest.param(f.ready(), f.agent_run(deadline=600, claim_policy="Manual"), {}, LIMIT,
                 id="ready-manual"),
    pytest.param(f.ready(), f.agent_run(deadline=600, suspend=True), {}, LIMIT,
                 id="ready-suspended"),
    pytest.param(f.retry_wait(retry_at=f.T0 + f.seconds(900)), f.agent_run(deadline=600), {},
                 LIMIT, id="retry-later-than-deadline"),
    pytest.param(f.retry_wait(retry_at=f.T0 + f.seconds(300)), f.agent_run(deadline=600), {},
                 f.T0 + f.seconds(300), id="retry-earlier-than-deadline"),
    pytest.param(f.retry_wait(retry_at=f.T0 + f.seconds(300)), f.agent_run(), {},
                 f.T0 + f.seconds(300), id="retry-no-deadline"),
    pytest.param(f.ready(), f.agent_run(claim_policy="Manual"), {}, None, id="manual-no-deadline"),
])
def test_a_wait_of_an_open_slot_is_capped_at_the_runs_deadline(
        status: SlotStatus, run: AgentRun, kwargs: dict[str, Any], until: datetime | None) -> None:
    prior = f.objects(1, pod=None, lease=f.lease(1, outcome="Failed"))
    world = f.world(status, run=run, attempt=prior if status.prior_worker else None, **kwargs)
    assert expect(steps.next_step(world), Wait).until == until


# --- Pending ---------------------------------------------------------------------------------


def test_a_failed_dependency_fails_the_slot() -> None:
    world = f.world(depends_on=["fetch", "parse"],
                    dependencies={"fetch": SlotState.SUCCEEDED, "parse": SlotState.FAILED})
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.state is SlotState.FAILED
    assert f.condition(step.status, transitions.SUCCEEDED).reason == "DependencyFailed"
    assert step.event == events.Event(type="Warning", reason="DependencyFailed",
                                      message="dependency parse failed; this slot cannot run")


def test_an_unmet_dependency_is_waited_for_by_name() -> None:
    world = f.world(depends_on=["fetch", "parse", "index"],
                    dependencies={"fetch": SlotState.SUCCEEDED, "parse": SlotState.ACTIVE})
    step = expect(steps.next_step(world), Wait)
    assert step.message == "waiting for parse, index to succeed"
    assert step.until is None


@pytest.mark.parametrize(("specs", "predicate"), [
    ((), "UnknownWorkerClass"),
    ((f.launch_spec("gpu-spec", classes=["gpu"]),), "UnknownWorkerClass"),
    ((f.launch_spec("cpu-other", classes=["cpu"], runs=["other-run"]),), "NoCompatibleLaunchSpec"),
    ((f.launch_spec("cpu-spec", classes=["cpu"], namespace="team-b"),), "UnknownWorkerClass"),
], ids=["none", "other-class", "out-of-scope", "other-namespace"])
def test_no_launch_spec_for_the_class_sets_launch_spec_selected_false_once(
        specs: tuple[LaunchSpec, ...], predicate: str) -> None:
    world = f.world(launch_specs=specs)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.state is SlotState.PENDING
    selected = f.condition(step.status, steps.LAUNCH_SPEC_SELECTED)
    assert (selected.status, selected.reason) == ("False", predicate)
    assert step.event is not None
    assert (step.event.type, step.event.reason) == ("Warning", predicate)
    assert step.event.message == selected.message
    # The condition is there: the next reading waits instead of writing again.
    again = expect(steps.next_step(f.world(step.status, launch_specs=specs)), Wait)
    assert again.message == selected.message


def test_a_serving_launch_spec_is_snapshotted_then_the_slot_is_ready() -> None:
    spec = f.launch_spec("cpu-spec", classes=["cpu"], lease_seconds=60)
    world = f.world(launch_specs=(f.launch_spec("gpu-spec", classes=["gpu"]), spec))
    create = expect(steps.next_step(world), Create)
    digest = launchpins.digest(spec.spec)
    snapshot = f"{f.RUN}-lspec-{digest[:10]}"
    assert (create.point, create.claim) == ("launch-spec-snapshot", False)
    assert (create.body["kind"], create.body["metadata"]["name"]) == ("ConfigMap", snapshot)
    # One snapshot per (run, digest), owned by the run (not by each slot).
    assert create.body["metadata"]["ownerReferences"][0]["uid"] == f.RUN_UID
    pinned = launchpins.pin(run=f.RUN, choice=selection.Choice(spec=spec, reason=""))
    assert specsnapshots.read(create.body, pinned=pinned) == spec.spec

    # Claimable at once (Automatic): no Ready write; the claim's Lease is the next write
    # and the Ready status (the pin) rides in its claiming world to the one status write.
    decision = steps.decide(f.world(launch_specs=world.launch_specs,
                                    next_attempt=f.objects(1),
                                    snapshots=frozenset({snapshot})))
    claim = expect(decision.step, Create)
    assert claim.point == "claim-lease"
    claiming = decision.world.slot.status
    assert claiming.launch_spec is not None and claiming.launch_spec.snapshot == snapshot
    assert decision.world.launch_spec == spec.spec

    # A slot that must wait (Manual: no claim command yet) gets its Ready status written.
    ready = expect(steps.next_step(
        f.world(launch_specs=world.launch_specs, snapshots=frozenset({snapshot}),
                run=f.agent_run(claim_policy="Manual"))), WriteStatus)
    assert ready.point == "status"
    assert ready.status.state is SlotState.READY
    assert ready.status.worker_class == "cpu"
    assert ready.status.launch_spec is not None
    assert (ready.status.launch_spec.name, ready.status.launch_spec.digest,
            ready.status.launch_spec.snapshot) == ("cpu-spec", digest, snapshot)
    assert f.condition(ready.status, steps.LAUNCH_SPEC_SELECTED).status == "True"
    assert ready.event is None  # Events only where a person needs them
    assert ready.status.attempt_count == 0


def test_a_worker_class_in_the_status_overrides_the_nodes() -> None:
    gpu = f.launch_spec("gpu-spec", classes=["gpu"])
    digest = launchpins.digest(gpu.spec)
    world = f.world(SlotStatus(worker_class="gpu"), launch_specs=(f.CPU_SPEC, gpu),
                    snapshots=frozenset({f"{f.RUN}-lspec-{digest[:10]}"}),
                    run=f.agent_run(claim_policy="Manual"))
    ready = expect(steps.next_step(world), WriteStatus)
    assert ready.status.worker_class == "gpu"
    assert ready.status.launch_spec is not None and ready.status.launch_spec.name == "gpu-spec"


def test_a_spec_that_appears_later_flips_launch_spec_selected_true() -> None:
    missing = expect(steps.next_step(f.world(launch_specs=())), WriteStatus).status
    snapshot = naming.launch_spec_snapshot_name(
        run=f.RUN, digest=launchpins.digest(f.CPU_SPEC.spec))
    ready = expect(steps.next_step(f.world(missing, snapshots=frozenset({snapshot}),
                                           run=f.agent_run(claim_policy="Manual"))),
                   WriteStatus)
    assert ready.status.state is SlotState.READY
    assert f.condition(ready.status, steps.LAUNCH_SPEC_SELECTED).reason == "Selected"


# --- Ready and RetryWait ----------------------------------------------------------------------

TOMBSTONED_PRIOR = f.objects(1, pod=f.pod(1, "Failed"), lease=f.lease(1, outcome="Failed"))


def test_a_ready_slot_is_claimed_automatically() -> None:
    """The claim's first write is the Lease of attempt 1 (no Claiming status first)."""
    decision = steps.decide(f.world(f.ready(), next_attempt=f.objects(1)))
    step = expect(decision.step, Create)
    assert (step.point, step.claim, step.body["kind"]) == ("claim-lease", True, "Lease")
    assert step.body["metadata"]["name"] == f.worker(1)
    assert decision.world.slot.status.attempt_count == 1


def test_a_retry_wait_slot_is_claimed_once_retry_at_has_passed() -> None:
    world = f.world(f.retry_wait(retry_at=f.T0 + f.seconds(10)), now=f.T0 + f.seconds(10),
                    attempt=TOMBSTONED_PRIOR, next_attempt=f.objects(2))
    decision = steps.decide(world)
    step = expect(decision.step, Create)
    assert (step.point, step.body["metadata"]["name"]) == ("claim-lease", f.worker(2))
    claiming = decision.world.slot.status
    assert (claiming.attempt_count, claiming.retry_at, claiming.prior_worker) == (
        2, None, f.worker(1))


def test_a_retry_wait_slot_waits_until_retry_at() -> None:
    at = f.T0 + f.seconds(30)
    world = f.world(f.retry_wait(retry_at=at), attempt=TOMBSTONED_PRIOR)
    step = expect(steps.next_step(world), Wait)
    assert (step.message, step.until) == ("waiting to retry", at)


def test_a_ready_slot_under_manual_policy_waits_for_a_claim_command() -> None:
    step = expect(steps.next_step(f.world(f.ready(), run=f.agent_run(claim_policy="Manual"))),
                  Wait)
    assert step.message == "waiting for a claim command (claimPolicy Manual)"
    assert step.until is None


def test_a_retry_wait_slot_under_manual_policy_waits_for_a_claim_command_not_a_past_time() -> None:
    # Regression: it returned Wait(until=retryAt) with retryAt already past, which the
    # scheduler treats as due on every tick: a reconcile per tick until a person claims.
    world = f.world(f.retry_wait(retry_at=f.T0), now=f.T0 + f.seconds(60),
                    run=f.agent_run(claim_policy="Manual"), attempt=TOMBSTONED_PRIOR)
    step = expect(steps.next_step(world), Wait)
    assert step.message == "waiting for a claim command (claimPolicy Manual)"
    assert step.until is None


@pytest.mark.parametrize("status", [f.ready(), f.retry_wait(retry_at=f.T0)], ids=["ready",
                                                                                   "retry-wait"])
def test_a_held_slot_waits_for_a_release_not_a_past_time(status: SlotStatus) -> None:
    held = transitions.hold(status, reason="investigating", now=f.T0)
    world = f.world(held, now=f.T0 + f.seconds(60), attempt=TOMBSTONED_PRIOR)
    step = expect(steps.next_step(world), Wait)
    assert "held" in step.message
    assert step.until is None


@pytest.mark.parametrize("status", [f.ready(), f.retry_wait(retry_at=f.T0)], ids=["ready",
                                                                                   "retry-wait"])
def test_a_slot_of_a_suspended_run_waits(status: SlotStatus) -> None:
    world = f.world(status, run=f.agent_run(suspend=True), now=f.T0 + f.seconds(60),
                    attempt=TOMBSTONED_PRIOR)
    step = expect(steps.next_step(world), Wait)
    assert (step.message, step.until) == ("the run is suspended", None)


def test_an_exhausted_slot_waits_for_a_person() -> None:
    exhausted = expect(steps.next_step(f.world(
        f.claiming(3), launch_spec=None, launch_spec_error="gone",
        attempt=f.objects(3, pod=None, lease=None))), WriteStatus).status
    assert f.condition(exhausted, transitions.AWAITING_REASSIGNMENT).status == "True"
    world = f.world(exhausted, now=f.T0 + f.seconds(3600),
                    attempt=f.objects(3, pod=None, lease=f.lease(3, outcome="ClaimFailed")))
    step = expect(steps.next_step(world), Wait)
    assert step.message == "attempts exhausted: awaiting reassignment or give-up"
    assert step.until is None


def test_a_retry_wait_slot_without_a_pinned_spec_waits_without_a_time() -> None:
    status = f.retry_wait(retry_at=f.T0).model_copy(update={"launch_spec": None})
    world = f.world(status, now=f.T0 + f.seconds(60), attempt=TOMBSTONED_PRIOR)
    step = expect(steps.next_step(world), Wait)
    assert (step.message, step.until) == ("not claimable: no launch spec is pinned", None)


def test_a_prior_lease_not_tombstoned_is_tombstoned_before_any_claim() -> None:
    world = f.world(f.retry_wait(retry_at=f.T0), now=f.T0 + f.seconds(60),
                    attempt=f.objects(1, pod=f.pod(1, "Failed"), lease=f.lease(1, renew_time="r")))
    step = expect(steps.next_step(world), Tombstone)
    assert step.name == f.worker(1)
    assert step.annotations[names.OUTCOME_ANNOTATION] == "Failed"


def test_a_live_prior_pod_is_deleted_before_any_claim() -> None:
    world = f.world(f.retry_wait(retry_at=f.T0), now=f.T0 + f.seconds(60),
                    attempt=f.objects(1, pod=f.pod(1, "Running"), lease=f.lease(1)))
    assert expect(steps.next_step(world), DeletePod).name == f.worker(1)
