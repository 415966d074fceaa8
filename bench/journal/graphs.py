"""``python -m bench.journal.graphs``: one LangGraph graph on the journal's checkpointer
beside LangGraph's ``PostgresSaver``, in one run (``make bench-journal`` runs it too).

The graph is the same on both sides: a ``StateGraph`` whose one node loops ``--supersteps``
times, each superstep appending a ``--message``-byte entry to a list channel (the state
grows as an agent's message history does, and each checkpoint carries the whole list, as
LangGraph's savers store it) and bumping a counter, run with ``durability="sync"`` (each
superstep's checkpoint durable before the next starts). Measured: supersteps/s over the
run, and each ``put`` (a checkpoint) from its call until it returned durable, p50/p99.

- *journal*: ``JournalSaver`` over the SDK's ``Worker`` of a fenced attempt (pod-bound
  token, every admission policy, etcd fsyncing) and a loopback SeaweedFS
  (:mod:`bench.journal.attempts`): each put is a value record to the store, the entry,
  the node, and the head advanced on the Lease under admission;
- *postgres*: ``PostgresSaver`` on an autocommit connection to a throwaway PostgreSQL 15
  with fsync and synchronous_commit on (:mod:`bench.journal.postgres`).

It prints both columns, the goal (the journal within 1.5x of Postgres, fenced), the
machine's load, and replaces the ``## LangGraph checkpointer vs PostgresSaver`` section of
``--write`` (default docs/benchmarks.md; ``-``: none).
"""

from __future__ import annotations

import argparse
import operator
import os
import statistics
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section

SECTION = "## LangGraph checkpointer vs PostgresSaver"
GOAL = 1.5
Figures = dict[str, Any]


class State(TypedDict):
    n: int
    log: Annotated[list[str], operator.add]


def graph(saver: Any, *, supersteps: int, message: int) -> Any:
    """The benchmark's graph over ``saver``."""
    def step(state: State) -> dict[str, Any]:
        return {"n": state["n"] + 1, "log": [f"{state['n']:08d}" * (message // 8)]}

    builder = StateGraph(State)
    builder.add_node("step", step)
    builder.add_edge(START, "step")
    builder.add_conditional_edges("step", lambda s: "step" if s["n"] < supersteps else END)
    return builder.compile(checkpointer=saver)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(saver: Any, *, supersteps: int, message: int) -> Figures:
    """Run the graph once over ``saver``, its puts timed (an instance attribute in front of
    the class's ``put``: LangGraph calls it as ``saver.put``)."""
    puts: list[float] = []
    put = saver.put

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return put(*args, **kwargs)
        finally:
            puts.append((time.perf_counter() - start) * 1000)

    saver.put = timed
    built = graph(saver, supersteps=supersteps, message=message)
    config = {"configurable": {"thread_id": f"bench-{uuid.uuid4().hex[:8]}"},
              "recursion_limit": supersteps + 10}
    start = time.perf_counter()
    try:
        final = built.invoke({"n": 0, "log": []}, config, durability="sync")
    finally:
        del saver.put  # the class's again: a later run is timed once, not twice
    elapsed = time.perf_counter() - start
    assert final["n"] == supersteps, final["n"]
    return {"supersteps": supersteps, "message_bytes": message, "seconds": elapsed,
            "supersteps_per_s": supersteps / elapsed, "puts": len(puts),
            "put_p50_ms": statistics.median(puts), "put_p99_ms": percentile(puts, 0.99),
            "state_bytes": sum(len(x) for x in final["log"])}


@contextmanager
def journal_saver(*, group_commit: bool = False) -> Iterator[Any]:
    from agentrun.worker.langgraph import JournalSaver
    from bench.journal.attempts import place

    with place() as where:
        attempt = where.attempt("graph", 1)
        worker = where.worker(attempt)
        worker.start()
        try:
            yield JournalSaver(worker, group_commit=group_commit)
        finally:
            worker.stop()


@contextmanager
def journal_grouped() -> Iterator[Any]:
    with journal_saver(group_commit=True) as saver:
        yield saver


@contextmanager
def postgres_saver() -> Iterator[Any]:
    from langgraph.checkpoint.postgres import PostgresSaver

    from bench.journal import langgraph_side, postgres

    with postgres.running() as server, langgraph_side.connect(server) as connection:
        saver = PostgresSaver(connection)
        saver.setup()
        yield saver


SIDES: dict[str, tuple[str, Callable[[], Any]]] = {
    "journal": ("JournalSaver (fenced)", journal_saver),
    "grouped": ("JournalSaver (fenced, group_commit)", journal_grouped),
    "postgres": ("LangGraph PostgresSaver", postgres_saver),
}


def report(figures: dict[str, Figures], *, load: tuple[str, str]) -> str:
    journal, pg = figures["journal"], figures["postgres"]
    ratio_rate = pg["supersteps_per_s"] / journal["supersteps_per_s"]
    ratio_p50 = journal["put_p50_ms"] / pg["put_p50_ms"]
    grouped = figures["grouped"]["supersteps_per_s"] / pg["supersteps_per_s"]
    lines = [
        f"The same graph on both: {journal['supersteps']} supersteps, each appending "
        f"{journal['message_bytes']} B to a list channel (the last checkpoint's list "
        f"{journal['state_bytes'] / 1024**2:.1f} MiB), `durability=\"sync\"`. "
        "`bench/journal/graphs.py` says what each side runs on.",
        "",
        "| figure | " + " | ".join(SIDES[s][0] for s in figures) + " |",
        "| --- | " + " | ".join("---" for _ in figures) + " |",
        "| supersteps/s | " + " | ".join(f"{f['supersteps_per_s']:.1f}"
                                        for f in figures.values()) + " |",
        "| put returned, p50 / p99 | " + " | ".join(
            f"{f['put_p50_ms']:.1f} / {f['put_p99_ms']:.1f} ms" for f in figures.values())
        + " |",
        "",
        "A put returns durable, except with `group_commit` (staged: durable within the "
        "worker's commit delay, 0.25 s, and before any effect's call, question or the "
        "attempt's end; a crash repeats that window's supersteps).",
        "",
        f"Goal: the journal within {GOAL}x of PostgresSaver while fenced. Measured: "
        f"{ratio_rate:.2f}x slower in supersteps/s, {ratio_p50:.2f}x the p50 put "
        f"({'met' if max(ratio_rate, ratio_p50) <= GOAL else 'not met'}). The floor is "
        "the fenced commit: a head advanced on the attempt's Lease through admission, with "
        "etcd fsyncing (the journal's own commit latency, 200 B, above), where PostgreSQL "
        f"fsyncs its WAL. With `group_commit`: {grouped:.2f}x PostgresSaver's supersteps/s.",
        "",
        f"Machine load (1, 5, 15 min) before: {load[0]}; after: {load[1]}.",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--supersteps", type=int, default=300, help="default 300")
    parser.add_argument("--message", type=int, default=2048,
                        help="bytes each superstep appends (default 2048)")
    parser.add_argument("--write", default=str(BENCHMARKS),
                        help=f"the file whose '{SECTION}' section is replaced ('-': none)")
    args = parser.parse_args(argv)
    if not 10 <= args.supersteps <= 10_000 or not 8 <= args.message <= 1 << 20:
        parser.error("--supersteps is 10..10000 and --message 8..1048576")
    before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    figures: dict[str, Figures] = {}
    for name, (title, make) in SIDES.items():
        with make() as saver:
            measure(saver, supersteps=10, message=args.message)  # warm-up, unmeasured
            figures[name] = found = measure(saver, supersteps=args.supersteps,
                                            message=args.message)
        print(f"{title}: {found['supersteps_per_s']:.1f} supersteps/s, put p50 "
              f"{found['put_p50_ms']:.1f} ms, p99 {found['put_p99_ms']:.1f} ms", flush=True)
    after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    text = report(figures, load=(before, after))
    print(text)
    if args.write != "-":
        write_section(Path(args.write), heading=SECTION,
                      text=f"{SECTION}\n\n{machine_commit_date()}\n\n{text}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
