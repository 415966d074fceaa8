"""An impostor pod: renewals and records on a Lease bound to another pod than the attempt's.

Admission binds an attempt Lease to the uid of the first pod that writes it as a worker
(``agentrun.dev/holder-uid``). Covers, in the core:
- ``renewals_count`` over every binding (none, the attempt's pod, another) and recorded
  pod uid (known, unknown); with none recorded (an attempt claimed before the operator
  recorded them), the pod of its name that this slot controls stands for it;
- the Active attempt, exhaustively over pod phase x binding x renewals seen x time: a
  Lease bound to another pod is judged exactly as one never renewed, so with the
  attempt's pod gone the attempt ends Lost at once (its message naming both uids) however
  recently the impostor renewed; bound to its own pod or unbound, nothing changes;
- a pod of the attempt's name whose uid is not the recorded one (read by name, unwatched)
  is not its pod: the attempt's pod is gone; it is neither fenced nor waited for, by the
  Active attempt, the reassignment guard or a successor's claim;
- the reassignment guard's view of a prior attempt, the same way;
- the tombstone carries the attempt pod's uid (``agentrun.dev/pod-uid``);
- the operator observes no ``.unresolved`` record from a Lease bound to another pod than
  the recorded one, and observes it when no pod uid was recorded.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from agentrun.api import names, records
from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.attempts import effectrecords, ending
from agentrun.core.attempts.observations import LeaseStatus, LeaseView, lease_view, renewals_count
from agentrun.core.base.actions import Create, DeletePod, Tombstone, Wait, WriteStatus
from agentrun.core.slots import commandsteps, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

OWN, IMPOSTOR = "uid-pod-1", "uid-impostor"


def with_pod_uid(status: SlotStatus, uid: str | None = OWN) -> SlotStatus:
    """``status`` with attempt 1's record naming the pod the operator created (``uid``)."""
    records_ = [a.model_copy(update={"pod_uid": uid}) if a.number == 1 else a
                for a in status.attempts]
    return status.model_copy(update={"attempts": records_})


def bound_lease(bound: str | None, *, renew_time: str | None = "r1",
                outcome: str | None = None) -> dict[str, Any]:
    found = f.lease(1, renew_time=renew_time, outcome=outcome, holder=outcome is None)
    if bound is not None:
        found["metadata"]["annotations"][names.HOLDER_UID_ANNOTATION] = bound
    return found


@pytest.mark.parametrize(("bound", "pod_uid", "counts"), [
    (None, OWN, True), (None, None, True),  # unbound: only the name was ever checked
    (OWN, OWN, True), (IMPOSTOR, OWN, False), (OWN, None, False), (IMPOSTOR, None, False),
])
def test_renewals_count_only_when_the_lease_is_unbound_or_bound_to_the_attempts_pod(
        bound: str | None, pod_uid: str | None, counts: bool) -> None:
    lease = lease_view(bound_lease(bound))
    assert lease.bound_uid == bound
    assert renewals_count(lease=lease, pod_uid=pod_uid) is counts


def test_an_impostor_renewing_keeps_no_slot_whose_pod_is_gone() -> None:
    """The attempt's pod deleted and a same-name pod renewing just now: the attempt ends
    Lost at once, its Event naming both uids; bound to its own pod, the Lease is held."""
    now = f.T0 + f.seconds(30)
    world = f.world(with_pod_uid(f.active(1)), now=now, observation=f.observed(now),
                    attempt=f.objects(1, pod=None, lease=bound_lease(IMPOSTOR)))
    step = expect(steps.next_step(world), WriteStatus)
    record = step.status.attempts[-1]
    assert (step.status.state, record.outcome) == (SlotState.RETRY_WAIT, Outcome.LOST)
    assert step.event is not None and step.event.reason == "AttemptEnded"
    assert f"bound to the pod of uid {IMPOSTOR}" in step.event.message
    assert f"(uid {OWN})" in step.event.message and "not counted" in step.event.message
    # The same lease bound to the attempt's own pod is held: nothing ends.
    own = f.world(with_pod_uid(f.active(1)), now=now, observation=f.observed(now),
                  attempt=f.objects(1, pod=None, lease=bound_lease(OWN)))
    assert expect(steps.next_step(own), Wait).message.startswith("the lease is held")


PHASES = [None, "Pending", "Running", "Succeeded", "Failed", "Unknown", "Terminating"]
SEEN = ["never", "recently", "long-ago"]
TIMES = [f.seconds(10), f.seconds(f.START_DEADLINE + 30)]


def active_world(*, phase: str | None, bound: str | None, seen: str, after: Any,
                 pod_uid: str | None = OWN) -> Any:
    now = f.T0 + after
    pod = None if phase is None else (
        f.pod(1, "Running", deleting=True) if phase == "Terminating" else f.pod(1, phase))
    observation = {"never": None, "recently": f.observed(now - f.seconds(1)),
                   "long-ago": f.observed(now - f.seconds(f.LEASE_SECONDS + 5))}[seen]
    return f.world(with_pod_uid(f.active(1), pod_uid), now=now, observation=observation,
                   attempt=f.objects(1, pod=pod, lease=bound_lease(
                       bound, renew_time=None if seen == "never" else "r1")))


def outcome(step: object) -> tuple[str, Any]:
    """What a step decides for the attempt, without the messages."""
    if isinstance(step, WriteStatus):
        return "ended", step.status.attempts[-1].outcome
    if isinstance(step, DeletePod):
        return "fence", step.uid
    assert isinstance(step, Wait), step
    return "wait", step.until


@pytest.mark.parametrize(("phase", "seen", "after"), list(itertools.product(PHASES, SEEN, TIMES)))
def test_a_lease_bound_to_another_pod_is_judged_as_never_renewed(
        phase: str | None, seen: str, after: Any) -> None:
    impostor = steps.next_step(active_world(phase=phase, bound=IMPOSTOR, seen=seen, after=after))
    never = steps.next_step(active_world(phase=phase, bound=None, seen="never", after=after))
    assert outcome(impostor) == outcome(never)
    if not isinstance(impostor, DeletePod):
        assert f"bound to the pod of uid {IMPOSTOR}" in getattr(impostor, "message", "") or (
            impostor.event is not None and IMPOSTOR in impostor.event.message)
    for bound in (None, OWN):  # unbound, or its own pod's: the renewals count as before
        counted = steps.next_step(active_world(phase=phase, bound=bound, seen=seen, after=after))
        unbound = steps.next_step(active_world(phase=phase, bound=None, seen=seen, after=after))
        assert counted == unbound
    if phase is None:  # gone: the attempt ends (Lost, or StartTimeout past the deadline)
        assert outcome(impostor)[0] == "ended"


@pytest.mark.parametrize(("phase", "seen", "after"), list(itertools.product(PHASES, SEEN, TIMES)))
def test_with_no_pod_uid_recorded_the_pod_of_its_name_this_slot_controls_is_its_own(
        phase: str | None, seen: str, after: Any) -> None:
    """An attempt claimed before pod uids were recorded (an upgrade): its Lease bound to
    the pod of its name that this slot controls counts as its own pod's, exactly as with
    that uid recorded; bound to another pod, as never renewed. With no pod of its name
    nothing tells whose the binding is: judged as never renewed, the attempt ends at once
    (with the uid recorded and its own pod's binding, once its Lease expires)."""
    for bound in (OWN, IMPOSTOR):
        unknown = steps.next_step(active_world(phase=phase, bound=bound, seen=seen,
                                               after=after, pod_uid=None))
        known = steps.next_step(active_world(phase=phase, bound=bound, seen=seen, after=after))
        if phase is None:
            assert outcome(unknown)[0] == "ended"
        else:
            assert outcome(unknown) == outcome(known)


def test_with_no_pod_uid_recorded_a_pod_this_slot_does_not_control_is_not_trusted() -> None:
    now = f.T0 + f.seconds(f.START_DEADLINE + 30)
    foreign = f.pod(1, "Running", owner_uid="uid-another-slot")  # its uid is OWN's
    world = f.world(with_pod_uid(f.active(1), None), now=now,
                    observation=f.observed(now - f.seconds(1)),
                    attempt=f.objects(1, pod=foreign, lease=bound_lease(OWN, renew_time="r1")))
    trusted = f.world(with_pod_uid(f.active(1), None), now=now,
                      observation=f.observed(now - f.seconds(1)),
                      attempt=f.objects(1, pod=f.pod(1, "Running"),
                                        lease=bound_lease(OWN, renew_time="r1")))
    assert outcome(steps.next_step(trusted))[0] == "wait"
    assert outcome(steps.next_step(world))[0] != "wait"


def stranger(phase: str = "Running") -> dict[str, Any]:
    """A pod of attempt 1's name that is not the one the operator created (another uid)."""
    found = f.pod(1, phase)
    found["metadata"]["uid"] = IMPOSTOR
    return found


@pytest.mark.parametrize("phase", ["Pending", "Running", "Unknown", "Terminating"])
def test_a_pod_of_the_attempts_name_with_another_uid_is_not_its_pod(phase: str) -> None:
    pod = stranger("Running")
    if phase == "Terminating":
        pod["metadata"]["deletionTimestamp"] = f.T0.isoformat()
    else:
        pod["status"]["phase"] = phase
    now = f.T0 + f.seconds(30)
    renewed = f.world(with_pod_uid(f.active(1)), now=now, observation=f.observed(now),
                      attempt=f.objects(1, pod=pod, lease=bound_lease(OWN)))
    held = expect(steps.next_step(renewed), Wait)  # its own pod's last renewal still holds
    assert "the pod is Gone" in held.message and f"another pod (uid {IMPOSTOR})" in held.message
    expired = f.world(with_pod_uid(f.active(1)), now=now + f.seconds(f.LEASE_SECONDS + 1),
                      observation=f.observed(now), attempt=f.objects(1, pod=pod,
                                                                     lease=bound_lease(OWN)))
    step = expect(steps.next_step(expired), WriteStatus)  # ended: never fenced, never waited for
    assert step.status.attempts[-1].outcome is Outcome.LOST
    # The same pod with the recorded uid is the attempt's own: held while it renews.
    own = f.world(with_pod_uid(f.active(1), IMPOSTOR), now=now, observation=f.observed(now),
                  attempt=f.objects(1, pod=pod, lease=bound_lease(None)))
    assert f"the pod is {phase}" in expect(steps.next_step(own), Wait).message


def test_a_successor_does_not_wait_for_a_stranger_under_the_priors_name() -> None:
    status = with_pod_uid(f.retry_wait(retry_at=f.T0))
    tombstoned = bound_lease(OWN, outcome="Lost")
    world = f.world(status, now=f.T0 + f.seconds(1),
                    attempt=f.objects(1, pod=stranger(), lease=tombstoned))
    assert expect(steps.next_step(world), Create).point == "claim-lease"
    own = f.world(status, now=f.T0 + f.seconds(1),
                  attempt=f.objects(1, pod=f.pod(1, "Running"), lease=tombstoned))
    assert isinstance(steps.next_step(own), DeletePod | Wait)  # its own pod: fenced first
    prior = commandsteps.prior(world)
    assert prior is not None and prior.pod.value == "Gone"


def test_with_no_pod_uid_recorded_a_bound_lease_is_not_the_attempts() -> None:
    world = active_world(phase=None, bound=IMPOSTOR, seen="recently", after=f.seconds(10),
                         pod_uid=None)
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.LOST
    assert "(uid unknown)" in step.status.attempts[-1].reason


def test_the_prior_attempts_lease_bound_to_another_pod_is_not_held_by_its_renewals() -> None:
    status = with_pod_uid(f.retry_wait(owner="alice"))
    now = f.T0 + f.seconds(f.START_DEADLINE + 30)
    for bound, held in ((IMPOSTOR, LeaseStatus.EXPIRED), (OWN, LeaseStatus.HELD)):
        world = f.world(status, now=now, observation=f.observed(now),
                        attempt=f.objects(1, pod=None, lease=bound_lease(bound)))
        prior = commandsteps.prior(world)
        assert prior is not None and prior.lease is held
        assert ending.is_terminal(pod=prior.pod, lease=prior.lease) is (bound == IMPOSTOR)


@pytest.mark.parametrize("uid", [OWN, None])
def test_the_tombstone_names_the_attempts_pod_uid(uid: str | None) -> None:
    status = with_pod_uid(f.finished(SlotState.SUCCEEDED), uid)
    world = f.world(status, now=f.T0 + f.seconds(600),
                    attempt=f.objects(1, pod=None, lease=bound_lease(OWN)))
    step = expect(steps.next_step(world), Tombstone)
    assert step.annotations.get(names.POD_UID_ANNOTATION) == uid


def unresolved_lease(bound: str | None) -> dict[str, Any]:
    payload = {"effect": "publish", "reason": "the owner answered unknown"}
    data = records.canonical(payload)
    record = records.Record(attempt=1, digest=records.digest(data), inline=payload,
                            key="publish.unresolved", kind=records.Kind.DECISION,
                            size=len(data))
    found = bound_lease(bound)
    found["metadata"]["annotations"][record.annotation] = records.encode(record)
    return found


@pytest.mark.parametrize(("bound", "observed"), [(None, 1), (OWN, 1), (IMPOSTOR, 0)])
def test_an_unresolved_record_of_another_pod_is_not_observed(bound: str | None,
                                                             observed: int) -> None:
    status = with_pod_uid(f.retry_wait())
    _, found = effectrecords.observed(status, lease=unresolved_lease(bound), slot=f.SLOT,
                                      now=f.T0)
    assert len(found) == observed


def test_an_unresolved_record_is_observed_when_no_pod_uid_was_recorded() -> None:
    status = with_pod_uid(f.retry_wait(), None)
    _, found = effectrecords.observed(status, lease=unresolved_lease(IMPOSTOR), slot=f.SLOT,
                                      now=f.T0)
    assert len(found) == 1  # admission let one pod write it; nothing says it is not its own


def test_a_lease_view_reads_no_binding_from_an_empty_annotation() -> None:
    lease = bound_lease("")
    assert lease_view(lease).bound_uid is None
    assert LeaseView(exists=True).bound_uid is None
