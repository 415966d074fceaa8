"""The fault scenarios "watch streams cut" and "a half-open connection".

One play (:func:`play`), shared by ``make faults`` (``bench/faults/network.py``: scenarios
``watch-cut`` and ``half-open``) and ``make test``
(``tests/integration/operator/test_fault_network.py``). The operator talks to the API
server only through a :class:`netfaults.Proxy`; the scenario plays the workers by hand,
directly against the API server (no node): their pods are never scheduled, their leases
renewed every second by a :class:`Workers` thread.

1. a run of ``slots`` nodes, lease ``lease_seconds``; once every slot is Active and its
   lease renewed, a hold command on the first slot, then
2. ``cuts`` times, every live connection of the operator cut (alternately RST and FIN),
   ``CUT_GAP`` apart, a renewal of every lease between two cuts;
3. when ``black_hole`` (seconds, more than the lease): the last slot's worker stops
   renewing (its lease is let expire), and the operator's connections are black-holed
   for that long, then healed (``then="heal"``) or cut (``"rst"``/``"fin"``);
4. after the fault: a release command, a run made then must be served (Active) within
   :data:`SERVED_BOUND`, the let-go slot's attempt recovered (attempt 2 Active) within
   two leases and :data:`RECOVERED_MARGIN` of the fault's end (both bounds longer by
   :data:`STRANDED_WATCH` when the connections are stranded), then every worker exits 0
   and every slot Succeeds within :data:`SETTLED_BOUND`.

What is checked (:func:`violations`): *no early takeover* (a renewed slot has one
attempt), *no attempt lost* and *one pod and one lease record per attempt* (the attempt
records numbered 1..n, the Leases exactly ``<slot>-1..n``, each tombstoned, no pod for an
attempt the slot does not record), *one ledger entry per command* and no command
annotation left, and *no slot stuck* (the bounds above).
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from agentrun.api import names
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.faults.netfaults import Proxy, hold_black_hole, proxied_kubeconfig, upstream_of
from tests.support.faults.pausedserver import (
    command_violations,
    decided,
    lease_outcome,
    release_then_run_after,
    status,
    timed,
)
from tests.support.plays.scenarios import Object, Scenario, request_id
from tests.support.waiting import wait_for, wait_for_default_service_account

CUT_GAP = 2.0  # seconds between two cuts: the operator reconnects, then loses it again
ACTIVE_BOUND = 60.0  # the first run's slots Active (claims: a Lease, a Pod, a status each)
SERVED_BOUND = 30.0  # a run created after the fault has its attempt Active
# The let-go lease is judged expired once its duration has passed outside blind time, so
# the recovery after the fault's end needs a lease (plus the reconnect): two, and 15 s.
RECOVERED_MARGIN = 15.0
# A stranded watch (``then="strand"``) is noticed only by Kopf's inactivity timeout
# (``settings.watching.inactivity_timeout``, 70 s: bookmarks come every 60 s): until then
# the operator hears nothing of that kind; every bound after the fault grows by it.
STRANDED_WATCH = 70.0
SETTLED_BOUND = 60.0  # after the workers exit, every slot Succeeded
COMMAND_BOUND = 30.0  # a command decided and its annotations removed
RENEWED_BEFORE = 3  # renewals (a second apart) of each lease before the faults begin


@dataclass
class Play:
    """One play's outcome: what went wrong (empty: nothing) and its figures (seconds)."""

    violations: list[str] = field(default_factory=list)
    cut_connections: int = 0  # connections closed by the cuts (and the hole's cut)
    connections: int = 0  # the operator's connections through the proxy, in all
    served_after: float | None = None  # the later run created → its attempt Active
    recovered_after: float | None = None  # the fault's end → the let-go slot's attempt 2
    settled_after: float | None = None  # the workers' exit → every slot Succeeded


@contextmanager
def operator_behind_proxy(cluster: Cluster, *, namespace: str,
                          folder: Path) -> Iterator[tuple[Proxy, OperatorProcess]]:
    """The operator of ``namespace``, its every connection through a proxy (its log and
    kubeconfig in ``folder``); stopped, then the proxy, when the block ends."""
    with Proxy(upstream=upstream_of(cluster.kubeconfig, context="operator")) as proxy:
        kubeconfig = proxied_kubeconfig(cluster.kubeconfig, proxy=proxy,
                                        into=folder / "proxied.kubeconfig")
        process = OperatorProcess(cluster=dataclasses.replace(cluster, kubeconfig=kubeconfig),
                                  namespace=namespace, log=folder / "operator.log").start()
        try:
            yield proxy, process
        finally:
            process.stop()


class Workers:
    """Plays the live workers: renews each lease of ``leases`` every second, directly on
    the API server (not through the proxy), until stopped. A failed renewal is retried at
    the next period, as a worker's keeper does."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.leases: set[str] = set()
        self.renewals: Counter[str] = Counter()  # renewals made, by lease
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def renewing(self, *leases: str) -> None:
        with self._lock:
            self.leases.update(leases)

    def let_go(self, lease: str) -> None:
        with self._lock:
            self.leases.discard(lease)

    def renew_all(self) -> None:
        with self._lock:
            leases = sorted(self.leases)
        for lease in leases:
            try:
                self.scenario.renew(lease)
                self.renewals[lease] += 1
            except Exception:  # a worker retries at its next period
                self.errors += 1

    def renewed(self, leases: list[str], *, times: int) -> bool:
        """Has each of ``leases`` been renewed ``times`` times?"""
        return all(self.renewals[lease] >= times for lease in leases)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.renew_all()
            self._stop.wait(1.0)  # the workers' renewal period, not a synchronisation

    def __enter__(self) -> Workers:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def active(scenario: Scenario, slots: list[str], *, attempts: int = 1) -> bool:
    return all(status(s := scenario.slot(name)).get("state") == "Active"
               and status(s).get("attemptCount") == attempts for name in slots)


def publish(scenario: Scenario, *, slots: int, lease_seconds: int) -> None:
    nodes: tuple[tuple[str, str, list[str]], ...] = tuple(
        (f"w{i:02d}", "cpu", []) for i in range(slots))
    scenario.configs(name="before", nodes=nodes)
    scenario.configs(name="after", nodes=(("late", "cpu", []),))
    scenario.launch_spec("hand-workers", classes=["cpu"], lease_seconds=lease_seconds,
                         start_deadline_seconds=600)
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)


def play(scenario: Scenario, *, proxy: Proxy, slots: int, lease_seconds: int, cuts: int,
         black_hole: float | None = None, then: str = "heal") -> Play:
    """Play the scenario once in ``scenario``'s namespace (its operator behind ``proxy``)
    and check it: see the module docstring."""
    result = Play()
    publish(scenario, slots=slots, lease_seconds=lease_seconds)
    with Workers(scenario) as workers:
        scenario.run("before", config="before", max_attempts=2)
        first = wait_for(lambda: (found := scenario.slot_names("before")) and len(found) == slots
                         and found, timeout=60, message=f"{slots} slots of run before")
        workers.renewing(*(f"{s}-1" for s in first))
        wait_for(lambda: active(scenario, first), timeout=ACTIVE_BOUND,
                 message="every slot of run before Active", interval=0.5)
        # Renewed, and seen renewed: a lease the operator never saw renewed is judged by
        # the start deadline instead (600 s here), not by its duration.
        wait_for(lambda: workers.renewed([f"{s}-1" for s in first], times=RENEWED_BEFORE),
                 timeout=ACTIVE_BOUND, message="every worker renewing", interval=0.5)
        hold, release = request_id(), request_id()
        held = scenario.annotate(first[0], user="admin", hold_id=hold,
                                 hold_reason="the network scenario")
        assert held.returncode == 0, held.stderr
        for number in range(cuts):
            result.cut_connections += proxy.cut(how="rst" if number % 2 == 0 else "fin")
            time.sleep(CUT_GAP)  # the fault's schedule: the operator reconnects meanwhile
        expected = {name: 1 for name in first}
        ended = time.monotonic()
        deaf = STRANDED_WATCH if then == "strand" else 0.0
        if black_hole is not None:
            lapsing = first[-1]
            workers.let_go(f"{lapsing}-1")
            expected[lapsing] = 2
            before = proxy.live
            ended = hold_black_hole(proxy, seconds=black_hole, then=then)
            result.cut_connections += before if then in ("rst", "fin") else 0
        made = release_then_run_after(scenario, result, slot=first[0], hold=hold,
                                      release=release)
        late = wait_for(lambda: scenario.slot_names("after"), timeout=SERVED_BOUND + deaf,
                        message="the slot of run after")
        workers.renewing(*(f"{s}-1" for s in late))
        expected.update({name: 1 for name in late})
        if timed(result, "the run made after the fault served (Active)",
                 lambda: active(scenario, late), timeout=SERVED_BOUND + deaf) is not None:
            result.served_after = time.monotonic() - made
        if black_hole is not None:
            workers.renewing(f"{lapsing}-2")
            if timed(result, f"{lapsing}: its let-go lease recovered (attempt 2 Active)",
                     lambda: active(scenario, [lapsing], attempts=2),
                     timeout=lease_seconds * 2 + RECOVERED_MARGIN + deaf) is not None:
                result.recovered_after = time.monotonic() - ended
            else:
                result.violations.append(f"{lapsing}: {said(scenario.slot(lapsing))}")
        timed(result, f"release {release} decided",
              lambda: decided(scenario, first[0], release), timeout=COMMAND_BOUND)
    settle(scenario, result, slots=list(expected))
    result.connections = proxy.accepted
    result.violations += violations(scenario, attempts=expected,
                                    commands={first[0]: [hold, release]})
    return result


def said(slot: Object) -> str:
    """A slot's state, attempt count and conditions, for a violation."""
    state = status(slot)
    conditions = "; ".join(f"{c.get('type')}={c.get('status')} {c.get('message', '')}"
                           for c in state.get("conditions", []))
    return f"{state.get('state')} after {state.get('attemptCount')} attempts; {conditions}"


def settle(scenario: Scenario, result: Play, *, slots: list[str]) -> None:
    """Every slot's current worker exits 0; every slot Succeeded, its attempts' Leases
    tombstoned (the tombstone is the write after the status), within the bound."""
    exited = time.monotonic()
    for name in slots:  # the attempt there is (a violation says if it is not the one due)
        finish(scenario, f"{name}-{status(scenario.slot(name)).get('attemptCount')}")

    def settled() -> bool:  # two LISTs a look, however many slots
        states = {s["metadata"]["name"]: status(s).get("state") for s in
                  scenario.custom.list_namespaced_custom_object(
                      "agentrun.dev", "v1alpha1", scenario.namespace, "slots")["items"]}
        leases = scenario.coordination.list_namespaced_lease(
            scenario.namespace, label_selector=names.SLOT_LABEL).items
        return all(states.get(s) == "Succeeded" for s in slots) and all(
            names.OUTCOME_ANNOTATION in (lease.metadata.annotations or {}) for lease in leases)
    if timed(result, "every slot Succeeded, its Leases tombstoned, after its worker exited",
             settled, timeout=SETTLED_BOUND) is not None:
        result.settled_after = time.monotonic() - exited


def finish(scenario: Scenario, worker: str) -> None:
    """The worker renews a last time, gives its lease up and its pod ends, exit 0."""
    scenario.renew(worker)
    scenario.release(worker)
    scenario.finish(worker, "Succeeded", exit_code=0)


def listed(scenario: Scenario, kind: str, slot: str) -> list[str]:
    selector = f"{names.SLOT_LABEL}={slot}"
    items = (scenario.core.list_namespaced_pod if kind == "pods"
             else scenario.coordination.list_namespaced_lease)(
        scenario.namespace, label_selector=selector).items
    return sorted(str(x.metadata and x.metadata.name) for x in items)


def violations(scenario: Scenario, *, attempts: dict[str, int],
               commands: dict[str, list[str]]) -> list[str]:
    """The invariants over each slot of ``attempts`` (its expected attempt count: 1 for a
    renewed worker, 2 for one let go); ``commands``: the request ids sent to each slot."""
    found: list[str] = []
    for name, want in attempts.items():
        slot = scenario.slot(name)
        state = status(slot)
        if state.get("state") != "Succeeded" or state.get("attemptCount") != want:
            found.append(f"{name}: {state.get('state')} after {state.get('attemptCount')} "
                         f"attempts (want Succeeded after {want}: "
                         f"{'an early takeover' if want == 1 else 'a lost or extra attempt'})")
        numbers = [a.get("number") for a in state.get("attempts", [])]
        if numbers != list(range(1, len(numbers) + 1)) or len(numbers) != want:
            found.append(f"{name}: attempt records {numbers} (want 1..{want})")
        expected = [f"{name}-{n}" for n in range(1, want + 1)]
        pods, leases = listed(scenario, "pods", name), listed(scenario, "leases", name)
        # The pod of an attempt whose lease expired may have been deleted (fenced).
        if leases != expected or not set(pods) <= set(expected) or expected[-1] not in pods:
            found.append(f"{name}: pods {pods}, leases {leases} (want leases {expected}, "
                         f"no other pod, and {expected[-1]}'s pod)")
        found += [f"{lease_name}: not tombstoned (no outcome)" for lease_name in leases
                  if not lease_outcome(scenario, lease_name)]
        found += command_violations(slot, sent=commands.get(name, []))
    return found
