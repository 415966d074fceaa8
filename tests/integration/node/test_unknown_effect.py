"""An effect nobody can answer for, on real pods.

The example agent's attempt 1 is SIGKILLed after its publish intent; the owner has lost
track of that key (it answers ``unknown``). Attempt 2 asks, hears "unknown", records
``publish.unresolved`` and stops (exit 3) without sending anything. Covers, on the real
node: the slot shows ``EffectUnresolved`` naming the effect, its key and its owner; a
reassignment is accepted and does not clear it; a claim is refused while it stands; a
``resolve-effect`` by the slot's owner actor (``not-applied``: the owner's own records
show nothing) clears it; attempt 3 then proceeds from that answer: it re-sends with the
same idempotency key without asking again, and the owner applies the publication once.
"""

from __future__ import annotations

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
from tests.support.plays.scenarios import Scenario, condition_of, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
CONDITION = "EffectUnresolved"




def claimed(scenario: Scenario, slot: str, attempt: int) -> str:
    """Alice's claim, accepted; the attempt's pod name."""
    rid = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=rid).returncode == 0
    entry = scenario.wait_ledger(slot, rid)
    assert entry["outcome"] == "Accepted", entry
    return f"{slot}-{attempt}"


def test_an_unknown_effect_waits_for_a_person_and_the_successor_uses_the_answer(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    scenario.grant_editor("alice", "bob")
    grant_worker_role(scenario)
    agent_configs(scenario, owner_url=owner.url)
    agent_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image,
                      pause="after-intent:publish@1")
    scenario.run("study", user="alice", claim_policy="Manual", max_attempts=4)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    first = claimed(scenario, slot, 1)
    run_uid = scenario.agentrun("study")["metadata"]["uid"]
    idem = effects.idempotency_key(run_uid=run_uid, slot=slot, key="publish")
    owner.unknown.add(idem)  # the owner lost track of this key
    kill_when_paused(scenario, node, first, point="after-intent:publish")

    scenario.wait_state(slot, "RetryWait", timeout=90)
    second = claimed(scenario, slot, 2)
    ended = wait_pod_phase(scenario, second, {"Succeeded", "Failed"}, timeout=150)
    events = agent_events(scenario, second)
    assert ended["status"]["phase"] == "Failed", events
    assert events[-1]["event"] == "stopped" and events[-1]["idempotencyKey"] == idem, events
    assert [(r.method, r.key) for r in owner.requests] == [("GET", idem)]  # asked, never sent
    unresolved = records.on_lease(scenario.lease(second) or {})[0]["publish.unresolved"]
    assert unresolved.attempt == 2

    shown = scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION) or {})
                               .get("status") == "True", message="EffectUnresolved True",
                               timeout=90)
    found = condition_of(shown["status"], CONDITION)
    assert found is not None and found["reason"] == "OwnerAnswerUnknown", found
    for text in ("record key publish", idem, "agentrun.dev/resolve-effect-key=publish"):
        assert text in found["message"], (text, found["message"])
    assert [(e["key"], e["state"], e["idempotencyKey"]) for e in shown["status"]["effects"]] \
        == [("publish", "Unresolved", idem)]

    # A reassignment is accepted and leaves it standing; a claim is refused while it does.
    scenario.wait_state(slot, "RetryWait", timeout=90)  # attempt 2 ended (it was shown before)
    rid = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=rid, reassign_run="study",
                             reassign_worker_class="cpu",
                             reassign_reason="retry on a fresh worker").returncode == 0
    entry = scenario.wait_ledger(slot, rid)
    assert entry["outcome"] == "Accepted", entry
    assert (condition_of(scenario.slot(slot)["status"], CONDITION) or {})["status"] == "True"
    rid = request_id()  # the operator's ledger decides it (admission's copy is not installed)
    assert scenario.annotate(slot, user="alice", claim_id=rid).returncode == 0
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "EffectUnresolved"), entry
    assert scenario.lease(f"{slot}-3") is None

    # The owner checked its own log: never applied. Bob may not say so; alice, the owner, may.
    owner.unknown.discard(idem)
    rid = request_id()
    assert scenario.annotate(slot, user="bob", resolve_effect_id=rid,
                             resolve_effect_key="publish", resolve_effect_outcome="not-applied",
                             resolve_effect_reason="I think it never went out").returncode == 0
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "NotOwner"), entry
    rid = request_id()
    assert scenario.annotate(slot, user="alice", resolve_effect_id=rid,
                             resolve_effect_key="publish", resolve_effect_outcome="not-applied",
                             resolve_effect_reason="the owner's log has no such key"
                             ).returncode == 0
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    scenario.wait_slot(slot, lambda s: (condition_of(s["status"], CONDITION) or {})
                       .get("status") == "False", message="EffectUnresolved False")

    third = claimed(scenario, slot, 3)
    lease = wait_for(lambda: scenario.lease(third), timeout=60, message="attempt 3's Lease")
    assert records.on_lease(lease)[0]["publish.resolved"].inline["answer"] == "not-applied"
    ended = wait_pod_phase(scenario, third, {"Succeeded", "Failed"}, timeout=150)
    events = agent_events(scenario, third)
    assert ended["status"]["phase"] == "Succeeded", events
    assert [e["event"] for e in events if e["event"] == "effect-reconciled"] == []  # not asked
    assert [(r.method, r.key, r.token) for r in owner.requests] == [
        ("GET", idem, None), ("POST", idem, 3)]
    assert owner.applied == {idem: 1}
    scenario.wait_state(slot, "Succeeded", timeout=60)
    print(f"ROW unknown effect | attempt 2 asked once, stopped; reassignment kept "
          f"{CONDITION}; resolve-effect not-applied; attempt 3 re-sent with the same key "
          f"| owner: {[(r.method, r.token) for r in owner.requests]} | applied 1")
