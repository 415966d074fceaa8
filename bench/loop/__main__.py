"""Benchmark: the control loop at scale, against an Indexed Job of the same size.

On one local control plane without a node (``make cluster NODE=0``'s way: pods are created
and never run), in one run, as a new user would use agentrun (Automatic claims, one
LaunchSpec, runs of ``--nodes`` nodes), for each size in ``--units``:

- an Indexed Job of that many pods (parallelism = completions), made by the Job controller
  at its documented default QPS (kube-controller-manager's ``--kube-api-qps`` 20, burst 30);
- the operator (i) at the Job controller's QPS (``--qps 20 --burst 30``), (ii) at its own
  documented defaults (no flags: ``agentrun.cli.QPS``/``BURST``);
- (iii) both unthrottled (a second control plane whose controller manager has
  ``--kube-api-qps`` 10,000; the operator's ``--qps 0``).

Measured: time from the first create to the last pod's create (on the audit log's clock),
pods/s, API writes per pod from the audit log (by the operator's user, split by resource;
by the Job controller's own user), CPU-seconds per pod of kube-apiserver (with its
embedded etcd) and of the maker (the operator process; kube-controller-manager, all its
controllers, for the Job) from ``/proc/<pid>/stat`` over the same window,
the operator's RSS idle and per 1,000 live slots, and API reads per second at steady state
with every slot idle and Active (``apiserver_request_total`` for GET/LIST/WATCH from the
API server's /metrics, delta over ``--window`` seconds), which must not grow with the
number of slots. A benchmark prints figures, it is never a test:

    make bench-loop                                   # --units 200,1000
    .venv/bin/python -m bench.loop --units 40,100 --out /tmp/benchmarks.md

It prints a markdown table and writes it as the ``## Control loop`` section of ``--out``
(default docs/benchmarks.md; the other sections are left as they are) with the machine,
the commit and the date, and ends it with the project's goals, "goal | figure | reference |
ratio | met", for every size.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agentrun import cli
from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.loop.goals import goal_table
from bench.loop.support import (
    JOB_CONTROLLER_BURST,
    JOB_CONTROLLER_QPS,
    UNTHROTTLED_QPS,
    Bench,
    cpu_seconds,
    job_body,
    launch_spec_body,
    run_body,
    workflow_configs,
)

SECTION = "## Control loop"


@dataclass
class Row:
    """One maker of pods at one size: what it took and what it wrote."""

    units: int
    who: str
    qps: str
    seconds: float
    writes: dict[str, int] = field(default_factory=dict)
    apiserver_cpu: float = 0.0  # CPU-seconds of kube-apiserver (embedded etcd) meanwhile
    maker_cpu: float = 0.0  # CPU-seconds of the maker's process meanwhile
    mode: str = ""  # "equal", "defaults" or "unthrottled": which goal row it serves

    @property
    def apiserver_cpu_per_pod(self) -> float:
        return self.apiserver_cpu / self.units

    @property
    def maker_cpu_per_pod(self) -> float:
        return self.maker_cpu / self.units

    @property
    def per_pod(self) -> float:
        return sum(self.writes.values()) / self.units

    @property
    def pods_per_second(self) -> float:
        return self.units / self.seconds if self.seconds else 0.0


@dataclass
class Steady:
    units: int
    rss_idle_mib: float
    rss_live_mib: float
    reads_per_second: float
    operator_reads_per_second: float
    audited_reads_per_second: float


OPERATOR_COLUMNS = ("slots", "slots/status", "agentruns/status", "events", "configmaps",
                    "leases", "pods")


def time_job(bench: Bench, *, units: int) -> Row:
    namespace = bench.namespace(f"job-{units}")
    cpu = Cpu(bench, maker=bench.controller_manager_pid)
    since = datetime.now(UTC)
    bench.batch.create_namespaced_job(namespace, job_body(units=units))
    bench.wait_pods(namespace, units, timeout=max(120.0, units * 0.5))
    apiserver_cpu, maker_cpu = cpu.spent()
    seconds = bench.last_pod_created(namespace, since=since)
    bench.settle()
    writes = bench.writes_by(namespace, user_prefix=bench.job_controller_user, since=since)
    bench.drop(namespace)
    qps = bench.job_controller_qps
    return Row(units=units, who="Indexed Job (Job controller)",
               qps=f"{JOB_CONTROLLER_QPS:g}/{JOB_CONTROLLER_BURST}" if qps is None else "none",
               seconds=seconds, writes=writes, apiserver_cpu=apiserver_cpu,
               maker_cpu=maker_cpu, mode="defaults" if qps is None else "unthrottled")


class Cpu:
    """CPU-seconds of kube-apiserver and of one maker process from now to :meth:`spent`."""

    def __init__(self, bench: Bench, *, maker: int) -> None:
        self.pids = (bench.apiserver_pid, maker)
        self.start = [cpu_seconds(pid) for pid in self.pids]

    def spent(self) -> tuple[float, float]:
        apiserver, maker = (cpu_seconds(pid) - at for pid, at in zip(self.pids, self.start,
                                                                     strict=True))
        return apiserver, maker


# The operator's rows: (mode, label, flags, QPS column). "defaults" passes no flag at all.
OPERATOR_MODES = {
    "equal": ("agentrun operator (Job controller's QPS)",
              ["--qps", f"{JOB_CONTROLLER_QPS:g}", "--burst", str(JOB_CONTROLLER_BURST)],
              f"{JOB_CONTROLLER_QPS:g}/{JOB_CONTROLLER_BURST}"),
    "defaults": ("agentrun operator (its defaults)", [], f"{cli.QPS[2]:g}/{cli.BURST[2]}"),
    "unthrottled": ("agentrun operator (unthrottled)", ["--qps", "0"], "none"),
}


def time_operator(bench: Bench, *, units: int, nodes: int, mode: str,
                  steady: Callable[[Steady], None] | None) -> Row:
    label, flags, qps = OPERATOR_MODES[mode]
    namespace = bench.namespace(f"op-{units}-{mode[0]}")
    for body in workflow_configs(nodes=nodes):
        bench.core.create_namespaced_config_map(namespace, body)
    bench.custom.create_namespaced_custom_object("agentrun.dev", "v1alpha1", namespace,
                                                 "launchspecs", launch_spec_body())
    process = bench.operator(namespace, flags=flags)
    try:
        bench.wait_operator_up(process, namespace)
        rss_idle = bench.rss_mib(process.pid)
        cpu = Cpu(bench, maker=process.pid)
        since = datetime.now(UTC)
        for index in range(units // nodes):
            bench.custom.create_namespaced_custom_object(
                "agentrun.dev", "v1alpha1", namespace, "agentruns", run_body(index))
        bench.wait_pods(namespace, units, timeout=max(180.0, units * 1.0))
        apiserver_cpu, maker_cpu = cpu.spent()
        seconds = bench.last_pod_created(namespace, since=since)
        bench.wait_active(namespace, units, timeout=max(120.0, units * 0.5))
        bench.settle()
        writes = bench.writes_by(namespace, user_prefix="operator", since=since)
        if steady is not None:
            rss_live = bench.rss_mib(process.pid)
            total, own, audited = bench.reads_per_second()
            steady(Steady(units=units, rss_idle_mib=rss_idle, rss_live_mib=rss_live,
                          reads_per_second=total, operator_reads_per_second=own,
                          audited_reads_per_second=audited))
    finally:
        bench.stop(process)
    bench.drop(namespace)
    return Row(units=units, who=label, qps=qps, seconds=seconds, writes=writes,
               apiserver_cpu=apiserver_cpu, maker_cpu=maker_cpu, mode=mode)


def table(rows: list[Row], steadies: list[Steady], *, notes: list[str]) -> str:
    lines = ["| units | who | QPS/burst | time to all pods | pods/s | API writes per pod | "
             "API server CPU-s per pod | maker CPU-s per pod |",
             "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for row in rows:
        lines.append(f"| {row.units:,} | {row.who} | {row.qps} | {row.seconds:.1f} s | "
                     f"{row.pods_per_second:.1f} | {row.per_pod:.2f} | "
                     f"{row.apiserver_cpu_per_pod * 1000:.1f} ms | "
                     f"{row.maker_cpu_per_pod * 1000:.1f} ms |")
    lines += ["", "Writes per pod, by resource (writes of that resource divided by the units):",
              "", "| units | who | QPS/burst | " + " | ".join(OPERATOR_COLUMNS) + " | other |",
              "| ---: | --- | ---: | " + " | ".join("---:" for _ in OPERATOR_COLUMNS)
              + " | ---: |"]
    for row in rows:
        known = [row.writes.get(c, 0) for c in OPERATOR_COLUMNS]
        other = sum(row.writes.values()) - sum(known)
        lines.append(f"| {row.units:,} | {row.who} | {row.qps} | "
                     + " | ".join(f"{n / row.units:.2f}" for n in known)
                     + f" | {other / row.units:.2f} |")
    lines += ["",
              "| live slots | operator RSS idle | RSS with the slots | RSS per 1,000 slots | "
              "API reads/s (all users) | reads/s of the operator's resources | "
              "the operator user's reads/s (audit log) |",
              "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for s in steadies:
        per = (s.rss_live_mib - s.rss_idle_mib) / s.units * 1000
        lines.append(f"| {s.units:,} | {s.rss_idle_mib:.0f} MiB | {s.rss_live_mib:.0f} MiB | "
                     f"{per:.0f} MiB | {s.reads_per_second:.2f} | "
                     f"{s.operator_reads_per_second:.2f} | {s.audited_reads_per_second:.2f} |")
    lines += ["", *notes]
    return "\n".join(lines)


def checks(rows: list[Row], steadies: list[Steady]) -> list[str]:
    """The figures the goals are judged by, said as they came out (a benchmark judges nothing)."""
    said = []
    for units in sorted({r.units for r in rows}):
        for row in (r for r in rows if r.units == units and r.who.startswith("agentrun")):
            claim = sum(row.writes.get(k, 0) for k in ("slots/status", "leases", "pods"))
            said.append(f"- {units:,} units, {row.who}: {claim / units:.2f} writes per pod "
                        f"on the first claim (slot status + Lease + Pod; target <= 3)")
    for row in rows:
        other = {k: n for k, n in row.writes.items() if k not in OPERATOR_COLUMNS}
        if other:
            said.append(f"- {row.units:,} units, {row.who}, other writes: " + ", ".join(
                f"{k} {n}" for k, n in sorted(other.items())))
    if len(steadies) >= 2:
        low, high = steadies[0], steadies[-1]
        said.append(f"- API reads/s at steady state (the operator's resources, /metrics): "
                    f"{low.operator_reads_per_second:.2f} with {low.units:,} idle Active "
                    f"slots, {high.operator_reads_per_second:.2f} with {high.units:,}; the "
                    f"operator user's (audit log): {low.audited_reads_per_second:.2f} and "
                    f"{high.audited_reads_per_second:.2f}")
    return said


def header() -> str:
    return (f"{SECTION}\n\n{machine_commit_date()} Made by "
            "`python -m bench.loop` (`make bench-loop`) on one local control plane without "
            "a node.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", default="200,1000",
                        help="comma-separated pod counts (multiples of --nodes)")
    parser.add_argument("--nodes", type=int, default=20, help="nodes per run")
    parser.add_argument("--window", type=float, default=20.0,
                        help="seconds over which steady-state reads are counted")
    parser.add_argument("--out", type=Path, default=BENCHMARKS,
                        help="the file whose '## Control loop' section is replaced")
    args = parser.parse_args(argv)
    try:
        sizes = [int(u) for u in args.units.split(",")]
    except ValueError:
        parser.error(f"--units: comma-separated whole numbers, not {args.units!r}")
    if not 1 <= args.nodes <= 100:
        parser.error(f"--nodes must be between 1 and 100, not {args.nodes}")
    if any(not 1 <= u <= 5000 for u in sizes):
        parser.error("every --units value must be between 1 and 5000")
    if not 1 <= args.window <= 600:
        parser.error(f"--window must be between 1 and 600 seconds, not {args.window:g}")
    if any(u % args.nodes for u in sizes):
        parser.error(f"every --units value must be a multiple of --nodes ({args.nodes})")
    rows: list[Row] = []
    steadies: list[Steady] = []
    load_at_start = os.getloadavg()[0]  # a shared machine's load moves every figure
    # Two control planes, one after the other: the Job controller at its default QPS with
    # the operator at the same QPS and at its own defaults; then both unthrottled
    # (kube-controller-manager's --kube-api-qps raised to UNTHROTTLED_QPS, --qps 0).
    for job_qps in (None, UNTHROTTLED_QPS):
        with tempfile.TemporaryDirectory(prefix="agentrun-bench-") as workdir:
            bench = Bench(workdir=Path(workdir), window=args.window, job_controller_qps=job_qps)
            try:
                bench.start()
                for units in sizes:
                    rows.append(time_job(bench, units=units))
                    for mode in (("equal", "defaults") if job_qps is None
                                 else ("unthrottled",)):
                        rows.append(time_operator(
                            bench, units=units, nodes=args.nodes, mode=mode,
                            steady=steadies.append if mode == "unthrottled" else None))
                    print(table(rows, steadies, notes=[]), flush=True)
            finally:
                bench.stop_cluster()
    notes = [f"Load average (1 min) {load_at_start:.1f} at the start, "
             f"{os.getloadavg()[0]:.1f} at the end, on {os.cpu_count()} cores.", "",
             f"The Job controller's QPS is kube-controller-manager's --kube-api-qps "
             f"({JOB_CONTROLLER_QPS:g}, its default; burst {JOB_CONTROLLER_BURST}); the "
             f"operator's documented default is --qps {cli.QPS[2]:g} --burst {cli.BURST[2]} "
             "(docs/design/caches-and-queue.md, \"The client-side rate limit\"). "
             "CPU-s per pod: utime + stime from /proc/<pid>/stat, from just before the "
             "first create to the poll that saw the last pod, divided by the pods; the API "
             "server's figure includes its embedded etcd and the benchmark's own polls "
             "(a metadata-only pod LIST every 0.5 s, the same for both makers); the Job's "
             "maker is the whole kube-controller-manager. Reads: every GET/LIST/WATCH "
             f"request the API server counted over {args.window:g} s with every slot idle "
             "and Active, divided by the window; the operator's resources are AgentRuns, "
             "Slots, LaunchSpecs, Pods, ConfigMaps, Leases, Namespaces and Secrets.",
             "", *checks(rows, steadies), "", "The goals, per size:", "",
             goal_table(rows)]
    text = header() + "\n" + table(rows, steadies, notes=notes) + "\n"
    print(text)
    write_section(args.out, heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
