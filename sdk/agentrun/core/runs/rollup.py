"""A run's status, derived purely from the run and its slots.

See docs/design/runs-and-configuration.md.

The run's status is a *view*: slot counts, ``done`` (succeeded/total, for the printer
column) and four conditions, recomputed from the slots on every reconcile, so a restart
of the operator rebuilds it exactly. Only ``pinned``, ``startTime`` and ``creator`` are
facts the status itself owns; all are written once, when the run is pinned
(:func:`record_pins`).

Conditions:

- ``Pinned``: True once ``status.pinned`` is written; False with the resolution problem's
  reason (``ConfigNotFound``, ...) while it cannot be; Unknown while resolving.
- ``CreatorVerified``: decided with the pins: True when the run's stamped creator was
  believed (:func:`verified_creator`), else False with why; never changed after.
- ``Ready``: True when the run is pinned, every workflow node has its Slot, no slot has
  failed and the deadline has not passed: the run is fully laid out and can still
  succeed. It stays True after success (nothing stopped being ready).
- ``Succeeded``: True when every node's slot has succeeded.
- ``Failed``: True when some slot failed and every slot is terminal (the failure is
  final and nothing else runs), or when ``activeDeadlineSeconds`` passed.

``Succeeded`` and ``Failed`` are verdicts: once one is True it stays so, whatever a later
(possibly stale) list of slots says, as a Job's ``Complete``/``Failed`` do. A rerun is the
one thing that reopens them: the status keeps the highest sum of its slots' ``reruns``
(``status.reruns``) and a larger sum drops the verdict. A slot whose dependencies were
rerun after it left Pending (held: superseded once released) is not counted as done.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from agentrun.api import bounds, conditions, modelusage, names
from agentrun.api.budgets import Budget, BudgetStatus
from agentrun.api.conditions import Condition, ConditionStatus
from agentrun.api.modelusage import PriceTable
from agentrun.api.runs import AgentRun, AgentRunStatus, Pins, SlotCounts
from agentrun.api.slots import TERMINAL_STATES, Slot, SlotState
from agentrun.core.machine import transitions
from agentrun.core.runs.resolution import Problem

# Run condition types (docs/design/names.md).
PINNED: Final = "Pinned"
CREATOR_VERIFIED: Final = "CreatorVerified"
READY: Final = "Ready"
SUCCEEDED: Final = "Succeeded"
FAILED: Final = "Failed"

RERUNNING: Final = transitions.RERUN  # the run's Succeeded reason while slots are rerun

# A reason other modules act on: the deadline fails open slots (``transitions.fail(reason=...)``).
DEADLINE_EXCEEDED: Final = "DeadlineExceeded"


def _controller_uid(slot: Slot) -> str | None:
    return next((ref.uid for ref in slot.metadata.owner_references if ref.controller), None)


def own_slots(*, run: AgentRun, slots: Sequence[Slot]) -> dict[str, Slot]:
    """This run's slots by node: ``spec.run`` is the run and the run's uid controls them.

    The uid check keeps a slot of a deleted run of the same name, not yet collected, out
    of the new run's counts.
    """
    uid = run.metadata.uid
    return {s.spec.node: s for s in slots if s.spec.run == run.metadata.name
            and (uid is None or _controller_uid(s) == uid)}


def count(*, nodes: Sequence[str], slots: dict[str, Slot]) -> SlotCounts:
    """Slot counts over the workflow's nodes; ``total`` counts nodes, created or not.

    A node whose Slot does not exist yet is in no bucket, so ``done`` (succeeded/total)
    never overstates progress and ``Ready`` can say how many are missing.
    """
    states = [slots[n].status.state for n in nodes if n in slots]
    return SlotCounts(
        total=len(nodes),
        pending=states.count(SlotState.PENDING),
        ready=states.count(SlotState.READY),
        active=states.count(SlotState.CLAIMING) + states.count(SlotState.ACTIVE),
        retry_wait=states.count(SlotState.RETRY_WAIT),
        succeeded=states.count(SlotState.SUCCEEDED),
        failed=states.count(SlotState.FAILED),
    )


def deadline(run: AgentRun) -> datetime | None:
    """When ``activeDeadlineSeconds`` runs out, counted from ``startTime`` (set at pinning).

    None without a deadline or before pinning: an unpinned run has started nothing, and
    the clock of a run waiting for its configuration should not run.
    """
    seconds, start = run.spec.active_deadline_seconds, run.status.start_time
    return None if seconds is None or start is None else start + timedelta(seconds=seconds)


def deadline_passed(*, run: AgentRun, now: datetime) -> bool:
    """Has the run's active deadline passed at ``now``? (The instant itself counts.)"""
    at = deadline(run)
    return at is not None and now >= at


def verified_creator(run: AgentRun, *, epoch: str | None) -> str | Problem:
    """The run's creator as admission stamped it, if stamped under ``epoch`` (the one in
    force now); else why it cannot be believed."""
    annotations = run.metadata.annotations or {}
    creator = annotations.get(names.CREATOR_ANNOTATION)
    stamped = annotations.get(names.CREATOR_EPOCH_ANNOTATION)
    if epoch is None:
        return Problem(reason="StampingNotInForce", message=(
            "the run's creator cannot be verified: actor stamping is not in force"))
    if not creator or not stamped:
        return Problem(reason="Unstamped", message=(
            "the run carries no creator stamped by admission (it was created while stamping "
            "was not in force)"))
    if stamped != epoch:
        return Problem(reason="StaleEpoch", message=(
            "the run's creator was stamped under an earlier stamping epoch"))
    if len(creator) > bounds.ACTOR_CHARS:  # clipped, it could name someone else
        return Problem(reason="Unstamped", message=(
            f"the run's creator's name is longer than {bounds.ACTOR_CHARS} characters"))
    return creator


BUDGET_INVALID = "BudgetInvalid"


def pinned_budget(run: AgentRun, *, prices: PriceTable | None,
                  default: str | None = None) -> BudgetStatus | Problem | None:
    """The run's budget as pinned: ``spec.budget``, else its tenant's ``default`` (the
    namespace's ``agentrun.dev/default-budget``, JSON), in its price table's currency (USD
    without one); None without either; a Problem when the two name other currencies or the
    default does not parse."""
    budget = run.spec.budget
    if budget is None and default is not None:
        try:
            if len(default.encode()) > names.DEFAULT_BUDGET_BYTES:
                raise ValueError(f"longer than {names.DEFAULT_BUDGET_BYTES} bytes")
            budget = Budget.model_validate_json(default)
        except ValueError as error:
            return Problem(reason=BUDGET_INVALID, message=bounds.clip(
                f"the namespace's {names.DEFAULT_BUDGET_ANNOTATION} is not a budget "
                f"(JSON as spec.budget, e.g. {{\"tokens\": 1000000}}): {error}; ask a "
                "tenant admin to fix it, or give the run its own spec.budget"))
    if budget is None:
        return None
    currency = prices.currency if prices is not None else modelusage.DEFAULT_CURRENCY
    if budget.currency is not None and budget.currency != currency:
        where = ("spec.budget" if run.spec.budget is not None else
                 f"the namespace's {names.DEFAULT_BUDGET_ANNOTATION}")
        return Problem(reason=BUDGET_INVALID, message=(
            f"{where} is in {budget.currency} and the run's price table (bindings "
            f"prices.currency) in {currency}: a budget is kept in the currency costs are; "
            f"give it in {currency} (or no currency)"))
    return BudgetStatus(tokens=budget.tokens, currency=currency, cost_micros=None if (
        budget.cost is None) else modelusage.micros(budget.cost))


def record_pins(*, run: AgentRun, pins: Pins, now: datetime,
                creator: str | Problem | None = None,
                budget: BudgetStatus | None = None) -> AgentRunStatus:
    """The status that pins the run: ``pinned``, ``startTime`` and ``creator`` (with the
    condition CreatorVerified), each set only once.

    Writing the same pins again is a no-op (a retry after a crash); other pins are a bug,
    refused here before the API server's write-once rule would refuse them.
    """
    old = run.status
    if old.pinned is not None and old.pinned != pins:
        raise ValueError(f"run {run.metadata.name!r} is already pinned; pins never change")
    start = old.start_time or now
    conds = _set(old.conditions, run=run, type_=PINNED, status="True", reason=PINNED,
                 message=_pins_message(pins), now=now)
    who = old.creator
    if old.pinned is not None:  # pinned already: who created it was decided then
        creator = None
    if who is None and isinstance(creator, str):
        who = creator
        conds = _set(conds, run=run, type_=CREATOR_VERIFIED, status="True", reason="Stamped",
                     message=f"created by {creator}", now=now)
    elif who is None and isinstance(creator, Problem):
        conds = _set(conds, run=run, type_=CREATOR_VERIFIED, status="False",
                     reason=creator.reason, message=f"{creator.message}: the run has no "
                     "verified creator", now=now)
    return old.model_copy(update={"pinned": pins, "start_time": start, "conditions": conds,
                                  "creator": who, "budget": old.budget or budget})


def _pins_message(pins: Pins) -> str:
    parts = [f"{kind} revision {pin.revision} from ConfigMap {pin.source} "
             f"(snapshot {pin.snapshot})"
             for kind, pin in (("package", pins.package), ("workflow", pins.workflow),
                               ("bindings", pins.bindings))]
    return "; ".join(parts)


def with_condition(run: AgentRun, *, type_: str, status: ConditionStatus, reason: str,
                   message: str, now: datetime) -> list[Condition]:
    """The run's conditions with one set (its transition time kept if it did not change)."""
    return _set(run.status.conditions, run=run, type_=type_, status=status, reason=reason,
                message=message, now=now)


def _set(conds: list[Condition], *, run: AgentRun, type_: str, status: ConditionStatus,
         reason: str, message: str, now: datetime) -> list[Condition]:
    return conditions.set_condition(conds, type_=type_, status=status, reason=reason,
                                    message=message, now=now,
                                    observed_generation=run.metadata.generation)


@dataclass(frozen=True, kw_only=True)
class _Verdict:
    status: ConditionStatus
    reason: str
    message: str


def _failed(*, run: AgentRun, nodes: Sequence[str], own: dict[str, Slot],
            now: datetime) -> _Verdict:
    failed = [n for n in nodes if n in own and own[n].status.state is SlotState.FAILED]
    if deadline_passed(run=run, now=now):
        at = deadline(run)
        assert at is not None
        return _Verdict(status="True", reason=DEADLINE_EXCEEDED, message=(
            f"activeDeadlineSeconds ({run.spec.active_deadline_seconds}) passed at "
            f"{at.isoformat()}; open slots are failed"))
    if not failed:
        return _Verdict(status="False", reason="NoSlotFailed", message="no slot has failed")
    open_nodes = [n for n in nodes if n not in own or own[n].status.state not in TERMINAL_STATES]
    if open_nodes:
        return _Verdict(status="False", reason="SlotsFinishing", message=(
            f"nodes {', '.join(failed)} failed; waiting for {len(open_nodes)} open slots to "
            "finish"))
    return _Verdict(status="True", reason="SlotsFailed", message=(
        f"nodes {', '.join(failed)} failed and every slot has finished"))


def _behind(slot: Slot, *, own: dict[str, Slot]) -> bool:
    """A slot whose dependencies were rerun since it left Pending (it is superseded, or
    will be once released): what it did is being redone under it."""
    if slot.status.state is SlotState.PENDING:
        return False
    return sum(own[d].status.reruns for d in slot.spec.depends_on
               if d in own) > slot.status.dependency_reruns


def _rerunning(slot: Slot) -> bool:
    """The slot waits to run again after a rerun (its own, or a dependency's)."""
    found = slot.status.conditions
    reopened = conditions.find(found, transitions.REOPENED)
    return slot.status.state not in TERMINAL_STATES and (
        (reopened is not None and reopened.status == "True" and reopened.reason == RERUNNING)
        or conditions.is_true(found, transitions.SUPERSEDED_CONDITION))


def _ready(*, run: AgentRun, nodes: Sequence[str], own: dict[str, Slot],
           failed: _Verdict) -> _Verdict:
    missing = [n for n in nodes if n not in own]
    failed_nodes = [n for n in nodes if n in own and own[n].status.state is SlotState.FAILED]
    if run.status.pinned is None:
        return _Verdict(status="False", reason="NotPinned",
                        message="the configuration is not pinned yet; see condition Pinned")
    if failed.reason == DEADLINE_EXCEEDED:
        return _Verdict(status="False", reason=DEADLINE_EXCEEDED, message=failed.message)
    if failed_nodes:
        return _Verdict(status="False", reason="SlotFailed",
                        message=f"nodes {', '.join(failed_nodes)} failed")
    if missing or not nodes:
        return _Verdict(status="False", reason="SlotsMissing", message=(
            f"{len(nodes) - len(missing)} of {len(nodes)} slots exist; missing: "
            f"{', '.join(missing) or 'the workflow nodes are not known yet'}"))
    return _Verdict(status="True", reason="SlotsCreated",
                    message=f"all {len(nodes)} slots exist and none has failed")


def derive(
    *, run: AgentRun, nodes: Sequence[str], slots: Sequence[Slot], now: datetime,
    problem: Problem | None = None,
) -> AgentRunStatus:
    """The run's whole status from the run, its workflow's ``nodes`` and its slots.

    ``nodes`` are the pinned workflow's node names (empty before pinning); ``problem`` is
    the last resolution problem, shown while the run is not pinned. ``pinned`` and
    ``startTime`` are kept as they are.
    """
    old = run.status
    own = own_slots(run=run, slots=slots)
    counts = count(nodes=nodes, slots=own)
    conds = old.conditions
    if old.pinned is not None:
        conds = _set(conds, run=run, type_=PINNED, status="True", reason=PINNED,
                     message=_pins_message(old.pinned), now=now)
    elif problem is not None:
        conds = _set(conds, run=run, type_=PINNED, status="False", reason=problem.reason,
                     message=problem.message, now=now)
    else:
        conds = _set(conds, run=run, type_=PINNED, status="Unknown", reason="Resolving",
                     message="resolving the package, workflow and bindings", now=now)
    all_succeeded = bool(nodes) and counts.succeeded == counts.total
    failed = _failed(run=run, nodes=nodes, own=own, now=now)
    reruns = sum(s.status.reruns for s in own.values())
    old_conditions = old.conditions if reruns <= old.reruns else [
        c for c in old.conditions if c.type not in (SUCCEEDED, FAILED)]  # a rerun reopens
    rerunning = [n for n in nodes if n in own and _rerunning(own[n])]
    behind = [n for n in nodes if n in own and _behind(own[n], own=own)]
    if behind:  # built on work a rerun redoes (superseded once released): not done yet
        all_succeeded = False
        rerunning.extend(n for n in behind if n not in rerunning)
    if conditions.is_true(old_conditions, SUCCEEDED) or (
            all_succeeded and not conditions.is_true(old_conditions, FAILED)):
        failed = _Verdict(status="False", reason="Succeeded", message="every slot succeeded")
        succeeded = _Verdict(status="True", reason="AllSlotsSucceeded",
                             message=f"all {counts.total} slots succeeded")
    else:
        if conditions.is_true(old_conditions, FAILED):
            prior = conditions.find(old_conditions, FAILED)
            assert prior is not None
            failed = _Verdict(status="True", reason=prior.reason, message=prior.message)
        succeeded = (_Verdict(status="False", reason=failed.reason, message=failed.message)
                     if failed.status == "True" else
                     _Verdict(status="False", reason=RERUNNING, message=(
                         f"nodes {', '.join(rerunning)} are rerun (see each slot's Reopened "
                         f"or Superseded condition: who, why); {counts.succeeded}/"
                         f"{counts.total} slots succeeded")) if rerunning else
                     _Verdict(status="False", reason="InProgress",
                              message=f"{counts.succeeded}/{counts.total} slots succeeded"))
    ready = _ready(run=run, nodes=nodes, own=own, failed=failed)
    for type_, verdict in ((READY, ready), (SUCCEEDED, succeeded), (FAILED, failed)):
        conds = _set(conds, run=run, type_=type_, status=verdict.status,
                     reason=verdict.reason, message=verdict.message, now=now)
    return old.model_copy(update={
        "slots": counts, "done": f"{counts.succeeded}/{counts.total}", "conditions": conds,
        "reruns": max(reruns, old.reruns),
        "usage": modelusage.total((s.status.usage for s in own.values()), currency=(
            None if old.budget is None else old.budget.currency)),
        "observed_generation": run.metadata.generation})


def journal_deleted(status: AgentRunStatus) -> str | None:
    """Why the run's journal is gone (``JournalDeleted`` True: its message), else None."""
    found = conditions.find(status.conditions, names.JOURNAL_DELETED_CONDITION)
    return found.message if found is not None and found.status == "True" else None


def reopened_message(status: AgentRunStatus) -> str:
    """The run's Event when a rerun reopened its verdict: its Succeeded condition's word."""
    found = conditions.find(status.conditions, SUCCEEDED)
    return f"the run is open again: {found.message if found is not None else 'a slot is rerun'}"


def is_finished(status: AgentRunStatus) -> bool:
    """Has the run reached a verdict (Succeeded or Failed True)? Then nothing more starts."""
    return (conditions.is_true(status.conditions, SUCCEEDED)
            or conditions.is_true(status.conditions, FAILED))
