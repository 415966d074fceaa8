"""A slot and its run's budget: the allowance a claim gives, the attempt that stopped at it,
and the slot that waits for a person to raise it.

Terms (docs/design/usage.md): the run's *budget* (``status.budget``: ``spec.budget`` as
pinned, plus every accepted raise) and *usage* (``status.usage``, the sum of its slots');
the *allowance* is what the budget leaves, given to each attempt on its Lease when it is
claimed. A slot *parks* (condition ``BudgetExceeded`` True, no claim, no Pod or Lease) when
its attempt stopped at its allowance (outcome ``OverBudget``: the worker's
``budget.exceeded`` record on its own Lease), or when it would be claimed while the run
has nothing left. Only a raise reopens it (``budgetRaises``: the raises it parked at), and
only when the raised budget leaves something: the claim then starts the attempt, as after a
reassignment.
"""

from __future__ import annotations

from agentrun.api import bounds, conditions, names, records
from agentrun.api.modelusage import Allowance
from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.base import actions, events
from agentrun.core.machine import retries, transitions
from agentrun.core.slots import inputs

CONDITION = names.BUDGET_EXCEEDED_CONDITION


def allowance(world: inputs.World) -> Allowance | None:
    """What the run's budget leaves a new attempt (None: the run has no budget)."""
    run = world.run
    if run is None or run.status.budget is None:
        return None
    return run.status.budget.left(run.status.usage)


def _exhausted(left: Allowance | None) -> bool:
    return left is not None and left.reached(None) is not None


def _told(world: inputs.World, left: Allowance) -> str:
    run = world.run
    assert run is not None and run.status.budget is not None
    budget, usage = run.status.budget, run.status.usage
    spent = f"{usage.tokens} tokens, {usage.cost_micros / 1e6:.6f} {usage.currency}" if (
        usage is not None) else "nothing recorded yet"
    limits = ", ".join(part for part in (
        None if budget.tokens is None else f"{budget.tokens} tokens",
        None if budget.cost_micros is None else
        f"{budget.cost_micros / 1e6:.6f} {budget.currency}") if part)
    return (f"run {run.metadata.name}'s budget ({limits}) is used up (it used {spent}): "
            f"raise it with kubectl agentrun budget {run.metadata.name} --add N "
            "[--add-cost X] --reason R (its creator, or someone granted override), or give "
            "the slot up")


def stopped(world: inputs.World) -> str | None:
    """Why the active attempt stopped at its allowance (its own pod's ``budget.exceeded``
    record on its Lease), or None."""
    objects = world.attempt
    if objects is None or objects.lease is None:
        return None
    status = world.slot.status
    pod_uid = next((a.pod_uid for a in status.attempts if a.lease == objects.name), None)
    for key, record in records.decisions_of(objects.lease, pod_uid=pod_uid,
                                            suffix=names.EXCEEDED_SUFFIX):
        if key == names.BUDGET_KEY:
            said = record.inline.get("reason") if isinstance(record.inline, dict) else None
            return bounds.clip(str(said or "it reached its allowance"),
                               limit=bounds.RECORD_MESSAGE_CHARS)
    return None


def ended(world: inputs.World, *, reason: str, exit_code: int | None,
          policy: retries.Effective, message: str) -> actions.WriteStatus:
    """The attempt that stopped at its budget ends ``OverBudget``; the slot parks."""
    status = world.slot.status
    new = transitions.end_attempt(status, outcome=Outcome.OVER_BUDGET,
                                  message=f"{reason}; {message}", exit_code=exit_code,
                                  policy=policy, now=world.now)
    new = _parked(world, new, why=f"attempt {status.active_worker} stopped at its budget: "
                  f"{reason}")
    return actions.WriteStatus(status=new, point="attempt-ended", fresh=True, event=events.Event(
        type="Warning", reason=CONDITION, message=f"attempt {status.active_worker} ended "
        f"OverBudget: {reason}"))


def _parked(world: inputs.World, status: SlotStatus, *, why: str) -> SlotStatus:
    run = world.run
    assert run is not None
    raises = run.status.budget.raises if run.status.budget is not None else 0
    left = allowance(world)
    said = why if left is None or not _exhausted(left) else f"{why}; {_told(world, left)}"
    if left is not None and not _exhausted(left):
        said = (f"{why}; the run's budget leaves {left.text()} as last read: raise it with "
                f"kubectl agentrun budget {run.metadata.name} --add N --reason R to go on")
    conds = conditions.set_condition(status.conditions, type_=CONDITION, status="True",
                                     reason=CONDITION, message=bounds.clip(said), now=world.now)
    return status.model_copy(update={"budget_raises": raises, "conditions": conds})


def gate(world: inputs.World) -> actions.Step | None:
    """Before a claim: park a slot its run's budget leaves nothing for, and reopen one a
    raise left something for; None when the budget does not stand in the way."""
    status, run = world.slot.status, world.run
    if run is None or (status.state is SlotState.PENDING and any(
            world.dependencies.get(node) is not SlotState.SUCCEEDED
            for node in world.slot.spec.depends_on)):
        return None
    left = allowance(world)
    parked = conditions.is_true(status.conditions, CONDITION)
    if parked:
        raises = run.status.budget.raises if run.status.budget is not None else 0
        if raises <= (status.budget_raises or 0):
            return actions.Wait(message=f"waiting for a raise of run {run.metadata.name}'s "
                                        "budget (condition BudgetExceeded)")
        if _exhausted(left):  # raised, not enough: still parked, at this raise
            assert left is not None
            return actions.WriteStatus(status=_parked(
                world, status, why="the run's budget was raised and is still used up"))
        return actions.WriteStatus(status=_reopened(world, status), event=events.Event(
            type="Normal", reason=names.BUDGET_RAISED,
            message=f"run {run.metadata.name}'s budget was raised: the slot may be claimed"))
    if _exhausted(left):
        assert left is not None
        return actions.WriteStatus(status=_parked(world, status, why="not claimed"),
                                   event=events.Event(type="Warning", reason=CONDITION,
                                                      message=_told(world, left)))
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
