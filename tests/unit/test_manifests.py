"""The generated deployment manifests: no drift, and a stamp for every command's actor."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentrun import manifests
from agentrun.core import commands

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


def test_files_match_the_generator() -> None:
    assert manifests.main(["--out", str(MANIFESTS), "--check"]) == 0


def test_every_command_kind_has_its_actor_stamped() -> None:
    policy, binding = manifests.stamp_policy()
    expressions = [m["jsonPatch"]["expression"] for m in policy["spec"]["mutations"]]
    for shape in commands.SHAPES:
        stamps = [e for e in expressions if f"'{shape.id}' in variables.new" in e]
        assert len(stamps) == 1, shape.kind
        assert shape.actor.replace("/", "~1") in stamps[0]
        assert "request.userInfo.username" in stamps[0]
        # A change to any of the command's annotations, the actor included, restamps it.
        for key in shape.keys:
            assert f"'{key}'" in stamps[0]
    assert binding["spec"]["policyName"] == policy["metadata"]["name"]


def test_the_operator_runs_alone_and_recreates() -> None:
    documents = list(yaml.safe_load_all((MANIFESTS / "deploy" / "operator.yaml").read_text()))
    deployment = next(d for d in documents if d["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "agentrun-operator"


def test_operator_rbac_never_writes_specs_it_does_not_own() -> None:
    rules = manifests.OPERATOR_RULES
    launchspec_writes = [r for r in rules if "launchspecs" in r["resources"]
                         and set(r["verbs"]) - {"get", "list", "watch"}]
    assert launchspec_writes == []  # LaunchSpecs belong to GitOps
    agentrun_writes = [r for r in rules if "agentruns" in r["resources"]
                       and set(r["verbs"]) - {"get", "list", "watch"}]
    assert agentrun_writes == []


def documents(relative: str) -> list[dict[str, Any]]:
    return list(yaml.safe_load_all((MANIFESTS / relative).read_text()))


def test_the_shipped_binding_names_only_the_service_account() -> None:
    binding = next(d for d in documents("rbac/operator.yaml")
                   if d["kind"] == "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "agentrun-operator",
                                    "namespace": "agentrun-system"}]


def test_the_local_file_binds_only_the_local_operator_user() -> None:
    (binding,) = documents("local/operator-user.yaml")
    assert binding["kind"] == "ClusterRoleBinding"
    assert binding["metadata"]["name"] == "agentrun-operator-local-user"
    assert binding["roleRef"]["name"] == "agentrun-operator"
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                                    "name": "operator"}]


def test_operator_writes_only_the_status_it_owns() -> None:
    status_writes = {resource for r in manifests.OPERATOR_RULES for resource in r["resources"]
                     if resource.endswith("/status") and set(r["verbs"]) - {"get"}}
    # launchspecs/status: the validity condition and the pins (GitOps owns the spec).
    assert status_writes == {"agentruns/status", "slots/status", "launchspecs/status"}
    (namespaces,) = [r for r in manifests.OPERATOR_RULES if "namespaces" in r["resources"]]
    assert namespaces["verbs"] == ["get", "list", "watch"]  # Kopf resolves namespace globs
