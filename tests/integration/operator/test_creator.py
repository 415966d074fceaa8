"""A run's creator: stamped by admission, kept by it, verified once by the operator.

Against the real API server with the shipped stamping policy: alice creates a run whose
manifest names bob as its creator; admission stamps alice (and the epoch in force), and the
operator copies her into ``status.creator`` when it pins the run (CreatorVerified True).
Bob (an editor) then tries to overwrite the annotation and to remove it: both writes are
accepted and admission puts alice back; ``status.creator`` never changes.
"""

from __future__ import annotations

import json

from agentrun.api import names
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for


def annotations(scenario: Scenario) -> dict[str, str]:
    return dict(scenario.agentrun("study")["metadata"].get("annotations") or {})


def test_the_creator_is_stamped_kept_and_verified(scenario: Scenario,
                                                  operator: OperatorProcess) -> None:
    scenario.grant_editor("alice", "bob")
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    body = {"apiVersion": f"{names.GROUP}/{names.VERSION}", "kind": "AgentRun",
            "metadata": {"name": "study", "namespace": scenario.namespace,
                         "annotations": {names.CREATOR_ANNOTATION: "bob",
                                         names.CREATOR_EPOCH_ANNOTATION: "forged"}},
            "spec": {kind: {"name": "study"} for kind in names.CONFIG_KINDS}}
    created = scenario.cluster.kubectl("apply", "-f", "-", user="alice", input=json.dumps(body))
    assert created.returncode == 0, created.stderr
    stamped = annotations(scenario)
    assert stamped[names.CREATOR_ANNOTATION] == "alice"
    assert stamped[names.CREATOR_EPOCH_ANNOTATION] not in ("", "forged")

    run = wait_for(lambda: (found := scenario.agentrun("study")).get("status", {}).get(
        "creator") and found, timeout=60, message="the run pinned with its creator")
    assert run["status"]["creator"] == "alice"
    verified = condition_of(run["status"], "CreatorVerified")
    assert verified is not None and (verified["status"], verified["reason"]) == (
        "True", "Stamped")

    for change in (f"{names.CREATOR_ANNOTATION}=bob", f"{names.CREATOR_ANNOTATION}-",
                   f"{names.CREATOR_EPOCH_ANNOTATION}-"):
        result = scenario.cluster.kubectl("-n", scenario.namespace, "annotate", "--overwrite",
                                          "agentruns.agentrun.dev/study", change, user="bob")
        assert result.returncode == 0, result.stderr
        assert annotations(scenario) == stamped, change
    assert scenario.agentrun("study")["status"]["creator"] == "alice"
    # Not even an admin's status write can change it: the CRD decides it once, at pinning.
    forged = scenario.cluster.kubectl(
        "-n", scenario.namespace, "patch", "agentruns.agentrun.dev/study", "--subresource",
        "status", "--type", "merge", "-p", json.dumps({"status": {"creator": "bob"}}))
    assert forged.returncode != 0 and "status.creator is decided once" in forged.stderr, (
        forged.stderr)
    assert scenario.agentrun("study")["status"]["creator"] == "alice"
