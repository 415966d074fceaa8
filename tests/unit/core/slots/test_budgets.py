"""Budgets in the core: the budget a claim passes on, the attempt that stops at it, the slot
that waits, the raise that reopens it, and the run's budget command.

Covers, each by the exact step and its content:
- a claim's Lease carries the run's budget in force (none without a budget);
- an attempt whose own Lease carries ``budget.exceeded`` ends ``OverBudget`` whatever its
  pod's end: RetryWait, no retryAt, ``askedAttempts`` counted (not ``maxAttempts``),
  condition BudgetExceeded True naming the budget and the command, ``budgetRaises`` kept;
  its usage in its record and the slot's sum;
- a parked slot waits (no claim, a claim command NotClaimable) until a raise: a raise that
  leaves nothing keeps it parked at that raise, one that leaves something reopens it (the
  last owner kept) and the claim then passes the raised budget on;
- a slot about to be claimed while its run has nothing left parks without an attempt;
- the budget command, exhaustively over actor x override x amounts x reason x stamping,
  against an oracle of the predicate order; its ledger keeps the newest 20;
- the pinned budget: the price table's currency, a mismatch refused.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest

from agentrun.api import conditions, modelusage, names, records
from agentrun.api.budgets import Budget, BudgetStatus
from agentrun.api.meta import OwnerReference
from agentrun.api.modelusage import ModelUsage, PriceTable
from agentrun.api.runs import RUN_COMMANDS_KEPT, AgentRun
from agentrun.api.slots import CommandKind, Outcome, Predicate, SlotState, SlotStatus
from agentrun.core.base.actions import Create, RemoveRunCommand, Wait, WriteRun, WriteStatus
from agentrun.core.policies import stamping
from agentrun.core.runs import rollup, runcommands, runsteps
from agentrun.core.runs.resolution import Problem
from agentrun.core.slots import steps
from agentrun.core.slots.inputs import World
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

CONDITION = names.BUDGET_EXCEEDED_CONDITION


def budgeted(*, tokens: int | None = 240, cost: int | None = None, raises: int = 0,
             used: ModelUsage | None = None, creator: str | None = f.CREATOR) -> AgentRun:
    run = f.agent_run()
    return run.model_copy(update={"status": run.status.model_copy(update={
        "budget": BudgetStatus(tokens=tokens, cost_micros=cost, raises=raises),
        "usage": used, "creator": creator})})


def exceeded_record(*, attempt: int = 1) -> tuple[str, str]:
    payload = {"reason": "the attempt used 240 tokens of the 240 its run's budget left it"}
    data = records.canonical(payload)
    record = records.Record(attempt=attempt, digest=records.digest(data), inline=payload,
                            key="budget.exceeded", kind=records.Kind.DECISION, size=len(data))
    return record.annotation, records.encode(record)


def stopped_world(*found: tuple[str, str], phase: str = "Succeeded",
                  claimed: str | None = "240 tokens, none micro-USD", **kwargs: Any) -> World:
    """Attempt 1 ended with ``found`` records on its Lease, given the budget ``claimed``
    (the operator's annotation at its claim; None: none)."""
    lease = f.lease(1, holder=False)
    lease["metadata"]["annotations"].update(dict(found))
    if claimed is not None:
        lease["metadata"]["annotations"][names.BUDGET_ANNOTATION] = claimed
    lease["metadata"]["annotations"][names.MODEL_USAGE_ANNOTATION] = ModelUsage(
        input_tokens=200, output_tokens=40).text()
    return f.world(f.active(1), attempt=f.objects(1, pod=f.pod(1, phase), lease=lease),
                   **kwargs)


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_an_attempt_that_stopped_at_its_budget_ends_over_budget_and_parks(phase: str) -> None:
    used = ModelUsage(input_tokens=200, output_tokens=40)
    world = stopped_world(exceeded_record(), phase=phase, run=budgeted(used=used))
    step = expect(steps.next_step(world), WriteStatus)
    status = step.status
    assert (status.state, status.attempts[-1].outcome, status.asked_attempts) == (
        SlotState.RETRY_WAIT, Outcome.OVER_BUDGET, 1)
    assert status.retry_at is None and status.budget_raises == 0
    assert status.attempts[-1].usage == status.usage == used
    parked = f.condition(status, CONDITION)
    assert parked.status == "True" and "kubectl agentrun budget research-1" in parked.message
    assert "240 tokens" in parked.message
    assert step.event is not None and step.event.reason == CONDITION
    # It waits: no claim, whatever the policy, until a raise.
    waiting = f.world(status, run=budgeted(used=used))
    assert isinstance(steps.next_step(waiting), Wait)
    # A claim command is NotClaimable while it waits.
    commanded = f.world(status, run=budgeted(used=used), annotations=f.command("claim"))
    decided = expect(steps.next_step(commanded), WriteStatus).status
    assert decided.commands[-1].predicate is Predicate.NOT_CLAIMABLE
    assert "budget" in decided.commands[-1].message


def test_a_lease_record_not_the_budgets_ends_the_attempt_as_before() -> None:
    annotation, value = exceeded_record()
    other = (annotation.replace("budget.exceeded", "plan.exceeded"),
             value.replace("budget.exceeded", "plan.exceeded"))
    step = expect(steps.next_step(stopped_world(other, phase="Failed", run=budgeted())),
                  WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.FAILED


def parked_status(*, raises: int = 0) -> SlotStatus:
    world = stopped_world(exceeded_record(), run=budgeted(
        used=ModelUsage(input_tokens=200, output_tokens=40), raises=raises))
    return expect(steps.next_step(world), WriteStatus).status


def test_a_raise_that_leaves_nothing_keeps_it_parked_one_that_does_reopens_it() -> None:
    used = ModelUsage(input_tokens=200, output_tokens=40)
    status = parked_status()
    short = f.world(status, run=budgeted(tokens=240, raises=1, used=used))
    still = expect(steps.next_step(short), WriteStatus).status
    assert f.condition(still, CONDITION).status == "True" and still.budget_raises == 1
    assert isinstance(steps.next_step(f.world(still, run=budgeted(
        tokens=240, raises=1, used=used))), Wait)
    raised = f.world(still, run=budgeted(tokens=740, raises=2, used=used))
    step = expect(steps.next_step(raised), WriteStatus)
    reopened = step.status
    assert f.condition(reopened, CONDITION).status == "False"
    assert f.condition(reopened, CONDITION).reason == names.BUDGET_RAISED
    assert f.condition(reopened, "Reopened").reason == names.BUDGET_RAISED
    assert reopened.next_owner_actor == f.CREATOR and reopened.budget_raises is None
    assert step.event is not None and step.event.reason == names.BUDGET_RAISED
    claim = steps.next_step(f.world(reopened, run=budgeted(tokens=740, raises=2, used=used)))
    lease = expect(claim, Create).body
    assert lease["metadata"]["annotations"][names.BUDGET_ANNOTATION] == (
        "740 tokens, none micro-USD")


def test_a_claim_passes_the_runs_budget_on_and_none_without_one() -> None:
    used = ModelUsage(input_tokens=10, output_tokens=5, cost_micros=2_000_000)
    lease = expect(steps.next_step(f.world(f.ready(), run=budgeted(
        tokens=100, cost=5_000_000, used=used))), Create).body
    assert lease["metadata"]["annotations"][names.BUDGET_ANNOTATION] == (
        "100 tokens, 5000000 micro-USD")
    plain = expect(steps.next_step(f.world(f.ready())), Create).body
    assert names.BUDGET_ANNOTATION not in plain["metadata"]["annotations"]


def test_a_slot_its_run_has_nothing_left_for_parks_without_an_attempt() -> None:
    run = budgeted(tokens=100, used=ModelUsage(input_tokens=100))
    step = expect(steps.next_step(f.world(f.ready(), run=run)), WriteStatus)
    assert step.status.state is SlotState.READY and step.status.attempt_count == 0
    assert f.condition(step.status, CONDITION).status == "True"
    assert isinstance(steps.next_step(f.world(step.status, run=run)), Wait)
    # A Pending slot waiting for its dependencies is not told about the budget.
    pending = f.world(SlotStatus(), run=run, depends_on=["other"])
    assert not isinstance(steps.next_step(pending), WriteStatus) or not conditions.find(
        expect(steps.next_step(pending), WriteStatus).status.conditions, CONDITION)


def raise_of(*, actor: str | None = "alice", add: str | None = "500",
             add_cost: str | None = None, reason: str | None = "worth it",
             override: bool = False, epoch: str | None = f.EPOCH) -> runcommands.Raise:
    return runcommands.Raise(request_id="r1", actor=actor, epoch=epoch, override=override,
                             add=add, add_cost=add_cost, reason=reason)


def oracle(run: AgentRun, command: runcommands.Raise,
           trust: stamping.Stamping) -> Predicate | None:
    if trust.epoch is None:
        return Predicate.COMMANDS_REFUSED
    if command.actor is None or command.epoch is None:
        return Predicate.UNSTAMPED
    if command.epoch != trust.epoch:
        return Predicate.STALE_EPOCH
    budget = run.status.budget
    if budget is None or (command.add is None and command.add_cost is None):
        return Predicate.MALFORMED
    if command.add is not None and (not command.add.isdigit() or command.add.startswith("0")
                                    or budget.tokens is None):
        return Predicate.MALFORMED
    if command.add_cost is not None and (budget.cost_micros is None or command.add_cost in (
            "0", "-1", "abc")):
        return Predicate.MALFORMED
    if command.reason is None or not command.reason.strip():
        return Predicate.BLANK_REASON
    if command.actor != run.status.creator and not command.override:
        return Predicate.NOT_OWNER
    return None


def test_the_budget_command_over_every_input_matches_the_oracle() -> None:
    """Every combination of actor x override x tokens x cost x reason x stamping x the
    run's budget (3,240), one loop: decided as the oracle says, and only accepted ones
    change the budget."""
    runs = {}
    for budget in ("tokens", "both", "none"):
        run = budgeted(tokens=240 if budget != "none" else None,
                       cost=3_000_000 if budget == "both" else None)
        if budget == "none":
            run = run.model_copy(update={"status": run.status.model_copy(
                update={"budget": None})})
        runs[budget] = run
    combinations = itertools.product(
        ["alice", "bob", None], [False, True], [None, "500", "0", "-5", "x"],
        [None, "2.5", "0", "abc"], ["worth it", "  ", None], ["in force", "stale", "off"],
        runs)
    for actor, override, add, add_cost, reason, trust, budget in combinations:
        run = runs[budget]
        command = raise_of(actor=actor, override=override, add=add, add_cost=add_cost,
                           reason=reason, epoch="other" if trust == "stale" else f.EPOCH)
        stamped = f.IN_FORCE if trust != "off" else stamping.Stamping(epoch=None,
                                                                      problem="off")
        status, event = runcommands.decide(run, command, stamping_now=stamped, now=f.T0)
        entry, expected = status.commands[-1], oracle(run, command, stamped)
        case = (actor, override, add, add_cost, reason, trust, budget, entry.message)
        assert (entry.kind, entry.request_id) == (CommandKind.BUDGET, "r1"), case
        assert entry.predicate is expected, case
        if expected is None:
            assert entry.outcome == "Accepted" and event.reason == names.BUDGET_RAISED, case
            assert status.budget is not None and run.status.budget is not None
            assert status.budget.raises == 1, case
            if add is not None:
                assert status.budget.tokens == (run.status.budget.tokens or 0) + int(add)
            assert entry.override is (True if actor != f.CREATOR else None), case
        else:
            assert entry.outcome == "Rejected" and event.type == "Warning", case
            assert status.budget == run.status.budget, case


def test_the_runs_ledger_keeps_the_newest_and_a_decided_command_is_only_removed() -> None:
    run = budgeted()
    for n in range(RUN_COMMANDS_KEPT + 5):
        command = runcommands.Raise(request_id=f"r{n}", actor="alice", epoch=f.EPOCH,
                                    override=False, add="1", add_cost=None, reason="more")
        status, _ = runcommands.decide(run, command, stamping_now=f.IN_FORCE, now=f.T0)
        run = run.model_copy(update={"status": status})
    assert len(run.status.commands) == RUN_COMMANDS_KEPT
    assert run.status.commands[-1].request_id == f"r{RUN_COMMANDS_KEPT + 4}"
    assert run.status.budget is not None and run.status.budget.tokens == 240 + 25
    assert runcommands.decided(run, runcommands.Raise(
        request_id=f"r{RUN_COMMANDS_KEPT + 4}", actor=None, epoch=None, override=False,
        add=None, add_cost=None, reason=None))


def test_the_pinned_budget_is_in_the_price_tables_currency() -> None:
    run = f.agent_run()
    assert rollup.pinned_budget(run, prices=None) is None
    with_budget = run.model_copy(update={"spec": run.spec.model_copy(update={
        "budget": Budget(tokens=5, cost="2.5")})})
    assert rollup.pinned_budget(with_budget, prices=PriceTable(currency="EUR")) == (
        BudgetStatus(tokens=5, cost_micros=2_500_000, currency="EUR"))
    assert rollup.pinned_budget(with_budget, prices=None) == BudgetStatus(
        tokens=5, cost_micros=2_500_000, currency="USD")
    other = with_budget.model_copy(update={"spec": with_budget.spec.model_copy(update={
        "budget": Budget(cost="1", currency="JPY")})})
    refused = rollup.pinned_budget(other, prices=PriceTable(currency="EUR"))
    assert isinstance(refused, Problem) and refused.reason == rollup.BUDGET_INVALID


def test_limits_read_back_and_say_which_bound_was_reached() -> None:
    bound = modelusage.Limits(tokens=100, cost_micros=None, currency="EUR")
    assert modelusage.Limits.parse(bound.text()) == bound
    assert bound.reached(ModelUsage(input_tokens=99, currency="EUR")) is None
    assert bound.reached(ModelUsage(
        input_tokens=60, output_tokens=40, currency="EUR")) == "100 tokens used of a budget of 100"
    assert bound.reached(ModelUsage(input_tokens=500)) is None  # another currency: nothing
    cost = modelusage.Limits(tokens=None, cost_micros=5, currency="USD")
    assert cost.reached(ModelUsage(cost_micros=5)) is not None
    assert modelusage.Limits.parse("lots") is None
    assert BudgetStatus(tokens=10).left(ModelUsage(input_tokens=20)).tokens == 0
    assert BudgetStatus(tokens=10).left(ModelUsage(input_tokens=5, currency="EUR")).tokens == 10
    assert BudgetStatus(tokens=10, cost_micros=3).limits() == modelusage.Limits(
        tokens=10, cost_micros=3)


def test_a_raise_made_while_the_attempt_ran_is_for_it() -> None:
    used = ModelUsage(input_tokens=200, output_tokens=40)
    # Claimed under 240 tokens; raised to 740 (raise 1) while it ran; it stopped at 240.
    world = stopped_world(exceeded_record(), claimed="240 tokens, none micro-USD",
                          run=budgeted(tokens=740, raises=1, used=used))
    status = expect(steps.next_step(world), WriteStatus).status
    assert status.budget_raises == 0
    reopened = expect(steps.next_step(f.world(status, run=budgeted(
        tokens=740, raises=1, used=used))), WriteStatus).status
    assert f.condition(reopened, CONDITION).status == "False"
    # Claimed under the budget in force now: it waits for the next raise.
    same = stopped_world(exceeded_record(), claimed="740 tokens, none micro-USD",
                         run=budgeted(tokens=740, raises=1, used=used))
    assert expect(steps.next_step(same), WriteStatus).status.budget_raises == 1


def test_a_stop_recorded_by_an_attempt_given_no_budget_is_not_one() -> None:
    world = stopped_world(exceeded_record(), phase="Failed", claimed=None, run=budgeted())
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.FAILED
    assert conditions.find(step.status.conditions, CONDITION) is None


def test_a_budget_command_is_decided_before_the_run_is_pinned() -> None:
    run = f.agent_run()
    unpinned = run.model_copy(update={
        "metadata": run.metadata.model_copy(update={"annotations": {
            runcommands.ID: "r1", runcommands.ADD: "5", runcommands.REASON: "more",
            runcommands.ACTOR: "alice", runcommands.EPOCH: f.EPOCH}}),
        "status": run.status.model_copy(update={"pinned": None})})
    world = runsteps.RunWorld(run=unpinned, tenant=f.TENANT, now=f.T0, stamping=f.IN_FORCE)
    step = runsteps.next_step(world)
    assert isinstance(step, WriteRun), step
    assert step.status.commands[-1].predicate is Predicate.MALFORMED
    assert "not pinned yet" in step.status.commands[-1].message
    decided = unpinned.model_copy(update={"status": step.status})
    removed = runsteps.next_step(dataclasses.replace(world, run=decided))
    assert isinstance(removed, RemoveRunCommand) and runcommands.ID in removed.keys


def test_an_attempt_stopped_at_the_budget_of_a_run_gone_still_ends() -> None:
    step = expect(steps.next_step(stopped_world(exceeded_record(), run=None)), WriteStatus)
    assert step.status.attempts[-1].outcome is Outcome.OVER_BUDGET
    assert "the run is gone" in f.condition(step.status, CONDITION).message


def test_the_runs_usage_is_summed_in_its_budgets_currency() -> None:
    run = budgeted()
    euros = run.model_copy(update={"status": run.status.model_copy(update={
        "budget": BudgetStatus(tokens=5, currency="EUR")})})
    owner = OwnerReference(api_version="agentrun.dev/v1alpha1", kind="AgentRun",
                           name=f.RUN, uid=f.RUN_UID, controller=True)
    slots = [f.slot(SlotStatus(usage=ModelUsage(input_tokens=n, currency=c)), node=f"n{n}")
             for n, c in ((7, "JPY"), (3, "EUR"), (4, "EUR"))]
    slots = [s.model_copy(update={"metadata": s.metadata.model_copy(update={
        "owner_references": [owner]})}) for s in slots]
    assert len(rollup.own_slots(run=euros, slots=slots)) == 3  # all its own
    derived = rollup.derive(run=euros, nodes=["n7", "n3", "n4"], slots=slots, now=f.T0)
    assert derived.usage == ModelUsage(input_tokens=7, currency="EUR")


def test_a_budget_command_on_a_run_not_pinned_yet_is_refused_with_why() -> None:
    run = f.agent_run()
    unpinned = run.model_copy(update={
        "spec": run.spec.model_copy(update={"budget": Budget(tokens=5)}),
        "status": run.status.model_copy(update={"pinned": None})})
    status, _ = runcommands.decide(unpinned, raise_of(), stamping_now=f.IN_FORCE, now=f.T0)
    assert status.commands[-1].predicate is Predicate.MALFORMED
    assert "not pinned yet" in status.commands[-1].message


def test_a_run_naming_no_budget_takes_its_tenants_default_never_over_its_own() -> None:
    run = f.agent_run()
    default = '{"tokens": 900, "cost": "1.5", "currency": "EUR"}'
    assert rollup.pinned_budget(run, prices=PriceTable(currency="EUR"), default=default) == (
        BudgetStatus(tokens=900, cost_micros=1_500_000, currency="EUR"))
    own = run.model_copy(update={"spec": run.spec.model_copy(update={
        "budget": Budget(tokens=5)})})
    assert rollup.pinned_budget(own, prices=None, default=default) == BudgetStatus(tokens=5)
    for bad in ('{"tokens": -1}', "tokens=5", "{}", '{"tokens": 1, "x": 2}',
                '{"tokens": 1, "cost": "0"}', '{"tokens": ' + "1" * 300 + "}"):
        refused = rollup.pinned_budget(run, prices=None, default=bad)
        assert isinstance(refused, Problem) and refused.reason == rollup.BUDGET_INVALID, bad
        assert "agentrun.dev/default-budget is not a budget" in refused.message


def test_a_budget_command_with_an_unusable_request_id_is_refused_once_and_removed() -> None:
    run = f.agent_run()
    garbage = run.model_copy(update={"metadata": run.metadata.model_copy(update={
        "annotations": {runcommands.ID: "not an id!" * 30, runcommands.ADD: "5",
                        runcommands.REASON: "more"}})})
    command = runcommands.pending(garbage)
    assert command is not None and command.request_id.startswith("invalid-")
    status, _ = runcommands.decide(garbage, command, stamping_now=f.IN_FORCE, now=f.T0)
    entry = status.commands[-1]
    assert (entry.predicate, entry.request_id) == (Predicate.MALFORMED, command.request_id)
    assert len(entry.message) <= 1024 and status.budget == garbage.status.budget
    decided = garbage.model_copy(update={"status": status})
    world = runsteps.RunWorld(run=decided, tenant=f.TENANT, now=f.T0, stamping=f.IN_FORCE)
    assert isinstance(runsteps.next_step(world), RemoveRunCommand)
