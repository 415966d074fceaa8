"""Model usage reported by the SDK, on a real attempt Lease (pod-bound token, the shipped
policies) with a real journal (a loopback SeaweedFS).

No operator and no node: the admin plays the operator (``test_worker_records.Attempt``).
Covers: ``worker.usage`` inside a step is priced by the run's pinned price table, journaled
durably with the step it was made in before it returns, and the attempt's sum is on its
Lease; a given cost is taken as is; a second ``Worker`` of the same attempt numbers on; a
report out of its bounds, in another currency, or of a model the table does not price is
refused and changes nothing; the run's budget is checked against the usage of all its slots
at once (two slots' attempts: each stops at the other's report, before a call or an effect);
and admission refuses a holder's hand-written sum that shrinks,
changes currency, is malformed or moves without the head; a LangGraph agent's model calls
are counted by the callback ``invoke`` adds, each with the node it ran in.
"""

from __future__ import annotations

import dataclasses
import hashlib
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from agentrun.api import names
from agentrun.api.modelusage import ModelUsage, UsageError
from agentrun.worker import BudgetExceeded
from agentrun.worker import _journal as journal
from agentrun.worker import _records as records
from agentrun.worker._context import PinnedConfig
from agentrun.worker._sdk import Worker
from agentrun.worker.langgraph import JournalSaver, UsageCallback, invoke
from tests.integration.operator import test_group_commit_lease as group_commit
from tests.integration.operator import test_worker_records as worker_records
from tests.integration.operator.test_worker_records import Attempt, worker_of
from tests.support.s3fixtures import endpoint

pytestmark = pytest.mark.serial
attempts, location = worker_records.attempts, group_commit.location
__all__ = ["attempts", "endpoint", "location"]  # fixtures this module takes from others
BINDINGS = """\
nodes:
- node: n
  agent: {name: agent, revision: "1"}
prices:
  currency: EUR
  models:
    fake-large: {inputPerMillion: "3", outputPerMillion: "15"}
    pricey: {inputPerMillion: "999999999", outputPerMillion: "0"}
"""
MODEL = names.MODEL_USAGE_ANNOTATION


def priced(attempt: Attempt, location: journal.Location, tmp_path: Path) -> Worker:
    """The attempt's Worker with its journal and the bindings above pinned."""
    worker = worker_of(attempt, tmp_path)
    worker.journal = location
    pinned = PinnedConfig(kind="bindings", path=tmp_path / "bindings.yaml", text=BINDINGS,
                          sha256=hashlib.sha256(BINDINGS.encode()).hexdigest())
    worker.context = dataclasses.replace(worker.context, pinned={"bindings": pinned})
    return worker


def test_usage_is_priced_journaled_with_its_step_and_summed_on_the_lease(
        attempts: Callable[[int], Attempt], location: journal.Location, tmp_path: Path) -> None:
    attempt = attempts(1)
    worker = priced(attempt, location, tmp_path)

    def plan() -> str:
        call = worker.usage("fake-large", input_tokens=1000, output_tokens=200)
        assert call == ModelUsage(input_tokens=1000, output_tokens=200,
                                  cost_micros=1000 * 3 + 200 * 15, currency="EUR")
        # Durable before usage returned: the Lease says so already, inside the step.
        assert ModelUsage.on_lease(attempt.lease()) == call
        return "the plan"

    worker.step("plan", do=plan)
    worker.usage("another-model", input_tokens=5, output_tokens=0, cost="0.25")
    worker.flush()
    lease = attempt.lease()
    assert lease["metadata"]["annotations"][MODEL] == (
        "1005 input tokens, 200 output tokens, 256000 micro-EUR")
    assert group_commit.reachable(attempt, location) == ["usage.1.1", "plan", "usage.1.2"]
    reports = {key: worker.steps.prefix.get(key) for key in ("usage.1.1", "usage.1.2")}
    assert reports["usage.1.1"] is not None and reports["usage.1.1"].inline == {
        "model": "fake-large", "inputTokens": 1000, "outputTokens": 200,
        "costMicros": 6000, "currency": "EUR", "step": "plan"}
    assert reports["usage.1.2"] is not None and "step" not in reports["usage.1.2"].inline
    assert worker.usage_total == ModelUsage.on_lease(lease)

    # Refused, nothing recorded: bounds, another currency, a model without a price.
    for report, said in (
            (dict(model="fake-large", input_tokens=-1, output_tokens=0), "whole number"),
            (dict(model="fake-large", input_tokens=10**9 + 1, output_tokens=0), "0..1000000000"),
            (dict(model="fake-large", input_tokens=True, output_tokens=0), "whole number"),
            (dict(model="", input_tokens=1, output_tokens=0), "a model's name"),
            (dict(model="fake-large", input_tokens=1, output_tokens=0, cost="-2"), "at least 0"),
            (dict(model="fake-large", input_tokens=1, output_tokens=0, cost=1, currency="USD"),
             "keeps its costs in EUR"),
            (dict(model="fake-large", input_tokens=1, output_tokens=0, cost=1, currency="ABC"),
             "not an ISO 4217"),
            (dict(model="unpriced", input_tokens=1, output_tokens=1), "no price"),
            (dict(model="pricey", input_tokens=10**9, output_tokens=0), "out of bounds")):
        with pytest.raises(UsageError, match=said):
            worker.usage(**report)  # type: ignore[arg-type]
    assert attempt.lease()["metadata"]["annotations"][MODEL] == lease["metadata"][
        "annotations"][MODEL]

    # Another Worker of the same attempt (the sidecar's, a restarted one) numbers on.
    again = priced(attempt, location, tmp_path)
    again.usage("fake-large", input_tokens=1, output_tokens=1)
    assert group_commit.reachable(attempt, location)[-1] == "usage.1.3"
    assert ModelUsage.on_lease(attempt.lease()) == ModelUsage(
        input_tokens=1006, output_tokens=201, cost_micros=256018, currency="EUR")
    worker.stop()
    again.stop()


def test_admission_keeps_the_sum_growing_in_one_currency_and_moving_with_the_head(
        attempts: Callable[[int], Attempt], location: journal.Location, tmp_path: Path) -> None:
    attempt = attempts(1)
    worker = priced(attempt, location, tmp_path)
    worker.usage("fake-large", input_tokens=100, output_tokens=10)
    annotations = attempt.lease()["metadata"]["annotations"]
    head = journal.Head.on_lease(attempt.lease())
    assert head is not None
    moved = journal.Head(seq=head.seq + 1, digest="0" * 64).text()
    for text, said in (
            ("99 input tokens, 10 output tokens, 450 micro-EUR", "never decreases"),
            ("100 input tokens, 10 output tokens, 450 micro-USD", "same currency"),
            ("a lot", "input tokens"),
            ("100 input tokens, 10 output tokens, 449 micro-EUR", "never decreases")):
        refused = attempt.raw_patch({"metadata": {"annotations": {
            names.JOURNAL_HEAD_ANNOTATION: moved, MODEL: text}}})
        assert said in refused, (text, refused)
    grown = "101 input tokens, 10 output tokens, 451 micro-EUR"
    refused = attempt.raw_patch({"metadata": {"annotations": {MODEL: grown}}})
    assert "changes only in the write that advances" in refused
    assert attempt.lease()["metadata"]["annotations"][MODEL] == annotations[MODEL]
    worker.stop()


class Notes(TypedDict):
    notes: Annotated[list[str], operator.add]


def test_a_langgraph_agents_model_calls_are_counted_with_no_code_of_its_own(
        attempts: Callable[[int], Attempt], location: journal.Location, tmp_path: Path) -> None:
    """A real StateGraph on the JournalSaver whose node calls LangChain's fake chat model
    (its messages carry the provider's usage_metadata); ``invoke`` reports them."""
    attempt = attempts(1)
    worker = priced(attempt, location, tmp_path)
    model = GenericFakeChatModel(messages=iter([
        AIMessage(content="first", usage_metadata={"input_tokens": 40, "output_tokens": 4,
                                                   "total_tokens": 44},
                  response_metadata={"model_name": "fake-large"}),
        AIMessage(content="unreported", response_metadata={"model_name": "fake-large"})]))

    def think(state: Notes, config: RunnableConfig) -> Notes:
        return {"notes": [str(model.invoke("go", config).content)]}

    def again(state: Notes, config: RunnableConfig) -> Notes:
        return {"notes": [str(model.invoke("more", config).content)]}

    builder = StateGraph(Notes)
    builder.add_node("think", think)
    builder.add_node("again", again)
    builder.add_edge(START, "think")
    builder.add_edge("think", "again")
    builder.add_edge("again", END)
    graph = builder.compile(checkpointer=JournalSaver(worker))
    done = invoke(graph, {"notes": []}, worker=worker,
                  config={"configurable": {"thread_id": "t"}})
    assert done == {"notes": ["first", "unreported"]}
    worker.flush()
    assert ModelUsage.on_lease(attempt.lease()) == ModelUsage(
        input_tokens=40, output_tokens=4, cost_micros=40 * 3 + 4 * 15, currency="EUR")
    report = worker.steps.prefix.get("usage.1.1")
    assert report is not None and report.inline["step"] == "think"
    assert worker.steps.prefix.get("usage.1.2") is None  # a call with no usage: not counted
    worker.stop()


def test_the_budget_is_checked_against_the_whole_runs_usage_before_each_call(
        attempts: Callable[..., Attempt], location: journal.Location, tmp_path: Path) -> None:
    """Two slots of one run at once (each attempt's Lease carries the run's budget, as the
    operator writes it at the claim): each one's check counts the other's usage as soon
    as it is reported, so neither starts a call or an effect past the run's budget."""
    budget = {names.BUDGET_ANNOTATION: "240 tokens, none micro-EUR"}
    here, there = attempts(1, annotations=budget), attempts(1, slot="t", annotations=budget)
    first, other = priced(here, location, tmp_path), priced(there, location, tmp_path)
    first.check_budget()
    first.usage("fake-large", input_tokens=150, output_tokens=50)
    other.check_budget()  # 200 of 240: go on
    other.usage("fake-large", input_tokens=30, output_tokens=0)
    first.check_budget()  # 230 of 240
    first.usage("fake-large", input_tokens=10, output_tokens=0)
    sent: list[str] = []
    for worker, attempt in ((other, there), (first, here)):
        with pytest.raises(BudgetExceeded, match="240 tokens used of a budget of 240"):
            worker.check_budget()
        with pytest.raises(BudgetExceeded):  # and before an effect: never sent
            worker.effect("publish", key="publish",
                          call=lambda key, token: sent.append(key))
        stopped = records.on_lease(attempt.lease())[0]["budget.exceeded"]
        assert stopped.inline == {"reason": "240 tokens used of a budget of 240",
                                  "budget": "240 tokens, none micro-EUR",
                                  "used": "190 input tokens, 50 output tokens, 1320 micro-EUR"}
    assert sent == []
    unbounded = priced(attempts(2), location, tmp_path)
    unbounded.check_budget()  # no budget on its Lease: nothing to stop at
    for worker in (first, other, unbounded):
        worker.stop()


def test_a_langchain_model_call_past_the_budget_is_never_made(
        attempts: Callable[..., Attempt], location: journal.Location, tmp_path: Path) -> None:
    attempt = attempts(1, annotations={names.BUDGET_ANNOTATION: "40 tokens, none micro-EUR"})
    worker = priced(attempt, location, tmp_path)
    replies = iter([AIMessage(content=f"reply {n}", usage_metadata={
        "input_tokens": 30, "output_tokens": 10, "total_tokens": 40},
        response_metadata={"model_name": "fake-large"}) for n in (1, 2)])
    model = GenericFakeChatModel(messages=replies)
    config: RunnableConfig = {"callbacks": [UsageCallback(worker)]}
    assert model.invoke("first", config).content == "reply 1"
    with pytest.raises(BudgetExceeded):
        model.invoke("second", config)
    assert next(replies).content == "reply 2"  # the model was never asked
    assert ModelUsage.on_lease(attempt.lease()) == ModelUsage(
        input_tokens=30, output_tokens=10, cost_micros=240, currency="EUR")
    worker.stop()
