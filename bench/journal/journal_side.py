"""The journal's side of ``bench.journal``: the SDK's ``Worker`` on fenced attempt Leases.

Every figure has the shape of the LangGraph side's (:mod:`bench.journal.langgraph_side`),
and a few of its own. What is measured, on :mod:`bench.journal.attempts`' control plane and
store:

- *commit latency*: ``worker.step(key, do=..., durable=True)`` returning, one writer: the
  payload put (by reference past 1 KiB), the node put, and the head advanced on the Lease
  under the Lease policy (a commit fenced by admission), each request one after another;
- *steps/s*: steps of 200 B as an agent's loop makes them, group-committed (the default
  delay), the time until the last one is durable (``flush``) included; one writer, then N
  writers at once (each its own attempt, Lease, token and thread);
- per step: API-server writes (head advances: the Lease's ``seq``), the client's CPU and
  the servers' (kube-apiserver with its embedded etcd, and the store);
- *prefix load* at each size: an attempt commits that many 200 B steps and is sealed; a
  successor's time from constructing its ``Worker`` to its recoverable prefix read
  (``worker.steps``: every committed result then fetchable, inline ones in memory), and
  until every result was fetched through ``steps.committed``;
- *per renewal*, at 0 and at the largest prefix's committed steps: the bytes a watch of
  attempt Leases (the operator's selector) receives, and the operator's CPU (the real
  operator process on the namespace);
- *RSS while streaming*: a worker process's peak RSS storing a 2 GiB artifact (generated
  as it is read, never on disk) beside one committing a 10 MiB step.
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from agentrun.worker._sdk import Worker
from bench.journal.attempts import Attempt, Place, place
from bench.renewals.support import cpu_seconds
from bench.scale.support import start_operator
from tests.support.actors import tokenworker
from tests.support.waiting import wait_for

Figures = dict[str, Any]
Say = Callable[[str], None]
SMALL = 200


def payload(size: int, i: int) -> str:
    """A JSON string whose canonical encoding is ``size`` bytes (its quotes included)."""
    return (f"{i:08d}" * (size // 8 + 1))[:max(0, size - 2)]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class Costs:
    """CPU of this process and of the servers over a phase, per step."""

    def __init__(self, place: Place) -> None:
        self.servers = [place.bench.apiserver_pid, *place.store_pids]
        self.client, self.server = time.process_time(), cpu_seconds(self.servers)

    def per_step(self, steps: int) -> Figures:
        return {"client_cpu_ms_per_step": (time.process_time() - self.client) * 1000 / steps,
                "server_cpu_ms_per_step":
                    (cpu_seconds(self.servers) - self.server) * 1000 / steps}


def latency(place: Place, *, size: int, steps: int, warmup: int) -> Figures:
    attempt = place.attempt(f"lat-{size}", 1)
    worker = place.worker(attempt)
    for i in range(warmup):
        worker.step(f"w{i}", do=lambda i=i: payload(size, i), durable=True)
    times: list[float] = []
    costs, started = Costs(place), time.perf_counter()
    for i in range(steps):
        began = time.perf_counter()
        worker.step(f"s{i}", do=lambda i=i: payload(size, i), durable=True)
        times.append(time.perf_counter() - began)
    seconds = time.perf_counter() - started
    writes = place.head_seq(attempt) - warmup
    return {"payload_bytes": size, "writers": 1, "steps": steps, "seconds": seconds,
            "steps_per_s": steps / seconds, "p50_ms": percentile(times, 0.5) * 1000,
            "p99_ms": percentile(times, 0.99) * 1000, "mean_ms": statistics.fmean(times) * 1000,
            "max_ms": max(times) * 1000, "api_writes_per_step": writes / steps,
            **costs.per_step(steps)}


def loop(place: Place, *, slot: str, steps: int) -> tuple[Attempt, Worker, float]:
    """One worker's loop of ``steps`` 200 B steps, group-committed; its seconds until all
    are durable."""
    attempt = place.attempt(slot, 1)
    worker = place.worker(attempt)
    _ = worker.steps  # the prefix read first: not part of the loop
    started = time.perf_counter()
    for i in range(steps):
        worker.step(f"s{i:06d}", do=lambda i=i: payload(SMALL, i))
    worker.flush()
    return attempt, worker, time.perf_counter() - started


def one_writer(place: Place, *, steps: int) -> Figures:
    costs = Costs(place)
    attempt, _, seconds = loop(place, slot="one", steps=steps)
    return {"payload_bytes": SMALL, "writers": 1, "steps": steps, "seconds": seconds,
            "steps_per_s": steps / seconds,
            "api_writes_per_step": place.head_seq(attempt) / steps, **costs.per_step(steps)}


def writers(place: Place, *, count: int, steps: int) -> Figures:
    made = [place.attempt(f"w{count}-{i}", 1) for i in range(count)]
    workers = [place.worker(a) for a in made]
    for w in workers:
        _ = w.steps
    gate, failures = threading.Barrier(count + 1), []

    def run(worker: Worker) -> None:
        gate.wait()
        try:
            for i in range(steps):
                worker.step(f"s{i:06d}", do=lambda i=i: payload(SMALL, i))
            worker.flush()
        except BaseException as error:  # reported below
            failures.append(error)

    threads = [threading.Thread(target=run, args=(w,), daemon=True) for w in workers]
    for t in threads:
        t.start()
    costs = Costs(place)
    gate.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    if failures:
        raise failures[0]
    total = steps * count
    writes = sum(place.head_seq(a) for a in made)
    return {"payload_bytes": SMALL, "writers": count, "steps": total, "seconds": seconds,
            "steps_per_s": total / seconds, "per_writer_steps_per_s": steps / seconds,
            "p99_ms": float("nan"), "api_writes_per_step": writes / total,
            **costs.per_step(total)}


def prefix_load(place: Place, *, steps: int, say: Say) -> Figures:
    slot = f"p{steps}"
    filled, worker, seconds = loop(place, slot=slot, steps=steps)
    say(f"  filled {steps:,} steps in {seconds:.1f} s ({steps / seconds:,.0f} steps/s, "
        f"{place.head_seq(filled)} head advances)")
    worker.stop()
    place.seal(filled)
    successor = place.attempt(slot, 2)
    began = time.perf_counter()
    second = place.worker(successor)
    steps_view = second.steps
    loaded = time.perf_counter() - began
    for i in range(steps):
        done, _ = steps_view.committed(f"s{i:06d}")
        assert done, i
    fetched = time.perf_counter() - began
    nodes = place.head_seq(filled)
    return {"steps": steps, "latest_ms": loaded * 1000, "all_ms": fetched * 1000,
            "connect_ms": float("nan"), "nodes": nodes}


RSS_SCRIPT = tokenworker.PRELUDE + """
class Generated:
    def __init__(self, size):
        self.size, self.given = size, 0
        self.block = hashlib.sha256(b"bench").digest() * 32768  # 1 MiB
    def read(self, n):
        n = min(n, self.size - self.given, len(self.block))
        self.given += n
        return self.block[:n]
_ = worker.steps
if given["artifact"]:
    worker.artifact("big", Generated(given["bytes"]))
else:
    worker.step("big", do=lambda: "x" * (given["bytes"] - 2), durable=True)
peak = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print(json.dumps({"peak_kib": int(peak)}))
"""


def peak_rss(place: Place, *, slot: str, size: int, artifact: bool) -> tuple[float, float]:
    """(peak RSS MiB, seconds) of a worker process storing ``size`` bytes."""
    attempt = place.attempt(slot, 1)
    config = place.bench.api.configuration
    given = tokenworker.given(host=config.host, ca=config.ssl_ca_cert, token=attempt.token,
                              namespace=place.namespace, run="bench", slot=slot,
                              lease=attempt.name, endpoint=place.location.endpoint,
                              bucket=place.location.bucket, prefix=place.location.prefix,
                              artifact=artifact, bytes=size)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", RSS_SCRIPT, given],
                          capture_output=True, text=True, check=True,
                          env={**os.environ, **place.bench.env()})
    return json.loads(done.stdout)["peak_kib"] / 1024, time.perf_counter() - started


def per_renewal(place: Place, *, lease: Attempt, renewals: int) -> Figures:
    """Watch bytes and operator CPU per renewal of ``lease`` (held, so renewable): a watch
    of it with the operator's selector counts the bytes of each event as sent."""
    watched: list[int] = []
    stream = place.leases.list_namespaced_lease(
        place.namespace, watch=True, label_selector="agentrun.dev/slot",
        field_selector=f"metadata.name={lease.name}", timeout_seconds=120,
        _preload_content=False)  # the server ends it: closing it here would race its reader

    def read() -> None:
        with contextlib.suppress(OSError, ValueError):  # closed at the end
            for line in stream:
                watched.append(len(line))

    threading.Thread(target=read, daemon=True).start()
    wait_for(lambda: len(watched) >= 1, timeout=30, message="the watch's first event")
    keeper = place.worker(lease).keeper
    operator = OPERATOR[0]
    before, first = operator.cpu_seconds(), len(watched)
    for _ in range(renewals):
        keeper.first_renewal(timeout=10)
    wait_for(lambda: len(watched) - first >= renewals, timeout=60,
             message="every renewal's watch event")
    used = operator.cpu_seconds() - before
    got = watched[first:first + renewals]
    return {"renewals": renewals, "watch_bytes_per_renewal": statistics.fmean(got),
            "operator_cpu_ms_per_renewal": used * 1000 / renewals}


OPERATOR: list[Any] = []


def measure(*, latencies: list[tuple[int, int]], steps: int, counts: list[int],
            writer_steps: int, prefixes: list[int], warmup: int, renewals: int,
            renew_steps: int, artifact_bytes: int, say: Say) -> Figures:
    figures: Figures = {"latency": [], "writers": [], "prefix": []}
    with place() as where:
        say(f"control plane {where.bench.cluster.workdir} (etcd fsync on), store "
            f"{where.location.endpoint}")
        for size, samples in latencies:
            found = latency(where, size=size, steps=samples, warmup=warmup)
            say(f"  {size} B: p50 {found['p50_ms']:.2f} ms, p99 {found['p99_ms']:.2f} ms")
            figures["latency"].append(found)
        figures["one_writer"] = one_writer(where, steps=steps)
        say(f"  one writer: {figures['one_writer']['steps_per_s']:,.0f} steps/s, "
            f"{figures['one_writer']['api_writes_per_step']:.4f} API writes/step")
        for count in counts:
            found = writers(where, count=count, steps=writer_steps)
            say(f"  {count} writers: {found['steps_per_s']:,.0f} steps/s")
            figures["writers"].append(found)
        figures["highest"] = max(figures["writers"], key=lambda w: w["steps_per_s"],
                                 default=None)
        for size in prefixes:
            found = prefix_load(where, steps=size, say=say)
            say(f"  prefix {size:,}: loaded {found['latest_ms']:.0f} ms, all fetched "
                f"{found['all_ms']:.0f} ms ({found['nodes']} nodes)")
            figures["prefix"].append(found)
        empty = where.attempt("renew-empty", 1)
        one, _, _ = loop(where, slot="renew-one", steps=1)
        full, _, _ = loop(where, slot="renew-full", steps=renew_steps)
        OPERATOR.append(start_operator(where.bench, where.namespace, tag="journal"))
        try:
            wait_for(OPERATOR[0].ready, timeout=120, message="the operator ready")
            figures["renewal"] = [
                {"steps": steps, **per_renewal(where, lease=lease, renewals=renewals)}
                for steps, lease in ((0, empty), (1, one), (renew_steps, full))]
        finally:
            OPERATOR.pop().process.terminate()
        small, _ = peak_rss(where, slot="rss-10m", size=10 * 1024 * 1024, artifact=False)
        big, big_s = peak_rss(where, slot="rss-art", size=artifact_bytes, artifact=True)
        figures["rss"] = {"step_10mib_mib": small, "artifact_mib": big,
                          "artifact_bytes": artifact_bytes, "artifact_seconds": big_s}
        say(f"  peak RSS: 10 MiB step {small:.0f} MiB; {artifact_bytes / 2**30:.1f} GiB "
            f"artifact {big:.0f} MiB in {big_s:.0f} s")
    return figures
