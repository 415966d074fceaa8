"""A run's budget on real pods: the example agent calls a fake model that reports tokens.

The operator pins the cluster's bundled store as the journal (usage is journaled); the
model service (``tests/support/actors/fakemodel.py``) answers every call with 100 input and
20 output tokens and counts the calls. alice's run has a budget of 240 tokens; the agent
calls the model once per source (three) and for its decision. Shown: two calls (240
tokens) and the third source's step stops before its call (``over-budget``): no model call
after the boundary, counted at the model; attempt 1 ends ``OverBudget`` (not counted
against ``maxAttempts: 1``), the slot waits with ``BudgetExceeded`` and no Pod or Lease of
attempt 2; the run's usage says 240 tokens and their price; bob's raise is refused
(``NotOwner``) and changes nothing; alice's raise is accepted, the slot reopens and attempt
2 skips the two sources committed, calls the model for the rest (four calls in all: none
repeated) and publishes once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.integration.node import test_journal
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.fakemodel import FakeModel
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import (
    agent_configs,
    agent_events,
    agent_launch_spec,
    grant_worker_role,
    node_address,
    wait_pod_phase,
)
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
journaled, installed = test_journal.journaled, test_journal.installed
CONDITION = "BudgetExceeded"
PRICES = {"currency": "EUR", "models": {
    "fake-large": {"inputPerMillion": "3", "outputPerMillion": "15"}}}
CALL_MICROS = 100 * 3 + 20 * 15  # one call's cost in micro-EUR


@pytest.fixture
def model(scenario: Scenario) -> Iterator[FakeModel]:
    started = FakeModel(host=node_address(scenario)).start()
    yield started
    started.stop()
    print(f"model prompts: {started.prompts}")


def test_a_run_stops_at_its_budget_and_goes_on_when_its_creator_raises_it(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        owner: EffectOwner, model: FakeModel) -> None:
    scenario.grant_editor("alice", "bob")
    grant_worker_role(scenario)
    agent_configs(scenario, owner_url=owner.url, model_url=model.url, prices=PRICES)
    agent_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image)
    scenario.run("study", user="alice", max_attempts=1, extra={"budget": {"tokens": 240}})
    slot = scenario.slot_name_eventually("study", "research")
    first, second = f"{slot}-1", f"{slot}-2"

    parked = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION) or {})
                                .get("status") == "True", message="BudgetExceeded True",
                                timeout=150)["status"]
    assert wait_pod_phase(scenario, first, {"Succeeded"}, timeout=60)
    events = agent_events(scenario, first)
    assert [e["event"] for e in events if e["event"] in ("model-call", "over-budget")] == [
        "model-call", "model-call", "over-budget"], events
    assert model.calls() == 2  # at the model: nothing after the boundary
    assert (parked["state"], parked["attempts"][-1]["outcome"], parked["askedAttempts"]) == (
        "RetryWait", "OverBudget", 1)
    assert "retryAt" not in parked and condition_of(parked, "AwaitingReassignment") is None
    assert parked["attempts"][-1]["usage"] == parked["usage"] == {
        "inputTokens": 200, "outputTokens": 40, "costMicros": 2 * CALL_MICROS,
        "currency": "EUR"}
    said = condition_of(parked, CONDITION)["message"]
    assert "240 tokens" in said and "kubectl agentrun budget study" in said, said
    run = wait_for(lambda: (r := scenario.agentrun("study"))["status"].get("usage") and r,
                   timeout=30, message="the run's usage")
    assert run["status"]["usage"]["inputTokens"] == 200
    assert run["status"]["budget"] == {"tokens": 240, "currency": "EUR", "raises": 0}

    bob = plugin(cluster, scenario, "budget", "study", "--add", "500", "--reason", "mine now",
                 user="bob")
    assert bob.returncode == 1 and "Rejected (NotOwner)" in bob.stdout, (bob.stdout, bob.stderr)
    bad = plugin(cluster, scenario, "budget", "study", "--add", "-5", "--reason", "more")
    assert bad.returncode == 2 and "--add is a whole number" in bad.stderr, bad.stderr
    unchanged = scenario.agentrun("study")["status"]
    assert unchanged["budget"]["tokens"] == 240 and len(unchanged["commands"]) == 1
    assert scenario.lease(second) is None and scenario.pod(second) is None
    assert scenario.slot(slot)["status"]["attemptCount"] == 1

    raised = plugin(cluster, scenario, "budget", "study", "--add", "500", "--reason",
                    "the report is worth it", "-o", "json")
    assert raised.returncode == 0, (raised.stdout, raised.stderr)
    entry = json.loads(raised.stdout)["entry"]
    assert (entry["kind"], entry["outcome"], entry["actor"]) == ("Budget", "Accepted", "alice")
    assert wait_pod_phase(scenario, second, {"Succeeded", "Failed"}, timeout=150)[
        "status"]["phase"] == "Succeeded", agent_events(scenario, second)
    steps = {e["key"]: e["status"] for e in agent_events(scenario, second)
             if e["event"] == "step"}
    assert steps == {"source-1": "skipped", "source-2": "skipped", "source-3": "ran",
                     "decision": "ran", "report": "ran"}, steps
    assert model.calls() == 4 and len(set(model.prompts)) == 4  # none repeated
    assert list(owner.applied.values()) == [1]
    done = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert [a["outcome"] for a in done["attempts"]] == ["OverBudget", "Succeeded"]
    assert done["usage"] == {"inputTokens": 400, "outputTokens": 80,
                             "costMicros": 4 * CALL_MICROS, "currency": "EUR"}
    assert (condition_of(done, CONDITION) or {}).get("status") == "False"
    final = wait_for(lambda: (r := scenario.agentrun("study"))["status"]["usage"][
        "inputTokens"] == 400 and r, timeout=30, message="the run's usage, summed")
    assert final["status"]["budget"] == {"tokens": 740, "currency": "EUR", "raises": 1}
    print(f"ROW budget | 240 tokens: 2 model calls, the 3rd stopped before it (OverBudget); "
          f"bob NotOwner; alice +500: attempt 2 skipped 2 sources, 4 calls in all, published "
          f"once; usage {final['status']['usage']}")
