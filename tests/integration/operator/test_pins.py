"""Pinned configuration (docs/design/runs-and-configuration.md), end to end.

A run resolves its package, workflow and bindings once, at launch, copies them into
immutable snapshot ConfigMaps it owns and writes ``status.pinned``; after that a newer
accepted revision, a GitOps prune of the source ConfigMaps, a restart of the operator and
a replacement worker all keep the pins: the next attempt's pod mounts the very same
snapshots. A run created after the new revision pins that one.

A run whose configuration is missing, not accepted or invalid says so (condition
``Pinned=False`` with reason ``ConfigNotFound`` / ``ConfigNotAccepted`` /
``ConfigInvalid``, a Warning Event) and creates no slots; publishing the missing
configuration later lets it pin.
"""

from __future__ import annotations

import yaml

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Object, Scenario, condition, condition_of, workflow
from tests.support.waiting import wait_for, wait_for_default_service_account

KINDS = ("package", "workflow", "bindings")


def mounted(pod: Object | None) -> dict[str, str]:
    """The pod's ConfigMap volumes: volume name → ConfigMap name."""
    assert pod is not None
    return {v["name"]: v["configMap"]["name"] for v in pod["spec"]["volumes"]
            if v.get("configMap")}


def snapshot(scenario: Scenario, name: str) -> Object | None:
    return scenario._or_none(lambda: scenario.core.read_namespaced_config_map(
        name, scenario.namespace))


def test_pins_survive_a_new_revision_a_prune_and_a_restart(
        scenario: Scenario, operator: OperatorProcess) -> None:
    scenario.configs(revision=1, outcome="revision one")
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("early", max_attempts=2)
    slot = scenario.slot_name_eventually("early", "research")
    scenario.wait_state(slot, "Active")
    pins = scenario.agentrun("early")["status"]["pinned"]
    assert {kind: pins[kind]["revision"] for kind in KINDS} == dict.fromkeys(KINDS, 1)
    contents = {}
    for kind in KINDS:
        found = snapshot(scenario, pins[kind]["snapshot"])
        assert found is not None and found["immutable"] is True
        contents[kind] = found["data"]
    assert "revision one" in contents["package"]["package.yaml"]
    first = mounted(scenario.pod(f"{slot}-1"))
    assert set(first.values()) == {pins[kind]["snapshot"] for kind in KINDS}

    # GitOps publishes revision 2 (different text, one more node) and prunes revision 1.
    scenario.configs(revision=2, outcome="revision two",
                     nodes=(("research", "cpu", []), ("review", "cpu", ["research"])))
    for kind in KINDS:
        scenario.core.delete_namespaced_config_map(f"study-{kind}-r1", scenario.namespace)

    # The operator restarts; then attempt 1 ends and attempt 2 starts.
    operator.stop()
    operator.start()
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.release(f"{slot}-1")
    active = scenario.wait_slot(slot, lambda s: s["status"].get("activeWorker") == f"{slot}-2",
                                message="attempt 2 active", timeout=60)["status"]
    assert active["attempts"][0]["outcome"] == "Failed"

    run = scenario.agentrun("early")
    assert run["status"]["pinned"] == pins
    assert scenario.slot_names("early") == [slot]  # the new workflow's node is not laid out
    for kind in KINDS:
        found = snapshot(scenario, pins[kind]["snapshot"])
        assert found is not None, f"snapshot {pins[kind]['snapshot']} was deleted"
        assert found["immutable"] is True
        assert found["data"] == contents[kind]
    assert mounted(scenario.pod(f"{slot}-2")) == first

    # A run created now pins revision 2, into snapshots of its own.
    scenario.run("late")
    late = wait_for(lambda: scenario.agentrun("late")["status"].get("pinned"), timeout=30,
                    message="run late pinned")
    assert {kind: late[kind]["revision"] for kind in KINDS} == dict.fromkeys(KINDS, 2)
    assert {late[kind]["snapshot"] for kind in KINDS}.isdisjoint(
        {pins[kind]["snapshot"] for kind in KINDS})
    late_package = snapshot(scenario, late["package"]["snapshot"])
    assert late_package is not None and "revision two" in late_package["data"]["package.yaml"]
    wait_for(lambda: len(scenario.slot_names("late")) == 2, timeout=30,
             message="run late has both nodes of revision 2")


def pinned_false(scenario: Scenario, run: str, reason: str) -> Object:
    """Wait for ``Pinned=False`` with ``reason``; the run has no pins and no slots."""
    def check() -> Object | None:
        found = condition_of(scenario.agentrun(run).get("status", {}), "Pinned")
        return found if found and (found["status"], found["reason"]) == ("False",
                                                                          reason) else None
    found: Object = wait_for(check, timeout=30, message=f"run {run}: Pinned=False {reason}")
    assert "pinned" not in scenario.agentrun(run)["status"]
    assert scenario.slot_names(run) == []
    return found


def test_unresolvable_configuration_pins_nothing_and_creates_no_slots(
        scenario: Scenario, operator: OperatorProcess) -> None:
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    # "draft": revision 1 exists but nobody accepted it.
    scenario.configs(name="draft")
    scenario.core.patch_namespaced_config_map(
        "draft-workflow-r1", scenario.namespace,
        {"metadata": {"labels": {"agentrun.dev/accepted": None}}})
    # "broken": a workflow whose dependsOn names a node that does not exist.
    scenario.configs(name="broken", nodes=(("research", "cpu", ["nowhere"]),))

    scenario.run("missing", config="absent")
    scenario.run("unaccepted", config="draft")
    scenario.run("invalid", config="broken")

    missing = pinned_false(scenario, "missing", "ConfigNotFound")
    assert "'absent'" in missing["message"] and "not found" in missing["message"]
    unaccepted = pinned_false(scenario, "unaccepted", "ConfigNotAccepted")
    assert "'draft'" in unaccepted["message"] and "accepted" in unaccepted["message"]
    invalid = pinned_false(scenario, "invalid", "ConfigInvalid")
    assert "nowhere" in invalid["message"]
    for reason, fragment in (("ConfigNotFound", "'absent'"), ("ConfigNotAccepted", "'draft'"),
                             ("ConfigInvalid", "nowhere")):
        scenario.wait_event(reason, fragment)
        warnings = [e for e in scenario.core.list_namespaced_event(scenario.namespace).items
                    if e.reason == reason]
        assert warnings and all(e.type == "Warning" for e in warnings)
    assert condition(scenario.agentrun("missing")["status"], "Ready") == "False"

    # GitOps publishes the missing configuration: the waiting run pins it and lays out.
    scenario.config(kind="package", name="absent", revision=3,
                    text=yaml.safe_dump({"outcome": "late but fine"}))
    scenario.config(kind="workflow", name="absent", revision=3,
                    text=workflow(("research", "cpu", [])))
    scenario.config(kind="bindings", name="absent", revision=3, text=yaml.safe_dump({
        "nodes": [{"node": "research", "agent": {"name": "researcher", "revision": "7"}}]}))
    pins = wait_for(lambda: scenario.agentrun("missing")["status"].get("pinned"), timeout=30,
                    message="run missing pinned once its configuration exists")
    assert {kind: pins[kind]["revision"] for kind in KINDS} == dict.fromkeys(KINDS, 3)
    assert condition(scenario.agentrun("missing")["status"], "Pinned") == "True"
    wait_for(lambda: scenario.slot_names("missing"), timeout=30,
             message="run missing has its slot")
    # The others still wait, slotless.
    assert scenario.slot_names("unaccepted") == [] and scenario.slot_names("invalid") == []
