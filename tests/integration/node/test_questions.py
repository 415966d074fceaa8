"""A question a worker asks a person, on real pods, as the local cluster's alice and bob.

The example agent with ``review: true`` asks before publishing (question ``review``, a
JSON Schema of ``{"publish": bool, "note": str}``). Attempt 1 (alice's claim) commits the
question on its Lease and is SIGKILLed there, before it could exit. Covers: the attempt ends
``Asked`` (not Failed) and the slot shows QuestionPending with the question, its schema and
its digest (status.questions), no attempt counted against maxAttempts and no Pod or Lease
of attempt 2; through the plugin: a value that is not JSON refused with exit 2 before any
write, a schema violation refused with the schema's message (AnswerInvalid) and nothing
changed, bob's answer on alice's slot refused (NotOwner); alice's answer accepted, the slot
reopened and still no Pod or Lease until her claim; attempt 2's Lease carries the answer,
the agent gets it byte for byte, skips every step attempt 1 committed and publishes once.
"""

from __future__ import annotations

import json

import pytest

from agentrun.api import questions
from agentrun.examples.research_report import REVIEW_SCHEMA
from agentrun.worker import _records as records
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import (
    agent_configs,
    agent_events,
    agent_launch_spec,
    grant_worker_role,
    kill_when_paused,
    wait_pod_phase,
)
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario, condition_of, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
CONDITION = "QuestionPending"
ANSWER = '{"note": "checked the sources", "publish": true}'


def test_a_question_waits_for_its_owners_answer_and_the_next_attempt_gets_it(
        cluster: Cluster, scenario: Scenario, operator: OperatorProcess, worker_image: str,
        node: LocalNode, owner: EffectOwner) -> None:
    scenario.grant_editor("alice", "bob")
    grant_worker_role(scenario)
    agent_configs(scenario, owner_url=owner.url, review=True)
    agent_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image,
                      pause="after-ask:review@1")
    scenario.run("study", user="alice", claim_policy="Manual", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    rid = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=rid).returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    first = f"{slot}-1"
    kill_when_paused(scenario, node, first, point="after-ask:review")
    asked = [e for e in agent_events(scenario, first) if e["event"] == "asked"]
    assert [e["key"] for e in asked] == ["review"], asked

    shown = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION) or {})
                               .get("status") == "True", message="QuestionPending True",
                               timeout=120)
    status = shown["status"]
    assert (status["state"], status["attempts"][-1]["outcome"], status["askedAttempts"]) == (
        "RetryWait", "Asked", 1)
    assert "retryAt" not in status and condition_of(status, "AwaitingReassignment") is None
    [entry] = status["questions"]
    assert (entry["key"], entry["state"], entry["attempt"]) == ("review", "Pending", 1)
    assert entry["question"].startswith("Publish the report")
    assert json.loads(entry["jsonSchema"]) == REVIEW_SCHEMA
    assert entry["digest"] == questions.digest(question=entry["question"], schema=REVIEW_SCHEMA)
    assert entry["digest"] == asked[0]["digest"]
    message = condition_of(status, CONDITION)["message"]
    for text in (entry["question"], entry["digest"], '"publish"', "kubectl agentrun answer"):
        assert text in message, (text, message)
    second = f"{slot}-2"
    assert scenario.lease(second) is None and scenario.pod(second) is None

    # Through the plugin: not JSON (exit 2, nothing written), the schema refuses, bob may not.
    ledger = len(status["commands"])
    bad = plugin(cluster, scenario, "answer", slot, "--key", "review", "--value", "yes",
                 "--reason", "go")
    assert bad.returncode == 2 and "--value must be JSON text" in bad.stderr, bad.stderr
    assert len(scenario.slot(slot)["status"]["commands"]) == ledger
    invalid = plugin(cluster, scenario, "answer", slot, "--key", "review", "--value",
                     '{"publish": "yes"}', "--reason", "go", "-o", "json")
    assert invalid.returncode == 1, (invalid.stdout, invalid.stderr)
    entry_json = json.loads(invalid.stdout)["entry"]
    assert entry_json["predicate"] == "AnswerInvalid", entry_json
    assert "'yes' is not of type 'boolean' (at /publish)" in entry_json["message"]
    bob = plugin(cluster, scenario, "answer", slot, "--key", "review", "--value", ANSWER,
                 "--reason", "looks fine to me", user="bob")
    assert bob.returncode == 1 and "Rejected (NotOwner)" in bob.stdout, bob.stdout
    unchanged = scenario.slot(slot)["status"]
    assert unchanged["questions"] == status["questions"]
    assert scenario.lease(second) is None and scenario.pod(second) is None

    accepted = plugin(cluster, scenario, "answer", slot, "--key", "review", "--value", ANSWER,
                      "--reason", "the sources check out")
    assert accepted.returncode == 0, (accepted.stdout, accepted.stderr)
    reopened = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], "Reopened") or {})
                                  .get("status") == "True", message="Reopened")["status"]
    assert reopened["questions"][0]["state"] == "Answered"
    assert reopened["questions"][0]["actor"] == "alice"
    assert (condition_of(reopened, CONDITION) or {})["status"] == "False"
    assert scenario.lease(second) is None and scenario.pod(second) is None  # until the claim

    rid = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=rid).returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    lease = wait_for(lambda: scenario.lease(second), timeout=60, message="attempt 2's Lease")
    delivered = records.on_lease(lease)[0]["review.answer"].inline
    assert isinstance(delivered, dict)
    assert records.canonical(delivered["value"]) == records.canonical(json.loads(ANSWER))
    assert (delivered["digest"], delivered["actor"]) == (entry["digest"], "alice")
    ended = wait_pod_phase(scenario, second, {"Succeeded", "Failed"}, timeout=150)
    events = agent_events(scenario, second)
    assert ended["status"]["phase"] == "Succeeded", events
    reviewed = [e for e in events if e["event"] == "reviewed"]
    assert [e["answer"] for e in reviewed] == [json.loads(ANSWER)], events
    steps = {e["key"]: e["status"] for e in events if e["event"] == "step"}
    assert steps == {"source-1": "skipped", "source-2": "skipped", "source-3": "skipped",
                     "decision": "skipped", "report": "skipped"}, events
    assert list(owner.applied.values()) == [1]
    done = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert [a["outcome"] for a in done["attempts"]] == ["Asked", "Succeeded"]
    print(f"ROW question | attempt 1 asked and was killed; shown with digest "
          f"{entry['digest'][:12]}; not-JSON exit 2, schema AnswerInvalid, bob NotOwner; "
          f"alice's answer reopened; attempt 2 got it and published once (maxAttempts 1)")
