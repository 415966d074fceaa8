"""The fault scenario "failover": two elected replicas, the leader lost mid-burst of claims.

Played by ``make faults`` (``bench/faults/failover.py``). Two replicas of the operator
(``--leader-elect``, a 4 s lease, renew deadline 3 s, retry 0.5 s) act as the operator's
ServiceAccount with tokens bound to placeholder pods, the fencing policy in force
(:mod:`tests.support.actors.leaders`); each talks to the API server through a proxy of its
own (:class:`netfaults.Proxy`), so its connections can be black-holed. The workers are
played by hand (no node: the pods are never scheduled): each Active attempt is renewed,
then ends (exit 0) at the next pass, so the run's places under ``spec.maxActive`` free up
and claims keep coming: a burst of ``slots`` claims, ``maxActive`` at a time.

While the burst goes on, the leader is lost ``kills`` times by SIGKILL, then once paused
(SIGSTOP) until the standby holds the Lease and then SIGCONTed, then once cut off by a
half-open connection (its proxy black-holes every connection, closing none) until the
standby holds the Lease, then healed (what the proxy kept is delivered). After each, the
lost replica is started again (the same pod: a container restart) and stands by.

Checked:

- *the former leader is fenced*: from the audit log, no write of a pod admitted once
  another pod's fence is in force (its first admitted dry-run probe of a term, which a new
  leader makes before it acts: :func:`leaders.late_writes`), however often the lead
  changed, by the scenario or by itself;
- *a paused or cut-off leader stops itself*: it exits 75 (lost the lead);
- *no slot claimed twice* (``netplay.violations``: each slot Succeeded after exactly one
  attempt, its Leases exactly ``<slot>-1``, tombstoned, no other pod);
- *maxActive never exceeded*: a watch of the run's slots, in the API server's order,
  never sees more than ``maxActive`` of them Claiming or Active (the states status says;
  the operator's own count also holds a place for a claim under way, which only
  tightens it);
- *the standby acts*: its first admitted write within :data:`ACT_BOUND` of the loss.

Figures: the time from each loss until the new leader's first admitted write (p50, p99,
max: at 20 kills the nearest-rank p99 is the max), the writes the fence refused, the
most slots Claiming or Active at once, and the claims made.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes

from agentrun.api import names
from agentrun.core.policies import fencing
from tests.support.actors import leaders
from tests.support.actors.leaders import fenced_for
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.faults import netplay
from tests.support.faults.netfaults import Proxy, proxied_kubeconfig, upstream_of
from tests.support.faults.netplay import status
from tests.support.faults.pausedserver import timed
from tests.support.faults.racing import Following
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

RUN = "burst"
PODS = ("failover-a", "failover-b")
LEASE_SECONDS = 4  # the leader Lease (the flags of :func:`leaders.election`)
WORKER_LEASE_SECONDS = 30  # the attempts' leases: renewed by hand throughout
ACT_BOUND = 60.0  # seconds from a loss to the new leader's first admitted write
TAKEOVER_BOUND = 60.0  # seconds from a loss to the standby holding the Lease
STANDBY_BOUND = 90.0  # a restarted replica standing by, its caches primed
PROGRESS_BOUND = 120.0  # the burst's next claims between two losses
SETTLED_BOUND = 120.0  # after the last loss, every slot Succeeded, its Lease tombstoned
EXIT_LOST = 75  # a replica that lost the lead exits with this status
KINDS = ("kill", "pause", "half-open")
BUSY = ("Claiming", "Active")


@dataclass
class Loss:
    """One failover: how the leader was lost, which pod lost and which took over, when
    (the wall clock, to compare with the audit log)."""

    kind: str
    old: str
    new: str
    at: datetime
    exited: int | None = None  # the former leader's exit status (None: still running)


@dataclass
class Play:
    violations: list[str] = field(default_factory=list)
    losses: list[Loss] = field(default_factory=list)
    acted_after: dict[int, float] = field(default_factory=dict)  # loss index -> seconds
    most_busy: int = 0
    claims: int = 0
    refused: int = 0  # writes refused by the fence: a pod's after another's came in force


class Census:
    """Watches the run's slots in the API server's order: the most of them Claiming or
    Active at once, and how many have been claimed (an attempt at all)."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.states: dict[str, str] = {}
        self.claimed: set[str] = set()
        self.most_busy = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _see(self, slot: Any) -> None:
        name = slot["metadata"]["name"]
        self.states[name] = str(status(slot).get("state") or "")
        if int(status(slot).get("attemptCount") or 0) >= 1:
            self.claimed.add(name)
        self.most_busy = max(self.most_busy, sum(s in BUSY for s in self.states.values()))

    def _loop(self) -> None:
        custom = self.scenario.custom
        selector = f"{names.RUN_LABEL}={RUN}"
        while not self._stop.is_set():
            try:
                listed = custom.list_namespaced_custom_object(
                    "agentrun.dev", "v1alpha1", self.scenario.namespace, "slots",
                    label_selector=selector)
                for slot in listed["items"]:
                    self._see(slot)
                version = listed["metadata"]["resourceVersion"]
                while not self._stop.is_set():
                    for event in kubernetes.watch.Watch().stream(
                            custom.list_namespaced_custom_object, "agentrun.dev", "v1alpha1",
                            self.scenario.namespace, "slots", label_selector=selector,
                            resource_version=version, timeout_seconds=5):
                        version = event["object"]["metadata"]["resourceVersion"]
                        if event["type"] in ("ADDED", "MODIFIED"):
                            self._see(event["object"])
            except Exception:  # a 410 or a dropped stream: list again
                self.errors += 1

    def wait_claimed(self, count: int) -> None:
        wait_for(lambda: len(self.claimed) >= count, timeout=PROGRESS_BOUND,
                 message=f"{count} slots claimed ({len(self.claimed)} so far)")

    def __enter__(self) -> Census:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


class Burst(Following):
    """The workers: each Active attempt renewed, then ended (exit 0) at the next pass."""

    def __init__(self, scenario: Scenario) -> None:
        super().__init__(scenario)
        self.seen: set[str] = set()
        self.ended: set[str] = set()

    def tend(self, worker: str) -> None:
        if worker in self.ended:
            return
        if worker in self.seen:
            netplay.finish(self.scenario, worker)
            self.ended.add(worker)
        else:
            self.scenario.renew(worker)
            self.seen.add(worker)


@dataclass
class Replica:
    pod: str
    proxy: Proxy
    process: OperatorProcess

    def since_start(self) -> str:
        """Its log since its latest start."""
        text = self.process.log.read_text(errors="replace") if self.process.log.exists() else ""
        return text.rsplit(f"--- start {self.process.starts} ", 1)[-1]


@contextmanager
def replicas(cluster: Cluster, *, namespace: str, folder: Path) -> Iterator[dict[str, Replica]]:
    """Two replicas (not started), each behind a proxy of its own, acting with a token
    bound to its placeholder pod; stopped when the block ends."""
    with ExitStack() as stack:
        stack.enter_context(leaders.fenced(cluster, pods=PODS))
        found: dict[str, Replica] = {}
        for pod in PODS:
            proxy = stack.enter_context(
                Proxy(upstream=upstream_of(cluster.kubeconfig, context="operator")))
            token = leaders.bound_token(cluster, pod, seconds=3600)
            config = proxied_kubeconfig(
                leaders.token_kubeconfig(cluster, token, folder / f"{pod}.token.kubeconfig"),
                proxy=proxy, into=folder / f"{pod}.kubeconfig")
            process = OperatorProcess(cluster=cluster, namespace=namespace,
                                      log=folder / f"{pod}.log",
                                      args=[*leaders.election(lease=LEASE_SECONDS),
                                            "--identity", pod],
                                      env={"KUBECONFIG": str(config)})
            found[pod] = Replica(pod=pod, proxy=proxy, process=process)
        try:
            yield found
        finally:
            for replica in found.values():
                process = replica.process
                replica.proxy.heal()
                if process.process is not None and process.alive:
                    os.killpg(process.process.pid, signal.SIGCONT)
                process.stop()


def standing_by(replica: Replica) -> None:
    replica.process.start()
    wait_for(lambda: "stands by, its caches primed" in replica.since_start(),
             timeout=STANDBY_BOUND, message=f"{replica.pod} standing by; "
                                            f"{replica.process.tail()}")


def lose(cluster: Cluster, kind: str, *, old: Replica, new: Replica) -> Loss:
    """Lose the leader ``old`` by ``kind``; return once ``new`` leads and ``old`` stands
    by again."""
    assert old.process.process is not None
    pid = old.process.process.pid
    loss = Loss(kind=kind, old=old.pod, new=new.pod, at=datetime.now(UTC))

    def taken() -> bool:
        return leaders.holder(cluster) == new.pod and "took the leader Lease" in \
            new.since_start()
    if kind == "kill":
        os.killpg(pid, signal.SIGKILL)
        wait_for(taken, timeout=TAKEOVER_BOUND, message=f"{new.pod} taking over")
    elif kind == "pause":
        os.killpg(pid, signal.SIGSTOP)
        wait_for(taken, timeout=TAKEOVER_BOUND, message=f"{new.pod} taking over")
        os.killpg(pid, signal.SIGCONT)
    else:
        old.proxy.black_hole()
        wait_for(taken, timeout=TAKEOVER_BOUND, message=f"{new.pod} taking over")
        old.proxy.heal()  # what it kept is delivered now, after the new leader's start
    loss.exited = old.process.wait_crashed(timeout=30)
    standing_by(old)
    return loss


def publish(scenario: Scenario, *, slots: int, max_active: int) -> None:
    nodes: tuple[tuple[str, str, list[str]], ...] = tuple(
        (f"w{i:03d}", "cpu", []) for i in range(slots))
    scenario.configs(name=RUN, nodes=nodes)
    scenario.launch_spec("hand-workers", classes=["cpu"], lease_seconds=WORKER_LEASE_SECONDS,
                         start_deadline_seconds=600)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.run(RUN, config=RUN, max_attempts=2, extra={"maxActive": max_active})


def settled(scenario: Scenario, slots: int) -> bool:
    """Every slot of the run Succeeded, every attempt Lease tombstoned."""
    found = scenario.custom.list_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "slots")["items"]
    leases = scenario.coordination.list_namespaced_lease(
        scenario.namespace, label_selector=names.SLOT_LABEL).items
    return len(found) == slots and all(status(s).get("state") == "Succeeded"
                                       for s in found) and all(
        names.OUTCOME_ANNOTATION in (lease.metadata.annotations or {}) for lease in leases)


def fenced_off(cluster: Cluster, losses: list[Loss], *, since: datetime,
               result: Play) -> None:
    """From the audit log: no write admitted from a pod after another pod's fence came in
    force (its first admitted probe of a term, :func:`leaders.late_writes`), however
    often the lead changed, by the scenario or by itself; the writes so refused counted;
    and each loss's new leader's first admitted write (the time it took)."""
    writes = leaders.operator_writes(cluster, since=since)
    result.violations += [f"{w.what} by {w.pod} admitted at {w.at:%H:%M:%S.%f}, after the "
                          f"fence named {holder}" for w, holder in leaders.late_writes(writes)]
    terms = leaders.fenced_in(writes)
    result.refused = sum(1 for w in writes if w.kind == leaders.WRITE and w.code == 403
                         and fencing.FENCED in w.message
                         and fenced_for(terms, w) not in (None, w.pod))
    for index, loss in enumerate(losses):
        first = next((w.at for w in writes if w.kind == leaders.WRITE and w.pod == loss.new
                      and w.admitted and w.at >= loss.at), None)
        if first is None or (first - loss.at).total_seconds() > ACT_BOUND:
            result.violations.append(f"loss {index + 1} ({loss.kind}): {loss.new} made no "
                                     f"admitted write within {ACT_BOUND:.0f} s")
        if first is not None:
            result.acted_after[index] = (first - loss.at).total_seconds()


def play(scenario: Scenario, *, folder: Path, slots: int, max_active: int,
         kills: int) -> Play:
    """Play the scenario once in ``scenario``'s namespace (nothing serving it yet)."""
    cluster = scenario.cluster
    assert cluster.audit_log is not None, "the failover scenario reads the audit log"
    result = Play()
    kinds = ["kill"] * kills + ["pause", "half-open"]
    step = max(1, slots // (len(kinds) + 2))  # claims between two losses
    since = datetime.now(UTC)
    with replicas(cluster, namespace=scenario.namespace, folder=folder) as found:
        first, second = (found[pod] for pod in PODS)
        first.process.start()
        wait_for(lambda: leaders.holder(cluster) == first.pod, timeout=STANDBY_BOUND,
                 message=f"{first.pod} leading; {first.process.tail()}")
        standing_by(second)
        publish(scenario, slots=slots, max_active=max_active)
        with Census(scenario) as census, Burst(scenario):
            for number, kind in enumerate(kinds, 1):
                census.wait_claimed(number * step)
                leader = wait_for(lambda: (h := leaders.holder(cluster)) in PODS and h,
                                  timeout=TAKEOVER_BOUND, message="a replica leading")
                old, new = (found[leader], found[next(p for p in PODS if p != leader)])
                result.losses.append(lose(cluster, kind, old=old, new=new))
            timed(result, "every slot Succeeded, its Lease tombstoned",
                          lambda: settled(scenario, slots), timeout=SETTLED_BOUND)
        result.most_busy, result.claims = census.most_busy, len(census.claimed)
    if result.most_busy > max_active:
        result.violations.append(f"{result.most_busy} slots Claiming or Active at once "
                                 f"(spec.maxActive {max_active})")
    result.violations += [f"{loss.kind}: the former leader {loss.old} exited "
                          f"{loss.exited} (want {EXIT_LOST}: lost the lead)"
                          for loss in result.losses
                          if loss.kind != "kill" and loss.exited != EXIT_LOST]
    result.violations += netplay.violations(
        scenario, attempts={name: 1 for name in scenario.slot_names(RUN)}, commands={})
    fenced_off(cluster, result.losses, since=since, result=result)
    return result


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile (``share`` from 0 to 1) of non-empty ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * share // 1))
    return ordered[int(rank) - 1]
