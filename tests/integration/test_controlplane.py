"""Smoke tests that prove the control plane under the suite is a real one.

Covers: objects and the status subresource; optimistic concurrency (409 on a stale
resourceVersion); CEL transition rules in a CRD; RBAC between tenant users;
ValidatingAdmissionPolicy and MutatingAdmissionPolicy acting on the requester's name;
service-account tokens bound to a Pod; the serviceaccount and garbage-collector
controllers; the audit log of writes; API Priority and Fairness classifying requests.
"""

from __future__ import annotations

import json
import uuid

import kubernetes
import pytest
from kubernetes.client.rest import ApiException

from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import HAND_PLAYED, user_binding
from tests.support.waiting import wait_for, wait_for_default_service_account


def core(cluster: Cluster, user: str = "admin") -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(cluster.client(user))


def pod_body(name: str, **spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        # Never bound (see scenarios.HAND_PLAYED): these tests write pod status by hand.
        "spec": {"restartPolicy": "Never", "schedulerName": HAND_PLAYED,
                 "containers": [{"name": "main", "image": "busybox:1.36"}], **spec},
    }


def test_lease_pod_and_status_subresource(cluster: Cluster, namespace: str) -> None:
    coordination = kubernetes.client.CoordinationV1Api(cluster.client())
    coordination.create_namespaced_lease(namespace, {
        "metadata": {"name": "w-1"},
        "spec": {"holderIdentity": "w-1", "leaseDurationSeconds": 15}})
    wait_for_default_service_account(cluster.client(), namespace)
    api = core(cluster)
    api.create_namespaced_pod(namespace, pod_body("w-1"))

    api.patch_namespaced_pod_status("w-1", namespace, {"status": {"phase": "Failed"}})

    pod = api.read_namespaced_pod("w-1", namespace)
    assert pod.status.phase == "Failed"
    assert pod.spec.restart_policy == "Never"
    lease = coordination.read_namespaced_lease("w-1", namespace)
    assert lease.spec.holder_identity == "w-1"
    assert lease.spec.lease_duration_seconds == 15


def test_stale_resource_version_conflicts(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    created = api.create_namespaced_config_map(namespace, {"metadata": {"name": "c"},
                                                           "data": {"k": "1"}})
    stale = created.metadata.resource_version
    api.replace_namespaced_config_map("c", namespace, {
        "metadata": {"name": "c", "resourceVersion": stale}, "data": {"k": "2"}})

    with pytest.raises(ApiException) as caught:
        api.replace_namespaced_config_map("c", namespace, {
            "metadata": {"name": "c", "resourceVersion": stale}, "data": {"k": "3"}})

    assert caught.value.status == 409
    assert api.read_namespaced_config_map("c", namespace).data == {"k": "2"}


SMOKE_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.smoke.agentrun.dev"},
    "spec": {
        "group": "smoke.agentrun.dev",
        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
        "scope": "Namespaced",
        "versions": [{
            "name": "v1", "served": True, "storage": True,
            "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                "type": "object", "properties": {"identity": {
                    "type": "string",
                    "x-kubernetes-validations": [{
                        "rule": "self == oldSelf", "message": "identity is immutable"}],
                }},
            }}}},
        }],
    },
}


def test_crd_cel_rule_rejects_a_change(cluster: Cluster, namespace: str) -> None:
    extensions = kubernetes.client.ApiextensionsV1Api(cluster.client())
    try:
        extensions.create_custom_resource_definition(SMOKE_CRD)
    except ApiException as error:
        if error.status != 409:
            raise
    wait_for(lambda: any(c.type == "Established" and c.status == "True" for c in (
        extensions.read_custom_resource_definition(SMOKE_CRD["metadata"]["name"])  # type: ignore[index]
        .status.conditions or [])), timeout=30, message="widgets CRD Established")
    custom = kubernetes.client.CustomObjectsApi(cluster.client())
    args = ("smoke.agentrun.dev", "v1", namespace, "widgets")
    wait_for(lambda: custom.create_namespaced_custom_object(*args, {
        "apiVersion": "smoke.agentrun.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"identity": "a"}}),
        timeout=30, message="first Widget created (the new API is served)")

    with pytest.raises(ApiException) as caught:
        custom.patch_namespaced_custom_object(*args, "w", {"spec": {"identity": "b"}})

    assert caught.value.status == 422
    assert "identity is immutable" in caught.value.body
    assert custom.get_namespaced_custom_object(*args, "w")["spec"]["identity"] == "a"


def test_rbac_separates_tenant_users(cluster: Cluster, namespace: str) -> None:
    """alice cannot read in bob's namespace until a RoleBinding lets her."""
    core(cluster).create_namespaced_config_map(namespace, {"metadata": {"name": "bobs"}})
    with pytest.raises(ApiException) as caught:
        core(cluster, "alice").read_namespaced_config_map("bobs", namespace)
    assert caught.value.status == 403

    rbac = kubernetes.client.RbacAuthorizationV1Api(cluster.client())
    rbac.create_namespaced_role_binding(namespace, user_binding(
        "alice-view", kind="ClusterRole", role="view", users=["alice"]))

    found = wait_for(lambda: core(cluster, "alice").read_namespaced_config_map("bobs", namespace),
                     timeout=30, message="alice allowed by her RoleBinding")
    assert found.metadata.name == "bobs"


def apply(cluster: Cluster, manifest: str) -> None:
    result = cluster.kubectl("apply", "-f", "-", input=manifest)
    assert result.returncode == 0, result.stderr


def grant_configmap_writes(cluster: Cluster, namespace: str, user: str) -> None:
    apply(cluster, f"""
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: {user}-edit, namespace: {namespace}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: edit}}
subjects: [{{apiGroup: rbac.authorization.k8s.io, kind: User, name: {user}}}]
""")


def test_validating_admission_policy_checks_the_requester(cluster: Cluster,
                                                          namespace: str) -> None:
    name = f"smoke-vap-{namespace}"
    apply(cluster, f"""
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}
  validations:
  - expression: "request.userInfo.username == 'alice'"
    message: only alice may create configmaps here
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {namespace}}}}}
""")
    grant_configmap_writes(cluster, namespace, "alice")
    try:
        def bob_rejected() -> str | None:
            try:
                core(cluster).create_namespaced_config_map(
                    namespace, {"metadata": {"generateName": "by-admin-"}})
            except ApiException as error:
                return error.body if error.status == 422 else None
            return None

        body = wait_for(bob_rejected, timeout=30, message="the policy denying admin")
        assert "only alice may create configmaps here" in body
        created = core(cluster, "alice").create_namespaced_config_map(
            namespace, {"metadata": {"name": "by-alice"}})
        assert created.metadata.name == "by-alice"
    finally:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy",
                        name, "--ignore-not-found")


def test_mutating_admission_policy_stamps_the_requester(cluster: Cluster,
                                                        namespace: str) -> None:
    name = f"smoke-map-{namespace}"
    apply(cluster, f"""
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicy
metadata: {{name: {name}}}
spec:
  failurePolicy: Fail
  reinvocationPolicy: Never
  matchConstraints:
    resourceRules:
    - {{apiGroups: [""], apiVersions: [v1], operations: [CREATE, UPDATE], resources: [configmaps]}}
  mutations:
  - patchType: ApplyConfiguration
    applyConfiguration:
      expression: >
        Object{{metadata: Object.metadata{{annotations: {{
          "smoke.agentrun.dev/actor": request.userInfo.username}}}}}}
---
apiVersion: admissionregistration.k8s.io/v1
kind: MutatingAdmissionPolicyBinding
metadata: {{name: {name}}}
spec:
  policyName: {name}
  matchResources:
    namespaceSelector: {{matchLabels: {{kubernetes.io/metadata.name: {namespace}}}}}
""")
    grant_configmap_writes(cluster, namespace, "bob")
    try:
        def stamped() -> str | None:
            created = core(cluster, "bob").create_namespaced_config_map(namespace, {
                "metadata": {"generateName": "by-bob-",
                             "annotations": {"smoke.agentrun.dev/actor": "alice"}}})
            return (created.metadata.annotations or {}).get("smoke.agentrun.dev/actor")

        # The typed "alice" is a forgery; the policy overwrites it with the real requester.
        actor = wait_for(lambda: stamped() == "bob" and "bob", timeout=30,
                         message="the policy stamping bob")
        assert actor == "bob"
    finally:
        cluster.kubectl("delete", "mutatingadmissionpolicybinding,mutatingadmissionpolicy",
                        name, "--ignore-not-found")


def test_token_bound_to_a_pod_names_the_pod(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    api.create_namespaced_service_account(namespace, {"metadata": {"name": "worker"}})
    wait_for_default_service_account(cluster.client(), namespace)
    api.create_namespaced_pod(namespace, pod_body("w-1", serviceAccountName="worker"))
    result = cluster.kubectl("-n", namespace, "create", "token", "worker",
                             "--bound-object-kind", "Pod", "--bound-object-name", "w-1")
    assert result.returncode == 0, result.stderr
    token = result.stdout.strip()

    configuration = kubernetes.client.Configuration()
    admin = cluster.client().configuration
    configuration.host = admin.host
    configuration.ssl_ca_cert = admin.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    as_pod = kubernetes.client.ApiClient(configuration)
    review = kubernetes.client.AuthenticationV1Api(as_pod).create_self_subject_review(
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})

    user = review.status.user_info
    assert user.username == f"system:serviceaccount:{namespace}:worker"
    assert user.extra["authentication.kubernetes.io/pod-name"] == ["w-1"]


def test_new_namespace_gets_default_service_account_and_pods(cluster: Cluster,
                                                             namespace: str) -> None:
    wait_for_default_service_account(cluster.client(), namespace)
    created = core(cluster).create_namespaced_pod(namespace, pod_body("p"))
    assert created.spec.service_account_name == "default"


def test_garbage_collector_deletes_dependents(cluster: Cluster, namespace: str) -> None:
    api = core(cluster)
    owner = api.create_namespaced_config_map(namespace, {"metadata": {"name": "owner"}})
    api.create_namespaced_config_map(namespace, {"metadata": {
        "name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner.metadata.uid}]}})

    api.delete_namespaced_config_map("owner", namespace, propagation_policy="Background")

    def gone() -> bool:
        try:
            api.read_namespaced_config_map("dependent", namespace)
        except ApiException as error:
            return error.status == 404
        return False

    wait_for(gone, timeout=60, message="the garbage collector deleting the dependent")


def test_audit_log_records_writes(cluster: Cluster, namespace: str) -> None:
    if cluster.audit_log is None:
        pytest.skip(f"no audit log is readable on this {cluster.kind} cluster")
    name = f"audited-{uuid.uuid4().hex[:8]}"
    core(cluster, "admin").create_namespaced_config_map(namespace, {"metadata": {"name": name}})

    def recorded() -> dict[str, object] | None:
        for line in audit.lines(cluster.audit_log):  # type: ignore[arg-type]
            try:
                event = json.loads(line)
            except json.JSONDecodeError:  # a line being written right now
                continue
            if event.get("objectRef", {}).get("name") == name:
                return event  # type: ignore[no-any-return]
        return None

    event = wait_for(recorded, timeout=15, message=f"an audit event for {name}")
    assert event["verb"] == "create"
    assert event["user"]["username"] == "admin"  # type: ignore[index]
    assert event["level"] == "Metadata"
    assert event["objectRef"]["namespace"] == namespace  # type: ignore[index]


def test_priority_and_fairness_classifies_requests(cluster: Cluster) -> None:
    """API Priority and Fairness is on, as on a real cluster: every request is classified
    (the response names its priority level), and the operator's user falls in a limited
    level, not the exempt one of system:masters."""
    levels = json.loads(cluster.kubectl("get", "prioritylevelconfigurations",
                                        "-o", "json").stdout)["items"]
    by_uid = {item["metadata"]["uid"]: item["metadata"]["name"] for item in levels}
    assert "exempt" in by_uid.values()
    seen = {}
    for user in ("admin", "operator"):  # /version: any authenticated user may read it
        headers = kubernetes.client.VersionApi(cluster.client(user)).get_code_with_http_info()[2]
        seen[user] = by_uid[headers["X-Kubernetes-PF-PriorityLevel-UID"]]
    assert seen["admin"] == "exempt"
    assert seen["operator"] != "exempt", seen
