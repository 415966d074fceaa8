"""Leader election and fencing, against the real API server.

Covers:
- two replicas (``--leader-elect``, short timings): one leads, the other stands by with
  its caches primed and does nothing; the leader SIGKILLed, the standby takes the leader
  Lease once it has gone unrenewed for its duration, and a command written in between
  (alice's hold, stamped under the epoch of the killed leader) is accepted, not
  ``StaleEpoch``: the epoch is not rotated by a failover (only the leader mints, and the
  new one finds it in force); its Event names the new leader (``reportingInstance``); a
  graceful stop releases the Lease (holder empty);
- the fencing policy (``agentrun-fence-operator``) with tokens of the operator's
  ServiceAccount bound to two placeholder pods: a write by the pod the fencing token does
  not name is refused (``fenced: pod ... is not the leader``), the named one's admitted;
  the token changes hands (a later term) and the refusal follows it; the former leader
  cannot write the token back at its old term; a token bound to no pod is refused; the
  election's own Lease is never fenced; the binding deleted and re-created (an uninstall
  and reinstall), the params still follow the token (the API server's param informer for
  a Lease froze there: the reason the token is a Secret);
- two replicas acting as the operator's ServiceAccount with pod-bound tokens, the fence
  in force: the leader SIGSTOPped past its lease, the standby takes over and serves a
  command; SIGCONTed, the former leader exits 75 and the audit log shows no write of it
  admitted once the new leader's fence was in force (its dry-run probe, before its first
  write).

The replicas here act as the local ``operator`` user, which the fencing policy does not
match (it matches the ServiceAccount only); the chart's in-cluster replica runs with both.
Cluster-wide (the one leader Lease, a cluster policy): ``serial``.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import kubernetes
import pytest

from agentrun.api import names
from tests.support.actors import leaders
from tests.support.actors.leaders import LEASE, TOKEN, bound_token, holder, token_kubeconfig
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

pytestmark = pytest.mark.serial

ELECTION = leaders.election()


def replica(cluster: Cluster, namespace: str, tmp_path: Path, name: str) -> OperatorProcess:
    return OperatorProcess(cluster=cluster, namespace=namespace, log=tmp_path / f"{name}.log",
                           args=[*ELECTION, "--identity", name])


@pytest.fixture
def replicas(cluster: Cluster, namespace: str, installed: None,
             tmp_path: Path) -> Iterator[tuple[OperatorProcess, OperatorProcess]]:
    first, second = (replica(cluster, namespace, tmp_path, f"{namespace}-{n}")
                     for n in ("a", "b"))
    yield first, second
    for process in (first, second):
        process.stop()
        print(f"--- {process.log.name} (tail) ---\n{process.tail(40)}")


def epoch(cluster: Cluster) -> str:
    found = cluster.kubectl("get", "-n", names.OPERATOR_NAMESPACE, "secret",
                            names.STAMPING_SECRET, "-o", "jsonpath={.data.epoch}")
    assert found.returncode == 0 and found.stdout, found.stderr
    return found.stdout


def test_the_standby_takes_over_and_a_command_in_flight_stands(
        scenario: Scenario, cluster: Cluster, namespace: str,
        replicas: tuple[OperatorProcess, OperatorProcess]) -> None:
    first, second = replicas
    leader, standby = f"{namespace}-a", f"{namespace}-b"
    first.start()
    # (A Lease left by an earlier install is taken once unrenewed for its duration.)
    wait_for(lambda: holder(cluster) == leader, timeout=60,
             message=f"{leader} leading; {first.tail()}")
    second.start()
    wait_for(lambda: "stands by, its caches primed" in second.tail(60), timeout=60,
             message=f"{standby} standing by; {second.tail()}")
    slot = scenario.owned_retry_wait()  # served by the leader alone
    assert holder(cluster) == leader
    before = epoch(cluster)

    assert first.process is not None
    os.killpg(first.process.pid, signal.SIGKILL)
    rid = request_id()  # in flight: written while nobody leads
    assert scenario.annotate(slot, user="alice", hold_id=rid,
                             hold_reason="the failover").returncode == 0
    entry = scenario.wait_ledger(slot, rid, timeout=60)
    assert entry["outcome"] == "Accepted", entry
    assert entry["actor"] == "alice"
    assert holder(cluster) == standby
    assert epoch(cluster) == before  # not rotated: nothing stamped under it is refused
    events = kubernetes.client.CoreV1Api(cluster.client()).list_namespaced_event(namespace)
    held = [e for e in events.items if e.reason == "Held"]
    assert held and {e.reporting_instance for e in held} == {standby}, held

    second.stop()  # graceful: the Lease is released for the next one
    assert holder(cluster) == ""


@pytest.fixture
def fence(cluster: Cluster, installed: None) -> Iterator[tuple[str, ...]]:
    """The fencing policy in force, and two placeholder pods of the operator's account."""
    with leaders.fenced(cluster, pods=("fence-probe-a", "fence-probe-b")) as pods:
        yield pods


def secret(pod: str, term: int) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": names.LEADER_SECRET, "namespace": names.OPERATOR_NAMESPACE,
                         "annotations": {names.LEADER_ANNOTATION: pod,
                                         names.LEADER_TERM_ANNOTATION: str(term)}}}


def name_leader(cluster: Cluster, pod: str, term: int, *, token: str | None = None) -> str:
    """Write the fencing token naming ``pod`` at ``term``, as ``token``'s holder (None:
    an admin); the stderr ('' when written)."""
    found = cluster.kubectl("get", *TOKEN, "-o", "json")
    body = secret(pod, term)
    if found.returncode == 0:
        body["metadata"]["resourceVersion"] = (  # type: ignore[index]
            json.loads(found.stdout)["metadata"]["resourceVersion"])
    verb = ["replace"] if found.returncode == 0 else ["create"]
    identity = ["--token", token] if token else []
    done = cluster.kubectl(*identity, *verb, "-f", "-", input=json.dumps(body))
    return "" if done.returncode == 0 else done.stderr


def write(cluster: Cluster, namespace: str, token: str, name: str) -> tuple[int, str]:
    """A ConfigMap created with ``token``: (exit code, stderr)."""
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}
    done = cluster.kubectl("--token", token, "-n", namespace, "create", "-f", "-",
                           input=json.dumps(body))
    return done.returncode, done.stderr


def fenced(cluster: Cluster, namespace: str, token: str) -> str:
    """The refusal of a write with ``token`` ('' when admitted)."""
    code, said = write(cluster, namespace, token, f"probe-{request_id()}")
    return "" if code == 0 else said


def test_only_the_leaders_pod_writes_as_the_operator(
        cluster: Cluster, namespace: str, fence: tuple[str, str]) -> None:
    a, b = fence
    token_a, token_b = bound_token(cluster, a), bound_token(cluster, b)
    assert name_leader(cluster, a, 1, token=token_a) == ""
    # The policy and its params load asynchronously: wait until it refuses b at all.
    said = wait_for(lambda: fenced(cluster, namespace, token_b), timeout=30,
                    message="the fencing policy in force")
    assert f"fenced: pod {b} is not the leader" in said and f"names {a}" in said, said
    assert fenced(cluster, namespace, token_a) == ""
    said = fenced(cluster, namespace, bound_token(cluster, None))
    assert "fenced: a token bound to no pod" in said, said

    assert name_leader(cluster, b, 2, token=token_b) == ""  # b took the Lease: term 2
    wait_for(lambda: fenced(cluster, namespace, token_a), timeout=30,
             message="the former leader fenced off")
    assert fenced(cluster, namespace, token_b) == ""
    # The former leader, waking up, cannot name itself again at its old term.
    said = name_leader(cluster, a, 1, token=token_a)
    assert "fenced: the fencing token" in said and "is at term 2" in said, said
    # The election itself is never fenced: a's candidate may still write the Lease.
    lease = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
             "metadata": {"name": names.LEADER_LEASE, "namespace": names.OPERATOR_NAMESPACE},
             "spec": {"holderIdentity": a, "leaseDurationSeconds": 15}}
    cluster.kubectl("delete", *LEASE, "--ignore-not-found")
    taken = cluster.kubectl("--token", token_a, "create", "-f", "-", input=json.dumps(lease))
    assert taken.returncode == 0, taken.stderr

    # The API server's param informer survives the binding's re-creation (an uninstall
    # and reinstall): with a Lease as params it did not (core.policies.fencing).
    binding = ("validatingadmissionpolicybinding", names.FENCE_POLICY)
    assert cluster.kubectl("delete", *binding).returncode == 0
    wait_for(lambda: fenced(cluster, namespace, token_a) == "", timeout=30,
             message="nothing fenced without the binding")
    applied = cluster.kubectl("apply", "--server-side", "-f", str(leaders.FENCE))
    assert applied.returncode == 0, applied.stderr
    wait_for(lambda: fenced(cluster, namespace, token_a), timeout=30,
             message="the binding back in force")
    assert name_leader(cluster, a, 3, token=token_a) == ""
    wait_for(lambda: fenced(cluster, namespace, token_b), timeout=30,
             message="the token's change seen after the re-creation")
    assert fenced(cluster, namespace, token_a) == ""


def test_a_leader_paused_past_its_lease_wakes_fenced_off_and_stops(
        scenario: Scenario, cluster: Cluster, namespace: str, fence: tuple[str, str],
        tmp_path: Path) -> None:
    """Two replicas acting as the operator's ServiceAccount, with tokens bound to their
    pods (the fence in force): the leader SIGSTOPped past its lease, the standby takes
    over and serves a command; SIGCONTed, the former leader stops (75), and the audit log
    shows no write of it admitted once the new leader's fence was in force (its admitted
    dry-run probe, before its first write)."""
    if cluster.audit_log is None:
        pytest.skip("needs the local control plane's audit log")
    a, b = fence
    first, second = (OperatorProcess(
        cluster=cluster, namespace=namespace, log=tmp_path / f"{pod}.log",
        args=[*ELECTION, "--identity", pod],
        env={"KUBECONFIG": str(token_kubeconfig(cluster, bound_token(cluster, pod),
                                                tmp_path / f"{pod}.kubeconfig"))})
        for pod in (a, b))
    try:
        first.start()
        wait_for(lambda: "took the leader Lease" in first.tail(80), timeout=60,
                 message=f"{a} leading; {first.tail()}")
        second.start()
        wait_for(lambda: "stands by" in second.tail(80), timeout=60,
                 message=f"{b} standing by; {second.tail()}")
        slot = scenario.owned_retry_wait()  # served by a
        since = datetime.now(UTC)
        assert first.process is not None
        os.killpg(first.process.pid, signal.SIGSTOP)
        wait_for(lambda: "took the leader Lease" in second.tail(80), timeout=60,
                 message=f"{b} taking over; {second.tail()}")
        rid = request_id()
        assert scenario.annotate(slot, user="alice", hold_id=rid,
                                 hold_reason="the leader paused").returncode == 0
        assert scenario.wait_ledger(slot, rid, timeout=60)["outcome"] == "Accepted"
        os.killpg(first.process.pid, signal.SIGCONT)
        assert first.wait_crashed(timeout=30) == 75, first.tail()
        writes = leaders.operator_writes(cluster, since=since)
        assert [pod for _, pod in leaders.fenced_in(writes)] == [b], writes
        new = [w for w in writes if w.kind == leaders.WRITE and w.pod == b and w.admitted]
        assert new, writes  # the hold's ledger entry, at least
        assert leaders.late_writes(writes) == []  # nothing of a's admitted after b's probe
    finally:
        for process in (first, second):
            if process.process is not None and process.alive:
                os.killpg(process.process.pid, signal.SIGCONT)
            process.stop()
            print(f"--- {process.log.name} (tail) ---\n{process.tail(40)}")
