"""The scale benchmark's machinery beyond :class:`bench.loop.support.Bench`: the operator with a
metrics port of its own (``/readyz``), a load generator renewing every attempt's Lease as
its worker would, and the operator's CPU time from ``/proc``.

The Bench's own operator serves ``/metrics`` on the default port 8080, which another
benchmark on the same machine may hold; this one binds a free loopback port instead.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes

from agentrun import rest
from agentrun.api import names
from agentrun.worker import _renewals as renewals
from bench.loop.support import Bench, launch_spec_body
from tests.support.cluster.processes import free_port
from tests.support.waiting import wait_for

Object = dict[str, Any]
TICKS = os.sysconf("SC_CLK_TCK")
HEAPDUMP = Path(__file__).resolve().parent / "heapdump"  # its sitecustomize.py
RENEWERS = 4  # threads sending renewals: enough for ~100 PUTs/s on this machine


def _parsed(line: str) -> Object | None:
    try:
        event: Object = json.loads(line)
    except json.JSONDecodeError:  # a line being written right now
        return None
    return event


def audit_events(log: Path, *, user: str) -> Iterator[Object]:
    """The audit log's ResponseComplete events whose line names ``"username":<user>``
    (``user`` as it appears quoted, e.g. ``'"operator"'``, or ``'"operator'``: a prefix)."""
    with open(log, encoding="utf-8", errors="replace") as lines:
        events = (_parsed(line) for line in lines if f'"username":{user}' in line)
        yield from (e for e in events if e and e.get("stage") == "ResponseComplete")


def received(event: Object) -> datetime:
    return datetime.fromisoformat(event["requestReceivedTimestamp"].replace("Z", "+00:00"))


def long_lease_spec(*, lease_seconds: int) -> Object:
    """The control-loop LaunchSpec with a lease of ``lease_seconds``."""
    body = launch_spec_body()
    body["spec"]["lease"] = {"durationSeconds": lease_seconds}
    return body


@dataclass
class Operator:
    """One operator process and the loopback port of its /metrics and /readyz."""

    process: subprocess.Popen[bytes]
    port: int
    heap: Path | None = None

    def dump(self, *, label: str) -> None:
        """With ``heap``: a heap breakdown of the process appended there, under ``label``."""
        if self.heap is None:
            return
        with open(self.heap, "a", encoding="utf-8") as out:
            out.write(f"\n## {label}: RSS {Bench.rss_mib(self.process.pid):.0f} MiB\n")
        ends = self.heap.read_text().count("=== end")
        os.kill(self.process.pid, signal.SIGUSR2)
        wait_for(lambda: self.heap is not None and self.heap.read_text().count("=== end")
                 > ends, timeout=120, interval=0.5, message="the heap breakdown written")

    def ready(self) -> bool:
        """Is ``/readyz`` 200 (stores primed, queue started)?"""
        if self.process.poll() is not None:
            raise RuntimeError(f"the operator exited with {self.process.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                        timeout=2) as answer:
                return bool(answer.status == 200)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False

    def cpu_seconds(self) -> float:
        """utime + stime of the process so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICKS


def start_operator(bench: Bench, namespace: str, *, tag: str, arenas: int = 0,
                   heap: Path | None = None) -> Operator:
    """The operator on ``namespace``, unthrottled, as the cluster's ``operator`` user;
    ``arenas``: glibc's ``MALLOC_ARENA_MAX`` for it (0: glibc's default, 8 per core);
    ``heap``: traced, its heap breakdown appended there on :meth:`Operator.dump`."""
    port = free_port()
    args = [sys.executable, "-m", "agentrun.cli", "run", "--namespace", namespace,
            "--context", "operator", "--metrics-address", "127.0.0.1",
            "--metrics-port", str(port), "--qps", "0"]
    log = open(bench.workdir / f"operator-{tag}.log", "wb")  # noqa: SIM115
    try:
        env = {**bench.env(), **({"MALLOC_ARENA_MAX": str(arenas)} if arenas else {})}
        if heap is not None:
            env["PYTHONPATH"] = f"{HEAPDUMP}{os.pathsep}{env['PYTHONPATH']}"
            env["AGENTRUN_HEAPDUMP"] = str(heap)
        process = subprocess.Popen(args, env=env, stdout=log,
                                   stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log.close()
    return Operator(process=process, port=port, heap=heap)


def sample(operator: Operator, *, seconds: float) -> tuple[float, float]:
    """(RSS MiB at the end, CPU seconds per second) over a window of ``seconds``."""
    before, started = operator.cpu_seconds(), time.monotonic()
    time.sleep(seconds)  # the measurement window itself
    used = operator.cpu_seconds() - before
    return Bench.rss_mib(operator.process.pid), used / (time.monotonic() - started)


@dataclass
class Renewer:
    """Renews each held attempt Lease of ``namespace`` once per ``every`` seconds, spread
    evenly over that period, as the worker does (``spec.renewTime`` only, under the
    resourceVersion read: :func:`agentrun.worker._renewals.renewed`), until stopped.

    Leases are listed at the start of each round, so those made meanwhile join the next.
    A conflict (the operator wrote the Lease meanwhile) reads it again and retries once.
    """

    api: kubernetes.client.ApiClient
    namespace: str
    every: float
    renewed: int = 0
    failed: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _relist: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._rest = rest.Rest(self.api)
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=RENEWERS,
                                                           thread_name_prefix="renew")
        self._thread = threading.Thread(target=self._rounds, name="renewals", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        self._pool.shutdown(wait=True, cancel_futures=True)

    def relist(self) -> None:
        """End this round now and list again (every Lease made since joins at once)."""
        self._relist.set()

    def _pause(self, seconds: float) -> bool:
        """Wait up to ``seconds``; True if stopped, False early on a relist."""
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0 and not self._relist.is_set():
            if self._stop.wait(min(left, 0.5)):
                return True
        return self._stop.is_set()

    def held(self) -> list[Object]:
        listed = self._rest.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/"
                                    f"{self.namespace}/leases",
                                    query={"labelSelector": names.ATTEMPT_LABEL})
        return [lease for lease in listed.get("items") or []
                if (lease.get("spec") or {}).get("holderIdentity")]

    def _rounds(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            leases = self.held()
            gap = self.every / max(len(leases), 1)
            self._relist.clear()
            for index, lease in enumerate(leases):
                if self._pause(started + index * gap - time.monotonic()):
                    return
                if self._relist.is_set():
                    break
                self._pool.submit(self._renew, lease)
            if self._pause(started + self.every - time.monotonic()):
                return

    def _renew(self, lease: Object) -> None:
        meta = lease["metadata"]
        where = (f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/"
                 f"{meta['name']}")
        for _ in range(2):
            try:
                self._rest.request("PUT", where, body=renewals.renewed(
                    lease, now=datetime.now(UTC)))
                with self._lock:
                    self.renewed += 1
                return
            except rest.ApiError as error:
                if error.status != 409:
                    break
                fresh = self._rest.get(where)
                if fresh is None or not (fresh.get("spec") or {}).get("holderIdentity"):
                    return  # gone or tombstoned: nothing to renew
                lease = fresh
            except Exception:  # a timeout or reset: the next round renews it
                break
        with self._lock:
            self.failed += 1
