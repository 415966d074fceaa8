"""The write budget of one recovery cycle, counted in the API server's audit log.

A failure → retry-wait → reassignment → claim cycle costs 7 operator writes (slot to
RetryWait, lease tombstone, ledger+reopen, annotation removal, Lease, Pod, Active; no
``Claiming`` write: the Lease is the claim's commit point), plus Events, none of them
Kopf bookkeeping. A reassignment to a class whose LaunchSpec snapshot the run does not
have yet costs one more (the run's snapshot). Under
``claimPolicy: Manual`` the claim is a command: its ledger entry rides on the Active
write, then its annotations are removed (one write more than Automatic). A first claim
costs at most 3 writes per pod beyond the slot's creation: Lease, Pod, one status.

The cycle: attempt 1 Active, its pod fails and its lease expires (maxAttempts 1, so the
slot awaits reassignment), the owner reassigns, the operator claims attempt 2. Counted:
writes (create/update/patch/delete) by the user ``operator`` on the slot's objects (the
Slot and its status, Leases and Pods ``<slot>-<n>``, its LaunchSpec snapshots) from just
before the pod's failure until attempt 2 is Active (and a moment after, so a late extra
write would be caught). The audit policy logs at ``Metadata`` level (no bodies), so
"no Kopf bookkeeping" is checked on the objects instead: no ``kopf.zalando.org``
annotation or finalizer and no ``last-handled-configuration`` annotation.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import (
    OPERATOR_USER,
    Object,
    condition,
    objects,
    publish,
    reassign,
    status,
    tombstoned,
)
from tests.support.plays.scenarios import Scenario, holds_throughout, request_id
from tests.support.waiting import wait_for, wait_for_default_service_account

SETTLE_SECONDS = 1.5  # after Active: any write the cycle still made would show up here
Expected = list[tuple[tuple[str, str, str, str], str]]


@pytest.fixture
def audit_log(cluster: Cluster) -> Path:
    if cluster.audit_log is None:
        pytest.skip(f"the write budget is read from the API server's audit log, which only "
                    f"the local control plane started by this suite writes; this "
                    f"{cluster.kind} cluster's is out of reach")
    return cluster.audit_log


@pytest.fixture
def operator_process(cluster: Cluster, namespace: str, installed: None, tmp_path: Path,
                     api_client: kubernetes.client.ApiClient) -> Iterator[OperatorProcess]:
    wait_for_default_service_account(api_client, namespace)
    process = OperatorProcess(cluster=cluster, namespace=namespace,
                              log=tmp_path / "operator.log").start()
    yield process
    process.stop()


def expected_cycle(slot: str, *, snapshot: str | None, manual: bool) -> Expected:
    """The designed writes, in order; ``snapshot``: the new class's snapshot to create."""
    rows: Expected = [
        (("update", "slots", "status", slot), "slot to RetryWait (attempt 1 ended)"),
        (("update", "leases", "", f"{slot}-1"), "lease tombstone"),
    ]
    if snapshot is not None:
        rows.append((("create", "configmaps", "", snapshot), "LaunchSpec snapshot (new class)"))
    rows += [
        (("update", "slots", "status", slot), "ledger + reopen (reassignment)"),
        (("patch", "slots", "", slot), "reassignment annotations removed"),
    ]
    rows += [
        (("create", "leases", "", f"{slot}-2"), "Lease of attempt 2 (the commit point)"),
        (("create", "pods", "", f"{slot}-2"), "Pod of attempt 2"),
        (("update", "slots", "status", slot),
         "Active + ledger (claim command)" if manual else "Active"),
    ]
    if manual:
        rows.append((("patch", "slots", "", slot), "claim annotations removed"))
    return rows


def of_slot(write: audit.Write, slot: str) -> bool:
    if write.resource == "slots":
        return write.name == slot
    if write.resource in ("leases", "pods"):
        return write.name.rpartition("-")[0] == slot
    if write.resource == "configmaps":  # the run's LaunchSpec snapshots (one per digest)
        return "-lspec-" in write.name
    return False


def fail_attempt(scenario: Scenario, slot: str) -> tuple[str, datetime]:
    """Attempt 1's pod fails (exit 3) after one renewal; its lease is left to expire.

    From a settled Active slot (an automatic claim writes no label of its own: the slot's
    LaunchSpec label rides on a command's annotation removal).
    """
    worker = scenario.wait_slot(slot, lambda s: s.get("status", {}).get("state") == "Active",
                                message="Active")["status"]["activeWorker"]
    scenario.renew(worker)
    since = datetime.now(UTC)
    scenario.finish(worker, "Failed", exit_code=3)
    return str(worker), since


def awaiting(scenario: Scenario, slot: str, worker: str) -> None:
    scenario.wait_slot(slot, lambda s: condition(s, "AwaitingReassignment") == "True",
                       message="attempts exhausted", timeout=30)
    wait_for(lambda: tombstoned(scenario, worker), timeout=30,
             message=f"lease {worker} tombstoned")


def active_again(scenario: Scenario, slot: str) -> None:
    worker = f"{slot}-2"
    scenario.wait_slot(slot, lambda s: status(s).get("activeWorker") == worker,
                       message=f"attempt {worker} Active", timeout=60)


def no_kopf_bookkeeping(*bodies: Object) -> None:
    for body in bodies:
        meta = body["metadata"]
        marks = [k for k in (meta.get("annotations") or {})
                 if "kopf.zalando.org" in k or k.endswith("last-handled-configuration")]
        marks += [f for f in meta.get("finalizers") or [] if "kopf" in f]
        assert marks == [], (meta["name"], marks)


def check_budget(*, title: str, log: Path, scenario: Scenario, since: datetime,
                 slot: str, expected: Expected, siblings: tuple[str, ...] = ()) -> None:
    """Print the table of the cycle's writes and compare it with the designed list.

    ``siblings``: other slots of the run, whose own cycles are checked on their own.
    """
    # The run's snapshots are shared: one counts for the slot whose cycle made it.
    made = {key[3] for key, _ in expected if key[1] == "configmaps"}

    def ours(write: audit.Write) -> bool:
        return of_slot(write, slot) and (write.resource != "configmaps" or write.name in made)

    def slot_writes() -> int:
        return sum(1 for w in audit.writes(log, namespace=scenario.namespace,
                                           user=OPERATOR_USER, since=since) if ours(w))

    # The cycle's writes may still be landing when Active is seen (a claim command's
    # annotations are removed after it, and every request waits for the rate limit's
    # token): wait for as many as designed, then the count must hold through a settling
    # window (a write beyond the design would break the hold, and the table).
    wait_for(lambda: slot_writes() >= len(expected), timeout=30,
             message=f"the {len(expected)} designed writes of slot {slot}'s cycle")
    settled = slot_writes()
    holds_throughout(lambda: slot_writes() == settled, seconds=SETTLE_SECONDS,
                     message=f"no further operator write on slot {slot} after Active")
    everything = audit.writes(log, namespace=scenario.namespace, user=OPERATOR_USER,
                              since=since)
    mine = [w for w in everything if ours(w)]
    events = [w for w in everything if w.resource == "events"]
    others = [w for w in everything if w not in mine and w not in events
              and not any(of_slot(w, sibling) for sibling in siblings)]
    labels = [label for _, label in expected]
    print(f"\n=== write budget: {title}: {len(mine)} operator writes on slot {slot} "
          f"(designed: {len(expected)}), plus {len(events)} Event writes in the namespace ===")
    for n, write in enumerate(mine, 1):
        label = labels[n - 1] if n <= len(labels) else "NOT IN THE DESIGN"
        print(f"{n:>2}. {write.row()}  {label}")
    if others:
        print("  other operator writes in the namespace meanwhile (not this slot's):")
        for write in others:
            print(f"    {write.row()}")
    assert [w.key for w in mine] == [key for key, _ in expected]
    assert all(200 <= w.code < 300 for w in mine), [w.row() for w in mine]
    # Besides Events, the only other writes are derived views: the run's status (its
    # slots' states) and a LaunchSpec's status (the slots that pin it), neither an
    # object of the slot, and neither Kopf's.
    assert {(w.resource, w.subresource) for w in others} <= {
        ("agentruns", "status"), ("launchspecs", "status")}, others
    no_kopf_bookkeeping(scenario.slot(slot), scenario.agentrun("study"),
                        *objects(scenario, "leases").values(),
                        *objects(scenario, "pods").values())


def run_snapshots(scenario: Scenario) -> set[str]:
    return set(objects(scenario, "configmaps", selector="agentrun.dev/snapshot-of=launchspec"))


def new_snapshot(scenario: Scenario, slot: str, before: set[str]) -> str:
    del slot  # the snapshot is the run's, shared by its slots
    added = run_snapshots(scenario) - before
    assert len(added) == 1, added
    return added.pop()


def test_write_budget_automatic(scenario: Scenario, audit_log: Path,
                                operator_process: OperatorProcess) -> None:
    """Two nodes: n0 is reassigned to its own class (8 writes), n1 to gpu (9)."""
    publish(scenario, nodes=2)
    scenario.run("study", max_attempts=1)
    slots = [scenario.slot_name_eventually("study", n) for n in ("n0", "n1")]
    started = [fail_attempt(scenario, slot) for slot in slots]
    for slot, (worker, _) in zip(slots, started, strict=True):
        awaiting(scenario, slot, worker)
    before = {slot: run_snapshots(scenario) for slot in slots}
    for slot, worker_class in zip(slots, ("cpu", "gpu"), strict=True):
        reassign(scenario, slot, worker_class=worker_class)
    for slot in slots:
        active_again(scenario, slot)

    same, other = slots
    check_budget(title="Automatic, reassigned to the same class", log=audit_log,
                 scenario=scenario, since=started[0][1], slot=same, siblings=(other,),
                 expected=expected_cycle(same, snapshot=None, manual=False))
    check_budget(title="Automatic, reassigned to a new class", log=audit_log,
                 scenario=scenario, since=started[1][1], slot=other, siblings=(same,),
                 expected=expected_cycle(other, snapshot=new_snapshot(scenario, other,
                                                                      before[other]),
                                         manual=False))


def test_write_budget_manual(scenario: Scenario, audit_log: Path,
                             operator_process: OperatorProcess) -> None:
    """claimPolicy Manual, reassigned to gpu: the claim command costs one write more."""
    publish(scenario, nodes=1)
    scenario.run("study", claim_policy="Manual", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    scenario.wait_state(slot, "Ready")
    first_claim = request_id()
    assert scenario.annotate(slot, user="admin", claim_id=first_claim).returncode == 0
    scenario.wait_ledger(slot, first_claim)
    worker, since = fail_attempt(scenario, slot)
    awaiting(scenario, slot, worker)
    before = run_snapshots(scenario)
    reopen = reassign(scenario, slot, worker_class="gpu")
    scenario.wait_ledger(slot, reopen)
    claim = request_id()
    assert scenario.annotate(slot, user="admin", claim_id=claim).returncode == 0
    active_again(scenario, slot)

    check_budget(title="Manual, reassigned to a new class, then a claim command",
                 log=audit_log, scenario=scenario, since=since, slot=slot,
                 expected=expected_cycle(slot, snapshot=new_snapshot(scenario, slot, before),
                                         manual=True))


def test_write_budget_first_claim(scenario: Scenario, audit_log: Path,
                                  operator_process: OperatorProcess) -> None:
    """A first Automatic claim of slots with nothing to wait for: at most 3 operator writes
    per pod beyond the slot's creation (Lease, Pod, one status: the first status and the
    pin ride on it), the run's one LaunchSpec snapshot aside, and no Event per pod."""
    publish(scenario, nodes=4)
    since = datetime.now(UTC)
    scenario.run("study", max_attempts=1)
    names = [scenario.slot_name_eventually("study", f"n{i}") for i in range(4)]
    for name in names:
        scenario.wait_state(name, "Active", timeout=60)

    def writes() -> list[audit.Write]:
        return [w for w in audit.writes(audit_log, namespace=scenario.namespace,
                                        user=OPERATOR_USER, since=since)
                if any(of_slot(w, name) for name in names) or w.resource == "events"]

    settled = len(writes())
    holds_throughout(lambda: len(writes()) == settled, seconds=SETTLE_SECONDS,
                     message="no further operator write after Active")
    found = writes()
    for name in names:
        mine = [w.key for w in found if w.resource != "configmaps" and of_slot(w, name)
                and not (w.resource == "slots" and w.verb == "create")]
        print(f"\n=== first claim of {name}: {len(mine)} writes ===")
        for key in mine:
            print(f"    {key}")
        assert mine == [("create", "leases", "", f"{name}-1"), ("create", "pods", "", f"{name}-1"),
                        ("update", "slots", "status", name)], mine
    snapshots = [w for w in found if w.resource == "configmaps"]
    assert [w.verb for w in snapshots] == ["create"], [w.row() for w in snapshots]
    events = [w for w in found if w.resource == "events"]
    assert len(events) <= len(names), [w.row() for w in events]
