"""``core.policies.fencing``'s builders for an operator installed in any namespace (no
cluster): the policy names that namespace's ServiceAccount as the user it fences, the
leader Lease and the fencing token there (in its CEL and its params), and nothing of
another namespace; the token and the probe are written there. The plain manifests' build
(``agentrun-system``) is the default install's."""

from __future__ import annotations

import json

from agentrun import manifests
from agentrun.api import names
from agentrun.core.policies import fencing

NAMESPACE = "agentrun-ops"


def test_the_fence_names_the_operators_namespace_its_user_and_its_token() -> None:
    policy, binding = fencing.fence_policy(namespace=NAMESPACE)
    user = "system:serviceaccount:agentrun-ops:agentrun-operator"
    assert fencing.operator_user(namespace=NAMESPACE) == user
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert conditions["the-operator"] == f"request.userInfo.username == '{user}'"
    assert f"request.namespace == '{NAMESPACE}'" in conditions["not-the-election"]
    assert f"request.name == '{names.LEADER_LEASE}'" in conditions["not-the-election"]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert f"request.namespace == '{NAMESPACE}'" in variables["token"]
    assert f"request.name == '{names.LEADER_SECRET}'" in variables["token"]
    messages = [v["messageExpression"] for v in policy["spec"]["validations"]]
    assert all(f"{NAMESPACE}/{names.LEADER_SECRET}" in m for m in messages)
    assert binding["spec"]["paramRef"] == {"name": names.LEADER_SECRET, "namespace": NAMESPACE,
                                           "parameterNotFoundAction": "Allow"}
    assert names.OPERATOR_NAMESPACE not in json.dumps([policy, binding])


def test_the_token_and_the_probe_are_written_in_the_operators_namespace() -> None:
    token = fencing.token_body(identity="pod-a", term=3, resource_version=None,
                               namespace=NAMESPACE)
    assert (token["metadata"]["namespace"], token["metadata"]["name"]) == (
        NAMESPACE, names.LEADER_SECRET)
    assert fencing.token_names(token) == ("pod-a", 3)
    probe = fencing.probe_body("pod-a", namespace=NAMESPACE)
    assert probe["metadata"]["namespace"] == probe["involvedObject"]["namespace"] == NAMESPACE


def test_the_plain_manifests_fence_the_default_namespaces_operator() -> None:
    """``manifests/`` installs in agentrun-system: its fence names that ServiceAccount,
    spelt out as the API server compares it."""
    policy, binding = manifests.fence_policy()
    conditions = {c["name"]: c["expression"] for c in policy["spec"]["matchConditions"]}
    assert conditions["the-operator"] == ("request.userInfo.username == "
                                          "'system:serviceaccount:agentrun-system:agentrun-operator'")
    assert binding["spec"]["paramRef"]["namespace"] == "agentrun-system"


def test_the_stamping_params_are_in_the_operators_namespace() -> None:
    (binding,) = [d for d in manifests.mutating_policies(namespace=NAMESPACE)
                  if d["kind"] == "MutatingAdmissionPolicyBinding"
                  and d["metadata"]["name"] == names.STAMP_POLICY]
    assert binding["spec"]["paramRef"]["namespace"] == NAMESPACE
