"""Names taken first by someone else: reported where a person looks, never used, no attempt spent.

Covers, against a real API server with the operator running, one deterministic name at a
time pre-created by the admin (as any editor could):
- a run's pinned package snapshot ConfigMap: the run shows ``NameSquatted`` (and Pinned
  False, reason NameSquatted) with the command to delete it, a Warning Event, no slot;
  once deleted, the run pins and its slot appears, the condition gone;
- a slot's LaunchSpec snapshot, even one carrying the snapshot labels: the slot stays
  Pending under ``NameSquatted``; once deleted it goes on;
- an attempt's Lease: the slot stays Claiming under ``NameSquatted`` with attempt 1
  pending and no pod; once deleted, the same attempt 1 becomes Active.
"""

from __future__ import annotations

import pytest
import yaml

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpec
from agentrun.core.base import naming
from agentrun.core.launchspecs import launchpins
from agentrun.core.runs import resolution
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Object, Scenario, condition_of
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration
GROUP, VERSION = "agentrun.dev", "v1alpha1"


def squatted(found: Object) -> Object | None:
    said = condition_of(found.get("status", {}), "NameSquatted")
    return said if said and said["status"] == "True" else None


def start(scenario: Scenario) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])


def test_a_squatted_run_snapshot_is_reported_and_never_used(
        scenario: Scenario, operator: OperatorProcess) -> None:
    start(scenario)
    text = yaml.safe_dump({"outcome": "a sourced report"})
    name = naming.config_snapshot_name(run="study", kind="package",
                                       sha256=resolution.sha256_of(text))
    scenario.core.create_namespaced_config_map(scenario.namespace, {
        "metadata": {"name": name}, "data": {"package.yaml": "outcome: something else\n"}})
    scenario.run("study")
    run = wait_for(lambda: (lambda r: r if squatted(r) else None)(scenario.agentrun("study")),
                   timeout=30, message="the run says NameSquatted")
    said = squatted(run)
    assert said is not None
    assert f"kubectl -n {scenario.namespace} delete configmap {name}" in said["message"]
    assert (condition_of(run["status"], "Pinned") or {}).get("reason") == "NameSquatted"
    assert "pinned" not in run["status"] and scenario.slot_names("study") == []
    scenario.wait_event("NameSquatted", name)

    scenario.core.delete_namespaced_config_map(name, scenario.namespace)
    slot = scenario.slot_name_eventually("study", "research", timeout=60)
    run = wait_for(lambda: (lambda r: r if condition_of(r.get("status", {}), "NameSquatted")
                            is None else None)(scenario.agentrun("study")),
                   timeout=30, message="NameSquatted cleared")
    assert run["status"]["pinned"]["package"]["snapshot"] == name
    owners = scenario.core.read_namespaced_config_map(name, scenario.namespace).metadata
    assert [o.uid for o in owners.owner_references] == [run["metadata"]["uid"]]
    assert slot


def test_a_squatted_launch_spec_snapshot_keeps_the_slot_pending(
        scenario: Scenario, operator: OperatorProcess) -> None:
    start(scenario)
    stored = scenario.custom.get_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "cpu-workers")
    digest = launchpins.digest(LaunchSpec.model_validate(stored).spec)
    slot = naming.slot_name(run="study", node="research")
    name = naming.launch_spec_snapshot_name(run="study", digest=digest)  # the run's copy
    scenario.core.create_namespaced_config_map(scenario.namespace, {
        "metadata": {"name": name, "labels": {names.RUN_LABEL: "study",
                                              names.SNAPSHOT_LABEL: "launchspec"}},
        "data": {"launchspec.json": "{}"}})
    scenario.run("study")
    found = scenario.wait_slot(slot, lambda s: squatted(s) is not None, timeout=30,
                               message="NameSquatted")
    assert found["status"]["state"] == "Pending"
    assert f"delete configmap {name}" in (squatted(found) or {})["message"]
    scenario.core.delete_namespaced_config_map(name, scenario.namespace)
    active = scenario.wait_state(slot, "Active", timeout=60)
    assert condition_of(active["status"], "NameSquatted") is None
    assert active["status"]["launchSpec"]["snapshot"] == name


def test_a_squatted_lease_waits_and_spends_no_attempt(
        scenario: Scenario, operator: OperatorProcess) -> None:
    start(scenario)
    slot = naming.slot_name(run="study", node="research")
    scenario.coordination.create_namespaced_lease(scenario.namespace, {
        "metadata": {"name": f"{slot}-1"}, "spec": {"holderIdentity": "someone"}})
    scenario.run("study", max_attempts=1)
    found = scenario.wait_slot(slot, lambda s: squatted(s) is not None, timeout=30,
                               message="NameSquatted")
    status = found["status"]
    assert (status["state"], status["attemptCount"], status["pendingWorker"]) == (
        "Claiming", 1, f"{slot}-1")
    assert f"delete lease {slot}-1" in (squatted(found) or {})["message"]
    assert scenario.pods() == []
    scenario.wait_event("NameSquatted", f"{slot}-1")
    scenario.coordination.delete_namespaced_lease(f"{slot}-1", scenario.namespace)
    active = scenario.wait_state(slot, "Active", timeout=60)["status"]
    assert (active["attemptCount"], [a["number"] for a in active["attempts"]]) == (1, [1])
    assert condition_of(active, "NameSquatted") is None
