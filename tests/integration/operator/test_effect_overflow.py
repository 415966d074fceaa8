"""More unresolved effects than a slot shows, end to end over the real API server (no node).

Attempt 1's worker (the SDK as its pod) stops on eight effects, each recorded
``<key>.unresolved``; the operator shows the eight. A ninth record follows, written by the
pod's token without the SDK (which records no more than a slot shows), its key sorting
before the eight. Covers: the operator keeps deciding (it once raised on every reconcile
here): ``status.effectsNotShown`` is 1 and the condition counts it; after the pod fails
each of the eight is resolved through the command path, a resolve-effect of the ninth is
rejected NoUnresolvedEffect, the condition turns False (NotShown), and alice's claim
is accepted: attempt 2 carries the eight answers. Attempt 2's SDK re-sends the eight
and, meeting the ninth with no answer, records it again on its own Lease; the operator
shows it (the count back to 0), alice's answer is accepted, and her claim starts
attempt 3 carrying it.
"""

from __future__ import annotations

import pytest

from agentrun.worker import _effects as effects
from agentrun.worker import _records as records
from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, condition_of, request_id
from tests.support.waiting import wait_for

from .test_effect_unresolved import (
    CONDITION,
    RUN,
    Died,
    Owner,
    dies,
    ledger,
    manual_slot,
    pod_api,
    resolve,
)

KEYS = [f"k{n}" for n in range(8)]
NINTH = "a-first"  # sorts before the eight


def open_keys(status: dict[str, object]) -> list[tuple[str, int]]:
    found = status.get("effects") or []
    assert isinstance(found, list)
    return sorted((e["key"], e["attempt"]) for e in found if e["state"] == "Unresolved")


def test_nine_unresolved_effects_are_shown_counted_and_all_resolved(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = manual_slot(scenario)

    def claim() -> None:
        done = scenario.annotate(slot, user="alice", claim_id=(rid := request_id()))
        assert done.returncode == 0, done.stderr
        assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"

    claim()
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun(RUN)["metadata"]["uid"]

    first = ledger(scenario, slot=slot, attempt=1, run_uid=run_uid)
    for key in KEYS:
        with pytest.raises(Died):
            first.effect(key, key=key, call=dies, owner="publisher")
        with pytest.raises(effects.AmbiguousEffect, match="no reconcile"):
            first.effect(key, key=key, call=dies, owner="publisher")
    scenario.wait_slot(slot, lambda s: len(open_keys(s["status"])) == 8,
                       message="the eight in status.effects")
    ninth = records.make(key=f"{NINTH}.unresolved", kind=records.Kind.DECISION, attempt=1,
                         payload={"effect": NINTH, "owner": "publisher",
                                  "cause": "no-reconcile", "reason": "written by hand"})
    records.LeaseRecords(api=pod_api(scenario, f"{slot}-1"), namespace=scenario.namespace,
                         lease=f"{slot}-1", attempt=1).commit(ninth)
    counted = scenario.wait_slot(slot, lambda s: s["status"].get("effectsNotShown") == 1,
                                 message="the ninth counted")
    assert open_keys(counted["status"]) == [(k, 1) for k in KEYS]
    told = condition_of(counted["status"], CONDITION)
    assert told["status"] == "True" and "1 more unresolved effect" in told["message"]
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.wait_state(slot, "RetryWait")

    for key in KEYS:
        done = resolve(scenario, slot, user="alice", key=key, outcome="not-applied",
                       reason="no trace at the owner")
        assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    hidden = scenario.wait_ledger(slot, resolve(scenario, slot, user="alice", key=NINTH,
                                                outcome="applied", reason="not shown"))
    assert (hidden["outcome"], hidden["predicate"]) == ("Rejected", "NoUnresolvedEffect")
    status = scenario.slot(slot)["status"]
    told = condition_of(status, CONDITION)
    assert (told["status"], told["reason"]) == ("False", "NotShown")
    assert status["effectsNotShown"] == 1 and "1 more unresolved effect" in told["message"]

    claim()  # nothing shown is open: claims are accepted again
    lease = wait_for(lambda: scenario.lease(f"{slot}-2"), timeout=60,
                     message="attempt 2 claimed once the shown ones are answered")
    assert sorted(records.on_lease(lease)[0]) == sorted(f"{k}.resolved" for k in KEYS)
    wait_for(lambda: scenario.pod(f"{slot}-2"), timeout=60, message="attempt 2's pod")
    owner = Owner()
    second = ledger(scenario, slot=slot, attempt=2, run_uid=run_uid)
    for key in KEYS:
        second.effect(key, key=key, call=owner.call, owner="publisher")
    assert len(owner.applied) == 8 and {r[2] for r in owner.requests} == {2}
    with pytest.raises(effects.AmbiguousEffect, match="attempt 1 recorded it unresolved"):
        second.effect(NINTH, key=NINTH, call=owner.call, owner="publisher")
    shown = scenario.wait_slot(slot, lambda s: open_keys(s["status"]) == [(NINTH, 2)],
                               message="the ninth shown, as attempt 2's")
    assert shown["status"].get("effectsNotShown", 0) == 0
    scenario.finish(f"{slot}-2", "Failed", exit_code=1)
    scenario.wait_state(slot, "RetryWait")

    done = resolve(scenario, slot, user="alice", key=NINTH, outcome="applied",
                   reason="the owner's log has it", resolve_effect_result='"r-9"')
    assert scenario.wait_ledger(slot, done)["outcome"] == "Accepted"
    claim()
    lease = wait_for(lambda: scenario.lease(f"{slot}-3"), timeout=60,
                     message="attempt 3 claimed once the ninth is answered")
    answer = records.on_lease(lease)[0][f"{NINTH}.resolved"].inline
    assert (answer["answer"], answer["result"], answer["unresolvedAttempt"]) == (
        "applied", "r-9", 2)
    wait_for(lambda: scenario.pod(f"{slot}-3"), timeout=60, message="attempt 3's pod")
    third = ledger(scenario, slot=slot, attempt=3, run_uid=run_uid)
    assert third.effect(NINTH, key=NINTH, call=owner.call, owner="publisher") == "r-9"
    assert isinstance(third.steps.ledger, records.LeaseRecords)
    assert third.steps.ledger.read()[f"{NINTH}.outcome"].inline["via"] == "resolve-effect"
