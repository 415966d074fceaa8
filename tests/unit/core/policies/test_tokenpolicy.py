"""The pod-bound token policy as generated, and the shipped roles' share of that boundary.

The policy matches only TokenRequests (``create`` on ``serviceaccounts/token``) in a
tenant's namespaces, only those bound to a Pod, and lets nodes and the controller
through; it is shipped with the other validating policies. The roles the project ships
grant nobody a way to act as a pod: no token requests, no exec or attach, no pod writes,
no impersonation. What the API server makes of it: tests/integration/operator/
test_pod_tokens.py.
"""

from __future__ import annotations

from typing import Any

from agentrun import manifests
from agentrun.api import names
from agentrun.core.policies import tokenpolicy, validating

AS_A_POD = {"serviceaccounts/token", "pods/exec", "pods/attach", "pods/ephemeralcontainers",
            "pods", "serviceaccounts", "users", "groups"}


def policy() -> dict[str, Any]:
    found = tokenpolicy.pod_tokens()
    assert [d["kind"] for d in found] == ["ValidatingAdmissionPolicy",
                                          "ValidatingAdmissionPolicyBinding"]
    assert found[1]["spec"] == {"policyName": tokenpolicy.POD_TOKENS,
                                "validationActions": ["Deny"]}
    spec: dict[str, Any] = found[0]["spec"]
    return spec


def test_only_token_requests_in_a_tenants_namespace_are_matched() -> None:
    constraints = policy()["matchConstraints"]
    assert constraints["resourceRules"] == [{
        "apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
        "resources": ["serviceaccounts/token"], "scope": "*"}]
    assert constraints["namespaceSelector"] == {"matchExpressions": [
        {"key": names.TENANT_LABEL, "operator": "Exists"}]}
    assert policy()["failurePolicy"] == "Fail"


def test_only_pod_bound_tokens_by_others_than_nodes_and_the_controller_are_refused() -> None:
    conditions = {c["name"]: c["expression"] for c in policy()["matchConditions"]}
    assert conditions == {
        "bound-to-a-pod": "object.spec.?boundObjectRef.?kind.orValue('') == 'Pod'",
        "not-a-node": "!request.userInfo.?groups.orValue([]).exists(g, g == 'system:nodes')",
        "not-the-controller": f"!{validating.controller()}"}
    (refusal,) = policy()["validations"]
    assert refusal["expression"] == "false" and refusal["reason"] == "Forbidden"
    assert "object.spec.boundObjectRef.name" in refusal["messageExpression"]
    assert "without --bound-object-kind Pod" in refusal["messageExpression"]


def test_it_is_shipped_with_the_other_validating_policies() -> None:
    shipped = manifests.validating_policies()
    assert all(d in shipped for d in tokenpolicy.pod_tokens())
    assert f"name: {tokenpolicy.POD_TOKENS}" in manifests.rendered()["admission/validating.yaml"]


def test_the_shipped_roles_grant_no_way_to_act_as_a_pod() -> None:
    roles = [*manifests.user_roles(), *manifests.worker_rbac()]
    for role in roles:
        for rule in role["rules"]:
            if "" in rule["apiGroups"]:
                assert not AS_A_POD & set(rule["resources"]), (role["metadata"]["name"], rule)
            assert "impersonate" not in rule["verbs"], role["metadata"]["name"]


def test_an_attempt_pods_ephemeral_containers_are_the_operators() -> None:
    (policy_object, _) = validating.operator_objects()
    (rule,) = policy_object["spec"]["matchConstraints"]["resourceRules"]
    assert rule["resources"] == ["pods", "pods/ephemeralcontainers", "configmaps"]
    assert rule["operations"] == ["CREATE", "UPDATE"]
