"""A ResourceQuota that refuses an attempt's pod: the claim waits, no attempt is spent.

Covers, on a real API server (its ResourceQuota admission and quota controller): with a
quota of zero pods the slot stays Claiming under ``QuotaExceeded`` (saying which quota),
attempt 1 is still the pending one and no pod exists; once the quota allows one pod the
same attempt 1 becomes Active and the condition is gone. With a quota that counts limits
(``limits.cpu``, ``limits.memory``): a LaunchSpec whose sidecar sets no limits is
``Valid`` False ``QuotaRequiresResources`` (its dry run builds the claim's pod, sidecar
included), one with the sidecar's default resources is ``Valid`` True; a claim whose pod
lacks limits spends no attempt (Claiming under ``LaunchSpecRefused``, attempt 1 pending,
never AwaitingReassignment with one attempt allowed) until the LaunchSpec is fixed, when
the same attempt 1 is made from the new generation. With a LimitRange whose maximum cpu
per container is below the sidecar's default limit, the LaunchSpec is ``Valid`` False
``LimitRangeRefused`` quoting the LimitRanger, and True once the sidecar's limits fit.
"""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.quotas import IMAGE, SIDECAR_DEFAULTS, limits_quota, patch_spec
from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario, condition_of
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration


def quota(scenario: Scenario, pods: int) -> None:
    body = {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": str(pods)}}}
    try:
        scenario.core.read_namespaced_resource_quota("compute", scenario.namespace)
    except Exception:
        scenario.core.create_namespaced_resource_quota(scenario.namespace, body)
    else:
        scenario.core.patch_namespaced_resource_quota("compute", scenario.namespace, body)

    def enforced() -> bool:
        found = scenario.core.read_namespaced_resource_quota("compute", scenario.namespace)
        return bool(found.status and found.status.hard
                    and found.status.hard.get("pods") == str(pods))
    wait_for(enforced, timeout=30, message=f"the quota of {pods} pods in force")


def test_a_pod_refused_by_a_quota_waits_and_spends_no_attempt(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    quota(scenario, 0)
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    waiting = scenario.wait_slot(slot, lambda s: (condition_of(
        s.get("status", {}), "QuotaExceeded") or {}).get("status") == "True",
        message="QuotaExceeded")
    status = waiting["status"]
    assert (status["state"], status["attemptCount"], status["pendingWorker"]) == (
        "Claiming", 1, f"{slot}-1")
    said = condition_of(status, "QuotaExceeded")
    assert said is not None and "exceeded quota: compute" in said["message"]
    assert scenario.pods() == []
    scenario.wait_event("QuotaExceeded", f"{slot}-1")

    quota(scenario, 1)
    active = scenario.wait_state(slot, "Active", timeout=60)["status"]
    assert (active["attemptCount"], active["activeWorker"]) == (1, f"{slot}-1")
    assert condition_of(active, "QuotaExceeded") is None
    assert [a["number"] for a in active["attempts"]] == [1]


def valid(scenario: Scenario, name: str, *, generation: int = 2) -> Object:
    def found() -> Object | None:
        status = scenario.custom.get_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "launchspecs", name).get("status") or {}
        said = condition_of(status, "Valid")
        return said if said and said["observedGeneration"] == generation else None
    checked: Object = wait_for(found, timeout=30,
                               message=f"{name} has Valid for generation {generation}")
    return checked


def test_the_dry_run_counts_the_sidecar_and_its_default_limits_pass_a_quota(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    limits_quota(scenario)
    scenario.launch_spec("defaults", classes=["cpu"])
    patch_spec(scenario, "defaults", sidecar={"image": IMAGE})
    scenario.launch_spec("no-limits", classes=["gpu"])
    patch_spec(scenario, "no-limits", sidecar={"image": IMAGE, "resources": {
        "requests": {"cpu": "10m", "memory": "16Mi"}}})

    refused = valid(scenario, "no-limits")
    assert (refused["status"], refused["reason"]) == ("False", "QuotaRequiresResources")
    assert "must specify limits.cpu" in refused["message"]
    assert "agentrun-worker" in refused["message"]  # the sidecar's container, by name
    accepted = valid(scenario, "defaults")
    assert (accepted["status"], accepted["reason"]) == ("True", "DryRunSucceeded")


def test_a_pod_refused_for_missing_limits_spends_no_attempt_until_the_spec_is_fixed(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    limits_quota(scenario)
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])  # its worker gives no limits
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    waiting = scenario.wait_slot(slot, lambda s: (condition_of(
        s.get("status", {}), "LaunchSpecRefused") or {}).get("status") == "True",
        message="LaunchSpecRefused")["status"]
    assert (waiting["state"], waiting["attemptCount"], waiting["pendingWorker"]) == (
        "Claiming", 1, f"{slot}-1")
    assert condition_of(waiting, "AwaitingReassignment") is None
    assert waiting.get("attempts", []) == []  # no attempt recorded, none spent
    said = condition_of(waiting, "LaunchSpecRefused")
    assert said is not None and "cpu-workers@1" in said["message"]
    assert "must specify limits.cpu" in said["message"]
    assert scenario.pods() == []
    scenario.wait_event("LaunchSpecRefused", f"{slot}-1")

    patch_spec(scenario, "cpu-workers", sidecar={"image": IMAGE})  # the fix: generation 2
    active = scenario.wait_state(slot, "Active", timeout=60)["status"]
    assert (active["attemptCount"], active["activeWorker"]) == (1, f"{slot}-1")
    assert [(a["number"], a["launchSpec"]) for a in active["attempts"]] == [
        (1, "cpu-workers@2")]
    assert condition_of(active, "LaunchSpecRefused") is None
    pod = scenario.pod(f"{slot}-1")
    assert pod is not None and pod["spec"]["initContainers"][0]["resources"] == SIDECAR_DEFAULTS
    lease = scenario.lease(f"{slot}-1")
    assert lease is not None
    assert lease["metadata"]["annotations"]["agentrun.dev/launch-spec"] == "cpu-workers@2"


def limit_range_in_force(scenario: Scenario) -> bool:
    """Whether the LimitRanger refuses a dry-run pod whose container asks for cpu 1."""
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
           "spec": {"containers": [{"name": "c", "image": "busybox:1.36", "resources": {
               "limits": {"cpu": "1", "memory": "64Mi"}}}]}}
    try:
        scenario.core.create_namespaced_pod(scenario.namespace, pod, dry_run="All")
    except ApiException as error:
        refused = error
    else:
        return False
    if refused.status != 403 or "per Container" not in str(refused.body):
        raise AssertionError(f"refused for another reason: {refused}")
    return True


def test_a_limit_range_the_sidecars_defaults_exceed_makes_the_launch_spec_invalid(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.core.create_namespaced_limit_range(scenario.namespace, {
        "metadata": {"name": "small"},
        "spec": {"limits": [{"type": "Container", "max": {"cpu": "500m"}}]}})
    wait_for(lambda: limit_range_in_force(scenario), timeout=30,
             message="the LimitRange in force")
    scenario.launch_spec("defaults", classes=["cpu"])
    patch_spec(scenario, "defaults", sidecar={"image": IMAGE})  # the worker's cpu: 500m

    refused = valid(scenario, "defaults")  # the sidecar's default cpu limit is 1
    assert (refused["status"], refused["reason"]) == ("False", "LimitRangeRefused")
    assert "maximum cpu usage per Container is 500m" in refused["message"]
    patch_spec(scenario, "defaults", sidecar={"image": IMAGE, "resources": {
        "requests": {"cpu": "50m", "memory": "64Mi"},
        "limits": {"cpu": "500m", "memory": "256Mi"}}})
    accepted = valid(scenario, "defaults", generation=3)
    assert (accepted["status"], accepted["reason"]) == ("True", "DryRunSucceeded")
