"""A slot and its run's budget: the budget a claim passes on, the attempt that stopped at
it, and the slot that waits for a person to raise it.

Terms (docs/design/usage.md): the run's *budget* (``status.budget``: ``spec.budget`` as
pinned, plus every accepted raise) and *usage* (``status.usage``, the sum of its slots'); a
claim writes the budget on the attempt's Lease, and the SDK checks the run's usage (the
sum on all its attempts' Leases) against it before each model call or effect. A slot
*parks* (condition ``BudgetExceeded`` True, no claim, no Pod or Lease) when its attempt
stopped at the budget (outcome ``OverBudget``: the worker's ``budget.exceeded`` record on
its own Lease), or when it would be claimed while the run has nothing left. Only a raise
reopens it (``budgetRaises``: the raises it parked at), and only when the raised budget
leaves something: the claim then starts the attempt, as after a reassignment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentrun.api import bounds, conditions, names, records
from agentrun.api.modelusage import Limits
from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.base import actions, events
from agentrun.core.machine import retries, transitions
from agentrun.core.slots import inputs

CONDITION = names.BUDGET_EXCEEDED_CONDITION


def limits(world: inputs.World) -> Limits | None:
    """The run's budget in force, for a new attempt's Lease (None: the run has none)."""
    run = world.run
    if run is None or run.status.budget is None:
        return None
    return run.status.budget.limits()


def left(world: inputs.World) -> Limits | None:
    """What the run's budget leaves after its usage as last read (None: no budget)."""
    run = world.run
    if run is None or run.status.budget is None:
        return None
    return run.status.budget.left(run.status.usage)


def _exhausted(found: Limits | None) -> bool:
    return found is not None and found.reached(None) is not None


def _told(world: inputs.World) -> str:
    """What the run used of which budget, and the command that raises it."""
    run = world.run
    assert run is not None and run.status.budget is not None
    budget, usage = run.status.budget, run.status.usage
    spent = (f"{usage.tokens} tokens, {usage.cost_micros / 1e6:.6f} {usage.currency}"
             if usage is not None else "nothing recorded yet")
    bounded = ", ".join(part for part in (
        None if budget.tokens is None else f"{budget.tokens} tokens",
        None if budget.cost_micros is None else
        f"{budget.cost_micros / 1e6:.6f} {budget.currency}") if part)
    return (f"run {run.metadata.name} has used {spent} of its budget ({bounded}): raise it "
            f"with kubectl agentrun budget {run.metadata.name} --add N [--add-cost X] "
            "--reason R (its creator, or someone granted override), or give the slot up")


@dataclass(frozen=True, kw_only=True)
class Stop:
    """What an attempt that stopped at its run's budget recorded (``budget.exceeded``):
    why, and the run's usage it saw, as texts (the worker's words: shown, never decided on)."""

    reason: str
    used: str | None = None


def stopped(world: inputs.World) -> Stop | None:
    """The active attempt's stop at its run's budget (its own pod's ``budget.exceeded``
    record on its Lease), or None."""
    objects = world.attempt
    if objects is None or objects.lease is None or _claimed_budget(objects.lease) is None:
        return None  # an attempt given no budget stops at none (a worker past the SDK's)
    status = world.slot.status
    pod_uid = next((a.pod_uid for a in status.attempts if a.lease == objects.name), None)
    for key, record in records.decisions_of(objects.lease, pod_uid=pod_uid,
                                            suffix=names.EXCEEDED_SUFFIX):
        if key == names.BUDGET_KEY:
            said = record.inline if isinstance(record.inline, dict) else {}
            return Stop(reason=_text(said, "reason") or "it reached its run's budget",
                        used=_text(said, "used"))
    return None


def _claimed_budget(lease: Mapping[str, Any] | None) -> str | None:
    """The budget the operator wrote on the attempt's Lease at its claim (the holder cannot
    change it), as text; None: the attempt was given none."""
    found = (((lease or {}).get("metadata") or {}).get("annotations") or {}).get(
        names.BUDGET_ANNOTATION)
    return None if found is None else str(found)


def _text(said: dict[str, object], name: str) -> str | None:
    """A field of the worker's record as text, clipped (a worker past the SDK writes any)."""
    found = said.get(name)
    return None if found is None else bounds.clip(str(found), limit=200)


def ended(world: inputs.World, *, stop: Stop, exit_code: int | None,
          policy: retries.Effective, message: str) -> actions.WriteStatus:
    """The attempt that stopped at its run's budget ends ``OverBudget``; the slot parks,
    at the raises the budget it was given had seen (a raise made while it ran lets it go
    on at the next look: the gate's)."""
    status, run = world.slot.status, world.run
    new = transitions.end_attempt(status, outcome=Outcome.OVER_BUDGET,
                                  message=f"{stop.reason}; {message}", exit_code=exit_code,
                                  policy=policy, now=world.now)
    why = (f"attempt {status.active_worker} stopped at its run's budget ({stop.reason}"
           + (f"; the run had used {stop.used}" if stop.used else "") + ")")
    raises = None
    claimed = None if world.attempt is None else _claimed_budget(world.attempt.lease)
    if run is not None and run.status.budget is not None:
        raises = run.status.budget.raises
        if claimed is not None and claimed != run.status.budget.limits().text():
            raises -= 1  # raised since its claim: that raise is for it
    new = _parked(world, new, why=why, raises=raises)
    return actions.WriteStatus(status=new, point="attempt-ended", fresh=True, event=events.Event(
        type="Warning", reason=CONDITION, message=bounds.clip(
            f"attempt {status.active_worker} ended OverBudget: {stop.reason}")))


def _parked(world: inputs.World, status: SlotStatus, *, why: str,
            raises: int | None = None) -> SlotStatus:
    """``status`` parked: BudgetExceeded True (why, and what raises it), at ``raises`` (by
    default the run's raises now). A run gone or without a budget (its slot winds down):
    the condition says why, and nothing will reopen it."""
    run = world.run
    told = _told(world) if run is not None and run.status.budget is not None else (
        "the run is gone or has no budget")
    conds = conditions.set_condition(status.conditions, type_=CONDITION, status="True",
                                     reason=CONDITION, message=bounds.clip(f"{why}; {told}"),
                                     now=world.now)
    if raises is None:
        raises = run.status.budget.raises if run is not None and (
            run.status.budget is not None) else 0
    return status.model_copy(update={"budget_raises": max(0, raises), "conditions": conds})


def gate(world: inputs.World) -> actions.Step | None:
    """Before a claim: park a slot its run's budget leaves nothing for, and reopen one a
    raise left something for; None when the budget does not stand in the way."""
    status, run = world.slot.status, world.run
    if run is None or run.status.budget is None or (
            status.state is SlotState.PENDING and any(
                world.dependencies.get(node) is not SlotState.SUCCEEDED
                for node in world.slot.spec.depends_on)):
        return None
    exhausted = _exhausted(left(world))
    if conditions.is_true(status.conditions, CONDITION):
        if run.status.budget.raises <= (status.budget_raises or 0):
            return actions.Wait(message=f"waiting for a raise of run {run.metadata.name}'s "
                                        "budget (condition BudgetExceeded)")
        if exhausted:  # raised, not enough: still parked, at this raise
            return actions.WriteStatus(status=_parked(
                world, status, why="the budget was raised and is still used up"))
        return actions.WriteStatus(status=_reopened(world, status), event=events.Event(
            type="Normal", reason=names.BUDGET_RAISED,
            message=f"run {run.metadata.name}'s budget was raised: the slot may be claimed"))
    if exhausted:
        return actions.WriteStatus(status=_parked(world, status, why="not claimed"),
                                   event=events.Event(type="Warning", reason=CONDITION,
                                                      message=bounds.clip(_told(world))))
    return None


def _reopened(world: inputs.World, status: SlotStatus) -> SlotStatus:
    """The raise reopens the slot (RetryWait: as a reassignment does, its last owner kept)."""
    message = "the run's budget was raised: the next claim starts the attempt"
    conds = conditions.set_condition(status.conditions, type_=CONDITION, status="False",
                                     reason=names.BUDGET_RAISED, message=message, now=world.now)
    new = status.model_copy(update={"conditions": conds, "budget_raises": None})
    if new.state is not SlotState.RETRY_WAIT or new.launch_spec is None:
        return new
    owner = new.attempts[-1].owner_actor if new.attempts else None
    return transitions.reopen(new, worker_class=new.worker_class or "",
                              launch_spec=new.launch_spec, owner_actor=owner, message=message,
                              now=world.now, reason=names.BUDGET_RAISED)
