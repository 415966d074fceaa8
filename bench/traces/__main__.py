"""Benchmark: what tracing costs a worker's step and an operator's write.

Tracing off (no endpoint: the default) a step's span and a write's report are a no-op;
on, each is an OpenTelemetry span batched and sent over OTLP/HTTP to a real Collector
(``tests/support/otelcol.py``) on loopback. Measured in this process, its CPU time
(``time.process_time``: every thread, the batch exporter's included) divided by the calls:

- *a worker's step*: ``AttemptSpans.step`` around an empty body (what the SDK adds to a
  step; the step's own commit is not in it);
- *an operator's report*: ``Telemetry.report`` of one finished span (what the operator adds
  to a status write that completed one: an attempt's end, a claim, a command).

The calls are made in rounds of :data:`ROUND` with a flush after each (the batch queue
holds 2,048 spans: a faster producer loses the excess, which the received count shows), so
every span is sent; the Collector's count says how many arrived. A benchmark prints
figures, it is never a test:

    make bench-traces
    .venv/bin/python -m bench.traces --calls 2000 --out /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from agentrun import telemetry
from agentrun.api import traces
from agentrun.worker._spans import AttemptSpans
from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from tests.support.otelcol import Collector
from tests.support.waiting import wait_for

SECTION = "## Traces"
ROUND = 1000
PARENT = traces.Parent(trace=traces.trace_id("bench-run"),
                       span=traces.attempt_span("bench-slot", 1))


def cpu_per_call(calls: int, call: Callable[[int], None], *,
                 flush: Callable[[], None]) -> float:
    """Seconds of this process's CPU per call of ``call(i)``, the flushes included."""
    started = time.process_time()
    for i in range(calls):
        call(i)
        if (i + 1) % ROUND == 0:
            flush()
    flush()
    return (time.process_time() - started) / calls


def step_with(spans: AttemptSpans) -> Callable[[int], None]:
    def step(i: int) -> None:
        with spans.step(f"s{i:06d}") as mark:
            mark.ran = True
    return step


def report_with(sink: telemetry.Telemetry) -> Callable[[int], None]:
    now = datetime.now(UTC)
    parent = traces.slot_span("bench-slot")

    def report(i: int) -> None:
        sink.report(traces.SpanRecord(
            trace=PARENT.trace, span=traces.attempt_span("bench-slot", i + 2), parent=parent,
            name=f"attempt {i + 2}", start=now, end=now,
            attributes={"agentrun.attempt": i + 2, "agentrun.outcome": "Succeeded"}))
    return report


def measure(calls: int) -> list[tuple[str, float, float, int]]:
    """(what, CPU per call off, CPU per call on, spans received) for each measured call."""
    rows = []
    with Collector() as collector:
        off = AttemptSpans()
        on = AttemptSpans(parent=PARENT, sink=telemetry.Telemetry.start(
            endpoint=collector.endpoint, service="bench-worker"))
        step_off = cpu_per_call(calls, step_with(off), flush=lambda: None)
        step_on = cpu_per_call(calls, step_with(on), flush=on.sink.flush)
        on.close()
        sink_off = telemetry.Telemetry()
        sink_on = telemetry.Telemetry.start(endpoint=collector.endpoint, service="bench-op")
        report_off = cpu_per_call(calls, report_with(sink_off), flush=lambda: None)
        report_on = cpu_per_call(calls, report_with(sink_on), flush=sink_on.flush)
        sink_on.shutdown()

        def received(service: str) -> int:
            return sum(1 for s in collector.spans() if s.service == service)
        wait_for(lambda: received("bench-worker") + received("bench-op") >= 2 * calls,
                 timeout=15, message="every span at the Collector")
        rows.append(("a worker's step (AttemptSpans.step)", step_off, step_on,
                     received("bench-worker")))
        rows.append(("an operator's report (Telemetry.report)", report_off, report_on,
                     received("bench-op")))
    return rows


def table(rows: list[tuple[str, float, float, int]], calls: int) -> str:
    lines = ["| call | calls | CPU per call, tracing off | CPU per call, tracing on "
             "(batching and OTLP export included) | spans the Collector received |",
             "| --- | ---: | ---: | ---: | ---: |"]
    lines += [f"| {what} | {calls:,} | {off * 1e6:.1f} µs | {on * 1e6:.1f} µs | {got:,} |"
              for what, off, on, got in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traces")
    parser.add_argument("--calls", type=int, default=10_000, help="calls of each kind")
    parser.add_argument("--out", type=Path, default=BENCHMARKS)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    rows = measure(args.calls)
    text = "\n\n".join([
        SECTION,
        f"{machine_commit_date()} Made by `python -m bench.traces` (`make bench-traces`): "
        "one process, a real OpenTelemetry Collector on loopback.",
        table(rows, args.calls),
        f"Load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
        f"on {os.cpu_count()} cores. CPU per call: this process's CPU time (every thread, "
        f"the batch exporter's included) over the calls, flushed every {ROUND:,} calls. "
        "Tracing off is the default; a step's own commit (milliseconds: a Lease or the "
        "journal's store) and a status write are not in these figures."])
    print(text)
    write_section(args.out, heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
