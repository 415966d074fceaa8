"""A ResourceQuota that counts limits, and a LaunchSpec fixed to meet it (shared by the
quota cases and their crash cases): every container of a pod must then give limits.
"""

from __future__ import annotations

from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario
from tests.support.waiting import wait_for

IMAGE = "localhost/agentrun/agentrun-operator:dev"
LIMITED = {"limits": {"cpu": "500m", "memory": "128Mi"}}
SIDECAR_DEFAULTS = {"requests": {"cpu": "50m", "memory": "64Mi"},
                    "limits": {"cpu": "1", "memory": "256Mi"}}


def limits_quota(scenario: Scenario) -> None:
    hard = {"limits.cpu": "8", "limits.memory": "8Gi"}
    scenario.core.create_namespaced_resource_quota(scenario.namespace, {
        "metadata": {"name": "limits"}, "spec": {"hard": hard}})
    wait_for(lambda: (found := scenario.core.read_namespaced_resource_quota(
        "limits", scenario.namespace)).status and found.status.hard == hard,
        timeout=30, message="the quota on limits in force")


def patch_spec(scenario: Scenario, name: str, *, sidecar: Object | None = None) -> None:
    """The LaunchSpec's worker given limits, and ``sidecar`` set (a new generation)."""
    spec = scenario.custom.get_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", name)["spec"]
    template = spec["template"]
    template["spec"]["containers"][0]["resources"] = LIMITED
    scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", name,
        {"spec": {"template": template, **({"sidecar": sidecar} if sidecar else {})}})
