"""The LangGraph side of ``bench/journal``: ``PostgresSaver`` on a durable local PostgreSQL.

What is modelled. One step is one ``saver.put(config, checkpoint, metadata, new_versions)``,
as LangGraph's loop hands a superstep's checkpoint to its saver: the checkpoint (``v`` as
LangGraph writes it now, a uuid6 ``id`` ordered by step, ``ts``) holds one channel,
``result``, whose version moves every step (the saver's own ``get_next_version``) and
whose value is the step's payload: ``bytes`` of the stated size, random (so nothing
compresses them; TOAST would shrink text), stored by the saver's default serde as a
``checkpoint_blobs`` row (a ``str`` would be inlined in the JSONB row instead);
``new_versions`` is ``{"result": <its new version>}``, metadata ``{"source": "loop",
"step": n, "parents": {}}``, and the config is chained as LangGraph chains it: each put gets
the config the previous put returned (its ``checkpoint_id`` becomes the new row's parent).

Why it favours Postgres. A step costs the same whatever came before: one new blob of the
payload's size and one small JSONB row. A real graph's state usually is a message list
that grows every step and is re-serialized whole into a new blob each superstep (its
cost grows with the run), it has several channels (``__start__``, ``branch:to:...``,
``messages``) whose versions move, and each task's writes go through ``put_writes``
besides; none of that is here. LangGraph's default durability ("async") runs the put in
the background while the next superstep starts; ``durability="sync"`` waits for it: the
commit latency below is what that wait is.

Commit latency is the time ``put`` takes to return, on an autocommit connection (as
``PostgresSaver.from_conn_string`` opens it: ``autocommit``, ``prepare_threshold=0``,
``dict_row``): with ``synchronous_commit=on`` a returned put is on disk. Steps/s is
committed puts over wall time: one writer over ``--steps``, then N writers at once, each
with its own Python thread, connection, saver and ``thread_id``, all released together,
``--writer-steps`` each (aggregate = all their puts over the time until the last is done).
Each phase also gives the CPU per step of this process (``time.process_time``: every
thread, the puts' serialization and psycopg included) and of the server (its process tree
from /proc, background processes and the observer's few queries included: see
:func:`postgres.tree_cpu_seconds`), the
WAL bytes per step (``pg_current_wal_lsn``), commits per step
(``pg_stat_database.xact_commit``) and WAL syncs per step (``pg_stat_wal.wal_sync``), the
last two read once the phase's backends are gone (their counters reach the shared stats
when they exit). A few unmeasured puts on a connection of their own warm the server first.

Prefix load. One thread grows to each of ``--prefixes`` committed steps (200 B payloads),
filled by the saver itself (the same rows as any put), ``--fill-batch`` puts per
transaction to fill fast (the measured puts commit one by one), then ``VACUUM ANALYZE``
(the state autovacuum would reach, and none of it running while loads are timed). At each
size: the time from opening a NEW connection and ``PostgresSaver(conn)`` until
``get_tuple(config)`` returns the latest checkpoint (what LangGraph reads to resume a
thread, so the figure to compare), and separately until ``list(config)`` has listed all
the thread's checkpoints (a full history read), median of ``--load-repeats``; the
server's caches are warm (it has just written them).
"""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import psycopg
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import ChannelVersions, Checkpoint, CheckpointMetadata
from langgraph.checkpoint.base.id import uuid6
from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.pregel._checkpoint import LATEST_VERSION  # the checkpoint "v" LangGraph writes
from psycopg.rows import DictRow, dict_row

from bench.journal.postgres import Server

CHANNEL = "result"
NODE = "agent"  # the node that wrote the channel (versions_seen)
QUIET_SECONDS = 30.0  # the longest wait for a phase's backends to exit

Connection = psycopg.Connection[DictRow]
Figures = dict[str, Any]


def connect(server: Server) -> Connection:
    """A connection as ``PostgresSaver.from_conn_string`` opens one."""
    return psycopg.Connection.connect(server.conninfo, autocommit=True, prepare_threshold=0,
                                      row_factory=dict_row)


class Chain:
    """One thread's checkpoints as LangGraph's loop hands them to ``put`` (module docstring):
    each :meth:`put` saves the next step and keeps the config it returns for the next."""

    def __init__(self, saver: PostgresSaver, *, thread_id: str, size: int) -> None:
        self.saver = saver
        self.config: RunnableConfig = {"configurable": {"thread_id": thread_id,
                                                        "checkpoint_ns": ""}}
        self.size = size
        self.base = os.urandom(size)
        self.version: str | None = None
        self.step = -1

    def payload(self) -> bytes:
        """The step's value: random bytes, their head the step number (each step's own)."""
        head = min(8, self.size)
        return self.step.to_bytes(8, "big")[-head:] + self.base[head:] if head else b""

    def next(self) -> tuple[RunnableConfig, Checkpoint, CheckpointMetadata, ChannelVersions]:
        self.step += 1
        seen: dict[str, ChannelVersions] = (
            {NODE: {CHANNEL: self.version}} if self.version else {})
        self.version = self.saver.get_next_version(self.version, None)
        checkpoint = Checkpoint(
            v=LATEST_VERSION, id=str(uuid6(clock_seq=self.step)),
            ts=datetime.now(UTC).isoformat(), channel_values={CHANNEL: self.payload()},
            channel_versions={CHANNEL: self.version}, versions_seen=seen,
            updated_channels=[CHANNEL])
        metadata = CheckpointMetadata(source="loop", step=self.step, parents={})
        return self.config, checkpoint, metadata, {CHANNEL: self.version}

    def put(self) -> float:
        """Save the next step; the seconds ``put`` took to return (the commit latency)."""
        config, checkpoint, metadata, versions = self.next()
        start = time.perf_counter()
        self.config = self.saver.put(config, checkpoint, metadata, versions)
        return time.perf_counter() - start


def percentile(values: list[float], q: float) -> float:
    """Nearest rank: the smallest value with at least ``q`` of them at or below it (of 40
    samples, p99 is the largest)."""
    ordered = sorted(values)
    rank = max(1, math.ceil(round(q * len(ordered), 9)))  # round: 0.99 * 100 is not 99.0
    return ordered[min(rank, len(ordered)) - 1]


def lsn(text: str) -> int:
    """A WAL position ``X/Y`` as bytes from the start."""
    high, low = text.split("/")
    return (int(high, 16) << 32) + int(low, 16)


@dataclass(frozen=True)
class Snapshot:
    """What a phase's figures are differences of."""

    client_cpu: float
    server_cpu: float
    wal: int
    commits: int
    wal_syncs: int

    @classmethod
    def take(cls, server: Server, observer: Connection) -> Snapshot:
        row = observer.execute(
            "SELECT pg_current_wal_lsn()::text AS lsn, (SELECT xact_commit FROM "
            "pg_stat_database WHERE datname = %s) AS commits, (SELECT wal_sync FROM "
            "pg_stat_wal) AS syncs", (server.database,)).fetchone()
        assert row is not None
        return cls(client_cpu=time.process_time(), server_cpu=server.cpu_seconds(),
                   wal=lsn(row["lsn"]), commits=int(row["commits"]),
                   wal_syncs=int(row["syncs"]))


def quiet(observer: Connection, *, database: str, keep: frozenset[int] = frozenset()) -> None:
    """Until no backend serves ``database`` but those of pids ``keep`` (a phase's own,
    open): the others have exited, so their counters are in the shared stats; refused
    after QUIET_SECONDS."""
    deadline = time.monotonic() + QUIET_SECONDS
    while True:
        rows = observer.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s",
                                (database,)).fetchall()
        if {row["pid"] for row in rows} <= keep:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"backends still serve {database} after {QUIET_SECONDS} s")
        time.sleep(0.02)  # the poll's pace


@dataclass
class Bench:
    """The server, an observer connection (to the ``postgres`` database, so its own
    queries are not counted as the bench database's commits), and a counter for fresh
    thread ids."""

    server: Server
    observer: Connection
    threads: int = 0
    warmed: set[int] = field(default_factory=set)

    def thread_id(self, kind: str) -> str:
        self.threads += 1
        return f"{kind}-{self.threads}"

    def warm(self, *, size: int, steps: int) -> None:
        """``steps`` unmeasured puts of ``size`` bytes on a connection of their own, once
        per size (tables, catalogs and buffers warm; none of it counted)."""
        if size in self.warmed or steps <= 0:
            return
        with connect(self.server) as conn:
            chain = Chain(PostgresSaver(conn), thread_id=self.thread_id("warm"), size=size)
            for _ in range(steps):
                chain.put()
        self.warmed.add(size)

    @contextmanager
    def phase(self, conns: list[Connection], steps: Callable[[], int],
              into: Figures) -> Iterator[None]:
        """Around a phase whose connections (``conns``) are open and whose puts run
        inside: the per-step costs into ``into`` (``steps()``: how many puts it made). The
        connections must be closed when the block ends (the stats are read once their
        backends are gone)."""
        keep = frozenset(c.info.backend_pid for c in conns)
        quiet(self.observer, database=self.server.database, keep=keep)
        before = Snapshot.take(self.server, self.observer)
        yield
        client_cpu = time.process_time()
        quiet(self.observer, database=self.server.database)
        after = Snapshot.take(self.server, self.observer)
        n = steps()
        into.update({
            "client_cpu_ms_per_step": (client_cpu - before.client_cpu) * 1000 / n,
            "server_cpu_ms_per_step": (after.server_cpu - before.server_cpu) * 1000 / n,
            "wal_bytes_per_step": (after.wal - before.wal) / n,
            "commits_per_step": (after.commits - before.commits) / n,
            "wal_syncs_per_step": (after.wal_syncs - before.wal_syncs) / n})


def latency_figures(latencies: list[float], seconds: float) -> Figures:
    return {"steps": len(latencies), "seconds": seconds,
            "steps_per_s": len(latencies) / seconds,
            "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000,
            "mean_ms": statistics.fmean(latencies) * 1000, "max_ms": max(latencies) * 1000}


def one_writer(bench: Bench, *, size: int, steps: int, warmup: int) -> Figures:
    """``steps`` puts of ``size`` bytes, one after the other, on one connection."""
    bench.warm(size=size, steps=warmup)
    figures: Figures = {"payload_bytes": size, "writers": 1}
    latencies: list[float] = []
    with connect(bench.server) as conn:
        chain = Chain(PostgresSaver(conn), thread_id=bench.thread_id(f"one-{size}"), size=size)
        with bench.phase([conn], lambda: len(latencies), figures):
            started = time.perf_counter()
            for _ in range(steps):
                latencies.append(chain.put())
            seconds = time.perf_counter() - started
            conn.close()
    return {**figures, **latency_figures(latencies, seconds)}


def many_writers(bench: Bench, *, writers: int, steps: int, size: int, warmup: int) -> Figures:
    """``writers`` threads, each on its own connection, saver and thread_id, released
    together, ``steps`` puts each; aggregate steps/s over the time until the last is done."""
    bench.warm(size=size, steps=warmup)
    figures: Figures = {"payload_bytes": size, "writers": writers}
    conns = [connect(bench.server) for _ in range(writers)]
    chains = [Chain(PostgresSaver(c), thread_id=bench.thread_id(f"w{writers}"), size=size)
              for c in conns]
    latencies: list[list[float]] = [[] for _ in range(writers)]
    failures: list[BaseException] = []
    gate = threading.Barrier(writers + 1)

    def write(i: int) -> None:
        gate.wait()
        try:
            for _ in range(steps):
                latencies[i].append(chains[i].put())
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=write, args=(i,), name=f"writer-{i}", daemon=True)
               for i in range(writers)]
    try:
        with bench.phase(conns, lambda: sum(map(len, latencies)), figures):
            for t in threads:
                t.start()
            gate.wait()
            started = time.perf_counter()
            for t in threads:
                t.join()
            seconds = time.perf_counter() - started
            for c in conns:
                c.close()
    finally:
        for c in conns:
            c.close()
    if failures:
        raise failures[0]
    every = [x for each in latencies for x in each]
    return {**figures, **latency_figures(every, seconds),
            "per_writer_steps_per_s": steps / seconds}


def prefix_loads(bench: Bench, *, sizes: list[int], size: int, batch: int,
                 repeats: int) -> list[Figures]:
    """One thread grown to each of ``sizes`` committed steps, the load times at each
    (module docstring)."""
    results: list[Figures] = []
    thread_id = bench.thread_id("prefix")
    config: RunnableConfig = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
    with connect(bench.server) as conn:
        chain = Chain(PostgresSaver(conn), thread_id=thread_id, size=size)
        for target in sorted(sizes):
            started = time.perf_counter()
            grown = 0
            while chain.step + 1 < target:
                with conn.transaction():
                    for _ in range(min(batch, target - chain.step - 1)):
                        chain.put()
                        grown += 1
            fill = time.perf_counter() - started
            conn.execute("VACUUM ANALYZE checkpoints, checkpoint_blobs")
            connects, latest, every = [], [], []
            for _ in range(repeats):
                connects.append(load(bench.server, config, target=target, how="connect"))
                latest.append(load(bench.server, config, target=target, how="latest"))
                every.append(load(bench.server, config, target=target, how="all"))
            results.append({
                "steps": target, "payload_bytes": size, "filled_steps": grown, "fill_batch": batch,
                "fill_seconds": fill, "fill_steps_per_s": grown / fill if fill else 0.0,
                "connect_ms": statistics.median(connects) * 1000,
                "latest_ms": statistics.median(latest) * 1000,
                "all_ms": statistics.median(every) * 1000,
                "latest_ms_each": [x * 1000 for x in latest],
                "all_ms_each": [x * 1000 for x in every]})
    return results


def load(server: Server, config: RunnableConfig, *, target: int, how: str) -> float:
    """Seconds from opening a new connection and ``PostgresSaver(conn)`` until: nothing
    more (``connect``), ``get_tuple`` gave the latest checkpoint (``latest``), ``list``
    gave every checkpoint (``all``); what came back is checked."""
    started = time.perf_counter()
    with connect(server) as conn:
        saver = PostgresSaver(conn)
        if how == "latest":
            found = saver.get_tuple(config)
            took = time.perf_counter() - started
            if found is None or found.metadata.get("step") != target - 1:
                raise RuntimeError(f"get_tuple at {target}: not the latest step")
            return took
        if how == "all":
            count = sum(1 for _ in saver.list(config))
            took = time.perf_counter() - started
            if count != target:
                raise RuntimeError(f"list at {target}: {count} checkpoints")
            return took
        return time.perf_counter() - started


def measure(server: Server, *, latency: list[tuple[int, int]], steps: int,
            writers: list[int], writer_steps: int, prefixes: list[int], fill_batch: int,
            load_repeats: int, warmup: int, small: int = 200,
            say: Callable[[str], None] = print) -> Figures:
    """Every figure of the LangGraph side (module docstring), printed as each is made
    (``say``); plain dicts."""
    with psycopg.Connection.connect(server.admin_conninfo, autocommit=True,
                                    row_factory=dict_row) as observer:
        bench = Bench(server=server, observer=observer)
        with connect(server) as conn:
            PostgresSaver(conn).setup()  # the saver's tables and indexes (its migrations)
        figures: Figures = {"latency": [], "writers": [], "prefix": []}
        for size, samples in latency:
            f = one_writer(bench, size=size, steps=samples, warmup=warmup)
            figures["latency"].append(f)
            say(f"  commit latency {size:>10,} B x {samples}: p50 {f['p50_ms']:.2f} ms, "
                f"p99 {f['p99_ms']:.2f} ms, {f['wal_bytes_per_step']:,.0f} WAL B/step")
        f = one_writer(bench, size=small, steps=steps, warmup=warmup)
        figures["one_writer"] = f
        say(f"  one writer, {steps} steps of {small} B: {f['steps_per_s']:.0f} steps/s, "
            f"client {f['client_cpu_ms_per_step']:.3f} / server "
            f"{f['server_cpu_ms_per_step']:.3f} CPU-ms per step")
        for n in writers:
            f = many_writers(bench, writers=n, steps=writer_steps, size=small, warmup=warmup)
            figures["writers"].append(f)
            say(f"  {n:>2} writer{'s' if n > 1 else ''} x {writer_steps}: "
                f"{f['steps_per_s']:.0f} steps/s aggregate "
                f"({f['per_writer_steps_per_s']:.0f} each), p99 {f['p99_ms']:.2f} ms, "
                f"{f['commits_per_step']:.2f} commits and "
                f"{f['wal_syncs_per_step']:.2f} WAL syncs per step")
        figures["highest"] = max(figures["writers"], key=lambda w: w["steps_per_s"],
                                 default=None)
        for p in prefix_loads(bench, sizes=prefixes, size=small, batch=fill_batch,
                              repeats=load_repeats):
            figures["prefix"].append(p)
            say(f"  prefix {p['steps']:>7,}: filled {p['filled_steps']:,} in "
                f"{p['fill_seconds']:.1f} s; new connection {p['connect_ms']:.1f} ms, + latest "
                f"{p['latest_ms']:.1f} ms, + all {p['all_ms']:.0f} ms")
    return figures
