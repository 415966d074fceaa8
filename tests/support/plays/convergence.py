"""Observing agentrun attempts in a test namespace, and checking that nothing is doubled.

Shared by the crash and concurrency tests: the worker's exits (no kubelet here: the test
plays the worker), listings of attempt objects, and :func:`assert_converged`, the end
state every crash or race must reach: exactly one Pod and one Lease per attempt number,
``<slot>-<n>`` with ``n`` consecutive from 1 to ``attemptCount``, each created once (a
create the crash cut in flight, audited 504, counting when it is the only one) and
each ended attempt's Lease tombstoned once (from the audit log where there is one), the
ledger without duplicates and no command left pending.
"""

from __future__ import annotations

from typing import Any

import kubernetes

from agentrun.core.commands import parsing
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import audit
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

ANN = "agentrun.dev/"
OPERATOR_USER = "operator"
CANCELED = 504  # the API server's code for a request whose client went away mid-flight
SIGKILL = -9
Object = dict[str, Any]


def publish(scenario: Scenario, *, nodes: int) -> list[str]:
    """Configuration with ``nodes`` independent cpu nodes; LaunchSpecs for cpu and gpu."""
    names = [f"n{i}" for i in range(nodes)]
    scenario.configs(nodes=tuple((n, "cpu", []) for n in names))
    scenario.launch_spec("cpu-workers", classes=["cpu"], image="busybox:cpu", lease_seconds=5)
    scenario.launch_spec("gpu-workers", classes=["gpu"], image="busybox:gpu", lease_seconds=5)
    return names


def crashed(process: OperatorProcess) -> None:
    code = process.wait_crashed(timeout=60)
    assert code == SIGKILL, f"exit status {code}, not SIGKILL; log:\n{process.tail()}"


def objects(scenario: Scenario, kind: str, *, selector: str | None = None) -> dict[str, Object]:
    """Pods, Leases or ConfigMaps of the namespace by name, as dicts (camelCase)."""
    api = kubernetes.client.ApiClient()
    items: list[Any]
    if kind == "pods":
        items = scenario.core.list_namespaced_pod(scenario.namespace,
                                                  label_selector=selector).items
    elif kind == "leases":
        items = scenario.coordination.list_namespaced_lease(scenario.namespace,
                                                            label_selector=selector).items
    else:
        items = scenario.core.list_namespaced_config_map(scenario.namespace,
                                                         label_selector=selector).items
    found: dict[str, Object] = {
        str(i.metadata.name): api.sanitize_for_serialization(i)  # type: ignore[no-untyped-call]
        for i in items}
    return found


def slots(scenario: Scenario) -> list[Object]:
    found: list[Object] = scenario.custom.list_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "slots")["items"]
    return found


def status(slot: Object) -> Object:
    found: Object = slot.get("status") or {}
    return found


def annotations_of(obj: Object | None) -> dict[str, str]:
    found: dict[str, str] = ((obj or {}).get("metadata") or {}).get("annotations") or {}
    return found


def command_annotations(slot: Object) -> list[str]:
    return sorted(k for k in annotations_of(slot) if k in parsing.ALL_KEYS)


def ledger(slot: Object) -> list[str]:
    return [c["requestId"] for c in status(slot).get("commands", [])]


def condition(slot: Object, type_: str) -> str | None:
    found = [c["status"] for c in status(slot).get("conditions", []) if c["type"] == type_]
    return found[0] if found else None


def exit_worker(scenario: Scenario, worker: str, *, phase: str = "Failed",
                expire: bool = False) -> None:
    """The worker renews once, then its pod ends; it releases its lease unless ``expire``."""
    scenario.renew(worker)
    if not expire:
        scenario.release(worker)
    scenario.finish(worker, phase, exit_code=0 if phase == "Succeeded" else 3)


def tombstoned(scenario: Scenario, lease: str) -> str | None:
    return annotations_of(scenario.lease(lease)).get(f"{ANN}outcome")


def assert_converged(scenario: Scenario, cluster: Cluster, name: str, *, count: int,
                     state: str, without_pod: tuple[int, ...] = (),
                     requests: tuple[str, ...] = (),
                     reannotated: tuple[int, ...] = ()) -> Object:
    """The end state of one slot after the restart (see the module docstring).

    ``reannotated``: the attempts whose claim's Lease was made to record another LaunchSpec
    (a re-pin, ``annotate-lease``): one update of that Lease each, and no more.
    """
    slot = scenario.slot(name)
    st = status(slot)
    uid = slot["metadata"]["uid"]
    assert st["state"] == state, st
    assert st["attemptCount"] == count, st
    assert "pendingWorker" not in st, st
    expected = [f"{name}-{n}" for n in range(1, count + 1)]
    leases = objects(scenario, "leases", selector=f"{ANN}slot={name}")
    pods = objects(scenario, "pods", selector=f"{ANN}slot={name}")
    assert sorted(leases) == sorted(expected), leases.keys()
    assert sorted(pods) == sorted(e for n, e in enumerate(expected, 1)
                                  if n not in without_pod), pods.keys()
    for kind, found in (("lease", leases), ("pod", pods)):
        for obj_name, obj in found.items():
            meta = obj["metadata"]
            assert meta["labels"][f"{ANN}attempt"] == obj_name.rsplit("-", 1)[1], (kind, meta)
            assert [ref["uid"] for ref in meta["ownerReferences"]] == [uid], (kind, meta)
    records = st.get("attempts", [])
    assert [r["number"] for r in records] == list(range(1, count + 1)), records
    for record in records:
        lease = leases[record["lease"]]
        outcome = annotations_of(lease).get(f"{ANN}outcome")
        if record.get("endedAt"):
            assert outcome == record["outcome"], (record, lease["metadata"])
            assert not (lease.get("spec") or {}).get("holderIdentity"), lease
        else:
            assert record["pod"] == st.get("activeWorker"), (record, st)
            assert outcome is None, lease["metadata"]
    ids = ledger(slot)
    assert len(ids) == len(set(ids)), ids
    for request in requests:
        assert ids.count(request) == 1, ids
    assert command_annotations(slot) == [], annotations_of(slot)
    log = cluster.audit_log
    if log is not None:  # each attempt object created once; each lease tombstoned once
        ended = {r["lease"] for r in records if r.get("endedAt")}
        want = {}
        for n, attempt in enumerate(expected, 1):
            want[("create", "leases", "", attempt)] = 1
            if n not in without_pod:
                want[("create", "pods", "", attempt)] = 1
            want[("update", "leases", "", attempt)] = (
                (attempt in ended) + (n in reannotated))

        def audited() -> dict[tuple[str, str, str, str], int]:
            # Successful writes only: a 409 is a race lost, the other writer won. And a
            # create whose client was killed in flight (the operator crashed mid-request:
            # audited 504, "context canceled") may have landed all the same, unseen by
            # anyone: it counts as the one create when no create succeeded.
            writes = audit.writes(log, namespace=scenario.namespace, user=OPERATOR_USER)
            found = {}
            for key in want:
                mine = [w for w in writes if w.key == key]
                landed = sum(1 for w in mine if w.code < 300)
                cut = key[0] == "create" and any(w.code == CANCELED for w in mine)
                found[key] = landed or int(cut)
            return found

        # The audit event of a request is written as its response completes, by the API
        # server's log backend, which a loaded machine can hold back for seconds: poll.
        try:
            wait_for(lambda: audited() == want, timeout=15, message="the audited writes")
        except AssertionError:
            got = audited()
            assert got == want, {k: (got[k], n) for k, n in want.items() if got[k] != n}
    return slot


def assert_nothing_stray(scenario: Scenario) -> None:
    """Every Pod and Lease in the namespace is an attempt ``<slot>-<n>``, n ≤ attemptCount."""
    counts = {s["metadata"]["name"]: status(s).get("attemptCount", 0) for s in slots(scenario)}
    for kind in ("pods", "leases"):
        for found in objects(scenario, kind):
            slot, _, number = found.rpartition("-")
            assert slot in counts and number.isdigit(), (kind, found, counts)
            assert int(number) in range(1, counts[slot] + 1), (kind, found, counts)
    assert all(status(s).get("state") != "Claiming" for s in slots(scenario))


def reassign(scenario: Scenario, slot: str, *, worker_class: str = "gpu") -> str:
    request = request_id()
    result = scenario.annotate(slot, user="admin", reassign_id=request, reassign_run="study",
                               reassign_worker_class=worker_class,
                               reassign_reason="crash test: needs another class")
    assert result.returncode == 0, result.stderr
    return request
