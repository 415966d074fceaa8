"""Crash convergence: SIGKILL right after each named write, restart, and nothing is doubled.

For every crash point the operator names (``point=`` in ``operator/agentrun`` and
``sdk/agentrun``; the first test checks this list against the code), a case starts the
operator with ``AGENTRUN_CRASH_AT=<point>``, drives the scenario until that write happens,
checks that the process died by SIGKILL and that the write is visible (and the next one is
not), restarts the operator without a crash point and checks convergence:

- exactly one Pod and one Lease per attempt number, named ``<slot>-<n>`` with ``n``
  consecutive from 1 up to ``attemptCount``, nothing else (audit log: each created once);
- the slot ends where it should (Active for a claim; a command once in the ledger and its
  annotations gone; an ended attempt's lease tombstoned once, with the outcome);
- nothing is left Claiming.

The claim is three writes: ``claim-lease`` (the Lease ``<slot>-<n+1>``, its
commit point), ``claim-pod``, ``active`` (one status write: Active, the attempt record,
the first status and the pin of a slot that was Pending, a claim command's ledger
entry); no ``Claiming`` status is written. Each is a case, for an Automatic claim and
for a Manual one (a claim command: its request id rides on the Lease until the ledger
has it). Besides the claim's, command's, attempt end's and launch's points, the
remaining points in the code are covered too: ``observed`` (the first status of a slot
that waits for a dependency), ``status`` (Ready written for a slot that waits for a
claim command), ``run-status``, ``delete-pod`` (fencing a pod whose lease expired),
``claim-failed`` (PodSecurity refuses the Pod), ``command-ledger`` of a rejection (a
restart must never re-decide it into an acceptance).

Cases stay short: leases of 5 s, backoff 0; the worker mostly *releases* its lease when
it exits (an ended attempt is then decided at once) rather than letting it expire.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import (
    ANN,
    annotations_of,
    assert_converged,
    assert_nothing_stray,
    command_annotations,
    condition,
    crashed,
    exit_worker,
    ledger,
    objects,
    publish,
    reassign,
    slots,
    status,
    tombstoned,
)
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

REPO = Path(__file__).resolve().parents[3]
SOURCES = (REPO / "operator" / "agentrun", REPO / "sdk" / "agentrun")  # both distributions
Object = dict[str, object]

# Every crash point, by the case(s) that cover it.
LAUNCH_POINTS = ["pin-snapshots", "pinned", "slots", "run-status", "launch-spec-snapshot"]
WAIT_POINTS = ["observed", "status"]  # a waiting slot's own status: test_crash_claims.py
CLAIM_POINTS = ["claim-lease", "claim-pod", "active"]
END_POINTS = ["attempt-ended", "tombstone", "delete-pod"]
REASSIGN_POINTS = ["launch-spec-snapshot", "command-ledger", "remove-command"]
OTHER_POINTS = ["command-ledger", "claim-failed",  # a Manual claim, a rejection; a refused Pod
                "quota-exceeded",  # a Pod refused by a ResourceQuota (test_crash_quota.py)
                # a Pod its LaunchSpec cannot make, then the fix (test_crash_quota.py)
                "launch-spec-refused", "launch-spec-repinned", "annotate-lease",
                "launch-spec-status",  # a LaunchSpec's status (test_launch_spec_status.py)
                "label"]  # a slot's LaunchSpec label (test_launch_spec_status.py)
STAMPING_POINTS = ["stamping-epoch"]  # the epoch just minted: test_stamping.py (serial)
EFFECT_POINTS = ["effect-unresolved"]  # an unresolved effect shown: test_effect_unresolved.py
QUESTION_POINTS = ["question-expired"]  # a question's deadline passed: test_questions.py
# The journal's store error shown and cleared: test_journal_unavailable.py
JOURNAL_POINTS = ["journal-unavailable", "journal-answers", "journal-lost",
                  "journal-owned", "journal-released"]  # and deleted: test_journal_deletion.py
FORK_POINTS = ["fork-lease", "fork"]  # a fork's copy cut short, then its status: test_forks.py


def test_every_crash_point_is_covered() -> None:
    """The points named in the operator's code are exactly the ones these cases cover."""
    in_code: set[str] = set()
    for path in (found for source in SOURCES for found in source.rglob("*.py")):
        text = path.read_text()
        in_code |= set(re.findall(r'point(?:: str)? ?= ?"([a-z-]+)"', text))
    covered = {*LAUNCH_POINTS, *WAIT_POINTS, *CLAIM_POINTS, *END_POINTS, *REASSIGN_POINTS,
               *OTHER_POINTS, *STAMPING_POINTS, *EFFECT_POINTS, *QUESTION_POINTS,
               *JOURNAL_POINTS, *FORK_POINTS}
    assert in_code == covered, (f"not covered: {sorted(in_code - covered)}; "
                                f"not in the code: {sorted(covered - in_code)}")


# --- fixtures and helpers -----------------------------------------------------------------
# --- a run's launch and the first claim -----------------------------------------------------
def _pins(scenario: Scenario) -> dict[str, Object]:
    return objects(scenario, "configmaps", selector=f"{ANN}config-kind,{ANN}snapshot-of")


def _launch_snapshots(scenario: Scenario) -> dict[str, Object]:
    return objects(scenario, "configmaps", selector=f"{ANN}snapshot-of=launchspec")


def _states(scenario: Scenario) -> list[str | None]:
    return [status(s).get("state") for s in slots(scenario)]


def _only_slot(scenario: Scenario) -> Object:
    found = slots(scenario)
    assert len(found) == 1, found
    return found[0]


def visible_pin_snapshots(scenario: Scenario) -> None:
    assert len(_pins(scenario)) == 1  # the first of three snapshots, then the crash
    assert "pinned" not in (scenario.agentrun("study").get("status") or {})
    assert slots(scenario) == []


def visible_pinned(scenario: Scenario) -> None:
    assert len(_pins(scenario)) == 3
    pinned = scenario.agentrun("study")["status"]["pinned"]
    assert {p["snapshot"] for k, p in pinned.items() if k != "journal"} == set(_pins(scenario))
    assert slots(scenario) == []


def visible_slots(scenario: Scenario) -> None:
    assert len(slots(scenario)) == 1  # the first of two slots, then the crash


def visible_run_status(scenario: Scenario) -> None:
    assert len(slots(scenario)) == 2
    run_status = scenario.agentrun("study")["status"]
    assert any(c["type"] == "Ready" for c in run_status.get("conditions", [])), run_status


def visible_launch_spec_snapshot(scenario: Scenario) -> None:
    assert len(_launch_snapshots(scenario)) == 1  # one per (run, digest), the run's
    assert all(state in (None, "Pending") for state in _states(scenario)), _states(scenario)


def _claim_not_written(scenario: Scenario) -> Object:
    """The slot has no status of the claim yet: no Claiming, no attempt consumed."""
    st = status(_only_slot(scenario))
    assert st.get("state") in (None, "Pending", "Ready"), st
    assert st.get("attemptCount", 0) == 0 and "pendingWorker" not in st, st
    return st


def visible_claim_lease(scenario: Scenario) -> None:
    _claim_not_written(scenario)
    slot = _only_slot(scenario)["metadata"]["name"]
    assert list(objects(scenario, "leases")) == [f"{slot}-1"]
    assert objects(scenario, "pods") == {}


def visible_claim_pod(scenario: Scenario) -> None:
    _claim_not_written(scenario)
    slot = _only_slot(scenario)["metadata"]["name"]
    assert list(objects(scenario, "leases")) == [f"{slot}-1"]
    assert list(objects(scenario, "pods")) == [f"{slot}-1"]


def visible_active(scenario: Scenario) -> None:
    slot = _only_slot(scenario)
    st = status(slot)
    assert st["state"] == "Active", st
    assert st["activeWorker"].endswith("-1") and "pendingWorker" not in st, st
    # The one status write carried the first status and the pin too.
    assert st["observedGeneration"] == slot["metadata"]["generation"], st
    assert st["launchSpec"]["snapshot"] in _launch_snapshots(scenario), st


VISIBLE: dict[str, Callable[[Scenario], None]] = {
    "pin-snapshots": visible_pin_snapshots, "pinned": visible_pinned,
    "slots": visible_slots, "run-status": visible_run_status,
    "launch-spec-snapshot": visible_launch_spec_snapshot,
    "claim-lease": visible_claim_lease, "claim-pod": visible_claim_pod,
    "active": visible_active,
}


@pytest.mark.parametrize("point", LAUNCH_POINTS + CLAIM_POINTS)
def test_crash_in_launch_or_claim(point: str, scenario: Scenario, cluster: Cluster,
                                  process: OperatorProcess) -> None:
    """Two independent nodes for the launch's points, one for the claim's."""
    nodes = publish(scenario, nodes=2 if point in LAUNCH_POINTS else 1)
    process.start(crash_at=point)
    scenario.run("study", max_attempts=1)
    crashed(process)
    VISIBLE[point](scenario)

    process.start()
    for node in nodes:
        slot = scenario.slot_name_eventually("study", node)
        scenario.wait_state(slot, "Active", timeout=60)
        assert_converged(scenario, cluster, slot, count=1, state="Active")
    assert len(slots(scenario)) == len(nodes)
    assert len(_pins(scenario)) == 3
    assert len(_launch_snapshots(scenario)) == 1  # shared by the run's slots
    assert_nothing_stray(scenario)


# --- an attempt's end ---------------------------------------------------------------------
@pytest.mark.parametrize("point", END_POINTS)
def test_crash_at_attempt_end(point: str, scenario: Scenario, cluster: Cluster,
                              process: OperatorProcess) -> None:
    """``attempt-ended``: the pod fails and its lease expires; ``tombstone``: the worker
    releases its lease as it fails; ``delete-pod``: the lease expires while the pod runs
    (fencing). maxAttempts 2: the restarted operator ends up with attempt 2 Active."""
    publish(scenario, nodes=1)
    process.start(crash_at=point)
    scenario.run("study", max_attempts=2)
    slot = scenario.slot_name_eventually("study", "n0")
    first = scenario.wait_state(slot, "Active")["status"]["activeWorker"]
    if point == "delete-pod":
        scenario.renew(first)
    else:
        exit_worker(scenario, first, expire=point == "attempt-ended")
    crashed(process)

    st = status(scenario.slot(slot))
    if point == "delete-pod":
        assert st["state"] == "Active" and st["activeWorker"] == first, st
        assert scenario.pod(first) is None  # not bound to a node: deleted at once
        assert tombstoned(scenario, first) is None
    else:
        assert (st["state"], st["priorWorker"], st["attemptCount"]) == (
            "RetryWait", first, 1), st
        assert st["attempts"][-1]["outcome"] == "Failed", st
        assert tombstoned(scenario, first) == ("Failed" if point == "tombstone" else None)

    process.start()
    second = f"{slot}-2"
    scenario.wait_slot(slot, lambda s: status(s).get("activeWorker") == second,
                       message=f"attempt {second} Active", timeout=60)
    ended = assert_converged(scenario, cluster, slot, count=2, state="Active",
                             without_pod=(1,) if point == "delete-pod" else ())
    assert status(ended)["attempts"][0]["outcome"] == ("Lost" if point == "delete-pod"
                                                       else "Failed")
    assert_nothing_stray(scenario)


# --- commands -----------------------------------------------------------------------------
def exhausted(scenario: Scenario, slot: str) -> str:
    """Attempt 1 Active, then its worker fails; the slot awaits reassignment, tombstoned."""
    first = scenario.wait_state(slot, "Active")["status"]["activeWorker"]
    exit_worker(scenario, first)
    scenario.wait_slot(slot, lambda s: condition(s, "AwaitingReassignment") == "True",
                       message="attempts exhausted")
    wait_for(lambda: tombstoned(scenario, first), timeout=30,
             message=f"lease {first} tombstoned")
    return str(first)


@pytest.mark.parametrize("point", REASSIGN_POINTS)
def test_crash_in_reassignment(point: str, scenario: Scenario, cluster: Cluster,
                               process: OperatorProcess) -> None:
    """A reassignment to gpu (no gpu snapshot yet: snapshot, ledger, annotation removal).

    ``launch-spec-snapshot`` is also written when a slot first becomes Ready, so that case
    arms the crash only after the slot is exhausted (stop, annotate, start armed).
    """
    publish(scenario, nodes=1)
    armed_late = point == "launch-spec-snapshot"
    process.start(crash_at=None if armed_late else point)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    first = exhausted(scenario, slot)
    snapshots_before = set(_launch_snapshots(scenario))
    if armed_late:
        process.stop()
    request = reassign(scenario, slot)
    if armed_late:
        process.start(crash_at=point)
    crashed(process)

    after = scenario.slot(slot)
    st = status(after)
    added = set(_launch_snapshots(scenario)) - snapshots_before
    assert len(added) == 1, added  # the gpu copy, written first
    assert st["state"] == "RetryWait" and st["attemptCount"] == 1, st
    if point == "launch-spec-snapshot":
        assert request not in ledger(after) and st["workerClass"] == "cpu", st
        assert annotations_of(after).get(f"{ANN}reassign-id") == request
    else:
        assert ledger(after).count(request) == 1, ledger(after)
        assert st["workerClass"] == "gpu" and condition(after, "Reopened") == "True", st
        assert st["launchSpec"]["snapshot"] in added, st
        still = annotations_of(after).get(f"{ANN}reassign-id")
        assert still == (request if point == "command-ledger" else None), annotations_of(after)
    assert scenario.pod(f"{slot}-2") is None and scenario.lease(f"{slot}-2") is None

    process.start()
    second = f"{slot}-2"
    scenario.wait_slot(slot, lambda s: status(s).get("activeWorker") == second,
                       message=f"attempt {second} Active", timeout=60)
    final = assert_converged(scenario, cluster, slot, count=2, state="Active",
                             requests=(request,))
    entry = next(c for c in status(final)["commands"] if c["requestId"] == request)
    assert entry["outcome"] == "Accepted", entry
    assert status(final)["attempts"][0]["outcome"] == "Failed"
    assert tombstoned(scenario, first) == "Failed"
    pod = scenario.pod(second)
    assert pod is not None and pod["spec"]["containers"][0]["image"] == "busybox:gpu"
    assert set(_launch_snapshots(scenario)) == snapshots_before | added
    assert_nothing_stray(scenario)


def test_crash_after_claim_failed(scenario: Scenario, cluster: Cluster,
                                  process: OperatorProcess) -> None:
    """``claim-failed``: PodSecurity refuses the Pod (403) after the Lease exists.

    (A ResourceQuota's refusal is not a ClaimFailed: see the next case.)
    """
    scenario.core.patch_namespace(scenario.namespace, {"metadata": {"labels": {
        "pod-security.kubernetes.io/enforce": "restricted"}}})
    publish(scenario, nodes=1)
    process.start(crash_at="claim-failed")
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    crashed(process)

    st = status(scenario.slot(slot))
    first = f"{slot}-1"
    assert (st["state"], st["priorWorker"], st["attemptCount"]) == ("RetryWait", first, 1), st
    assert st["attempts"][-1]["outcome"] == "ClaimFailed", st
    assert scenario.lease(first) is not None and tombstoned(scenario, first) is None
    assert scenario.pod(first) is None

    process.start()
    wait_for(lambda: tombstoned(scenario, first), timeout=30,
             message=f"lease {first} tombstoned")
    final = assert_converged(scenario, cluster, slot, count=1, state="RetryWait",
                             without_pod=(1,))
    assert tombstoned(scenario, first) == "ClaimFailed"
    assert condition(final, "AwaitingReassignment") == "True"
    assert_nothing_stray(scenario)


def test_crash_after_rejection_never_flips(scenario: Scenario, cluster: Cluster,
                                           process: OperatorProcess) -> None:
    """``command-ledger`` of a rejection: the restart removes the command, never re-decides.

    The reassignment is rejected (the slot is Active, not RetryWait); while the operator
    is down the attempt fails, so a fresh decision would now accept it. The ledger wins.
    """
    publish(scenario, nodes=1)
    process.start(crash_at="command-ledger")
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    first = scenario.wait_state(slot, "Active")["status"]["activeWorker"]
    request = reassign(scenario, slot)
    crashed(process)

    after = scenario.slot(slot)
    entry = status(after)["commands"][-1]
    assert (entry["requestId"], entry["outcome"], entry["predicate"]) == (
        request, "Rejected", "NotRetryWait"), entry
    assert annotations_of(after).get(f"{ANN}reassign-id") == request
    exit_worker(scenario, first)  # the prior is now terminal: would be accepted if re-decided

    process.start()
    scenario.wait_slot(slot, lambda s: condition(s, "AwaitingReassignment") == "True",
                       message="attempts exhausted", timeout=30)
    wait_for(lambda: tombstoned(scenario, first), timeout=30,
             message=f"lease {first} tombstoned")
    # The attempt is judged before any command, so the ledgered command goes after it.
    wait_for(lambda: not command_annotations(scenario.slot(slot)), timeout=30,
             message="the ledgered command removed")
    final = assert_converged(scenario, cluster, slot, count=1, state="RetryWait",
                             requests=(request,))
    assert [c["outcome"] for c in status(final)["commands"]] == ["Rejected"]
    assert status(final)["workerClass"] == "cpu" and condition(final, "Reopened") is None
    assert_nothing_stray(scenario)
