"""LaunchSpec ``spec.sidecar`` against a real API server (the pods are hand-played).

Covers: the CRD refuses a sidecar without an image, with a port out of bounds or a
resource quantity that is not one (the field named, nothing stored); a template that
already has a container named ``agentrun-worker`` is ``Valid`` False ``SidecarNameTaken``
with what to change; a valid one's claim creates a pod the API server accepts, whose
first init container is the native sidecar (``restartPolicy: Always``, its command, its
exec startup probe) and whose main container has ``AGENTRUN_SIDECAR_URL``.
"""

from __future__ import annotations

from typing import Any

import kubernetes
import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import GROUP, VERSION, Object, Scenario, condition_of
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration
IMAGE = "localhost/agentrun/agentrun-operator:dev"


def with_sidecar(scenario: Scenario, name: str, sidecar: Object,
                 containers: list[Object] | None = None) -> Object:
    spec = scenario.launch_spec(name, classes=["cpu"])
    body: Any = {"spec": {"sidecar": sidecar}}
    if containers is not None:
        body["spec"]["template"] = {**spec["spec"]["template"]}
        body["spec"]["template"]["spec"] = {**spec["spec"]["template"]["spec"],
                                            "containers": containers}
    patched: Object = scenario.custom.patch_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", name, body)
    return patched


@pytest.mark.parametrize(("sidecar", "field"), [
    ({"port": 8686}, "spec.sidecar.image"), ({"image": IMAGE, "port": 80}, "spec.sidecar.port"),
    ({"image": IMAGE, "checkInSeconds": 601}, "spec.sidecar.checkInSeconds"),
    ({"image": IMAGE, "resources": {"limits": {"memory": "lots"}}},
     "spec.sidecar.resources.limits.memory")])
def test_the_crd_bounds_the_field(scenario: Scenario, sidecar: Object, field: str) -> None:
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    with pytest.raises(kubernetes.client.ApiException) as refused:
        scenario.custom.patch_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "launchspecs", "cpu-workers",
            {"spec": {"sidecar": sidecar}})
    assert refused.value.status == 422 and field in str(refused.value.body)
    stored = scenario.custom.get_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "cpu-workers")
    assert "sidecar" not in stored["spec"]


def test_a_template_using_the_name_is_not_valid(scenario: Scenario,
                                                operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    with_sidecar(scenario, "cpu-workers", {"image": IMAGE},
                 containers=[{"name": "agentrun-worker", "image": "busybox:1.36"}])

    def found() -> Object | None:
        status = scenario.custom.get_namespaced_custom_object(
            GROUP, VERSION, scenario.namespace, "launchspecs", "cpu-workers").get("status")
        return condition_of(status or {}, "Valid")

    valid = wait_for(lambda: (c := found()) and c["observedGeneration"] == 2 and c,
                     timeout=30, message="cpu-workers has Valid for generation 2")
    assert (valid["status"], valid["reason"]) == ("False", "SidecarNameTaken")
    assert "rename it, or remove spec.sidecar" in valid["message"]


def test_a_claimed_pod_has_the_native_sidecar(scenario: Scenario,
                                              operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    with_sidecar(scenario, "cpu-workers", {"image": IMAGE, "port": 9000, "checkInSeconds": 12})
    scenario.configs()
    scenario.run("study")
    slot = scenario.slot_name_eventually("study", "research")
    pod = wait_for(lambda: scenario.pod(f"{slot}-1"), timeout=60, message="the attempt's pod")
    sidecar, *others = pod["spec"]["initContainers"]
    assert others == []
    assert (sidecar["name"], sidecar["image"], sidecar["restartPolicy"]) == (
        "agentrun-worker", IMAGE, "Always")
    assert sidecar["command"] == ["agentrun-worker", "sidecar", "--port", "9000",
                                  "--check-in-seconds", "12"]
    assert sidecar["startupProbe"]["exec"]["command"] == ["agentrun-worker", "ready",
                                                          "--port", "9000"]
    (main,) = pod["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in main["env"]}
    assert env["AGENTRUN_SIDECAR_URL"] == "http://127.0.0.1:9000"
    assert {e["name"]: e.get("value") for e in sidecar["env"]}["AGENTRUN_LEASE"] == f"{slot}-1"
