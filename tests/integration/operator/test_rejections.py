"""Rejected commands, end to end: each one changes nothing but the ledger.

Covers the reassignment guard of docs/design/commands-and-trust.md against a real API server, one
failed predicate at a time: ``NotRetryWait`` (an Active slot, also when its pod failed but
its lease is still renewed, and when its lease expired but its pod still runs, before the
operator fences it), ``WrongRun``, ``WrongTenant``, ``UnknownWorkerClass``,
``NoCompatibleLaunchSpec`` (a different message), ``Held`` (then released and accepted,
and a second release ``NotHeld``),
a duplicate request id (a no-op), a command written while the actor-stamping admission
binding is missing (``CommandsRefused``) and a forged actor annotation (admission
overwrites it; the ledger records the real user).

Every rejection is checked the same way (:func:`assert_rejected`): the slot's spec, state
and guarded status fields are unchanged, no pod or lease appears, the ledger has an entry
with the predicate and a readable message, a Warning Event ``CommandRejected`` names the
request, and condition ``CommandRejected`` carries the predicate.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import (
    Object,
    Scenario,
    actor_stamping_works,
    condition,
    condition_of,
    holds_throughout,
    request_id,
    unchanged,
)
from tests.support.waiting import wait_for, wait_for_default_service_account

ANN = "agentrun.dev/"
MANIFESTS = Path(__file__).resolve().parents[3] / "manifests"
STAMP_BINDING = "agentrun-stamp-actors"


def launched(scenario: Scenario, *, max_attempts: int = 1, lease_seconds: int = 5) -> str:
    """alice's run ``study`` (one node, Automatic claims) with attempt 1 Active: the slot."""
    scenario.grant_editor("alice", "bob")
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=lease_seconds)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run("study", user="alice", max_attempts=max_attempts)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Active")
    return slot


def reassign(scenario: Scenario, slot: str, *, user: str = "alice", run: str = "study",
             worker_class: str = "cpu", reason: str = "the worker died mid-step",
             rid: str | None = None, **extra: str) -> str:
    rid = rid or request_id()
    result = scenario.annotate(slot, user=user, reassign_id=rid, reassign_run=run,
                               reassign_worker_class=worker_class, reassign_reason=reason,
                               **extra)
    assert result.returncode == 0, result.stderr
    return rid


def assert_rejected(scenario: Scenario, slot: str, rid: str, *, before: Object,
                    predicate: str, says: Iterable[str], pods: list[str],
                    kind: str = "Reassign") -> Object:
    """The command ``rid`` was rejected with ``predicate`` and changed nothing else."""
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["predicate"], entry["kind"]) == ("Rejected", predicate,
                                                                     kind)
    message = entry["message"]
    for fragment in says:
        assert fragment in message, f"{fragment!r} not in the ledger message {message!r}"
    after = scenario.slot(slot)
    unchanged(before, after)
    rejected = condition_of(after["status"], "CommandRejected")
    assert rejected is not None
    assert (rejected["status"], rejected["reason"]) == ("True", predicate)
    assert rid in rejected["message"]
    assert scenario.pods() == pods and scenario.leases() == pods
    event = scenario.wait_event("CommandRejected", rid)
    assert f"({predicate})" in event and message in event
    warnings = [e for e in scenario.core.list_namespaced_event(scenario.namespace).items
                if e.reason == "CommandRejected" and rid in (e.message or "")]
    assert warnings and all(e.type == "Warning" for e in warnings)
    return entry


def test_an_active_slot_is_not_reassigned_even_when_its_pod_failed(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = launched(scenario)
    first = f"{slot}-1"

    # Active, worker alive: a reassignment is rejected, the attempt runs on.
    before = scenario.slot(slot)
    rid = reassign(scenario, slot)
    assert_rejected(scenario, slot, rid, before=before, predicate="NotRetryWait",
                    says=[slot, "Active", "not RetryWait"], pods=[first])

    # The pod failed but the worker still renews its lease: the attempt has not ended.
    with scenario.renewing(first, every=1.0) as worker:
        wait_for(lambda: worker.renewals >= 1, timeout=10, message="a first renewal")
        scenario.finish(first, "Failed", exit_code=1)
        wait_for(lambda: (scenario.pod(first) or {}).get("status", {}).get("phase") == "Failed",
                 timeout=10, message="the pod reported Failed")
        before = scenario.slot(slot)
        rid = reassign(scenario, slot)
        assert_rejected(scenario, slot, rid, before=before, predicate="NotRetryWait",
                        says=["Active", "only a slot whose last attempt ended"], pods=[first])

        def still_running() -> bool:
            status = scenario.slot(slot)["status"]
            return (status["state"] == "Active" and status["activeWorker"] == first
                    and "endedAt" not in status["attempts"][-1])
        # Longer than the lease's 5 s: only the renewals keep the attempt open.
        holds_throughout(still_running, seconds=6.5,
                         message="the attempt stays Active while its lease is renewed")
        assert worker.renewals >= 6

    # Renewals stop: the lease expires and the attempt ends as Failed.
    ended = scenario.wait_state(slot, "RetryWait", timeout=30)["status"]
    assert ended["priorWorker"] == first
    assert (ended["attempts"][-1]["outcome"], ended["attempts"][-1]["exitCode"]) == ("Failed", 1)
    assert condition(ended, "AwaitingReassignment") == "True"


def test_an_expired_lease_with_a_running_pod_is_fenced_before_any_reassignment(
        scenario: Scenario, operator: OperatorProcess) -> None:
    slot = launched(scenario)
    first = f"{slot}-1"

    # The worker renews once, runs, and stops renewing (hung or partitioned).
    scenario.renew(first)
    scenario.finish(first, "Running")
    before = scenario.slot(slot)
    rid = reassign(scenario, slot)
    assert_rejected(scenario, slot, rid, before=before, predicate="NotRetryWait",
                    says=["Active", "not RetryWait"], pods=[first])

    # The lease expires; the pod still runs: the operator deletes it, then ends the attempt.
    scenario.wait_event("PodDeleted", "the pod is still Running: deleting the pod to fence",
                         timeout=30)
    wait_for(lambda: scenario.pod(first) is None, timeout=30, message=f"pod {first} deleted")
    ended = scenario.wait_state(slot, "RetryWait", timeout=30)["status"]
    assert ended["priorWorker"] == first
    assert ended["attempts"][-1]["outcome"] == "Lost"
    tombstone = scenario.lease(first)
    assert tombstone is not None
    wait_for(lambda: (scenario.lease(first) or {}).get("metadata", {}).get(
        "annotations", {}).get(f"{ANN}outcome") == "Lost", timeout=10,
        message="the lease tombstoned with outcome Lost")

    # Now both are terminal: the same reassignment is accepted; the claim makes attempt 2.
    rid = reassign(scenario, slot)
    assert scenario.wait_ledger(slot, rid)["outcome"] == "Accepted"
    second = scenario.wait_state(slot, "Active")["status"]
    assert second["activeWorker"] == f"{slot}-2"
    assert second["attempts"][-1]["ownerActor"] == "alice"


def test_guard_predicates_on_a_waiting_slot(scenario: Scenario,
                                            operator: OperatorProcess) -> None:
    slot = launched(scenario)
    first = f"{slot}-1"
    # gpu is listed only by a spec scoped to another run.
    scenario.launch_spec("gpu-elsewhere", classes=["gpu"], runs=["another-run"])
    scenario.finish(first, "Failed", exit_code=2)
    scenario.release(first)  # the worker lets go of its lease as it exits
    waiting = scenario.wait_state(slot, "RetryWait", timeout=30)
    assert condition(waiting["status"], "AwaitingReassignment") == "True"
    before = scenario.slot(slot)
    pods = [first]

    # WrongRun: the command names another run.
    wrong_run = reassign(scenario, slot, run="another-run")
    assert_rejected(scenario, slot, wrong_run, before=before, predicate="WrongRun",
                    says=["'another-run'", "'study'", f"{ANN}reassign-run"], pods=pods)

    # WrongTenant: the command names a tenant other than the namespace's.
    rid = reassign(scenario, slot, reassign_tenant="someone-else")
    assert_rejected(scenario, slot, rid, before=before, predicate="WrongTenant",
                    says=["'someone-else'", repr(scenario.namespace)], pods=pods)

    # UnknownWorkerClass: no LaunchSpec lists tpu.
    rid = reassign(scenario, slot, worker_class="tpu")
    unknown = assert_rejected(scenario, slot, rid, before=before,
                              predicate="UnknownWorkerClass",
                              says=["no LaunchSpec", "'tpu'"], pods=pods)

    # NoCompatibleLaunchSpec: gpu is listed, but not for this run.
    rid = reassign(scenario, slot, worker_class="gpu")
    incompatible = assert_rejected(scenario, slot, rid, before=before,
                                   predicate="NoCompatibleLaunchSpec",
                                   says=["'gpu'", "gpu-elsewhere"], pods=pods)
    assert incompatible["message"] != unknown["message"].replace("'tpu'", "'gpu'")
    assert "no LaunchSpec" not in incompatible["message"]

    # Held: a hold (with a reason) is accepted, then a reassignment is rejected.
    hold = request_id()
    assert scenario.annotate(slot, user="alice", hold_id=hold,
                             hold_reason="checking the tool output first").returncode == 0
    assert scenario.wait_ledger(slot, hold)["outcome"] == "Accepted"
    assert condition(scenario.slot(slot)["status"], "Held") == "True"
    held = scenario.slot(slot)
    rid = reassign(scenario, slot)
    assert_rejected(scenario, slot, rid, before=held, predicate="Held",
                    says=["held", f"{ANN}release-id"], pods=pods)
    unchanged(before, scenario.slot(slot))

    # Release; a duplicate of an earlier id (now well-formed) is a no-op.
    release = request_id()
    assert scenario.annotate(slot, user="alice", release_id=release).returncode == 0
    assert scenario.wait_ledger(slot, release)["outcome"] == "Accepted"
    assert condition(scenario.slot(slot)["status"], "Held") == "False"
    # NotHeld: a second release, the slot no longer held.
    again_release = request_id()
    assert scenario.annotate(slot, user="alice", release_id=again_release).returncode == 0
    assert_rejected(scenario, slot, again_release, before=scenario.slot(slot),
                    predicate="NotHeld", says=["is not held", "nothing to release"],
                    pods=pods, kind="Release")
    settled = scenario.slot(slot)
    reassign(scenario, slot, rid=wrong_run)
    scenario.wait_ledger(slot, wrong_run)  # annotations removed
    again = scenario.slot(slot)
    assert len(again["status"]["commands"]) == len(settled["status"]["commands"])
    assert again["status"] == settled["status"]
    assert again["spec"] == settled["spec"]
    assert [c["requestId"] for c in again["status"]["commands"]].count(wrong_run) == 1
    assert scenario.pods() == pods and scenario.leases() == pods

    # alice forges the actor annotation as bob: admission overwrites it, the ledger says
    # alice; the reassignment is accepted and the claim makes attempt 2, owned by alice.
    rid = reassign(scenario, slot, reassign_actor="bob")
    entry = scenario.wait_ledger(slot, rid)
    assert (entry["outcome"], entry["actor"]) == ("Accepted", "alice")
    second = scenario.wait_state(slot, "Active")["status"]
    assert second["activeWorker"] == f"{slot}-2"
    assert second["attempts"][-1]["ownerActor"] == "alice"
    assert [c["requestId"] for c in second["commands"]][-1] == rid


@pytest.mark.serial
def test_commands_are_refused_while_the_stamping_binding_is_missing(
        scenario: Scenario, operator: OperatorProcess, cluster: Cluster) -> None:
    """Deletes a cluster-wide admission binding: run alone (marked ``serial``)."""
    slot = launched(scenario)
    first = f"{slot}-1"
    before = scenario.slot(slot)
    deleted = cluster.kubectl("delete", "mutatingadmissionpolicybinding", STAMP_BINDING)
    assert deleted.returncode == 0, deleted.stderr
    try:
        wait_for(lambda: not actor_stamping_works(cluster), timeout=30,
                 message="admission to stop stamping actors")
        rid = request_id()
        assert scenario.annotate(slot, user="alice", hold_id=rid,
                                 hold_reason="look at this").returncode == 0
        entry = assert_rejected(scenario, slot, rid, before=before,
                                predicate="CommandsRefused", kind="Hold",
                                says=["refused", "actors cannot be verified",
                                      f"MutatingAdmissionPolicyBinding {STAMP_BINDING} is "
                                      "missing", "make install", "re-send"],
                                pods=[first])
        assert entry.get("actor") is None  # nothing stamped, nothing guessed
        status = scenario.slot(slot)["status"]
        refused = condition_of(status, "CommandsRefused")
        assert refused is not None
        assert (refused["status"], refused["reason"]) == ("True", "StampingNotInForce")
        assert condition(status, "Held") is None
    finally:
        restored = cluster.kubectl("apply", "--server-side", "-f",
                                   str(MANIFESTS / "admission" / "stamp-actors.yaml"))
        assert restored.returncode == 0, restored.stderr
        wait_for(lambda: actor_stamping_works(cluster), timeout=30,
                 message="admission to stamp actors again")

    # Restored: the operator trusts commands again once it has minted a new epoch for the
    # new binding (a few seconds after it finds it as shipped); meanwhile they are refused.
    def accepted_hold() -> Object | None:
        rid = request_id()
        assert scenario.annotate(slot, user="alice", hold_id=rid,
                                 hold_reason="look at this").returncode == 0
        entry = scenario.wait_ledger(slot, rid)
        return entry if entry["outcome"] == "Accepted" else None
    entry = wait_for(accepted_hold, timeout=30, interval=0.5,
                     message="a hold accepted after the binding is restored")
    assert entry["actor"] == "alice"
    status = scenario.slot(slot)["status"]
    assert condition(status, "Held") == "True"
    assert condition(status, "CommandsRefused") == "False"
