"""Benchmark: failure detection, replacement, reassignment and recovery latency.

On one local control plane without a node (pods are created and nothing runs them), in
one run, the bench plays the kubelet (pod status written through pods/status as admin)
and the worker (its Lease released on exit, or renewed once and then left to expire),
and measures, over ``--count`` events each, staggered (the failures of both systems
interleaved, one every ``--every`` seconds; the operator's plays alone one every
``--alone-every``) so that neither's write budget (the Job controller's QPS 20, the operator's
documented default --qps 100) is the bottleneck:

1. failure detection (pod Failed -> the slot's attempt recorded ended, or the Job's
   ``status.failedIndexes`` holding the index) and replacement (pod Failed -> the next
   pod exists), for the operator (runs with ``retry.maxAttempts`` 2 and
   ``backoff.initialSeconds`` 0) and for an Indexed Job (``backoffLimitPerIndex`` 1,
   ``podReplacementPolicy: Failed``), raw and net of the mandatory backoffs;
2. reassignment (the reassign annotations written -> the ledger's Accepted -> the new pod)
   of the exhausted slots, beside a floor: this process doing the same writes the
   operator does for a reassignment (the audit log's), as fast as it can;
3. recovery overhead: the attempt recorded ended minus the lease's expiry (the renewal's
   receipt plus ``leaseDurationSeconds``), the pod made Failed first and the lease renewed
   once, then left to expire (the CRD's minimum lease, 5 s).

Every time is a receipt time on this process's monotonic clock (bench/latency/support.py:
watches of pods, slots, leases and the Job); a write's time is taken just before it is
sent. A benchmark prints figures, it is never a test:

    make bench-latency                                    # --count 200
    .venv/bin/python -m bench.latency --count 20 --out /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from agentrun import cli
from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.latency.plays import Plays
from bench.latency.support import percentile, summary
from bench.loop.support import JOB_CONTROLLER_QPS, Bench

SECTION = "## Latency"
JOB_BACKOFF_SECONDS = 10.0  # the Job controller's pod-failure backoff, first failure
GOALS = {"detection": "operator p99 <= the Job controller's",
         "reassignment": "p99 <= 1.5x the floor's p99",
         "recovery": "overhead p99 <= 1 s"}


def bounded(kind: Callable[[str], float], low: float, high: float) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from error
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value:g} is outside [{low:g}, {high:g}]")
        return value
    return parse


def p99(values: list[float]) -> float:
    return percentile(values, 99)


def lines(plays: Plays) -> list[str]:
    f = plays.figures
    out = ["| measure | who | backoff in it | raw | net of the backoff |",
           "| --- | --- | ---: | --- | --- |"]

    def row(measure: str, who: str, values: list[float], backoff: float) -> None:
        net = [v - backoff for v in values]
        out.append(f"| {measure} | {who} | {backoff:g} s | {summary(values)} | "
                   f"{summary(net) if backoff else 'same'} |")

    row("detection, first failure (attempt recorded ended)", "operator",
        f["op_detect_1"], 0)
    row("detection, last failure (attempt recorded ended, exhausted)", "operator",
        f["op_detect_2"], 0)
    row("detection, last failure (status.failedIndexes)", "Indexed Job",
        f["job_detect"], 0)
    row("replacement (pod Failed -> next pod)", "operator", f["op_replace"], 0)
    row("replacement (pod Failed -> next pod)", "Indexed Job", f["job_replace"],
        JOB_BACKOFF_SECONDS)
    row("reassignment: annotation -> ledger Accepted", "operator", f["reassign_ledger"], 0)
    row("reassignment: annotation -> new pod", "operator", f["reassign_pod"], 0)
    row("reassignment floor: the same writes -> new pod", "bare client", f["floor_pod"], 0)
    row("recovery overhead: recorded ended - lease expiry", "operator", f["recovery"], 0)
    return out


def checks(plays: Plays) -> list[str]:
    f = plays.figures
    said = []
    job, op = p99(f["job_detect"]), p99(f["op_detect_2"])
    said.append(f"- detection: operator p99 {op:.3f} s vs the Job controller's {job:.3f} s "
                f"(goal: {GOALS['detection']}): {'met' if op <= job else 'missed'}")
    floor, pod = p99(f["floor_pod"]), p99(f["reassign_pod"])
    ratio = pod / floor if floor else float("nan")
    said.append(f"- reassignment: p99 {pod:.3f} s, floor p99 {floor:.3f} s, ratio "
                f"{ratio:.2f} (goal: {GOALS['reassignment']}): "
                f"{'met' if ratio <= 1.5 else 'missed'}")
    rec = p99(f["recovery"])
    said.append(f"- recovery: overhead p99 {rec:.3f} s (goal: {GOALS['recovery']}): "
                f"{'met' if rec <= 1.0 else 'missed'}")
    said.append("- the operator's writes per reassignment (audit log, user operator): "
                + ", ".join(f"{k} {v:.2f}" for k, v in sorted(plays.reassign_writes.items())))
    said.append(f"- the operator's reads per reassignment (audit log, user operator, GET/LIST/"
                f"WATCH in any namespace): {plays.reassign_reads:.2f}; with the writes, each "
                "counts against its --qps")
    said.append("- the floor's writes per reassignment (in this order): "
                + ", ".join(plays.floor_sequence))
    if plays.lost:
        said.append("- not measured (an event the watches did not see in time): "
                    + ", ".join(f"{k} {n}" for k, n in sorted(plays.lost.items())))
    return said


def header(args: argparse.Namespace) -> str:
    who = (f"at its documented defaults (--qps {cli.QPS[2]:g} --burst {cli.BURST[2]}, "
           "no flags given)")
    return (f"{SECTION}\n\n{machine_commit_date()} Made by `python -m bench.latency --count "
            f"{args.count} --every {args.every:g} --alone-every {args.alone_every:g}` "
            "(`make bench-latency`) on one local control "
            f"plane without a node; the operator {who}, the Job controller at "
            f"kube-controller-manager's default QPS ({JOB_CONTROLLER_QPS:g}). Times are "
            "receipt times of watch events in the bench process (monotonic clock); a "
            "write's time is taken just before it is sent. Backoffs: the operator's retry "
            "backoff is set to 0 on the runs (`retry.backoff.initialSeconds: 0`, "
            "`maxAttempts: 2`); the Job controller's pod-failure backoff is 10 s on an "
            "index's first failure (doubling per index), in its replacement time and "
            "subtracted for the net figure; a failed index (backoffLimitPerIndex 1 reached) "
            "has no backoff. The lease is the CRD's minimum, 5 s.\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=bounded(int, 20, 2000), default=200,
                        help="events of each kind (a multiple of --nodes)")
    parser.add_argument("--nodes", type=bounded(int, 1, 100), default=20,
                        help="nodes per run")
    parser.add_argument("--every", type=bounded(float, 0.05, 5.0), default=0.45,
                        help="seconds between two events of the same play")
    parser.add_argument("--out", type=Path, default=BENCHMARKS,
                        help="the file whose '## Latency' section is replaced")
    parser.add_argument("--alone-every", type=bounded(float, 0.05, 5.0), default=0.75,
                        help="seconds between two events of the operator's plays alone "
                             "(reassignments, the floor, recoveries): each costs the "
                             "operator 8-12 requests against its --qps")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the cluster's files and the operator's log here")
    args = parser.parse_args(argv)
    args.count, args.nodes = int(args.count), int(args.nodes)
    if args.count % args.nodes:
        parser.error(f"--count must be a multiple of --nodes ({args.nodes})")
    with tempfile.TemporaryDirectory(prefix="agentrun-latency-") as temporary:
        workdir = args.workdir or Path(temporary)
        workdir.mkdir(parents=True, exist_ok=True)
        bench = Bench(workdir=workdir, window=1.0)
        try:
            bench.start()
            plays = Plays(bench=bench, count=args.count, nodes=args.nodes, every=args.every,
                          alone_every=args.alone_every, flags=[])
            try:
                plays.run()
            finally:
                plays.stop()
        finally:
            bench.stop_cluster()
    text = "\n".join([header(args), *lines(plays), "", *checks(plays)]) + "\n"
    print(text)
    write_section(args.out, heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
