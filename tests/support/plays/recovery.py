"""The seed paper's recovery trace, played against whichever operator serves the namespace.

"A research worker is assigned slot q in run R. Its attempt reaches a terminal outcome,
and q enters retry-wait while retaining the prior-worker reference. An authorized caller
submits a reassignment command with a reason and requested worker class. [...] No worker
or lease has been created at this point. [...] A later claim performs the separate
creation step."

``alice`` and ``bob`` both hold an editor Role in the namespace, so it is the owner-actor
rule, not RBAC, that stops ``bob``. The run is ``claimPolicy: Manual`` so that the
reopened-but-unclaimed state can be observed. Used by
``tests/integration/operator/test_recovery_trace.py`` (the operator as a subprocess) and
``tests/integration/node/test_chart.py`` (the operator the Helm chart installed).
"""

from __future__ import annotations

import time

from tests.support.plays.scenarios import Scenario, condition, request_id, unchanged
from tests.support.waiting import wait_for

ANN = "agentrun.dev/"


def play_recovery_trace(scenario: Scenario) -> str:
    """Play the trace in ``scenario``'s namespace, asserting each step; the slot's name."""
    started = time.monotonic()
    scenario.grant_editor("alice", "bob")
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"], image="busybox:cpu")
    scenario.launch_spec("gpu-workers", classes=["gpu"], image="busybox:gpu",
                         lease_seconds=30)

    # Run launched (by alice) and pinned; its slot is Ready, nothing claimed yet.
    scenario.run("study", user="alice", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    pins = scenario.agentrun("study")["status"]["pinned"]
    assert scenario.pods() == [] and scenario.leases() == []

    # alice claims: pod and lease <slot>-1, attempt 1, owner alice.
    claim = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim).returncode == 0
    assert scenario.wait_ledger(slot, claim)["outcome"] == "Accepted"
    active = scenario.wait_state(slot, "Active")["status"]
    first = f"{slot}-1"
    assert active["activeWorker"] == first
    assert active["attempts"][-1]["ownerActor"] == "alice"
    assert scenario.pods() == [first] and scenario.leases() == [first]
    pod = scenario.pod(first)
    assert pod is not None
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["containers"][0]["image"] == "busybox:cpu"
    mounted = {v["name"]: v["configMap"]["name"] for v in pod["spec"]["volumes"]
               if v.get("configMap")}
    assert set(mounted.values()) == {p["snapshot"] for k, p in pins.items() if k != "journal"}

    # The worker renews once, then fails; its lease is left to expire.
    scenario.renew(first)
    scenario.finish(first, "Failed", exit_code=3)
    waiting = scenario.wait_state(slot, "RetryWait", timeout=30)["status"]
    assert waiting["priorWorker"] == first
    assert waiting["attempts"][-1]["outcome"] == "Failed"
    assert waiting["attempts"][-1]["exitCode"] == 3
    # The tombstone is the write after RetryWait: wait for it, then read it.
    tombstone = wait_for(lambda: (lease := scenario.lease(first)) and f"{ANN}outcome" in (
        lease["metadata"].get("annotations") or {}) and lease, timeout=30,
        message=f"lease {first} tombstoned")
    assert tombstone["spec"].get("holderIdentity") is None
    assert tombstone["metadata"]["annotations"][f"{ANN}outcome"] == "Failed"
    assert tombstone["metadata"]["annotations"][f"{ANN}owner-actor"] == "alice"

    # bob's reassignment: rejected by the owner-actor rule (by admission where the
    # validating policies are installed, as by the chart, else by the operator's ledger);
    # nothing else changes.
    before = scenario.slot(slot)
    by_bob = request_id()
    refused = scenario.annotate(slot, user="bob", reassign_id=by_bob, reassign_run="study",
                                reassign_worker_class="gpu", reassign_reason="take over")
    if refused.returncode == 0:
        entry = scenario.wait_ledger(slot, by_bob)
        assert (entry["outcome"], entry["predicate"], entry["actor"]) == (
            "Rejected", "NotOwner", "bob")
    else:
        assert "the attempt is owned by alice, not bob" in refused.stderr, refused.stderr
    after = scenario.slot(slot)
    unchanged(before, after)

    # A blank reason: rejected (by admission once it checks reasons, else by the operator).
    blank = request_id()
    result = scenario.annotate(slot, user="alice", reassign_id=blank, reassign_run="study",
                               reassign_worker_class="gpu", reassign_reason=" ")
    if result.returncode == 0:
        entry = scenario.wait_ledger(slot, blank)
        assert (entry["outcome"], entry["predicate"]) == ("Rejected", "BlankReason")
    unchanged(before, scenario.slot(slot))

    # alice reassigns to gpu: reopened with the gpu spec pinned, and no attempt 2 yet.
    reassign = request_id()
    assert scenario.annotate(slot, user="alice", reassign_id=reassign, reassign_run="study",
                             reassign_worker_class="gpu",
                             reassign_reason="needs a GPU for the embeddings").returncode == 0
    assert scenario.wait_ledger(slot, reassign)["outcome"] == "Accepted"
    reopened = scenario.slot(slot)["status"]
    assert reopened["state"] == "RetryWait"
    assert reopened["workerClass"] == "gpu"
    assert reopened["launchSpec"]["name"] == "gpu-workers"
    assert reopened["priorWorker"] == first
    assert "activeWorker" not in reopened and "pendingWorker" not in reopened
    assert "retryAt" not in reopened
    assert condition(reopened, "Reopened") == "True"
    assert scenario.pods() == [first] and scenario.leases() == [first]

    # The claim creates attempt 2 from the gpu spec; attempt 1's record stays.
    claim2 = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim2).returncode == 0
    second = f"{slot}-2"
    final = scenario.wait_state(slot, "Active")["status"]
    assert final["activeWorker"] == second
    assert final["attemptCount"] == 2
    assert condition(final, "Reopened") is None
    assert scenario.pods() == [first, second] and scenario.leases() == [first, second]
    pod2 = scenario.pod(second)
    assert pod2 is not None
    assert pod2["spec"]["containers"][0]["image"] == "busybox:gpu"
    assert pod2["metadata"]["labels"]["example/spec"] == "gpu-workers"
    kept = scenario.lease(first)
    assert kept is not None
    assert kept["metadata"]["annotations"][f"{ANN}outcome"] == "Failed"
    ledger = [c["requestId"] for c in final["commands"]]
    assert ledger == [r for r, recorded in ((claim, True), (by_bob, refused.returncode == 0),
                                            (blank, result.returncode == 0), (reassign, True),
                                            (claim2, True)) if recorded]
    print(f"recovery trace wall time: {time.monotonic() - started:.1f}s")
    return slot

