"""Benchmark: the operator at 1,000 and 10,000 live slots.

On one local control plane without a node (pods are created and never run: every slot
stays Active, a start deadline far past the run), in one namespace that grows to each size
of ``--slots`` in turn (runs of ``--nodes`` nodes, Automatic claims, the operator
unthrottled), with every attempt's Lease renewed by a load generator as its worker would
(``spec.renewTime`` under the version read, each Lease once per ``--renew-every`` seconds,
spread evenly; the lease is ``--lease`` seconds long so that the renewals are affordable):

- the operator's RSS and CPU (utime+stime per second, ``/proc``) idle (no slots) and at
  each size, over ``--window`` seconds;
- API reads per second at each size (GET/LIST/WATCH from the API server's
  ``apiserver_request_total``, all users and the operator's resources; the operator user's
  own from the audit log), which must not grow with the slot count;
- at the largest size, the resync: SIGTERM to the operator, a new one started, the time
  until its ``/readyz`` says serving (that is after its stores listed every kind in full:
  ``runtime.Operator.begin``), and the writes by the operator's user in the audit log from
  the new start until ``--after`` seconds past ready (the goal: none);
- the API server's RSS (etcd embedded) and etcd's data on disk at each size.

A benchmark prints figures, it is never a test:

    make bench-scale                                  # --slots 1000,10000
    .venv/bin/python -m bench.scale --slots 200,1000 --out /tmp/benchmarks.md

It prints a table (each figure with its goal) and writes the ``## Scale`` section of
``--out`` (default docs/benchmarks.md) with the machine, the commit and the date.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.faults.support import bounded
from bench.loop.support import Bench, run_body, workflow_configs
from bench.scale.support import (
    Operator,
    Renewer,
    audit_events,
    long_lease_spec,
    received,
    start_operator,
)
from tests.support.cluster import audit
from tests.support.waiting import wait_for

SECTION = "## Scale"
GOAL_MIB_PER_1000 = 40.0
GOAL_RESYNC_SECONDS = 60.0
MAX_NODES = 100  # a run's nodes here (the CRD allows more; 100 keeps runs few and small)
SLOTS = (1, 20_000)
LEASE = (60, 3600)


@dataclass
class Point:
    """The operator and the API server with ``slots`` live slots (0: idle)."""

    slots: int
    rss_mib: float
    cpu: float
    reads: float
    own_reads: float
    audited_reads: float
    apiserver_mib: float
    etcd_mib: float
    read_kinds: dict[str, int] = field(default_factory=dict)


@dataclass
class Resync:
    slots: int
    seconds: float
    cpu_seconds: float
    rss_mib: float
    writes: dict[str, int]
    window: float
    rows: list[str]
    missing: list[str] = field(default_factory=list)  # Active slots' pods absent before


def etcd_mib(bench: Bench) -> float:
    where = bench.cluster.etcd_dir
    if where is None:
        return 0.0
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file()) / 2**20


def measure(bench: Bench, operator: Operator, *, slots: int, window: float) -> Point:
    """Every figure of :class:`Point` over one window of ``window`` seconds."""
    metrics, since = bench.metrics(), datetime.now(UTC)
    cpu, started = operator.cpu_seconds(), time.monotonic()
    time.sleep(window)  # the measurement window itself
    elapsed = time.monotonic() - started
    used = operator.cpu_seconds() - cpu
    after, until = bench.metrics(), datetime.now(UTC)
    audited = bench.audited_reads(user="operator", since=since, until=until)
    kinds = reads_by_kind(bench, since=since, until=until)
    return Point(read_kinds=kinds, slots=slots, rss_mib=Bench.rss_mib(operator.process.pid),
                 cpu=used / elapsed,
                 reads=(after[0] - metrics[0]) / elapsed,
                 own_reads=(after[1] - metrics[1]) / elapsed, audited_reads=audited / elapsed,
                 apiserver_mib=Bench.rss_mib(bench.cluster.processes[0].pid),
                 etcd_mib=etcd_mib(bench))


def reads_by_kind(bench: Bench, *, since: datetime, until: datetime) -> dict[str, int]:
    """The operator user's reads in the window, by verb and resource (the audit log)."""
    found: Counter[str] = Counter(
        f"{e['verb']} {(e.get('objectRef') or {}).get('resource')}"
        for e in audit_events(bench.cluster.audit_log, user='"operator"')
        if e.get("verb") in ("get", "list", "watch") and since <= received(e) < until)
    return dict(found)


def wait_active(bench: Bench, namespace: str, slots: int, *, timeout: float) -> None:
    """Every slot Active; counted from one LIST each few seconds (10k slots are ~20 MB)."""
    def active() -> bool:
        listed = bench.custom.list_namespaced_custom_object(
            "agentrun.dev", "v1alpha1", namespace, "slots")
        return sum(1 for s in listed["items"]
                   if (s.get("status") or {}).get("state") == "Active") >= slots

    wait_for(active, timeout=timeout, interval=5.0, message=f"{slots} slots Active")


def operator_writes(bench: Bench, namespace: str, *,
                    since: datetime) -> list[tuple[str, bool, str]]:
    """The operator user's writes (code < 400) in ``namespace`` since ``since``: resource,
    whether a dry run (``?dryRun=All``: the API server persists nothing), a row each."""
    found: list[tuple[str, bool, str]] = []
    for event in audit_events(bench.cluster.audit_log, user='"operator'):
        ref, code = event.get("objectRef") or {}, (event.get("responseStatus") or {}).get(
            "code", 0)
        at = received(event)
        if (event.get("verb") not in audit.WRITE_VERBS or ref.get("namespace") != namespace
                or at < since or code >= 400):
            continue
        key = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get(
            "subresource") else "")
        found.append((key, "dryRun=All" in event.get("requestURI", ""),
                      f"{at:%H:%M:%S.%f} {event['verb']} {key} {ref.get('name', '')} {code}"))
    return found


def pods_missing(bench: Bench, namespace: str) -> list[str]:
    """The pods that Active slots name (``status.activeWorker``) and that do not exist."""
    pods = {p["metadata"]["name"] for p in bench.count(f"/api/v1/namespaces/{namespace}/pods")}
    listed = bench.custom.list_namespaced_custom_object("agentrun.dev", "v1alpha1", namespace,
                                                        "slots")
    named = {(s.get("status") or {}).get("activeWorker") for s in listed["items"]
             if (s.get("status") or {}).get("state") == "Active"}
    return sorted(n for n in named - pods if n)


def grow(bench: Bench, namespace: str, *, runs: range) -> None:
    for index in runs:
        bench.custom.create_namespaced_custom_object("agentrun.dev", "v1alpha1", namespace,
                                                     "agentruns", run_body(index))


def resync(bench: Bench, namespace: str, old: Operator, *, slots: int,
           after: float, arenas: int, heap: Path | None) -> tuple[Resync, Operator]:
    """SIGTERM ``old``, start a new operator, time it to ready, count its writes."""
    missing = pods_missing(bench, namespace)
    Bench.stop(old.process)
    since, started = datetime.now(UTC), time.monotonic()
    new = start_operator(bench, namespace, tag="resync", arenas=arenas, heap=heap)
    wait_for(new.ready, timeout=600, interval=0.2, message="the new operator ready")
    seconds = time.monotonic() - started
    cpu = new.cpu_seconds()
    time.sleep(after)  # the window after ready in which no write may come
    bench.settle()
    found = operator_writes(bench, namespace, since=since)
    writes = dict(Counter(key for key, dry, _ in found if not dry))
    rows = [row + (" (dryRun=All: not persisted)" if dry else "") for _, dry, row in found]
    return Resync(slots=slots, seconds=seconds, cpu_seconds=cpu,
                  rss_mib=Bench.rss_mib(new.process.pid), writes=writes,
                  window=time.monotonic() - started, rows=rows, missing=missing), new


def table(points: list[Point], resyncs: list[Resync]) -> str:
    idle = next((p for p in points if p.slots == 0), None)
    lines = ["| live slots | operator RSS | RSS per 1,000 slots above idle (goal <= 40 MiB) | "
             "operator CPU (s/s) | API reads/s (all users) | reads/s of the operator's "
             "resources | the operator user's reads/s (audit log) | API server RSS "
             "(etcd embedded) | etcd on disk |",
             "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for p in points:
        per = ("-" if idle is None or not p.slots else
               f"{(p.rss_mib - idle.rss_mib) / p.slots * 1000:.1f} MiB")
        lines.append(f"| {p.slots:,} | {p.rss_mib:.0f} MiB | {per} | {p.cpu:.3f} | "
                     f"{p.reads:.2f} | {p.own_reads:.2f} | {p.audited_reads:.2f} | "
                     f"{p.apiserver_mib:.0f} MiB | {p.etcd_mib:.0f} MiB |")
    if resyncs:
        lines += ["", "| resync of | time to /readyz (goal <= 60 s) | its CPU | RSS after | "
                  "RSS per 1,000 above idle | writes by the operator's user, dry runs not "
                  "counted (goal 0) | window |",
                  "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for r in resyncs:
            writes = sum(r.writes.values())
            said = f"{writes}" + (f" ({', '.join(f'{k} {n}' for k, n in sorted(r.writes.items()))})"
                                  if writes else "")
            per = ("-" if idle is None else
                   f"{(r.rss_mib - idle.rss_mib) / r.slots * 1000:.1f} MiB")
            lines.append(f"| {r.slots:,} slots | {r.seconds:.1f} s | {r.cpu_seconds:.1f} s | "
                         f"{r.rss_mib:.0f} MiB | {per} | {said} | {r.window:.0f} s |")
    return "\n".join(lines)


def notes(args: argparse.Namespace, points: list[Point], resyncs: list[Resync],
          renewer: Renewer) -> list[str]:
    live = [p for p in points if p.slots]
    said = [f"Leases of {args.lease} s, each renewed once per {args.renew_every:g} s by the "
            f"load generator ({renewer.renewed:,} renewals sent, {renewer.failed} failed); "
            "the worker's own cadence is a third of the lease but at most 10 s "
            "(agentrun.worker._renewals.MAX_INTERVAL_SECONDS), which at 10,000 slots would "
            "be 1,000 renewals/s: the cadence here is what 2 cores afford, not the worker's.",
            f"Each figure over {args.window:g} s with every slot idle and Active; runs of "
            f"{args.nodes} nodes; the operator unthrottled; reads as in `## Control loop`."]
    for p in points:
        said.append(f"- the operator user's reads over the window at {p.slots:,} slots: "
                    + (", ".join(f"{k} {n}" for k, n in sorted(p.read_kinds.items()))
                       or "none"))
    for r in resyncs:
        said += [f"- writes by the operator's user during the resync of {r.slots:,} slots:",
                 *(f"  - `{row}`" for row in r.rows),
                 f"- pods of Active slots missing just before the restart: "
                 f"{', '.join(r.missing) or 'none'}"]
    if len(live) >= 2:
        low, high = live[0], live[-1]
        said.append(f"- reads/s of the operator's resources: {low.own_reads:.2f} at "
                    f"{low.slots:,} slots, {high.own_reads:.2f} at {high.slots:,}; the "
                    f"operator user's (audit log): {low.audited_reads:.2f} and "
                    f"{high.audited_reads:.2f} (goal: not growing with the slots)")
    return said


def header(args: argparse.Namespace) -> str:
    arenas = f" --arenas {args.arenas}" if args.arenas else ""
    return (f"{SECTION}\n\n{machine_commit_date()} Made by `python -m bench.scale --slots "
            f"{args.slots}{arenas}` (`make bench-scale`) on one local control plane without "
            "a node.\n")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", default="1000,10000",
                        help="comma-separated live slot counts, growing (multiples of --nodes)")
    parser.add_argument("--nodes", type=bounded(1, MAX_NODES), default=100,
                        help="nodes per run")
    parser.add_argument("--lease", type=bounded(*LEASE), default=600,
                        help="lease duration in seconds")
    parser.add_argument("--renew-every", type=float, default=None,
                        help="seconds between renewals of one Lease (default: --lease / 3)")
    parser.add_argument("--window", type=float, default=30.0,
                        help="seconds over which each steady figure is taken")
    parser.add_argument("--after", type=float, default=30.0,
                        help="seconds past the new operator's ready in which writes count")
    parser.add_argument("--arenas", type=bounded(0, 64), default=0,
                        help="MALLOC_ARENA_MAX for the operator (0: glibc's default)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the cluster's files and the operators' logs here")
    parser.add_argument("--heap", type=Path, default=None,
                        help="trace the operator (tracemalloc; slower, more memory: "
                        "diagnosis only) and append its heap breakdowns to this file")
    parser.add_argument("--out", type=Path, default=BENCHMARKS,
                        help="the file whose '## Scale' section is replaced")
    args = parser.parse_args(argv)
    try:
        args.sizes = [int(s) for s in args.slots.split(",")]
    except ValueError:
        parser.error(f"--slots must be comma-separated integers, not {args.slots!r}")
    if any(not SLOTS[0] <= s <= SLOTS[1] or s % args.nodes for s in args.sizes) or \
            args.sizes != sorted(set(args.sizes)):
        parser.error(f"--slots: growing sizes in {SLOTS[0]}..{SLOTS[1]}, each a multiple of "
                     f"--nodes ({args.nodes}), not {args.slots!r}")
    args.renew_every = args.lease / 3 if args.renew_every is None else args.renew_every
    if not 1.0 <= args.renew_every < args.lease:
        parser.error(f"--renew-every must be in 1..{args.lease} (the lease), "
                     f"not {args.renew_every:g}")
    for name in ("window", "after"):
        if not 1.0 <= getattr(args, name) <= 600.0:
            parser.error(f"--{name} must be in 1..600 seconds, not {getattr(args, name):g}")
    return args


def play(bench: Bench, args: argparse.Namespace, points: list[Point],
         resyncs: list[Resync]) -> Renewer:
    namespace = bench.namespace("scale")
    for body in workflow_configs(nodes=args.nodes):
        bench.core.create_namespaced_config_map(namespace, body)
    bench.custom.create_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", namespace, "launchspecs",
        long_lease_spec(lease_seconds=args.lease))
    operator = start_operator(bench, namespace, tag="first", arenas=args.arenas,
                              heap=args.heap)
    renewer = Renewer(api=bench.api, namespace=namespace, every=args.renew_every)
    try:
        bench.wait_operator_up(operator.process, namespace)
        wait_for(operator.ready, timeout=60, interval=0.2, message="the operator ready")
        points.append(measure(bench, operator, slots=0, window=args.window))
        operator.dump(label="idle")
        renewer.start()
        made = 0
        for size in args.sizes:
            grow(bench, namespace, runs=range(made // args.nodes, size // args.nodes))
            made = size
            wait_active(bench, namespace, size, timeout=max(300.0, size * 0.2))
            renewer.relist()
            bench.settle()
            points.append(measure(bench, operator, slots=size, window=args.window))
            operator.dump(label=f"{size} live slots")
            print(table(points, resyncs), flush=True)
        found, operator = resync(bench, namespace, operator, slots=made, after=args.after,
                                  arenas=args.arenas, heap=args.heap)
        operator.dump(label=f"after the resync of {made} slots")
        resyncs.append(found)
    finally:
        renewer.stop()
        Bench.stop(operator.process)
    return renewer


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    points: list[Point] = []
    resyncs: list[Resync] = []
    with tempfile.TemporaryDirectory(prefix="agentrun-scale-") as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        bench = Bench(workdir=workdir, window=args.window, job_controller_qps=None)
        try:
            bench.start()
            renewer = play(bench, args, points, resyncs)
        finally:
            bench.stop_cluster()
    text = (header(args) + "\n" + table(points, resyncs) + "\n\n"
            + "\n".join(notes(args, points, resyncs, renewer)) + "\n")
    print(text)
    if args.heap is None:  # a traced operator's figures are not the operator's
        write_section(args.out, heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
