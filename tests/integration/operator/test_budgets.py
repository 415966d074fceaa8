"""Budgets' bad input against the real API server (the CRD's schema and rules, the shipped
admission policies) and the operator's pinning: each refused with a message a person can
act on, and nothing changed.

- a run whose ``spec.budget`` is negative, zero, oversized, not a decimal, in an unknown
  currency or empty is refused at create; a budget is never edited, added or removed;
- a budget command on a run out of its bounds (negative or non-numeric tokens, a cost that
  is not a decimal, neither amount, a blank reason, no request id) is refused by admission;
- a run whose bindings' price table fails its schema, or whose budget names another
  currency than its price table, is not pinned (``Pinned=False``: ``ConfigInvalid``,
  ``BudgetInvalid``) and lays out no slot;
- a run naming no budget takes its namespace's default (the tenant admin's annotation);
  a default that is not a budget stops its pinning with why.
"""

from __future__ import annotations

import json

import pytest
import yaml

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import GROUP, Object, Scenario, condition_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.serial  # the shipped policies are cluster-wide


def apply_run(scenario: Scenario, name: str, budget: object) -> str:
    """``kubectl apply`` of a run with ``budget`` as alice; stderr ('' when created)."""
    body = {"apiVersion": f"{GROUP}/v1alpha1", "kind": "AgentRun",
            "metadata": {"name": name, "namespace": scenario.namespace},
            "spec": {"package": {"name": "study"}, "workflow": {"name": "study"},
                     "bindings": {"name": "study"}, "budget": budget}}
    done = scenario.cluster.kubectl("apply", "-f", "-", user="alice", input=json.dumps(body))
    return "" if done.returncode == 0 else done.stderr


BAD_BUDGETS = [
    ({"tokens": -1}, "spec.budget.tokens"),
    ({"tokens": 0}, "spec.budget.tokens"),
    ({"tokens": 10**16}, "spec.budget.tokens"),
    ({"cost": "-2.50"}, "spec.budget.cost"),
    ({"cost": "1e3"}, "spec.budget.cost"),
    ({"cost": "1.1234567"}, "spec.budget.cost"),
    ({"tokens": 5, "currency": "XYZ"}, "spec.budget.currency"),
    ({"cost": "0.0"}, "spec.budget.cost is more than 0"),
    ({}, "a budget names tokens, cost or both"),
]


def test_a_budget_out_of_its_bounds_is_refused_at_create(
        scenario: Scenario, validating: None) -> None:
    scenario.grant_editor("alice")
    for budget, said in BAD_BUDGETS:
        refused = apply_run(scenario, "costly", budget)
        assert said in refused, (budget, refused)
        assert scenario._or_none(lambda: scenario.agentrun("costly")) is None


def test_a_budget_is_never_edited_and_a_raise_out_of_bounds_is_refused(
        cluster: Cluster, scenario: Scenario, validating: None) -> None:
    scenario.grant_editor("alice")
    assert apply_run(scenario, "study", {"tokens": 1000}) == ""
    assert "spec.budget is immutable" in apply_run(scenario, "study", {"tokens": 9000})
    removed = cluster.kubectl("-n", scenario.namespace, "patch", "agentruns.agentrun.dev",
                              "study", "--type", "json", "-p",
                              '[{"op": "remove", "path": "/spec/budget"}]', user="alice")
    assert "spec.budget is set when a run is created" in removed.stderr, removed.stderr
    before = scenario.agentrun("study")["metadata"]
    for written, said in (
            ({"budget-id": "r1", "budget-add": "-5", "budget-reason": "more"},
             "budget-add is a whole number of tokens"),
            ({"budget-id": "r1", "budget-add": "many", "budget-reason": "more"},
             "budget-add is a whole number of tokens"),
            ({"budget-id": "r1", "budget-add-cost": "1,50", "budget-reason": "more"},
             "budget-add-cost is a decimal amount"),
            ({"budget-id": "r1", "budget-reason": "more"}, "raises tokens"),
            ({"budget-id": "r1", "budget-add": "5", "budget-reason": "   "},
             "budget-reason is required"),
            ({"budget-add": "5", "budget-reason": "more"}, "needs its request id")):
        pairs = [f"agentrun.dev/{k}={v}" for k, v in written.items()]
        done = cluster.kubectl("-n", scenario.namespace, "annotate", "--overwrite",
                               "agentruns.agentrun.dev/study", *pairs, user="alice")
        assert done.returncode != 0 and said in done.stderr, (written, done.stderr)
    after = scenario.agentrun("study")["metadata"]
    assert after["resourceVersion"] == before["resourceVersion"]


def test_a_run_naming_no_budget_takes_its_tenants_default(
        scenario: Scenario, operator: OperatorProcess) -> None:
    """The namespace's default budget (a tenant admin's annotation) is pinned on a run that
    names none, not on one that names its own; a default that is not a budget stops the
    pinning with why."""
    scenario.configs()
    annotate = scenario.core.patch_namespace
    annotate(scenario.namespace, {"metadata": {"annotations": {
        "agentrun.dev/default-budget": '{"tokens": 5000, "cost": "2.5"}'}}})
    scenario.run("defaulted")
    scenario.run("own", extra={"budget": {"tokens": 70}})
    for run, expected in (("defaulted", {"tokens": 5000, "costMicros": 2_500_000,
                                         "currency": "USD", "raises": 0}),
                          ("own", {"tokens": 70, "currency": "USD", "raises": 0})):
        found = wait_for(lambda run=run: scenario.agentrun(run)["status"].get("budget"),
                         timeout=60, message=f"run {run}'s budget pinned")
        assert found == expected, (run, found)
    annotate(scenario.namespace, {"metadata": {"annotations": {
        "agentrun.dev/default-budget": '{"tokens": -1}'}}})
    scenario.run("broken")

    def refused() -> Object | None:
        found = scenario.agentrun("broken")
        pinned = condition_of(found.get("status") or {}, "Pinned") or {}
        return found if pinned.get("reason") == "BudgetInvalid" else None
    said = condition_of(wait_for(refused, timeout=60, message="Pinned False BudgetInvalid")[
        "status"], "Pinned")["message"]
    assert "agentrun.dev/default-budget is not a budget" in said, said


def test_a_price_table_out_of_its_schema_or_another_currency_is_not_pinned(
        scenario: Scenario, operator: OperatorProcess) -> None:
    scenario.configs(name="bad-prices")
    scenario.config(kind="bindings", name="bad-prices", revision=2, text=yaml.safe_dump({
        "nodes": [{"node": "research", "agent": {"name": "researcher", "revision": "7"}}],
        "prices": {"currency": "XYZ", "models": {}}}))
    scenario.run("unpriced", config="bad-prices")
    scenario.configs(name="euros")
    scenario.config(kind="bindings", name="euros", revision=2, text=yaml.safe_dump({
        "nodes": [{"node": "research", "agent": {"name": "researcher", "revision": "7"}}],
        "prices": {"currency": "EUR"}}))
    scenario.run("dollars", config="euros", extra={"budget": {"cost": "5", "currency": "USD"}})
    for run, reason, said in (("unpriced", "ConfigInvalid", "not an ISO 4217 code"),
                              ("dollars", "BudgetInvalid", "spec.budget is in USD")):
        def refused(run: str = run, reason: str = reason) -> Object | None:
            found = scenario.agentrun(run)
            pinned = condition_of(found.get("status") or {}, "Pinned") or {}
            return found if pinned.get("reason") == reason else None
        found = wait_for(refused, timeout=60, message=f"run {run}: Pinned False {reason}")
        assert said in condition_of(found["status"], "Pinned")["message"]
        assert "pinned" not in found["status"] and scenario.slot_names(run) == []
