"""A LaunchSpec's status, written by the operator: validity and the slots that pin it.

Covers, against a real API server: a template the API server accepts is ``Valid`` True
(a server-side dry run; no pod is created); one it refuses (a container name that is not
a DNS label) is ``Valid`` False ``InvalidTemplate`` with the server's words; once a run's
slot pins the valid spec, ``pinnedBy`` is 1 and ``generations`` says which generation,
and ``kubectl get slots -l agentrun.dev/launch-spec=<name>`` lists that slot (the label
is written on its own only by a slot that waits Ready, here under claimPolicy Manual;
an automatically claimed slot gets it on a command's annotation removal, never as a
write of its own: 3 writes per pod); a crash
right after the status write (``launch-spec-status``) or after a slot's first label patch
(``label``) is harmless: the restart converges.
"""

from __future__ import annotations

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.convergence import crashed
from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario, condition_of
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration


def spec_status(scenario: Scenario, name: str) -> Object:
    found: Object = scenario.custom.get_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", name)
    return found.get("status") or {}


def valid(scenario: Scenario, name: str) -> Object | None:
    return condition_of(spec_status(scenario, name), "Valid")


def judged(scenario: Scenario, name: str) -> Object:
    """``Valid`` once the dry run's answer is definitive: a refusal of another kind
    (``DryRunRefused``: the API server busy, an admission cache not yet holding the
    namespace's ServiceAccount) is tried again 30 s later by design, and is no verdict on
    the template."""
    condition: Object = wait_for(
        lambda: (c := valid(scenario, name)) and c["reason"] != "DryRunRefused" and c,
        timeout=75, message=f"{name} has a definitive Valid; last: {valid(scenario, name)}")
    return condition


def test_validity_and_pins_are_shown(scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    bad = scenario.launch_spec("broken", classes=["gpu"])
    bad["spec"]["template"]["spec"]["containers"][0]["name"] = "Not_A_DNS_Label"
    scenario.custom.replace_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "broken", bad)

    good = judged(scenario, "cpu-workers")
    assert (good["status"], good["reason"]) == ("True", "DryRunSucceeded"), good
    broken = wait_for(lambda: (lambda c: c if c and c["observedGeneration"] == 2 else None)(
        valid(scenario, "broken")), timeout=30, message="broken has Valid for generation 2")
    assert (broken["status"], broken["reason"]) == ("False", "InvalidTemplate")
    assert "Not_A_DNS_Label" in broken["message"]
    assert scenario.pods() == [] and scenario.core.list_namespaced_pod(
        scenario.namespace).items == []

    scenario.configs()
    scenario.run("study", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    pinned = wait_for(lambda: (lambda s: s if s.get("pinnedBy") == 1 else None)(
        spec_status(scenario, "cpu-workers")), timeout=30, message="pinnedBy 1")
    assert pinned["generations"] == [{"generation": 1, "slots": 1}]
    listed = wait_for(lambda: [s["metadata"]["name"] for s in
                               scenario.custom.list_namespaced_custom_object(
                                   GROUP, VERSION, scenario.namespace, "slots",
                                   label_selector="agentrun.dev/launch-spec=cpu-workers")
                               ["items"]], timeout=30, message="the slot labelled")
    assert listed == [slot]


def test_a_crash_after_the_status_write_converges(scenario: Scenario,
                                                  process: OperatorProcess) -> None:
    process.start(crash_at="launch-spec-status")
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    crashed(process)
    assert (valid(scenario, "cpu-workers") or {}).get("status") == "True"
    process.start()
    scenario.configs()
    scenario.run("study")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    wait_for(lambda: spec_status(scenario, "cpu-workers").get("pinnedBy") == 1, timeout=30,
             message="pinnedBy 1 after the restart")


def test_a_crash_after_the_label_patch_converges(scenario: Scenario,
                                                 process: OperatorProcess) -> None:
    """``label``: the first label patch of a slot, then a crash; the restart goes on."""
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    scenario.configs()
    process.start(crash_at="label")
    scenario.run("study", claim_policy="Manual")  # a slot that waits Ready is labelled
    slot = scenario.slot_name_eventually("study", "research")
    crashed(process)
    labels = scenario.slot(slot)["metadata"].get("labels") or {}
    assert labels.get("agentrun.dev/launch-spec") == "cpu-workers"
    process.start()
    scenario.wait_state(slot, "Ready")
    listed = wait_for(lambda: [s["metadata"]["name"] for s in
                               scenario.custom.list_namespaced_custom_object(
                                   GROUP, VERSION, scenario.namespace, "slots",
                                   label_selector="agentrun.dev/launch-spec=cpu-workers")
                               ["items"]], timeout=30, message="the slot labelled")
    assert listed == [slot]
