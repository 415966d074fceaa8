"""A run's commands: the budget raise, sent to an AgentRun.

``kubectl agentrun budget <run> --add N [--add-cost X] --reason R`` (or ``kubectl
annotate``) writes ``agentrun.dev/budget-id`` (the request id), ``-add`` (tokens),
``-add-cost`` (an amount of the run's currency), ``-reason``; admission stamps
``-actor``, ``-epoch`` and ``-override`` (whether the writer holds ``override`` on
``agentruns``), as it stamps a slot's commands, and refuses values out of their bounds.

The operator decides it in the run's step, before anything else, in this order (the first
that fails is the ledger's ``predicate``): ``Malformed`` (its request id unusable),
``CommandsRefused``/``Unstamped``/``StaleEpoch``
(stamping, as for every command), ``Malformed`` (an amount missing, out of its bounds, or a
raise past the largest budget; a run with no budget has nothing to raise), ``BlankReason``,
``NotOwner`` (only the run's verified creator, or someone granted ``override``, raises its
budget: a run without a verified creator is no one's). Accepted: ``status.budget`` grows
and counts the raise; every slot parked at the budget that the raised budget leaves
something for is reopened by its own step (``core.slots.budgetsteps``). Either way the
entry goes into the run's ledger (``status.commands``, the newest kept) with an Event, and
the next pass removes the command's annotations (a request id already in the ledger is
never decided twice).

It is in the registry's ``RUN_COMMANDS``, not its ``COMMANDS``: everything that iterates
those (the slot's parser and guard, the slot policies, the plugin's slot commands, the
bad-input matrix) reads a Slot; this command reads a run. Its annotations are derived
from its word by the same :func:`agentrun.core.commands.spec.key`, and the stamping
policy stamps it with the same expression (:func:`agentrun.core.policies.admission`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

from agentrun.api import bounds, modelusage, names
from agentrun.api.budgets import BudgetStatus
from agentrun.api.runs import RUN_COMMANDS_KEPT, AgentRun, AgentRunStatus
from agentrun.api.slots import CommandKind, CommandRecord, Predicate
from agentrun.core.base import events
from agentrun.core.commands import ledger, parsing
from agentrun.core.commands.spec import BUDGET, key
from agentrun.core.policies import stamping, validating

ID, ACTOR, EPOCH, OVERRIDE = BUDGET.id, BUDGET.actor, BUDGET.epoch, BUDGET.override
ADD, ADD_COST, REASON = (key(BUDGET.word, s) for s in BUDGET.suffixes)
KEYS: Final = BUDGET.keys
TOKENS_PATTERN: Final = validating.TOKENS_PATTERN  # 1 .. 10^15 - 1
COST_PATTERN: Final = modelusage.BUDGET_COST_PATTERN
ADD_CHARS: Final = 16


@dataclass(frozen=True, kw_only=True)
class Raise:
    """A budget command as found on the run's annotations (nothing checked yet)."""

    request_id: str
    actor: str | None
    epoch: str | None
    override: bool
    add: str | None
    add_cost: str | None
    reason: str | None
    bad_id: str | None = None  # why its request id was unusable (then it is invalid-<hash>)


def pending(run: AgentRun) -> Raise | None:
    """The budget command on ``run``, when it carries one. A request id out of its bounds
    is replaced by ``invalid-<hash>`` of it (as a slot's is: ``commands.parsing``), so the
    command is still refused into the ledger once, and removed."""
    found = run.metadata.annotations
    request_id = found.get(ID)
    if request_id is None:
        return None
    problem = parsing.request_id_problem(ID, request_id)
    return Raise(request_id=request_id if problem is None else parsing.invalid_id(
                     ID, request_id), bad_id=problem,
                 actor=found.get(ACTOR), epoch=found.get(EPOCH),
                 override=found.get(OVERRIDE) == "true", add=found.get(ADD),
                 add_cost=found.get(ADD_COST), reason=found.get(REASON))


def decided(run: AgentRun, command: Raise) -> bool:
    """Is the command in the run's ledger already (decided: only its annotations remain)?"""
    return any(c.request_id == command.request_id and c.kind is CommandKind.BUDGET
               for c in run.status.commands)


def decide(run: AgentRun, command: Raise, *, stamping_now: stamping.Stamping | None,
           now: datetime) -> tuple[AgentRunStatus, events.Event]:
    """The run's status with the command decided (see the module docstring), its Event."""
    refused = _check(run, command, stamping_now=stamping_now)
    status = run.status
    if refused is not None:
        predicate, message = refused
        said = f"Budget {command.request_id} rejected ({predicate}): {message}"
        return _ledger(status, command, outcome="Rejected", predicate=predicate,
                       message=message, now=now), events.Event(
            type="Warning", reason="CommandRejected", message=bounds.clip(said))
    budget = status.budget
    assert budget is not None
    tokens = None if command.add is None else int(command.add)
    micros = None if command.add_cost is None else modelusage.micros(command.add_cost)
    raised = budget.model_copy(update={
        "tokens": budget.tokens if tokens is None or budget.tokens is None
        else budget.tokens + tokens,
        "cost_micros": budget.cost_micros if micros is None or budget.cost_micros is None
        else budget.cost_micros + micros,
        "raises": budget.raises + 1})
    message = (f"budget raised by {command.actor}: {_amounts(tokens, micros, budget.currency)}"
               f" (now {_limits(raised)}): {command.reason}")
    new = _ledger(status.model_copy(update={"budget": raised}), command, outcome="Accepted",
                  predicate=None, message=message, now=now)
    return new, events.Event(type="Normal", reason=names.BUDGET_RAISED,
                             message=bounds.clip(message))


def _check(run: AgentRun, command: Raise, *,
           stamping_now: stamping.Stamping | None) -> tuple[Predicate, str] | None:
    if command.bad_id is not None:
        return Predicate.MALFORMED, command.bad_id
    trust = stamping.refusal_of(what=f"Budget {command.request_id}", stamped=(
        command.actor is not None), epoch=command.epoch, stamping=stamping_now)
    if trust is not None:
        return trust.predicate, trust.message
    budget = run.status.budget
    if budget is None and (run.spec.budget is not None or run.status.pinned is None):
        return (Predicate.MALFORMED, f"run {run.metadata.name} is not pinned yet (condition "
                "Pinned): its budget (its own, or its namespace's default) is in force, and "
                "raised, once it is")
    if budget is None:
        return (Predicate.MALFORMED, f"run {run.metadata.name} has no budget (spec.budget) "
                "to raise: a budget is set when a run is created")
    malformed = _amount_problem(command, budget_tokens=budget.tokens,
                                budget_cost=budget.cost_micros)
    if malformed is not None:
        return Predicate.MALFORMED, malformed
    if ledger.is_blank(command.reason):
        return (Predicate.BLANK_REASON, "a raise needs a reason (--reason, at most 1 KiB): "
                "the ledger says who raised a budget and why")
    creator = run.status.creator
    if (creator is None or command.actor != creator) and not command.override:
        who = ("the run has no verified creator, so only someone granted 'override' on "
               "agentruns raises it" if creator is None else
               f"only the run's creator ({creator}) or someone granted 'override' on "
               "agentruns raises its budget")
        return Predicate.NOT_OWNER, f"{command.actor} may not raise it: {who}"
    return None


def _amount_problem(command: Raise, *, budget_tokens: int | None,
                    budget_cost: int | None) -> str | None:
    if command.add is None and command.add_cost is None:
        return f"a raise names tokens ({ADD}) or a cost ({ADD_COST}), or both"
    if command.add is not None:
        if len(command.add) > ADD_CHARS or not re.fullmatch(TOKENS_PATTERN, command.add):
            return (f"{ADD} is a whole number of tokens, 1 to {modelusage.MAX_TOKENS - 1}, "
                    f"not {bounds.clip(command.add, limit=40)!r}")
        if budget_tokens is None:
            return "the run's budget bounds no tokens: raise its cost instead"
        if budget_tokens + int(command.add) > modelusage.MAX_TOKENS:
            return f"a budget is at most {modelusage.MAX_TOKENS} tokens"
    if command.add_cost is not None:
        if len(command.add_cost) > ADD_CHARS or not re.fullmatch(COST_PATTERN, command.add_cost):
            return (f"{ADD_COST} is a decimal amount of the run's currency (at most 6 places), "
                    f"not {bounds.clip(command.add_cost, limit=40)!r}")
        micros = modelusage.micros(command.add_cost)
        if micros == 0:
            return f"{ADD_COST} is more than 0"
        if budget_cost is None:
            return "the run's budget bounds no cost: raise its tokens instead"
        if budget_cost + micros > modelusage.MAX_COST_MICROS:
            return f"a budget is at most {modelusage.MAX_COST_MICROS // 10**6} units"
    return None


def _amounts(tokens: int | None, micros: int | None, currency: str, *,
             sign: str = "+") -> str:
    parts = [f"{sign}{tokens} tokens" if tokens is not None else None,
             f"{sign}{micros / 1e6:.6f} {currency}" if micros is not None else None]
    return ", ".join(p for p in parts if p)


def _limits(budget: BudgetStatus) -> str:
    return _amounts(budget.tokens, budget.cost_micros, budget.currency, sign="")


def _ledger(status: AgentRunStatus, command: Raise, *, outcome: Literal["Accepted", "Rejected"],
            predicate: Predicate | None, message: str, now: datetime) -> AgentRunStatus:
    entry = CommandRecord(request_id=command.request_id, kind=CommandKind.BUDGET,
                          actor=command.actor, reason=command.reason, outcome=outcome,
                          predicate=predicate, override=True if (
                              outcome == "Accepted" and command.override
                              and command.actor != status.creator) else None,
                          message=bounds.clip(message, limit=bounds.RECORD_MESSAGE_CHARS),
                          time=now)
    return status.model_copy(update={"commands": [*status.commands, entry][-RUN_COMMANDS_KEPT:]})
