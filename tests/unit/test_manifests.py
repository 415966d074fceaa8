"""The generated deployment manifests: no drift, and a stamp for every command's actor."""

from __future__ import annotations

from pathlib import Path

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
    assert launchspec_writes == []  # LaunchSpecs belong to GitOps; only their status is ours
    agentrun_writes = [r for r in rules if "agentruns" in r["resources"]
                       and set(r["verbs"]) - {"get", "list", "watch"}]
    assert agentrun_writes == []
