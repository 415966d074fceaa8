"""The generated deployment manifests: no drift, and a stamp for every command's actor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentrun import bundledstore, manifests, workload
from agentrun.api import names
from agentrun.core.commands import parsing

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_files_match_the_generator() -> None:
    assert manifests.main(["--out", str(MANIFESTS), "--check"]) == 0


def test_the_base_takes_the_crds_as_the_top_level_kustomization() -> None:
    resources = manifests.kustomization()["resources"]
    assert resources[0] == "../crds"
    assert (MANIFESTS / resources[0] / "kustomization.yaml").is_file()
    assert not any(r.endswith(".yaml") and "crds" in r for r in resources)


def test_every_command_kind_has_its_actor_stamped() -> None:
    policy, binding = manifests.stamp_policy()
    expressions = [m["jsonPatch"]["expression"] for m in policy["spec"]["mutations"]]
    for shape in parsing.SHAPES:
        stamps = [e for e in expressions if f"'{shape.id}' in variables.new" in e]
        assert len(stamps) == 1, shape.kind
        assert shape.actor.replace("/", "~1") in stamps[0]
        assert shape.epoch.replace("/", "~1") in stamps[0]
        assert "request.userInfo.username" in stamps[0]
        assert "params.data['epoch']" in stamps[0]
        assert (shape.override is not None) == (".check('override').allowed()" in stamps[0])
        # A change to any of the command's annotations, the actor included, restamps it.
        for key in shape.keys:
            assert f"'{key}'" in stamps[0]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["paramKind"] == {"apiVersion": "v1", "kind": "Secret"}
    assert binding["spec"]["paramRef"] == {"name": "agentrun-stamping",
                                           "namespace": "agentrun-system",
                                           "parameterNotFoundAction": "Deny"}


def test_two_replicas_elect_roll_one_at_a_time_and_spread() -> None:
    documents = list(yaml.safe_load_all((MANIFESTS / "deploy" / "operator.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 2
    # A new pod Ready (a primed standby) before an old one stops: never fewer than two.
    assert deployment["spec"]["strategy"] == {
        "type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = deployment["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "agentrun-operator"
    assert "--leader-elect" in pod["containers"][0]["args"]
    (term,) = pod["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"]  # soft: one node runs both
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"] == \
        deployment["spec"]["selector"]["matchLabels"]
    budget = next(d for d in documents if d["kind"] == "PodDisruptionBudget")
    assert budget["spec"]["maxUnavailable"] == 1  # never blocks a drain of one replica
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]


def test_operator_rbac_never_writes_specs_it_does_not_own() -> None:
    rules = manifests.OPERATOR_RULES
    launchspec_writes = [r for r in rules if "launchspecs" in r["resources"]
                         and set(r["verbs"]) - {"get", "list", "watch"}]
    assert launchspec_writes == []  # LaunchSpecs belong to GitOps
    agentrun_writes = [r for r in rules if "agentruns" in r["resources"]
                       and set(r["verbs"]) - {"get", "list", "watch"}]
    # patch, for a run's journal finalizer alone (kube.writes.set_finalizers: RBAC cannot
    # narrow a patch to metadata.finalizers; the operator's code patches nothing else)
    assert agentrun_writes == [{"apiGroups": [names.GROUP], "resources": ["agentruns"],
                                "verbs": ["patch"]}]


def documents(relative: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((MANIFESTS / relative).read_text()))


def test_the_shipped_binding_names_only_the_service_account() -> None:
    binding = next(d for d in documents("rbac/operator.yaml")
                   if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "agentrun-operator",
                                    "namespace": "agentrun-system"}]


def test_the_local_file_binds_only_the_local_operator_user() -> None:
    cluster_wide, in_namespace, reader = documents("local/operator-user.yaml")
    assert (cluster_wide["kind"], in_namespace["kind"]) == ("ClusterRoleBinding", "RoleBinding")
    assert in_namespace["metadata"]["namespace"] == "agentrun-system"
    # The front proxy's CA (the history API), through the role kube-system has for that.
    assert (reader["kind"], reader["metadata"]["namespace"]) == ("RoleBinding", "kube-system")
    assert reader["roleRef"]["name"] == "extension-apiserver-authentication-reader"
    for binding in (cluster_wide, in_namespace, reader):
        assert binding["metadata"]["name"] == "agentrun-operator-local-user"
        assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io",
                                        "kind": "User", "name": "operator"}]
    assert cluster_wide["roleRef"]["name"] == in_namespace["roleRef"]["name"] == (
        "agentrun-operator")


def test_the_operator_writes_only_its_own_secrets_in_its_own_namespace() -> None:
    role = next(d for d in documents("rbac/operator.yaml") if d["kind"] == "Role")
    assert role["metadata"]["namespace"] == "agentrun-system"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "update"],
         "resourceNames": ["agentrun-stamping", "agentrun-operator-leader",
                           "agentrun-operator-history-tls"]}]
    # cluster-wide, only the journal's Secret by its one name, only read (checked before a
    # run is launched, and signed with to delete a run's journal)
    assert [r for r in manifests.OPERATOR_RULES if "secrets" in r["resources"]] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"],
         "resourceNames": [names.JOURNAL_SECRET]}]


def test_operator_writes_only_the_status_it_owns() -> None:
    status_writes = {resource for r in manifests.OPERATOR_RULES for resource in r["resources"]
                     if resource.endswith("/status") and set(r["verbs"]) - {"get"}}
    # launchspecs/status: the validity condition and the pins (GitOps owns the spec).
    assert status_writes == {"agentruns/status", "slots/status", "launchspecs/status"}
    (namespaces,) = [r for r in manifests.OPERATOR_RULES if "namespaces" in r["resources"]]
    assert namespaces["verbs"] == ["get", "list", "watch"]  # Kopf resolves namespace globs


def test_every_command_kind_is_validated_and_every_policy_is_bound_to_deny() -> None:
    from agentrun.core.policies import validating

    documents = validating.validating_policies()
    policies = {d["metadata"]["name"]: d for d in documents
                if d["kind"] == "ValidatingAdmissionPolicy"}
    bindings = {d["spec"]["policyName"]: d for d in documents
                if d["kind"] == "ValidatingAdmissionPolicyBinding"}
    assert set(policies) == set(bindings)
    assert all(b["spec"]["validationActions"] == ["Deny"] for b in bindings.values())
    assert all(p["spec"]["failurePolicy"] == "Fail" for p in policies.values())
    checks = policies[validating.SLOT_COMMANDS]["spec"]["validations"]
    for shape in parsing.SHAPES:
        mine = [c for c in checks if f"variables.{validating._variable(shape)} ||" in
                c["expression"]]
        assert any(f"['{shape.id}'].size() <= 253" in c["expression"] for c in mine), shape
        for key in shape.fields.values():
            assert any(f"'{key}'" in c["expression"] for c in mine), key
    # Only people are checked for what they change on a Slot, Pod or ConfigMap.
    for name in (validating.SLOT_CHANGES, validating.OPERATOR_OBJECTS):
        conditions = policies[name]["spec"]["matchConditions"]
        assert {"name": "not-the-controller",
                "expression": f"!{validating.controller()}"} in conditions


def test_the_user_roles_aggregate_and_never_write_status() -> None:
    roles = {r["metadata"]["name"]: r for r in documents("rbac/roles.yaml")}
    assert set(roles) == {"agentrun-viewer", "agentrun-editor", "agentrun-slot-override",
                          "agentrun-approver", "agentrun-self-approver",
                          "agentrun-launchspec-admin", "agentrun-tenant-admin"}
    aggregated = {name: sorted(k.rsplit("-", 1)[-1] for k in r["metadata"].get("labels", {}))
                  for name, r in roles.items()}
    assert aggregated["agentrun-viewer"] == ["admin", "edit", "view"]
    assert aggregated["agentrun-editor"] == ["admin", "edit"]
    assert aggregated["agentrun-slot-override"] == ["admin"]
    assert aggregated["agentrun-launchspec-admin"] == []  # bound by hand to GitOps
    # Approving is a duty of its own: never aggregated into edit or admin.
    assert aggregated["agentrun-approver"] == aggregated["agentrun-self-approver"] == []
    resources = {res for r in roles.values() for rule in r["rules"] for res in rule["resources"]}
    assert not any(res.endswith("/status") for res in resources)
    editor_slots = [rule for rule in roles["agentrun-editor"]["rules"]
                    if "slots" in rule["resources"]]
    assert editor_slots == [{"apiGroups": ["agentrun.dev"], "resources": ["slots"],
                             "verbs": ["patch", "update"]}]  # no create, no delete


def test_the_store_is_one_locked_down_pod_on_a_claim_behind_its_service() -> None:
    claim, deployment, service = bundledstore.store(pull_policy=workload.PULL_POLICY)
    assert [claim["kind"], deployment["kind"], service["kind"]] == [
        "PersistentVolumeClaim", "Deployment", "Service"]
    assert {d["metadata"]["namespace"] for d in (claim, deployment, service)} == {
        manifests.OPERATOR_NAMESPACE}
    assert "storageClassName" not in claim["spec"] and "clusterIP" not in service["spec"]
    spec = deployment["spec"]
    assert spec["replicas"] == 1 and spec["strategy"] == {"type": "Recreate"}
    pod = spec["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert container["resources"]["requests"] and container["resources"]["limits"]
    assert f"-s3.port={bundledstore.STORE_PORT}" in container["args"]
    assert container["readinessProbe"]["httpGet"]["port"] == bundledstore.STORE_PORT_NAME
    assert {"persistentVolumeClaim": {"claimName": claim["metadata"]["name"]},
            "name": "data"} in pod["volumes"]
    assert service["spec"]["ports"][0]["port"] == bundledstore.STORE_PORT


def test_the_store_takes_a_class_and_a_fixed_address_when_asked() -> None:
    claim, _, service = bundledstore.store(pull_policy=workload.PULL_POLICY, storage_class="",
                                           cluster_ip="10.96.0.83")
    assert claim["spec"]["storageClassName"] == ""
    assert service["spec"]["clusterIP"] == "10.96.0.83"
