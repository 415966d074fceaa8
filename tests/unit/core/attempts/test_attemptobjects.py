"""An attempt's Lease and Pod as the builders make them, and which existing object is our own."""

from __future__ import annotations

from agentrun.api import names, traces
from agentrun.api.meta import OwnerReference
from agentrun.core.attempts import attemptobjects
from tests.unit.core import corefakes as f

SPEC = f.launch_spec(
    "cpu-spec", classes=["cpu"], generation=4,
    containers=[{"name": "worker", "image": "w", "env": [{"name": "AGENTRUN_RUN", "value": "x"},
                                                        {"name": "KEEP", "value": "1"}]},
                {"name": "sidecar", "image": "s"}],
    init_containers=[{"name": "init", "image": "i"}])
PIN = f.PINNED.model_copy(update={"generation": 4})


def test_lease_body() -> None:
    body = attemptobjects.lease_body(slot=f.slot(), attempt=3, owner_actor="alice", tenant=f.TENANT,
                             launch_spec=PIN, lease_duration_seconds=30)
    meta = body["metadata"]
    assert body["apiVersion"] == "coordination.k8s.io/v1" and meta["name"] == f"{f.SLOT}-3"
    assert body["spec"] == {"holderIdentity": f"{f.SLOT}-3", "leaseDurationSeconds": 30}
    assert meta["labels"] == {names.RUN_LABEL: f.RUN, names.SLOT_LABEL: f.SLOT,
                              names.ATTEMPT_LABEL: "3", names.NODE_LABEL: f.NODE,
                              names.TENANT_LABEL: f.TENANT}
    assert meta["annotations"] == {names.OWNER_ACTOR_ANNOTATION: "alice",
                                   names.LAUNCH_SPEC_ANNOTATION: "cpu-spec@4"}
    assert meta["ownerReferences"] == [{
        "apiVersion": "agentrun.dev/v1alpha1", "kind": "Slot", "name": f.SLOT,
        "uid": f.SLOT_UID, "controller": True, "blockOwnerDeletion": True}]
    assert attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=3)


def test_pod_body() -> None:
    body = attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=SPEC.spec, pinned=PIN,
                           attempt=2, owner_actor=None, tenant=None)
    spec = body["spec"]
    assert spec["restartPolicy"] == "Never"
    assert body["metadata"]["labels"]["app"] == "worker"
    assert names.TENANT_LABEL not in body["metadata"]["labels"]
    assert names.OWNER_ACTOR_ANNOTATION not in body["metadata"]["annotations"]
    assert body["metadata"]["ownerReferences"][0]["uid"] == f.SLOT_UID
    volumes = {v["name"]: v["configMap"]["name"] for v in spec["volumes"]}
    assert sorted(volumes.values()) == sorted(f.pins().snapshot_names().values())
    for container in spec["containers"] + spec["initContainers"]:
        mounts = {m["mountPath"]: (m["name"], m["readOnly"]) for m in container["volumeMounts"]}
        for kind in ("package", "workflow", "bindings"):
            assert mounts[f"/etc/agentrun/config/{kind}/"] == (f"agentrun-config-{kind}", True)
        env = {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}
        assert env["AGENTRUN_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert (env["AGENTRUN_RUN"], env["AGENTRUN_SLOT"], env["AGENTRUN_NODE"]) == (
            f.RUN, f.SLOT, f.NODE)
        assert env["AGENTRUN_ATTEMPT"] == env["AGENTRUN_FENCING_TOKEN"] == "2"
        assert env["AGENTRUN_LEASE"] == f"{f.SLOT}-2"
        assert env["AGENTRUN_CONFIG_DIR"] == "/etc/agentrun/config"
        assert len([e for e in container["env"] if e["name"] == "AGENTRUN_RUN"]) == 1
    assert {"name": "KEEP", "value": "1"} in spec["containers"][0]["env"]
    assert SPEC.spec.template.spec.containers[0]["env"][0]["value"] == "x"  # not mutated


def test_already_exists_matches_only_own_attempt() -> None:
    body = attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=SPEC.spec, pinned=PIN,
                           attempt=2, owner_actor=None, tenant=None)
    assert attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=2)
    assert not attemptobjects.matches_attempt(body, slot_uid=f.SLOT_UID, attempt=3)
    assert not attemptobjects.matches_attempt(body, slot_uid="uid-recreated-slot", attempt=2)
    loose = {"metadata": {"labels": body["metadata"]["labels"], "ownerReferences": [
        {**body["metadata"]["ownerReferences"][0], "controller": False}]}}
    assert not attemptobjects.matches_attempt(loose, slot_uid=f.SLOT_UID, attempt=2)
    assert not attemptobjects.matches_attempt({}, slot_uid=f.SLOT_UID, attempt=2)


def test_a_pod_names_its_attempts_span_as_its_traceparent() -> None:
    """The worker's spans join the run's trace under the span the operator reports for the
    attempt; a slot with no controlling run (no trace to derive) gets none."""
    meta = f.slot().metadata.model_copy(update={"owner_references": [OwnerReference(
        api_version=names.API_VERSION, kind="AgentRun", name=f.RUN, uid=f.RUN_UID,
        controller=True)]})
    owned = f.slot().model_copy(update={"metadata": meta})
    body = attemptobjects.pod_body(slot=owned, pins=f.pins(), launch_spec=SPEC.spec,
                                   pinned=PIN, attempt=2, owner_actor=None, tenant=None)
    for container in body["spec"]["containers"] + body["spec"]["initContainers"]:
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert traces.parse_traceparent(env["TRACEPARENT"]) == traces.Parent(
            trace=traces.trace_id(f.RUN_UID), span=traces.attempt_span(f.SLOT_UID, 2))
    bare = attemptobjects.pod_body(slot=f.slot(), pins=f.pins(), launch_spec=SPEC.spec,
                                   pinned=PIN, attempt=2, owner_actor=None, tenant=None)
    assert "TRACEPARENT" not in {e["name"] for e in bare["spec"]["containers"][0]["env"]}
