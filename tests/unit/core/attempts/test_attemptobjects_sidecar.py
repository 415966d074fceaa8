"""LaunchSpec ``spec.sidecar`` and the pod it builds (pure: ``attemptobjects.pod_body``).

Covers: without the field the pod has no sidecar and no ``AGENTRUN_SIDECAR_URL``; with
it, the first init container is ``agentrun-worker`` with ``restartPolicy: Always``, the
image, the sidecar command with the port and window, an exec startup probe bounded by
the start deadline, the agentrun environment and config mounts; every main container
(not the template's own init containers) gets the sidecar's URL, once; the template's
init containers keep their order after it; the field's bounds (image required, port and
window ranges, resource quantities) are the model's; the sidecar has requests and limits
by default (a namespace whose quota counts limits accepts it), or ``resources`` as
given, and a spec without ``resources`` keeps its digest; its securityContext is the
restricted Pod Security Standard's by default, or ``securityContext`` as given, bounded,
and a spec without it keeps its digest; the dry run's pod is the
claim's pod, sidecar included; a template already using the name is ``Valid`` False
with a message that says what to change, before any dry run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from pydantic import ValidationError

from agentrun.api import conditions, names
from agentrun.api.launchspecs import LaunchSpec, LaunchSpecSpec, Sidecar
from agentrun.core.attempts import attemptobjects
from agentrun.core.launchspecs import launchpins, launchspecstatus
from tests.unit.core import corefakes as f

IMAGE = "localhost/agentrun/agentrun-operator:abc"


def with_sidecar(spec: LaunchSpec, **sidecar: Any) -> LaunchSpec:
    wire = spec.spec.wire()
    return spec.model_copy(update={"spec": LaunchSpecSpec.model_validate(
        {**wire, "sidecar": {"image": IMAGE, **sidecar}})})


def pod(spec: LaunchSpec) -> dict[str, Any]:
    return attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=spec.spec,
                                   pinned=f.PINNED, attempt=3, owner_actor=None, tenant=None)


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_without_the_field_there_is_no_sidecar() -> None:
    spec = pod(f.CPU_SPEC)["spec"]
    assert "initContainers" not in spec
    assert names.ENV_SIDECAR_URL not in env_of(spec["containers"][0])


def test_the_sidecar_is_the_first_init_container_a_native_sidecar() -> None:
    base = f.launch_spec("cpu-spec", classes=["cpu"], start_deadline_seconds=120,
                         containers=[{"name": "main", "image": "sh:1"},
                                     {"name": "helper", "image": "sh:1",
                                      "env": [{"name": names.ENV_SIDECAR_URL, "value": "x"}]}],
                         init_containers=[{"name": "setup", "image": "sh:1"}])
    spec = pod(with_sidecar(base, port=9000, checkInSeconds=12))["spec"]
    sidecar, setup = spec["initContainers"]
    assert setup["name"] == "setup"
    assert {k: sidecar[k] for k in ("name", "image", "restartPolicy", "command")} == {
        "name": "agentrun-worker", "image": IMAGE, "restartPolicy": "Always",
        "command": ["agentrun-worker", "sidecar", "--port", "9000", "--check-in-seconds", "12"]}
    assert sidecar["startupProbe"] == {
        "exec": {"command": ["agentrun-worker", "ready", "--port", "9000"]},
        "periodSeconds": 1, "timeoutSeconds": 5, "failureThreshold": 120}
    env = env_of(sidecar)
    assert (env["AGENTRUN_LEASE"], env["AGENTRUN_ATTEMPT"]) == (f"{f.SLOT}-3", "3")
    assert names.ENV_SIDECAR_URL not in env and names.ENV_SIDECAR_URL not in env_of(setup)
    mounts = {m["mountPath"] for m in sidecar["volumeMounts"]}
    assert mounts == {f"/etc/agentrun/config/{k}/" for k in names.CONFIG_KINDS}
    for container in spec["containers"]:
        urls = [e for e in container["env"] if e["name"] == names.ENV_SIDECAR_URL]
        assert urls == [{"name": names.ENV_SIDECAR_URL, "value": "http://127.0.0.1:9000"}]
        assert env_of(container)["AGENTRUN_LEASE"] == f"{f.SLOT}-3"


def test_the_defaults() -> None:
    sidecar = Sidecar.model_validate({"image": IMAGE})
    assert (sidecar.port, sidecar.check_in_seconds) == (8686, 30)
    spec = pod(with_sidecar(f.CPU_SPEC))["spec"]
    assert spec["initContainers"][0]["command"][2:] == ["--port", "8686",
                                                         "--check-in-seconds", "30"]
    assert spec["initContainers"][0]["resources"] == {
        "requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "256Mi"}}


def test_resources_as_given_and_a_spec_without_them_keeps_its_digest() -> None:
    given = {"requests": {"cpu": "10m"}, "limits": {"cpu": "2", "ephemeral-storage": "1Gi"}}
    spec = pod(with_sidecar(f.CPU_SPEC, resources=given))["spec"]
    assert spec["initContainers"][0]["resources"] == given  # a list left out is not set
    assert "resources" not in with_sidecar(f.CPU_SPEC).spec.wire()["sidecar"]  # pinned as was
    assert launchpins.digest(with_sidecar(f.CPU_SPEC).spec) == hashlib.sha256(json.dumps(
        {**f.CPU_SPEC.spec.wire(), "sidecar": {"image": IMAGE, "port": 8686,
                                               "checkInSeconds": 30}},
        sort_keys=True, separators=(",", ":")).encode()).hexdigest()


RESTRICTED = {"runAsNonRoot": True, "allowPrivilegeEscalation": False,
              "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"}}


def test_the_security_context_is_restricted_by_default_or_as_given() -> None:
    assert pod(with_sidecar(f.CPU_SPEC))["spec"]["initContainers"][0][
        "securityContext"] == RESTRICTED
    given = {"runAsUser": 1000, "runAsGroup": 1000, "runAsNonRoot": True,
             "readOnlyRootFilesystem": True, "allowPrivilegeEscalation": False,
             "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
             "seccompProfile": {"type": "Localhost", "localhostProfile": "agentrun.json"}}
    spec = with_sidecar(f.CPU_SPEC, securityContext=given)
    assert pod(spec)["spec"]["initContainers"][0]["securityContext"] == given  # whole
    assert launchspecstatus.dry_run_pod(spec)["spec"]["initContainers"][0][
        "securityContext"] == given
    assert "securityContext" not in with_sidecar(f.CPU_SPEC).spec.wire()["sidecar"]
    # {} opts out of the default (an image that runs as root, say): the container's own.
    assert pod(with_sidecar(f.CPU_SPEC, securityContext={}))["spec"]["initContainers"][0][
        "securityContext"] == {}


@pytest.mark.parametrize(("security", "field"), [
    ({"runAsUser": -1}, "runAsUser"), ({"runAsUser": 2**31}, "runAsUser"),
    ({"capabilities": {"add": ["net_admin"]}}, "add"),
    ({"capabilities": {"drop": ["X"] * 65}}, "drop"),
    ({"seccompProfile": {"type": "Strict"}}, "type"),
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "p" * 256}},
     "localhostProfile"),
    ({"privileged": True}, "privileged")])
def test_the_security_context_is_bounded(security: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Sidecar.model_validate({"image": IMAGE, "securityContext": security})


def test_the_dry_run_makes_the_claims_pod_sidecar_included() -> None:
    spec = with_sidecar(f.CPU_SPEC, resources={"limits": {"cpu": "1", "memory": "1Gi"}})
    dry, claim = launchspecstatus.dry_run_pod(spec)["spec"], pod(spec)["spec"]

    def shape(pod_spec: dict[str, Any]) -> list[Any]:
        return [(c["name"], c["image"], c.get("resources"), c.get("command"), len(c["env"]),
                 c["volumeMounts"]) for key in ("initContainers", "containers")
                for c in pod_spec[key]]
    assert shape(dry) == shape(claim) and dry["initContainers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi"}}
    assert [v["name"] for v in dry["volumes"]] == [v["name"] for v in claim["volumes"]]
    assert "generateName" in launchspecstatus.dry_run_pod(spec)["metadata"]


@pytest.mark.parametrize(("sidecar", "field"), [
    ({}, "image"), ({"image": ""}, "image"), ({"image": "a b"}, "image"),
    ({"image": "x" * 513}, "image"), ({"image": IMAGE, "port": 80}, "port"),
    ({"image": IMAGE, "port": 70000}, "port"), ({"image": IMAGE, "checkInSeconds": 4},
                                                "checkInSeconds"),
    ({"image": IMAGE, "checkInSeconds": 601}, "checkInSeconds"),
    ({"image": IMAGE, "extra": 1}, "extra"),
    ({"image": IMAGE, "resources": {"limits": {"cpu": "-1"}}}, "cpu"),
    ({"image": IMAGE, "resources": {"limits": {"memory": "lots"}}}, "memory"),
    ({"image": IMAGE, "resources": {"limits": {"cpu": "1" * 33}}}, "cpu"),
    ({"image": IMAGE, "resources": {"limits": {"nvidia.com/gpu": "1"}}}, "nvidia.com/gpu"),
    ({"image": IMAGE, "resources": {"claims": []}}, "claims")])
def test_the_field_is_bounded(sidecar: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        Sidecar.model_validate(sidecar)


@pytest.mark.parametrize("where", ["containers", "init_containers"])
def test_a_template_using_the_name_is_not_valid(where: str) -> None:
    taken = [{"name": "agentrun-worker", "image": "sh:1"}]
    others = {"containers": [{"name": "main", "image": "sh:1"}]}
    base = f.launch_spec("cpu-spec", classes=["cpu"], **{**others, where: taken})
    assert base.spec.sidecar_conflict() is None  # no sidecar: the name is the template's
    spec = with_sidecar(base)
    field = "containers" if where == "containers" else "initContainers"
    assert spec.spec.sidecar_conflict() == (
        f"template.spec.{field} has a container named 'agentrun-worker', the name "
        "spec.sidecar adds; rename it, or remove spec.sidecar")
    derived = launchspecstatus.derive(spec=spec, slots=[], now=f.T0,
                                      dry_run=launchspecstatus.DryRun(status=201))
    valid = conditions.find(derived.conditions, launchspecstatus.VALID)
    assert valid is not None
    assert (valid.status, valid.reason) == ("False", "SidecarNameTaken")
    assert "rename it" in valid.message
