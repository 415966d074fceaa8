"""A question's deadline, against a real API server, with a crash after the expiry's write.

Attempt 1's worker (its pod's own token, the SDK's record writer) commits ``plan.question``
with a 2 s deadline and a default answer, and its pod ends. Covers: the attempt ends
``Asked`` and the question is shown; the operator is SIGKILLed right after the deadline's
status write (``question-expired``); that write holds the question Expired with the
default as its value, the ledger entry ``deadline.plan.1`` and the slot reopened; the
restarted operator claims attempt 2 (the run is Automatic) whose Lease carries
``plan.answer`` (the default, ``expired: true``), with one ledger entry and one Lease and
Pod per attempt.
"""

from __future__ import annotations

from agentrun.api import names, questions
from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import assert_converged, assert_nothing_stray, crashed
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

from .test_effect_unresolved import RUN, pod_api, publish


def test_crash_after_a_question_expires_with_its_default(
        scenario: Scenario, cluster: Cluster, process: OperatorProcess) -> None:
    publish(scenario)
    process.start(crash_at="question-expired")
    scenario.run(RUN, max_attempts=3)  # Automatic, backoff 0
    slot = scenario.slot_name_eventually(RUN, "research")
    scenario.wait_state(slot, "Active")
    payload = {"question": "Go on?", "schema": {"type": "boolean"}, "deadlineSeconds": 2,
               "onExpiry": "default", "default": True}
    own = records.LeaseRecords(api=pod_api(scenario, f"{slot}-1"), namespace=scenario.namespace,
                               lease=f"{slot}-1", attempt=1)
    own.commit(records.make(key="plan.question", kind=records.Kind.DECISION, attempt=1,
                            payload=payload))
    scenario.finish(f"{slot}-1", "Succeeded", exit_code=0)
    crashed(process)

    written = scenario.slot(slot)["status"]
    assert written["attempts"][-1]["outcome"] == "Asked"
    [entry] = written["questions"]
    assert (entry["state"], entry["value"], entry["onExpiry"]) == ("Expired", "true", "default")
    assert entry["digest"] == questions.digest(question="Go on?", schema={"type": "boolean"})
    assert [c["requestId"] for c in written["commands"]] == ["deadline.plan.1"]
    assert condition_of(written, "Reopened")["reason"] == "Answered"
    assert condition_of(written, names.QUESTION_PENDING_CONDITION)["status"] == "False"

    process.start()
    lease = wait_for(lambda: scenario.lease(f"{slot}-2"), timeout=60,
                     message="attempt 2 claimed with the default answer")
    answer = records.on_lease(lease)[0]["plan.answer"].inline
    assert isinstance(answer, dict)
    assert (answer["value"], answer["expired"], answer["digest"]) == (True, True, entry["digest"])
    scenario.wait_state(slot, "Active")
    after = scenario.slot(slot)["status"]
    assert [c["requestId"] for c in after["commands"]] == ["deadline.plan.1"]  # once
    assert after["askedAttempts"] == 1
    assert_converged(scenario, cluster, slot, count=2, state="Active")
    assert_nothing_stray(scenario)
