"""The reassignment guard over every combination of the paper's dimensions.

"For reassignment, vary tenant, run, slot state, prior worker status, lease status, owner
actor, reason, and worker class. Confirm that only an authorized retry-wait slot with a
terminal prior attempt can be reopened and that the selected launch specification
matches the requested class."

The expected outcome comes from the table of predicates below, written from the paper
and docs/design/commands-and-trust.md, never from the code under test.
"""

from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

from agentrun.api.conditions import Condition
from agentrun.api.slots import CommandKind, CommandRecord, Predicate, SlotState, SlotStatus
from agentrun.core.attempts.observations import LeaseStatus, PodPhase
from agentrun.core.commands import guards
from tests.unit.core import corefakes as f

# --- The independent oracle ------------------------------------------------------------

# docs/design/states.md: an attempt is terminal ("yes") only in these cells.
TERMINAL_CELLS = {
    (pod, lease)
    for pod in ("Succeeded", "Failed", "Gone")
    for lease in ("Expired", "Released", "Missing")
}

# (predicate id, fails when) in the order the design lists them; first failure wins.
PREDICATES: list[tuple[str, object]] = [
    ("Duplicate", lambda c: c.request == "seen"),
    ("WrongTenant", lambda c: c.tenant == "other"),
    ("WrongRun", lambda c: c.run != "same"),
    ("NotRetryWait", lambda c: c.state != "RetryWait"),
    ("Held", lambda c: c.held),
    ("PriorNotTerminal", lambda c: (c.pod, c.lease) not in TERMINAL_CELLS),
    ("BlankReason", lambda c: c.reason != "ok"),
    # "none": an attempt no one owns (a run without a verified creator) needs override too
    ("NotOwner", lambda c: c.owner in ("other", "none")),
    ("UnknownWorkerClass", lambda c: c.worker_class == "unknown"),
    ("NoCompatibleLaunchSpec", lambda c: c.worker_class == "incompatible"),
]


class Case(NamedTuple):
    tenant: str
    run: str
    state: str
    held: bool
    pod: str
    lease: str
    owner: str
    reason: str
    worker_class: str
    request: str


DIMENSIONS = {
    "tenant": ["same", "other", "omitted"],
    "run": ["same", "other", "missing"],
    "state": [s.value for s in SlotState],
    "held": [False, True],
    "pod": ["Pending", "Running", "Succeeded", "Failed", "Unknown", "Terminating", "Gone"],
    "lease": ["Held", "Expired", "Released", "Missing"],
    "owner": ["none", "same", "other", "other-with-override"],
    "reason": ["empty", "blank", "too-long", "ok"],
    "worker_class": ["compatible", "incompatible", "unknown"],
    "request": ["new", "seen"],
}


def expected(case: Case) -> str | None:
    for predicate, fails in PREDICATES:
        if fails(case):  # type: ignore[operator]
            return predicate
    return None


# --- Cheap inputs ------------------------------------------------------------------------

SPECS = [
    f.launch_spec("gpu-for-this-run", classes=["gpu"], runs=[f.RUN]),
    f.launch_spec("tpu-elsewhere", classes=["tpu"], runs=["another-run"]),
]
CLASSES = {"compatible": "gpu", "incompatible": "tpu", "unknown": "quantum"}
REASONS = {"empty": "", "blank": " \t\n", "too-long": "x" * 1025, "ok": "node lost; retry on gpu"}
OWNERS = {"none": None, "same": "alice", "other": "bob", "other-with-override": "bob"}
HELD = Condition(type="Held", status="True", reason="HoldRequested", message="hold",
                 last_transition_time=f.T0)
SEEN = CommandRecord(request_id="req-seen", kind=CommandKind.HOLD, actor="carol",
                     outcome="Accepted", time=f.T0)


def status_for(state: str, held: bool, owner: str, request: str) -> SlotStatus:
    base = f.retry_wait(owner=OWNERS[owner], attempts_used=1, retry_at=f.T0)
    update: dict[str, object] = {"state": SlotState(state)}
    if state == "Active":
        update |= {"active_worker": f"{f.SLOT}-2", "attempt_count": 2}
    if state == "Claiming":
        update |= {"pending_worker": f"{f.SLOT}-2", "attempt_count": 2}
    if held:
        update["conditions"] = [HELD]
    if request == "seen":
        update["commands"] = [SEEN]
    return base.model_copy(update=update)


@functools.cache
def command_for(case: Case) -> guards.Command:
    return guards.Command(
        kind=CommandKind.REASSIGN,
        request_id="req-seen" if case.request == "seen" else "req-new",
        actor="alice",
        override=case.owner == "other-with-override",
        reason=REASONS[case.reason],
        worker_class=CLASSES[case.worker_class],
        run={"same": f.RUN, "other": "someone-elses-run", "missing": None}[case.run],
        tenant={"same": f.TENANT, "other": "globex", "omitted": None}[case.tenant],
    )


UNCHANGED = [k for k in SlotStatus.model_fields if k not in ("commands", "conditions")]


def test_reassignment_guard_over_every_combination() -> None:
    """These checks reject a held or active slot, a slot from another tenant or run, and a
    reassignment by a different actor when ownership is recorded (or when no one owns the
    prior attempt: automatic, in a run without a verified creator)."""
    slots = {
        key: f.slot(status_for(*key))
        for key in itertools.product(DIMENSIONS["state"], DIMENSIONS["held"],
                                     DIMENSIONS["owner"], DIMENSIONS["request"])
    }
    count = accepted = 0
    by_predicate: dict[str | None, int] = {}
    for values in itertools.product(*DIMENSIONS.values()):
        case = Case(*values)
        slot = slots[(case.state, case.held, case.owner, case.request)]
        decision = guards.decide(
            command=command_for(case._replace(state="", held=False, pod="", lease="")),
            slot=slot, tenant=f.TENANT,
            prior=guards.Prior(pod=PodPhase(case.pod), lease=LeaseStatus(case.lease)),
            launch_specs=SPECS, now=f.T0)
        want = expected(case)
        got = None if decision.accepted else str(decision.predicate)
        assert got == want, case
        by_predicate[want] = by_predicate.get(want, 0) + 1
        count += 1
        before = slot.status
        after = decision.status
        if want == "Duplicate":
            assert after == before and decision.event is None and decision.duplicate
            continue
        assert len(after.commands) == len(before.commands) + 1
        entry = after.commands[-1]
        assert entry.request_id == "req-new"
        # Nothing about attempts or identity ever changes: reassignment creates none.
        assert (after.attempts, after.attempt_count, after.prior_worker, after.state) == (
            before.attempts, before.attempt_count, before.prior_worker, before.state)
        assert decision.event is not None
        if want is None:
            accepted += 1
            assert entry.outcome == "Accepted" and decision.event.reason == "Reassigned"
            assert after.launch_spec is not None
            assert after.launch_spec.name == "gpu-for-this-run"
            assert after.worker_class == "gpu"
            assert (after.pending_worker, after.active_worker, after.retry_at) == (
                None, None, None)
            assert after.next_owner_actor == "alice"
            assert any(c.type == "Reopened" and c.status == "True" for c in after.conditions)
        else:
            assert entry.outcome == "Rejected" and entry.predicate == Predicate(want)
            assert decision.event.type == "Warning"
            assert decision.event.reason == "CommandRejected"
            assert after is not before
            assert all(getattr(after, k) == getattr(before, k) for k in UNCHANGED)
            rejected = [c for c in after.conditions if c.type == "CommandRejected"]
            assert rejected and rejected[0].reason == want
    total = 1
    for values in DIMENSIONS.values():
        total *= len(values)
    print(f"\nreassignment guard: {count} combinations, {accepted} accepted; {by_predicate}")
    assert count == total == 3 * 3 * 7 * 2 * 7 * 4 * 4 * 4 * 3 * 2 == 338688
    # Accepted: same/omitted tenant x same run x RetryWait, not held x 9 terminal cells
    # x owner same/override x ok reason x compatible class x new id.
    assert accepted == 2 * 1 * 1 * 9 * 2 * 1 * 1 * 1 == 36
