"""Tenants: a namespace's ``agentrun.dev/tenant`` label, set by an admin.

As the real users, with the shipped validating policies in force (``serial``): ``bob``,
an editor of his own tenant's namespace only, can neither list nor annotate the slots of
``alice``'s tenant; granted ``patch`` on his own Namespace (as multi-tenancy tools grant),
he may label it but not set, change or remove its tenant label (the policy's message is
shown), nor create a namespace that names a tenant; an AgentRun's ``spec.tenant`` must be
its namespace's tenant, and a reassignment's ``reassign-tenant`` too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import kubernetes
import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import EDITOR_RULES, Scenario, request_id

pytestmark = pytest.mark.serial
TENANT = "agentrun.dev/tenant"
DEFAULT_BUDGET = "agentrun.dev/default-budget"
PATCH_OWN_NAMESPACE = [{"apiGroups": [""], "resources": ["namespaces"],
                        "verbs": ["get", "patch"]}]


@pytest.fixture
def bobs_namespace(cluster: Cluster) -> Iterator[str]:
    """A namespace of tenant ``bobs``, where bob is an editor and may patch the Namespace."""
    api = cluster.client()
    core = kubernetes.client.CoreV1Api(api)
    rbac = kubernetes.client.RbacAuthorizationV1Api(api)
    name = f"b-{uuid.uuid4().hex[:10]}"
    core.create_namespace({"metadata": {"name": name, "labels": {TENANT: "bobs"}}})
    for role, rules in (("editor", EDITOR_RULES), ("own-namespace", PATCH_OWN_NAMESPACE)):
        rbac.create_namespaced_role(name, {"metadata": {"name": role}, "rules": rules})
        rbac.create_namespaced_role_binding(name, {
            "metadata": {"name": role},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                          "name": "bob"}]})
    yield name
    core.delete_namespace(name)


def test_bob_cannot_reach_another_tenants_slots(
        scenario: Scenario, operator: OperatorProcess, validating: None,
        bobs_namespace: str, cluster: Cluster) -> None:
    slot = scenario.owned_retry_wait(owner="alice", editors=("alice",))
    listed = cluster.kubectl("-n", scenario.namespace, "get", "slots.agentrun.dev", user="bob")
    assert listed.returncode != 0 and "forbidden" in listed.stderr.lower()
    assert cluster.kubectl("-n", bobs_namespace, "get", "slots.agentrun.dev",
                           user="bob").returncode == 0  # his own namespace: allowed
    written = scenario.annotate(slot, user="bob", hold_id=request_id(), hold_reason="mine")
    assert written.returncode != 0 and "forbidden" in written.stderr.lower()
    assert "agentrun.dev/hold-id" not in (scenario.slot(slot)["metadata"].get("annotations")
                                          or {})
    # alice, in her own tenant, cannot name another tenant in a command either.
    named = scenario.annotate(slot, user="alice", reassign_id=request_id(),
                              reassign_run="study", reassign_reason="move",
                              reassign_tenant="bobs")
    assert named.returncode != 0
    assert f"must be the namespace's tenant (its label {TENANT}, here " \
           f"{scenario.namespace})" in named.stderr


def test_a_tenant_user_cannot_change_the_tenant_label_or_budget_of_his_own_namespace(
        validating: None, bobs_namespace: str, cluster: Cluster) -> None:
    says = f"{TENANT} names the namespace's tenant, and {DEFAULT_BUDGET} its runs' default " \
        "budget; both are set by a cluster admin"
    for change in (f"{TENANT}=alices", f"{TENANT}-"):
        result = cluster.kubectl("label", "--overwrite", "namespace", bobs_namespace, change,
                                 user="bob")
        assert result.returncode != 0, change
        assert says in result.stderr, result.stderr
    budget = cluster.kubectl("annotate", "namespace", bobs_namespace,
                             f'{DEFAULT_BUDGET}={{"tokens": 999999999}}', user="bob")
    assert budget.returncode != 0 and says in budget.stderr, budget.stderr
    other = cluster.kubectl("label", "namespace", bobs_namespace, "team=blue", user="bob")
    assert other.returncode == 0, other.stderr  # patch is granted: only the tenant is kept
    labels = json.loads(cluster.kubectl("get", "namespace", bobs_namespace, "-o",
                                        "json").stdout)["metadata"]["labels"]
    assert (labels[TENANT], labels["team"]) == ("bobs", "blue")
    made = cluster.kubectl("create", "-f", "-", user="admin", input=json.dumps({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": f"{bobs_namespace}-x", "labels": {TENANT: "bobs"}}}))
    assert made.returncode == 0, made.stderr  # a cluster admin may
    assert cluster.kubectl("delete", "namespace", f"{bobs_namespace}-x",
                           "--wait=false").returncode == 0


def test_a_runs_tenant_is_its_namespaces(
        scenario: Scenario, validating: None, cluster: Cluster) -> None:
    scenario.grant_editor("alice")
    body = {"apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun",
            "metadata": {"name": "study", "namespace": scenario.namespace},
            "spec": {"package": {"name": "study"}, "workflow": {"name": "study"},
                     "bindings": {"name": "study"}, "tenant": "bobs"}}
    result = cluster.kubectl("create", "--dry-run=server", "-f", "-", user="alice",
                             input=json.dumps(body))
    assert result.returncode != 0
    assert f"spec.tenant must be the namespace's tenant (its label {TENANT}, here " \
           f"{scenario.namespace})" in result.stderr
    body["spec"]["tenant"] = scenario.namespace
    assert cluster.kubectl("create", "--dry-run=server", "-f", "-", user="alice",
                           input=json.dumps(body)).returncode == 0
