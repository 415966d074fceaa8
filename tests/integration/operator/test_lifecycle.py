"""A run's life, end to end: dependencies, verdicts, suspend, deadline, give-up, deletion.

Covers docs/design/states.md and runs-and-configuration.md beyond a single attempt:

- ``dependsOn`` (research → report): report stays Pending until research Succeeds, then
  runs; when both succeed the run gets ``Succeeded=True`` (``kubectl wait`` returns 0);
  the printer columns of ``kubectl get slots`` / ``kubectl get agentruns`` are shown;
  deleting the run lets the garbage collector remove its slots, pods, leases and
  snapshot ConfigMaps;
- research fails for good (one attempt, then a give-up by its owner): report fails with
  reason ``DependencyFailed`` and the run gets ``Failed=True``;
- give-up on an Active slot deletes its pod and tombstones its lease (outcome ``GaveUp``);
- ``spec.suspend: true``: nothing is claimed until it is set false;
- ``activeDeadlineSeconds``: every open slot (Active, Ready, Pending) fails with reason
  ``DeadlineExceeded`` and the run gets ``Failed=True``.
"""

from __future__ import annotations

import json

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import (
    Object,
    Scenario,
    condition,
    condition_of,
    holds_throughout,
    request_id,
)
from tests.support.waiting import wait_for, wait_for_default_service_account

ANN = "agentrun.dev/"
Nodes = tuple[tuple[str, str, list[str]], ...]
PIPELINE: Nodes = (("research", "cpu", []), ("report", "cpu", ["research"]))


def prepare(scenario: Scenario, *, nodes: Nodes = PIPELINE,
            lease_seconds: int = 5) -> None:
    scenario.grant_editor("alice", "bob")
    scenario.configs(nodes=nodes)
    scenario.launch_spec("cpu-workers", classes=["cpu"], lease_seconds=lease_seconds)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)


def run_condition(scenario: Scenario, run: str, type_: str, status: str = "True", *,
                  timeout: float = 30) -> Object:
    def check() -> Object | None:
        found = condition_of(scenario.agentrun(run).get("status", {}), type_)
        return found if found and found["status"] == status else None
    found: Object = wait_for(check, timeout=timeout,
                             message=f"run {run}: condition {type_}={status}")
    return found


def slot_failed(scenario: Scenario, slot: str, reason: str, *, timeout: float = 30) -> Object:
    """Wait for the slot to be Failed; its ``Succeeded`` condition is False with ``reason``."""
    found: Object = scenario.wait_state(slot, "Failed", timeout=timeout)["status"]
    verdict = condition_of(found, "Succeeded")
    assert verdict is not None and (verdict["status"], verdict["reason"]) == ("False", reason)
    return found


def finish_worker(scenario: Scenario, attempt: str, phase: str, exit_code: int = 0) -> None:
    """The worker exits: its pod reaches ``phase`` and it lets go of its lease."""
    scenario.finish(attempt, phase, exit_code=exit_code)
    scenario.release(attempt)


def kubectl_ok(scenario: Scenario, *args: str) -> str:
    result = scenario.cluster.kubectl("-n", scenario.namespace, *args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_dependencies_success_columns_and_garbage_collection(
        scenario: Scenario, operator: OperatorProcess) -> None:
    prepare(scenario)
    scenario.run("study")
    research = scenario.slot_name_eventually("study", "research")
    report = scenario.slot_name_eventually("study", "report")
    scenario.wait_state(research, "Active")
    waiting = scenario.wait_state(report, "Pending")["status"]
    assert waiting.get("attemptCount", 0) == 0 and "launchSpec" not in waiting
    assert scenario.pods() == [f"{research}-1"]
    in_progress = (kubectl_ok(scenario, "get", "slots"), kubectl_ok(scenario, "get", "agentruns"))

    # research succeeds; only then does report leave Pending and run.
    finish_worker(scenario, f"{research}-1", "Succeeded")
    done = scenario.wait_state(research, "Succeeded")["status"]
    started = scenario.wait_state(report, "Active")["status"]
    assert started["attempts"][0]["startedAt"] >= done["attempts"][0]["endedAt"]
    assert scenario.pods() == sorted([f"{research}-1", f"{report}-1"])

    finish_worker(scenario, f"{report}-1", "Succeeded")
    scenario.wait_state(report, "Succeeded")
    run_condition(scenario, "study", "Succeeded")
    waited = scenario.cluster.kubectl("-n", scenario.namespace, "wait",
                                      "--for=condition=Succeeded", "agentrun/study",
                                      "--timeout=30s")
    assert waited.returncode == 0, waited.stderr
    status = scenario.agentrun("study")["status"]
    assert status["done"] == "2/2"
    assert condition(status, "Failed") == "False"
    assert condition(status, "Ready") == "True"

    # Printer columns: what a person reads first.
    slots_table = kubectl_ok(scenario, "get", "slots")
    runs_table = kubectl_ok(scenario, "get", "agentruns")
    wide = kubectl_ok(scenario, "get", "slots", "-o", "wide")
    print("\n--- in progress ---\n$ kubectl get slots\n" + in_progress[0]
          + "$ kubectl get agentruns\n" + in_progress[1])
    print("--- finished ---\n$ kubectl get slots\n" + slots_table
          + "$ kubectl get slots -o wide\n" + wide
          + "$ kubectl get agentruns\n" + runs_table)
    columns = ["NAME", "STATE", "CLASS", "WORKER", "ATTEMPTS", "LAUNCHSPEC", "AGE"]
    assert slots_table.splitlines()[0].split() == columns
    assert wide.splitlines()[0].split() == [*columns, "PRIOR", "RUN", "NODE", "UNRESOLVED",
                                            "QUESTION"]
    rows = table(slots_table)
    # WORKER is the active worker: empty once the attempt has ended.
    for name in (research, report):
        assert {k: rows[name][k] for k in columns[1:6]} == {
            "STATE": "Succeeded", "CLASS": "cpu", "WORKER": "", "ATTEMPTS": "1",
            "LAUNCHSPEC": "cpu-workers"}
        assert table(wide)[name]["PRIOR"] == f"{name}-1"
    before = table(in_progress[0])
    assert {k: before[research][k] for k in columns[1:6]} == {
        "STATE": "Active", "CLASS": "cpu", "WORKER": f"{research}-1", "ATTEMPTS": "1",
        "LAUNCHSPEC": "cpu-workers"}
    assert (before[report]["STATE"], before[report]["WORKER"]) == ("Pending", "")
    assert runs_table.splitlines()[0].split() == ["NAME", "READY", "SUCCEEDED", "DONE", "AGE"]
    run_row = table(runs_table)["study"]
    assert (run_row["READY"], run_row["SUCCEEDED"], run_row["DONE"]) == ("True", "True", "2/2")
    assert table(in_progress[1])["study"]["DONE"] == "0/2"

    # Deleting the run: the garbage collector removes everything it owns, transitively.
    owned = {
        "slots": scenario.slot_names("study"),
        "pods": scenario.pods(),
        "leases": scenario.leases(),
        "snapshots": snapshots(scenario),
    }
    assert len(owned["slots"]) == 2 and len(owned["pods"]) == 2 and len(owned["leases"]) == 2
    assert len(owned["snapshots"]) == 3 + 1  # the run's three pins, one LaunchSpec per run
    kubectl_ok(scenario, "delete", "agentrun", "study", "--wait=false")

    def everything_gone() -> bool:
        left = {"slots": scenario.slot_names("study"), "pods": scenario.pods(),
                "leases": scenario.leases(), "snapshots": snapshots(scenario)}
        everything_gone.left = left  # type: ignore[attr-defined]
        return not any(left.values())
    wait_for(everything_gone, timeout=90, interval=0.5,
             message="the garbage collector to remove the run's slots, pods, leases and "
                     "snapshots")


def table(printed: str) -> dict[str, dict[str, str]]:
    """``kubectl get`` output as rows by NAME, cells cut at the header's column starts."""
    header, *lines = printed.splitlines()
    names = header.split()
    starts = [header.index(f"{name} ") if f"{name} " in header else header.index(name)
              for name in names]
    ends = [*starts[1:], None]
    return {line.split()[0]: {name: line[start:end].strip()
                              for name, start, end in zip(names, starts, ends, strict=True)}
            for line in lines if line.strip()}


def snapshots(scenario: Scenario) -> list[str]:
    return sorted(str(cm.metadata.name) for cm in scenario.core.list_namespaced_config_map(
        scenario.namespace, label_selector=f"{ANN}snapshot-of").items if cm.metadata)


def test_a_failed_dependency_fails_its_dependents_and_the_run(
        scenario: Scenario, operator: OperatorProcess) -> None:
    prepare(scenario)
    scenario.run("study", user="alice", claim_policy="Manual", max_attempts=1)
    research = scenario.slot_name_eventually("study", "research")
    report = scenario.slot_name_eventually("study", "report")
    scenario.wait_state(research, "Ready")
    claim = request_id()
    assert scenario.annotate(research, user="alice", claim_id=claim).returncode == 0
    scenario.wait_state(research, "Active")

    # The only attempt fails: research waits for a person; report still waits for it.
    finish_worker(scenario, f"{research}-1", "Failed", exit_code=4)
    exhausted = scenario.wait_state(research, "RetryWait", timeout=30)["status"]
    assert condition(exhausted, "AwaitingReassignment") == "True"
    assert scenario.slot(report)["status"]["state"] == "Pending"
    assert condition(scenario.agentrun("study")["status"], "Failed") == "False"

    # bob may not give up alice's attempt; alice may.
    by_bob = request_id()
    assert scenario.annotate(research, user="bob", give_up_id=by_bob,
                             give_up_reason="not worth it").returncode == 0
    entry = scenario.wait_ledger(research, by_bob)
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "NotOwner")
    assert scenario.slot(research)["status"]["state"] == "RetryWait"
    give_up = request_id()
    assert scenario.annotate(research, user="alice", give_up_id=give_up,
                             give_up_reason="the source is gone for good").returncode == 0
    assert scenario.wait_ledger(research, give_up)["outcome"] == "Accepted"
    failed = slot_failed(scenario, research, "GaveUp")
    assert condition(failed, "AwaitingReassignment") is None

    dependent = slot_failed(scenario, report, "DependencyFailed")
    assert "research" in (condition_of(dependent, "Succeeded") or {})["message"]
    assert dependent.get("attemptCount", 0) == 0
    verdict = run_condition(scenario, "study", "Failed")
    assert "research" in verdict["message"]
    assert condition(scenario.agentrun("study")["status"], "Succeeded") == "False"
    scenario.wait_event("DependencyFailed", "research")
    scenario.wait_event("GaveUp", "the source is gone for good")
    assert scenario.pods() == [f"{research}-1"]  # report never started


def test_give_up_on_an_active_slot_fences_its_attempt(
        scenario: Scenario, operator: OperatorProcess) -> None:
    prepare(scenario, nodes=(("research", "cpu", []),), lease_seconds=30)
    scenario.run("study", user="alice", claim_policy="Manual")
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    first = f"{slot}-1"
    scenario.renew(first)
    scenario.finish(first, "Running")

    give_up = request_id()
    assert scenario.annotate(slot, user="alice", give_up_id=give_up,
                             give_up_reason="wrong question").returncode == 0
    assert scenario.wait_ledger(slot, give_up)["outcome"] == "Accepted"
    failed = slot_failed(scenario, slot, "GaveUp")
    assert failed["priorWorker"] == first and "activeWorker" not in failed
    assert failed["attempts"][-1]["outcome"] == "GaveUp"
    wait_for(lambda: scenario.pod(first) is None, timeout=30, message=f"pod {first} deleted")

    def tombstone() -> Object | None:
        lease = scenario.lease(first)
        annotations = (lease or {}).get("metadata", {}).get("annotations") or {}
        return lease if annotations.get(f"{ANN}outcome") == "GaveUp" else None
    lease = wait_for(tombstone, timeout=30, message=f"lease {first} tombstoned GaveUp")
    assert lease["spec"].get("holderIdentity") is None
    assert lease["metadata"]["annotations"][f"{ANN}owner-actor"] == "alice"
    assert scenario.leases() == [first]  # kept as the attempt's record
    run_condition(scenario, "study", "Failed")


def test_a_suspended_run_claims_nothing_until_resumed(
        scenario: Scenario, operator: OperatorProcess) -> None:
    prepare(scenario, nodes=(("research", "cpu", []),))
    scenario.run("study", user="alice", extra={"suspend": True})
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")

    # The operator has seen the suspension: it refuses a claim command because of it.
    claim = request_id()
    assert scenario.annotate(slot, user="alice", claim_id=claim).returncode == 0
    entry = scenario.wait_ledger(slot, claim)
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "NotClaimable")
    assert "suspend" in entry["message"]
    holds_throughout(lambda: scenario.slot(slot)["status"]["state"] == "Ready"
                     and scenario.pods() == [] and scenario.leases() == [],
                     seconds=2, message="a suspended run's slot stays Ready, unclaimed")

    resumed = scenario.cluster.kubectl(
        "-n", scenario.namespace, "patch", "agentrun", "study", "--type=merge",
        "-p", json.dumps({"spec": {"suspend": False}}), user="alice")
    assert resumed.returncode == 0, resumed.stderr
    active = scenario.wait_state(slot, "Active", timeout=30)["status"]
    assert active["activeWorker"] == f"{slot}-1"
    assert scenario.pods() == [f"{slot}-1"]


def test_the_active_deadline_fails_every_open_slot_and_the_run(
        scenario: Scenario, operator: OperatorProcess) -> None:
    prepare(scenario, nodes=(("side", "cpu", []), *PIPELINE))
    scenario.run("study", user="alice", claim_policy="Manual",
                 extra={"activeDeadlineSeconds": 8})
    side = scenario.slot_name_eventually("study", "side")
    research = scenario.slot_name_eventually("study", "research")
    report = scenario.slot_name_eventually("study", "report")
    scenario.wait_state(side, "Ready")
    assert scenario.annotate(side, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(side, "Active")
    scenario.wait_state(research, "Ready")  # nobody claims it
    scenario.wait_state(report, "Pending")
    assert condition(scenario.agentrun("study")["status"], "Failed") == "False"

    verdict = run_condition(scenario, "study", "Failed", timeout=30)
    assert verdict["reason"] == "DeadlineExceeded"
    for slot in (side, research, report):
        slot_failed(scenario, slot, "DeadlineExceeded", timeout=30)
    wait_for(lambda: scenario.pod(f"{side}-1") is None, timeout=30,
             message="the Active slot's pod deleted")
    ended = scenario.slot(side)["status"]["attempts"][-1]
    assert ended["outcome"] == "GaveUp"
    assert condition(scenario.agentrun("study")["status"], "Succeeded") == "False"
    scenario.wait_event("DeadlineExceeded", "activeDeadlineSeconds")
