"""The node side of ``bench/renewals``: N real workers on the node renewing their Leases,
watched over a window (renewTime changes), with the CPU time of the API server and of the
operator read from ``/proc`` around it.

Why a module of its own: ``bench/renewals`` keeps the options and the figures (pure,
unit-tested in ``tests/unit/bench/test_renewals.py``); this one needs the control plane.
"""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes

from tests.support.actors.effectowner import CLIENT, EffectOwner, word_key
from tests.support.actors.workers import (
    OWNER_ENV,
    audit_log,
    grant_worker_role,
    printed,
    real_launch_spec,
)
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

# The worker's script: the renewer (``agentrun-worker run``) renews its Lease; the script
# idles until the effect owner says ``finish`` (the bench's word: a status query of its
# key answers "applied"), then exits 0.
FINISH = "finish"
WORKER = CLIENT + f"""
import time
print(json.dumps({{"started": time.time()}}), flush=True)
while not said({FINISH!r}):
    time.sleep(2)
print(json.dumps({{"done": time.time()}}), flush=True)
"""
FINISH_KEY, FINISH_FENCE = word_key(FINISH), "bench"
ACTIVE_BOUND = 300.0  # seconds: every attempt Active and its worker started (a cold node)
SETTLED_BOUND = 120.0  # after the word to finish, every slot Succeeded
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """utime+stime of ``pids`` from /proc/<pid>/stat (gone ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / TICKS


def group(pgid: int) -> list[int]:
    """The processes of process group ``pgid`` (the operator runs as one)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.getpgid(int(entry.name)) == pgid:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@dataclass
class Window:
    """What one window measured."""

    seconds: float = 0.0
    renew_changes: int = 0  # renewTime changes seen by the watch
    lease_writes: int = 0  # the workers' user's update/patch leases (audit log)
    worker_requests: int = 0  # the workers' user's audited requests, any verb
    apiserver_cpu: float = 0.0
    operator_cpu: float = 0.0
    operator_requests: int = 0  # the operator's audited requests (reads included)
    by_verb: dict[str, int] = field(default_factory=dict)
    operator_by_verb: dict[str, int] = field(default_factory=dict)


class RenewWatch:
    """Counts renewTime changes of the namespace's Leases from a watch, in a thread."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self.seen: dict[str, Any] = {}
        self.changes: list[float] = []  # monotonic moments of each change
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        api = kubernetes.client.CoordinationV1Api(self.scenario.cluster.client())
        while not self.stopped.is_set():
            watch = kubernetes.watch.Watch()
            for event in watch.stream(api.list_namespaced_lease, self.scenario.namespace,
                                      timeout_seconds=30):
                lease = event["object"]
                renew = lease.spec and lease.spec.renew_time
                name = lease.metadata.name
                if name in self.seen and renew != self.seen[name]:
                    self.changes.append(time.monotonic())
                self.seen[name] = renew
                if self.stopped.is_set():
                    watch.stop()
                    break

    def between(self, start: float, end: float) -> int:
        return sum(start <= t < end for t in self.changes)


def audited(log: Path, *, namespace: str, user: str, since: datetime,
            until: datetime) -> dict[str, int]:
    """The ``user``'s audited requests by ``verb resource`` received in [since, until)."""
    found: dict[str, int] = {}
    with open(log, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            if user not in line:
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            ref = event.get("objectRef") or {}
            who = (event.get("user") or {}).get("username", "")
            if event.get("stage") != "ResponseComplete" or who != user:
                continue
            if namespace and ref.get("namespace") not in (namespace, None):
                continue
            at = datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))
            if since <= at < until:
                key = f"{event.get('verb')} {ref.get('resource', '')}"
                found[key] = found.get(key, 0) + 1
    return found


def start_workers(scenario: Scenario, *, image: str, owner: EffectOwner, workers: int,
                  lease: int) -> list[str]:
    """A run of ``workers`` real workers; their attempts' names once all are Active."""
    grant_worker_role(scenario)
    nodes = tuple((f"w{i:03d}", "cpu", []) for i in range(workers))
    scenario.configs(name="renew", nodes=nodes)
    real_launch_spec(scenario, "renew-workers", classes=["cpu"], image=image, script=WORKER,
                     renewer=True, lease_seconds=lease, env={OWNER_ENV: owner.url})
    scenario.run("renew", config="renew", max_attempts=1)
    slots = wait_for(lambda: (found := scenario.slot_names("renew")) and len(found) == workers
                     and found, timeout=60, message=f"{workers} slots")
    wait_for(lambda: all((scenario.slot(s).get("status") or {}).get("state") == "Active"
                         for s in slots), timeout=ACTIVE_BOUND, message="every slot Active",
             interval=1.0)
    attempts = [f"{s}-1" for s in slots]
    wait_for(lambda: all(any("started" in p for p in printed(scenario, a)) for a in attempts),
             timeout=ACTIVE_BOUND, message="every worker started", interval=1.0)
    return attempts


def measure(scenario: Scenario, *, apiserver_pid: int, operator_pgid: int, user: str,
            operator_user: str, seconds: float, watch: RenewWatch) -> Window:
    """One window of ``seconds``: renewals seen, audited requests, CPU seconds."""
    operator = group(operator_pgid)
    since, start = datetime.now(UTC), time.monotonic()
    api0, op0 = cpu_seconds([apiserver_pid]), cpu_seconds(operator)
    time.sleep(seconds)  # the window itself: measured, not a synchronization
    api1, op1 = cpu_seconds([apiserver_pid]), cpu_seconds(operator)
    end, until = time.monotonic(), datetime.now(UTC)
    time.sleep(2)  # let the audit log's batch reach the file before reading it
    log = audit_log(scenario)
    workers = audited(log, namespace=scenario.namespace, user=user, since=since, until=until)
    ops = audited(log, namespace="", user=operator_user, since=since, until=until)
    return Window(seconds=end - start, renew_changes=watch.between(start, end),
                  lease_writes=sum(n for k, n in workers.items()
                                   if k in ("update leases", "patch leases")),
                  worker_requests=sum(workers.values()), apiserver_cpu=api1 - api0,
                  operator_cpu=op1 - op0, operator_requests=sum(ops.values()),
                  by_verb=workers, operator_by_verb=ops)


def finish(scenario: Scenario, *, owner: EffectOwner, attempts: list[str]) -> None:
    """Tell the workers to exit; wait until every slot Succeeded."""
    status_code, _ = owner.effect(key=FINISH_KEY, token=0, fence=FINISH_FENCE, payload=None)
    assert status_code == 200, status_code
    slots = [a.rsplit("-", 1)[0] for a in attempts]
    wait_for(lambda: all((scenario.slot(s).get("status") or {}).get("state") == "Succeeded"
                         for s in slots), timeout=SETTLED_BOUND,
             message="every slot Succeeded after the word to finish", interval=1.0)
