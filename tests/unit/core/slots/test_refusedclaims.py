"""A claim whose Pod the LaunchSpec can never make spends no attempt (``core.slots.refusedclaims``).

Covers: how a refusal is told apart (``core.base.refusals``: a full quota, the LaunchSpec's,
other); a Pod refused as invalid, for "must specify" limits or by a LimitRange keeps the
claim under way
(Claiming, the same attempt number, nothing recorded, never AwaitingReassignment even with
one attempt allowed) under ``LaunchSpecRefused``, and is asked for again as pinned after
``REFUSED_WAIT``; a changed LaunchSpec is taken (its snapshot, the pin, the Lease's
record, then the Pod from it); the claim's end clears the condition; a slot waiting so
reads the LaunchSpecs.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import conditions, names
from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.slots import PinnedLaunchSpec, SlotState, SlotStatus
from agentrun.core.base import refusals
from agentrun.core.base.actions import AnnotateLease, Create, Wait, WriteStatus
from agentrun.core.launchspecs import launchpins, selection
from agentrun.core.machine import transitions
from agentrun.core.slots import attemptlife, inputs, refusedclaims, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

MUST_SPECIFY = ('pods "x-1" is forbidden: failed quota: compute: must specify limits.cpu '
                "for: worker; limits.memory for: worker")
FULL = ('pods "x-1" is forbidden: exceeded quota: compute, requested: pods=1, used: pods=1, '
        "limited: pods=1")
# A LimitRange's refusals, as the API server words them (one violation, or several).
LIMIT_MAX = ('pods "x-1" is forbidden: maximum cpu usage per Container is 500m, but limit '
             "is 1")
LIMIT_RATIO = ('pods "x-1" is forbidden: cpu max limit to request ratio per Container is 2, '
               "but provided ratio is 20.000000")
LIMIT_MIN = ('pods "x-1" is forbidden: [minimum memory usage per Container is 128Mi, but '
             "request is 64Mi, maximum memory usage per Pod is 1Gi, but limit is 2Gi]")
R = refusals.Refusal


@pytest.mark.parametrize(("status", "message", "kind"), [
    (403, FULL, R.QUOTA_FULL), (403, MUST_SPECIFY, R.LAUNCH_SPEC),
    (422, "Pod is invalid: spec.containers[0].image: Required value", R.LAUNCH_SPEC),
    (400, "quantities must match the regular expression", R.LAUNCH_SPEC),
    (403, LIMIT_MAX, R.LAUNCH_SPEC), (403, LIMIT_RATIO, R.LAUNCH_SPEC),
    (403, LIMIT_MIN, R.LAUNCH_SPEC),
    (403, 'pods "x-1" is forbidden: one pod per Container image allowed', R.OTHER),
    (403, "violates PodSecurity", R.OTHER),
    (403, 'error looking up service account team-a/w: serviceaccount "w" not found', R.OTHER),
    (500, MUST_SPECIFY, R.OTHER)])
def test_a_refusal_is_told_by_its_status_and_cause(status: int, message: str,
                                                   kind: refusals.Refusal) -> None:
    assert refusals.of(status=status, message=message) is kind


def pin(spec: LaunchSpec) -> PinnedLaunchSpec:
    return launchpins.pin(run=f.RUN, choice=selection.Choice(spec=spec, reason="chosen"))


def lease(ref: str = "cpu-spec@1") -> dict[str, Any]:
    found = f.lease(1)
    found["metadata"]["annotations"][names.LAUNCH_SPEC_ANNOTATION] = ref
    return found


LIMITED = f.launch_spec("cpu-spec", classes=["cpu"], generation=2, containers=[
    {"name": "worker", "image": "example/worker:1",
     "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}])


def refused_claim(status: int = 403, message: str = MUST_SPECIFY) -> WriteStatus:
    """A Ready slot (one attempt allowed) whose first claim's Pod is refused so."""
    ready = f.ready().model_copy(update={"launch_spec": pin(f.CPU_SPEC)})
    world = f.world(ready, run=f.agent_run(max_attempts=1),
                    next_attempt=f.objects(1, lease=lease()))
    decision = steps.decide(world)
    create = expect(decision.step, Create)
    assert create.point == "claim-pod"
    return expect(attemptlife.on_rejected(decision.world, create=create, status=status,
                                          message=message), WriteStatus)


@pytest.mark.parametrize(("status", "message"), [
    (403, MUST_SPECIFY), (422, "Pod is invalid"), (403, LIMIT_MAX), (403, LIMIT_RATIO)])
def test_a_pod_the_launch_spec_can_never_make_spends_no_attempt(status: int,
                                                                message: str) -> None:
    then = refused_claim(status, message)
    assert then.point == "launch-spec-refused"
    new = then.status
    assert (new.state, new.attempt_count, new.pending_worker, new.attempts) == (
        SlotState.CLAIMING, 1, f.worker(1), [])
    assert conditions.find(new.conditions, transitions.AWAITING_REASSIGNMENT) is None
    said = f.condition(new, transitions.LAUNCH_SPEC_REFUSED)
    assert (said.status, said.reason) == ("True", "PodRefused")
    assert "LaunchSpec cpu-spec@1" in said.message and message in said.message
    assert "no attempt is spent" in said.message
    assert then.event is not None and then.event.reason == "LaunchSpecRefused"


def waiting(status: SlotStatus, **kw: Any) -> inputs.World:
    return f.world(status, run=f.agent_run(max_attempts=1), **{
        "attempt": f.objects(1, lease=lease()), **kw})


def test_the_waiting_claim_asks_again_as_pinned_and_only_waits_on_the_same_answer() -> None:
    world = waiting(refused_claim().status)
    decision = steps.decide(world)
    again = expect(decision.step, Create)
    assert (again.point, again.body["metadata"]["name"]) == ("claim-pod", f.worker(1))
    waited = expect(attemptlife.on_rejected(decision.world, create=again, status=403,
                                            message=MUST_SPECIFY), Wait)
    assert waited.until == f.T0 + refusedclaims.REFUSED_WAIT


def test_a_changed_launch_spec_is_taken_by_the_waiting_claim() -> None:
    status = refused_claim().status
    new_pin = pin(LIMITED)
    specs = {"launch_specs": (LIMITED,)}
    snapshot = expect(steps.next_step(waiting(status, **specs)), Create)
    assert (snapshot.point, snapshot.body["metadata"]["name"]) == (
        "launch-spec-snapshot", new_pin.snapshot)
    have = {**specs, "snapshots": frozenset({new_pin.snapshot})}
    repinned = expect(steps.next_step(waiting(status, **have)), WriteStatus)
    assert repinned.point == "launch-spec-repinned"
    pinned = repinned.status.launch_spec
    assert pinned is not None and (pinned.digest, pinned.generation) == (new_pin.digest, 2)
    assert (repinned.status.attempt_count, repinned.status.pending_worker) == (1, f.worker(1))
    assert repinned.event is not None and "cpu-spec@2" in repinned.event.message
    now = {**have, "launch_spec": LIMITED.spec}
    annotate = expect(steps.next_step(waiting(repinned.status, **now)), AnnotateLease)
    assert annotate.annotations == {names.LAUNCH_SPEC_ANNOTATION: "cpu-spec@2"}
    created = expect(steps.next_step(waiting(repinned.status, **{
        **now, "attempt": f.objects(1, lease=lease("cpu-spec@2"))})), Create)
    assert created.point == "claim-pod"
    assert created.body["spec"]["containers"][0]["resources"]["limits"]["memory"] == "1Gi"


def test_without_the_wait_a_lease_of_another_spec_still_fails_the_claim() -> None:
    status = f.claiming(1).model_copy(update={"launch_spec": pin(LIMITED)})
    step = expect(steps.next_step(f.world(status, attempt=f.objects(1, lease=lease()))),
                  WriteStatus)
    assert step.point == "claim-failed"


def test_the_claims_end_clears_the_condition_and_a_waiting_slot_reads_launch_specs() -> None:
    status = refused_claim().status
    assert inputs.reads_for(f.slot(status), max_active=False).selecting
    assert not inputs.reads_for(f.slot(f.claiming(1)), max_active=False).selecting
    active = transitions.finish_claim(status, now=f.T0)
    given_up = transitions.fail(status, reason="GaveUp", message="no", now=f.T0)
    for ended in (active, given_up):
        assert conditions.find(ended.conditions, transitions.LAUNCH_SPEC_REFUSED) is None
