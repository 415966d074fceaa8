"""The seed's interruption points with the example agent on real pods.

Each attempt is a real pod running ``python3 -m agentrun.examples.research_report`` (the
SDK renews the Lease, commits every step on it, publishes to the test's effect owner on
the node bridge's address). The fault hook (``AGENTRUN_EXAMPLE_PAUSE=<point>@1``) makes
attempt 1 announce and block at the point; the test then SIGKILLs its container from
the host and the successor is attempt 2, by the run's automatic retry (backoff 0) or,
where a person's commands are the point, by a claim. What each successor did is read
from its printed event lines, the Leases' records and the owner's request log
(:attr:`EffectOwner.requests`, in order): a successor must skip what was committed,
repeat what was not, ask the owner (GET) before it sends anything (POST), and the owner
must apply the publication once, under one idempotency key across attempts.
"""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest

from agentrun.worker import _effects as effects
from agentrun.worker import _records as records
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    agent_configs,
    agent_events,
    agent_launch_spec,
    grant_worker_role,
    kill_when_paused,
    wait_pod_phase,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
SOURCES = ["source-1", "source-2", "source-3"]
STEPS = [*SOURCES, "decision", "report"]




def launched(scenario: Scenario, owner: EffectOwner, *, image: str, pause: str,
             **run: Any) -> str:
    """A one-node run of the agent whose attempt 1 pauses at ``pause``; its slot."""
    grant_worker_role(scenario)
    agent_configs(scenario, owner_url=owner.url)
    agent_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=image, pause=pause)
    scenario.run("study", **{"max_attempts": 2, "initial_backoff": 0, **run})
    return scenario.slot_name_eventually("study", "research")


def interrupted(scenario: Scenario, owner: EffectOwner, node: LocalNode, *, image: str,
                point: str, **run: Any) -> tuple[str, str, str]:
    """A run whose attempt 1 was SIGKILLed at ``point``: its slot, attempts 1 and 2."""
    slot = launched(scenario, owner, image=image, pause=f"{point}@1", **run)
    kill_when_paused(scenario, node, f"{slot}-1", point=point)
    return slot, f"{slot}-1", f"{slot}-2"


def succeeded(scenario: Scenario, pod: str) -> list[dict[str, Any]]:
    """The events of ``pod``, once it has succeeded."""
    ended = wait_pod_phase(scenario, pod, {"Succeeded", "Failed"}, timeout=150)
    events = agent_events(scenario, pod)
    assert ended["status"]["phase"] == "Succeeded", events
    assert events[-1]["event"] == "finished", events
    return events


def statuses(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["key"]: e["status"] for e in events if e["event"] == "step"}


def lease_records(scenario: Scenario, lease: str) -> dict[str, records.Record]:
    found = scenario.lease(lease)
    assert found is not None, lease
    committed, unreadable = records.on_lease(found)
    assert unreadable == [], unreadable
    return committed


def row(point: str, owner: EffectOwner, events: list[dict[str, Any]]) -> None:
    """One row of the interruption table (printed; the closing note quotes them)."""
    steps = statuses(events)
    requests = " ".join(f"{r.method}" + (f"(token {r.token})" if r.token else "")
                        for r in owner.requests)
    print(f"ROW {point} | successor ran {sum(v == 'ran' for v in steps.values())}, skipped "
          f"{sum(v == 'skipped' for v in steps.values())} of {len(steps)} steps | owner: "
          f"{requests} | applied {sorted(owner.applied.values())}")


def published(owner: EffectOwner, events: list[dict[str, Any]]) -> str:
    """The one idempotency key the owner applied, once; the events' effect says so too."""
    (key,) = owner.applied
    assert owner.applied == {key: 1}
    assert [e["event"] for e in events if e["event"].startswith("effect")][-1] == "effect"
    return key


def settled(scenario: Scenario, owner: EffectOwner, events: list[dict[str, Any]], *,
            lease: str, key: str, answer: str, via: str) -> None:
    """The successor asked the owner once (``answer``), settled the effect by ``via``,
    recorded that as the outcome on its ``lease``, and ``key`` was applied once."""
    assert [e.get("answer") for e in events if e["event"] == "effect-reconciled"] == [answer]
    assert [e["via"] for e in events if e["event"] == "effect"] == [via]
    assert published(owner, events) == key
    outcome = records.payload(lease_records(scenario, lease)["publish.outcome"], store=None)
    assert isinstance(outcome, dict) and outcome["via"] == via


def test_killed_at_start_the_successor_does_every_step(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    slot, first, second = interrupted(scenario, owner, node, image=worker_image,
                                      point="start")
    assert [e["event"] for e in agent_events(scenario, first)] == ["started", "paused"]

    events = succeeded(scenario, second)
    assert lease_records(scenario, first) == {}
    assert statuses(events) == dict.fromkeys(STEPS, "ran")
    key = published(owner, events)
    assert [(r.method, r.token) for r in owner.requests] == [("POST", 2)]
    assert key == effects.idempotency_key(run_uid=scenario.agentrun("study")["metadata"]["uid"],
                                          slot=slot, key="publish")
    row("start", owner, events)
    attempts = scenario.wait_state(slot, "Succeeded")["status"]["attempts"]
    assert [(a["outcome"], a.get("exitCode")) for a in attempts] == [
        ("Failed", 137), ("Succeeded", 0)]


def test_a_committed_tool_result_is_skipped_and_an_uncommitted_one_repeated(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    _, first, second = interrupted(scenario, owner, node, image=worker_image,
                                   point="before-commit:source-2")
    assert statuses(agent_events(scenario, first)) == {"source-1": "ran"}  # source-2 obtained

    events = succeeded(scenario, second)
    assert statuses(events) == {"source-1": "skipped", "source-2": "ran", "source-3": "ran",
                                "decision": "ran", "report": "ran"}
    assert events[-1]["skipped"] == ["source-1"]
    assert set(lease_records(scenario, first)) == {"source-1"}
    mine = lease_records(scenario, second)
    assert {"source-2", "source-3", "decision", "report"} <= set(mine)
    assert "source-1" not in mine and mine["source-2"].attempt == 2
    assert mine["source-2"].kind is records.Kind.SOURCE_NOTES
    published(owner, events)
    assert [(r.method, r.token) for r in owner.requests] == [("POST", 2)]
    row("before-commit:source-2", owner, events)


def test_killed_after_the_intent_the_successor_reconciles_then_resends_the_same_key(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    _, first, second = interrupted(scenario, owner, node, image=worker_image,
                                   point="after-intent:publish")
    assert owner.requests == []  # the call never left attempt 1
    intent = records.payload(lease_records(scenario, first)["publish.intent"], store=None)
    assert isinstance(intent, dict) and intent["fencingToken"] == 1

    events = succeeded(scenario, second)
    assert set(statuses(events).values()) == {"skipped"}
    assert [(r.method, r.key, r.token) for r in owner.requests] == [
        ("GET", intent["idempotencyKey"], None), ("POST", intent["idempotencyKey"], 2)]
    settled(scenario, owner, events, lease=second, key=intent["idempotencyKey"],
            answer="not-applied", via="call")
    row("after-intent:publish", owner, events)


def test_killed_after_the_call_the_successor_reconciles_and_never_resends(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    _, first, second = interrupted(scenario, owner, node, image=worker_image,
                                   point="after-call:publish")
    (sent,) = owner.requests
    assert (sent.method, sent.token, sent.status) == ("POST", 1, 200)
    assert "publish.outcome" not in lease_records(scenario, first)

    events = succeeded(scenario, second)
    assert [(r.method, r.key) for r in owner.requests] == [("POST", sent.key),
                                                           ("GET", sent.key)]
    assert not [e for e in events if e["event"] == "effect-sent"]
    settled(scenario, owner, events, lease=second, key=sent.key, answer="applied",
            via="reconcile")
    row("after-call:publish", owner, events)


def test_the_operator_killed_during_retry_wait_loses_no_attempt(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    """SIGKILL of the operator while the slot waits out its backoff, then a restart: one
    successor (pod and lease ``-2``), attempt 1's record kept, one publication."""
    slot, first, second = interrupted(scenario, owner, node, image=worker_image,
                                      point="start", initial_backoff=20)
    waiting = scenario.wait_state(slot, "RetryWait", timeout=60)["status"]
    assert waiting.get("retryAt"), waiting
    assert operator.process is not None
    os.killpg(operator.process.pid, signal.SIGKILL)
    wait_for(lambda: not operator.alive, timeout=10, message="the operator killed")
    assert scenario.slot(slot)["status"]["state"] == "RetryWait"
    assert scenario.pods() == [first]
    operator.start()

    events = succeeded(scenario, second)
    final = scenario.wait_state(slot, "Succeeded")["status"]
    assert final["attemptCount"] == 2
    assert [(a["outcome"], a.get("exitCode")) for a in final["attempts"]] == [
        ("Failed", 137), ("Succeeded", 0)]
    assert scenario.pods() == [first, second] and scenario.leases() == [first, second]
    assert statuses(events) == dict.fromkeys(STEPS, "ran")
    published(owner, events)
    row("retry wait: operator SIGKILLed", owner, events)


@pytest.mark.parametrize("order", ["one-write", "claim-decided-first"])
def test_a_reassignment_racing_a_claim_makes_one_successor(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner, order: str) -> None:
    """A claim and a reassignment (to gpu) for a RetryWait slot: one attempt 2 (one pod,
    one lease) whichever the operator decides first, and the ledger has both. In one
    write the operator decides the reassignment first (commands.ORDER), so the claim makes
    attempt 2 from the gpu spec; with the claim decided first, the reassignment finds the
    slot no longer RetryWait and its ledger entry says so."""
    scenario.grant_editor("alice")
    agent_launch_spec(scenario, "gpu-workers", classes=["gpu"], image=worker_image)
    slot = launched(scenario, owner, image=worker_image, pause="start@1", user="alice",
                    claim_policy="Manual", max_attempts=3)
    first, second = f"{slot}-1", f"{slot}-2"
    scenario.wait_state(slot, "Ready")
    claim = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim).returncode == 0
    assert scenario.wait_ledger(slot, claim)["outcome"] == "Accepted"
    kill_when_paused(scenario, node, first, point="start")
    scenario.wait_state(slot, "RetryWait", timeout=60)

    claim2, reassign = request_id(), request_id()
    reassignment = {"reassign_id": reassign, "reassign_run": "study",
                    "reassign_worker_class": "gpu", "reassign_reason": "racing the claim"}
    if order == "one-write":
        assert scenario.annotate(slot, user="alice", claim_id=claim2,
                                 **reassignment).returncode == 0
    else:
        assert scenario.annotate(slot, user="alice", claim_id=claim2).returncode == 0
        scenario.wait_ledger(slot, claim2)
        assert scenario.annotate(slot, user="alice", **reassignment).returncode == 0
    claimed = scenario.wait_ledger(slot, claim2)
    reassigned = scenario.wait_ledger(slot, reassign)
    events = succeeded(scenario, second)
    assert claimed["outcome"] == "Accepted", claimed
    pod = scenario.pod(second)
    assert pod is not None
    spec = pod["metadata"]["labels"]["example/spec"]
    assert reassigned["outcome"] == ("Accepted" if order == "one-write" else "Rejected")
    if reassigned["outcome"] == "Rejected":  # the claim came first: nothing to reopen
        assert reassigned["predicate"] == "NotRetryWait", reassigned
        assert "not RetryWait" in reassigned["message"], reassigned
        assert spec == "cpu-workers"
    else:  # the reassignment came first: the claim made attempt 2 from the gpu spec
        assert reassigned["outcome"] == "Accepted", reassigned
        assert spec == "gpu-workers"
    print(f"race: reassignment {reassigned['outcome']}, attempt 2 from {spec}")
    final = scenario.wait_state(slot, "Succeeded")["status"]
    assert final["attemptCount"] == 2
    assert scenario.pods() == [first, second] and scenario.leases() == [first, second]
    published(owner, events)
    row(f"retry wait: reassignment racing a claim ({order})", owner, events)

