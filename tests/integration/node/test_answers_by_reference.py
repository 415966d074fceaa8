"""An answer larger than the answer command's field holds, by reference, on real pods.

A worker (the SDK in the project's image, its run on the cluster's journal) asks a question
whose answer is a long text. alice (``edit`` in the namespace) answers with ``kubectl
agentrun answer --file``: 3 KiB, past the 512 bytes ``answer-value`` holds, so the plugin
writes an immutable ConfigMap and sends ``answer-value-from`` naming it with the value's
sha256. Covers: the operator reads it, checks it against the question's schema and
accepts it; the slot keeps the reference, not the value; attempt 2's Pod mounts it, its
Lease names the file and digest, and the worker gets the answer byte for byte (and
commits it as its step, by reference in the journal).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentrun.worker import _records as records
from tests.integration.node import stale, test_journal
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import (
    OWNER_ENV,
    grant_worker_role,
    printed,
    real_launch_spec,
)
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, condition_of, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
installed = operator_fixtures.installed
journaled = test_journal.journaled  # the operator, pinning the cluster's store on each run
__all__ = ["installed", "journaled"]  # fixtures this module takes from others
SCHEMA = {"type": "object", "required": ["text"], "properties": {"text": {"type": "string"}}}
SCRIPT = f"""
from agentrun.worker import QuestionAsked
with Worker.from_env(commit_delay=0) as worker:
    try:
        say(answer=worker.ask("brief", "What should the report say?", schema={SCHEMA!r}))
    except QuestionAsked as asked:
        say(asked=asked.key)
"""
ANSWER = {"text": "Say what fails, and what a successor needs. " * 70}  # about 3 KiB


def claimed(scenario: Scenario, slot: str) -> None:
    rid = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=rid).returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"


def test_a_large_answer_travels_by_reference_and_reaches_the_worker_byte_for_byte(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        tmp_path: Path) -> None:
    grant_worker_role(scenario)
    scenario.grant_edit("alice")  # edit: the plugin writes the answer's ConfigMap
    scenario.configs()
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=worker_image,
                     script=stale.PRELUDE + SCRIPT, renewer=False,
                     env={OWNER_ENV: "http://127.0.0.1:9"})  # the prelude's; no effect here
    scenario.run("study", user="alice", claim_policy="Manual", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    claimed(scenario, slot)
    scenario.wait_slot(slot, lambda s: (condition_of(s["status"], "QuestionPending") or {})
                       .get("status") == "True", message="the question shown", timeout=120)

    given = tmp_path / "answer.json"
    given.write_text(json.dumps(ANSWER))
    answered = plugin(cluster, scenario, "answer", slot, "--key", "brief", "--file",
                      str(given), "--reason", "the brief, in full", "-o", "json")
    assert answered.returncode == 0, (answered.stdout, answered.stderr)
    assert "sent by reference: ConfigMap agentrun-answer-" in answered.stderr
    [entry] = scenario.slot(slot)["status"]["questions"]
    assert entry["state"] == "Answered" and "value" not in entry, entry
    configmap = entry["valueFrom"].split("/", 1)[0]
    assert scenario.core.read_namespaced_config_map(configmap, scenario.namespace).immutable

    claimed(scenario, slot)
    second = f"{slot}-2"
    lease = wait_for(lambda: scenario.lease(second), timeout=60, message="attempt 2's Lease")
    handed = records.on_lease(lease)[0]["brief.answer"].inline
    assert isinstance(handed, dict) and handed["valueFrom"]["configMap"] == configmap
    pod = scenario.pod(second)
    assert pod is not None
    assert any((v.get("configMap") or {}).get("name") == configmap
               for v in pod["spec"]["volumes"]), pod["spec"]["volumes"]
    said = wait_for(lambda: next((p for p in printed(scenario, second) if "answer" in p),
                                 None), timeout=120, message="attempt 2 got the answer")
    assert said["answer"] == ANSWER
    assert scenario.wait_state(slot, "Succeeded", timeout=60)["status"]["attempts"][-1][
        "outcome"] == "Succeeded"
