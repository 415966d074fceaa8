"""Benchmark: the web UI's pages at 1,000 runs and 10,000 slots, measured in the browser.

One local control plane without a node and without an operator (the objects are written
as the operator would leave them: each run with its slot counts, each slot with its state
and one attempt), ``--runs`` runs of ``--nodes`` slots each (a chain: each node after the
one before) in one namespace; then ``kubectl agentrun ui`` as the cluster's admin, and a
headless Chromium (Debian's, through Playwright) that opens the runs page (every run: a
table of 1,000 rows) and a run's page (its graph and its slots) ``--samples`` times each.
For each page: the browser's own Navigation Timing (``loadEventEnd``: the complete page,
its scripts and styles loaded; the data is in the HTML, never a skeleton filled later),
p50/p95/max, and the rows it held. Beside them, the reference: the LIST a page would need
if it read the API server per request (the runs of the namespace; a run's slots by label),
timed from the same machine; and the LIST requests the UI sent while the pages were read
(the API server's ``apiserver_request_total``: the goal is none, its reads are watches).

A benchmark prints figures, it is never a test:

    make bench-ui
    .venv/bin/python -m bench.ui --runs 200 --nodes 10 --out /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes

from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.loop.support import Bench
from tests.support import browser

SECTION = "## The web UI at 1,000 runs and 10,000 slots (bench/ui)"
GOAL_MS = 300.0
PLUGIN = Path(sys.executable).parent / "kubectl-agentrun"
GROUP, VERSION = "agentrun.dev", "v1alpha1"
STATES = ("Succeeded", "Succeeded", "Active", "Pending", "RetryWait", "Failed")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def populate(custom: kubernetes.client.CustomObjectsApi, namespace: str, *, runs: int,
             nodes: int) -> None:
    """The runs and slots, and their status as the operator writes it, eight at a time."""
    began = datetime.now(UTC) - timedelta(hours=1)

    def one(index: int) -> None:
        run = f"run-{index:04d}"
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "agentruns", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun", "metadata": {"name": run},
            "spec": {"package": {"name": "bench"}, "workflow": {"name": "bench"},
                     "bindings": {"name": "bench"}, "tenant": f"team-{index % 7}"}})
        done = 0
        for node in range(nodes):
            slot = f"{run}-n{node:02d}"
            state = STATES[(index + node) % len(STATES)]
            done += state == "Succeeded"
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "slots", {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "Slot",
                "metadata": {"name": slot, "labels": {"agentrun.dev/run": run}},
                "spec": {"run": run, "node": f"n{node:02d}", "workerClass": "cpu",
                         "dependsOn": [f"n{node - 1:02d}"] if node else []}})
            start = began + timedelta(seconds=node * 30)
            attempt: dict[str, Any] = {
                "number": 1, "pod": f"{slot}-1", "lease": f"{slot}-1", "workerClass": "cpu",
                "launchSpec": "bench@1",
                "startedAt": start.strftime("%Y-%m-%dT%H:%M:%SZ")}
            if state in ("Succeeded", "Failed", "RetryWait"):
                attempt.update(outcome="Failed" if state != "Succeeded" else "Succeeded",
                               endedAt=(start + timedelta(seconds=20)).strftime(
                                   "%Y-%m-%dT%H:%M:%SZ"))
            custom.patch_namespaced_custom_object_status(GROUP, VERSION, namespace, "slots",
                                                         slot, {"status": {
                                                             "state": state,
                                                             "attempts": [attempt]}})
        custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, "agentruns", run,
            {"status": {"slots": {"total": nodes, "succeeded": done}}})
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(one, range(runs)))


def lists(bench: Bench) -> float:
    """LIST requests for runs and slots the API server has answered, all users."""
    answer = bench.cluster.kubectl("get", "--raw", "/metrics")
    if answer.returncode != 0:
        raise RuntimeError(f"the API server's metrics: {answer.stderr}")
    text = answer.stdout
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_request_total{") and 'verb="LIST"' in line and (
                'resource="agentruns"' in line or 'resource="slots"' in line):
            total += float(line.rsplit(" ", 1)[1])
    return total


def navigation_ms(page: Any, url: str) -> float:
    page.goto(url, wait_until="load")
    return float(page.evaluate(
        "performance.getEntriesByType('navigation')[0].loadEventEnd"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--samples", type=int, default=40)
    parser.add_argument("--out", type=Path, default=BENCHMARKS)
    args = parser.parse_args(argv)
    if (why := browser.available()) is not None:
        raise SystemExit(why)
    with tempfile.TemporaryDirectory(prefix="agentrun-bench-ui-") as work:
        bench = Bench(workdir=Path(work), window=0)
        bench.start()
        ui: subprocess.Popen[str] | None = None
        try:
            namespace = bench.namespace("ui")
            began = time.monotonic()
            populate(bench.custom, namespace, runs=args.runs, nodes=args.nodes)
            print(f"wrote {args.runs} runs and {args.runs * args.nodes} slots in "
                  f"{time.monotonic() - began:.0f} s", flush=True)
            started = time.monotonic()
            ui = subprocess.Popen([str(PLUGIN), "--kubeconfig", str(bench.cluster.kubeconfig),
                                   "--context", "admin", "ui", "--port", "0"],
                                  stdout=subprocess.PIPE, text=True)
            assert ui.stdout is not None
            url = next(line for line in ui.stdout if " at http://" in line).split(" at ")[1]
            print(f"the UI listed and served in {time.monotonic() - started:.1f} s", flush=True)
            origin = url.strip().split("/?")[0]
            before = lists(bench)
            runs_ms: list[float] = []
            run_ms: list[float] = []
            with browser.browser() as launched, browser.browsing(launched) as seen:
                page = seen.page
                page.goto(url.strip())
                rows = page.locator("#runs .row").count()
                for sample in range(args.samples):
                    runs_ms.append(navigation_ms(page, f"{origin}/runs"))
                    run = f"run-{(sample * 37) % args.runs:04d}"
                    run_ms.append(navigation_ms(page, f"{origin}/runs/{namespace}/{run}"))
                slot_rows = page.locator("#slots tbody tr").count()
            sent = lists(bench) - before
            reference_runs = timed(lambda: bench.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentruns"), args.samples)
            reference_run = timed(lambda: bench.custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "slots", label_selector="agentrun.dev/run=run-0001"),
                args.samples)
        finally:
            if ui is not None:
                ui.terminate()
                ui.wait(timeout=20)
            bench.stop_cluster()
    load = os.getloadavg()
    table = [
        "| page | rows | p50 | p95 | max | goal (p95) "
        "| reference: one LIST per request (p50 / p95) |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| runs | {rows} | {statistics.median(runs_ms):.0f} ms | "
        f"{percentile(runs_ms, 0.95):.0f} ms | {max(runs_ms):.0f} ms | {GOAL_MS:.0f} ms | "
        f"{statistics.median(reference_runs):.0f} / {percentile(reference_runs, 0.95):.0f} ms |",
        f"| a run | {slot_rows} | {statistics.median(run_ms):.0f} ms | "
        f"{percentile(run_ms, 0.95):.0f} ms | {max(run_ms):.0f} ms | {GOAL_MS:.0f} ms | "
        f"{statistics.median(reference_run):.0f} / {percentile(reference_run, 0.95):.0f} ms |",
    ]
    text = "\n".join([
        SECTION, "",
        f"{machine_commit_date()} Load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} "
        "at the end.", "",
        f"{args.runs} runs of {args.nodes} slots ({args.runs * args.nodes} slots) in one "
        "namespace of a local control plane; `kubectl agentrun ui` as its admin; Debian's "
        f"Chromium headless; {args.samples} loads of each page, the browser's "
        "`loadEventEnd` (the page complete: its rows are in the HTML). The reference is "
        "what the same page would cost at least if it read the API server per request: "
        "one LIST of its objects (the Python client, JSON decoded), without rendering.", "",
        *table, "",
        f"LIST requests for runs or slots while the pages were read: {sent:.0f} "
        "(goal: none; the UI reads its watches' store).", ""])
    print(text)
    write_section(args.out, heading=SECTION, text=text)
    return 0 if percentile(runs_ms, 0.95) < GOAL_MS and percentile(run_ms, 0.95) < GOAL_MS \
        and sent == 0 else 1


def timed(call: Any, samples: int) -> list[float]:
    took = []
    for _ in range(samples):
        began = time.perf_counter()
        call()
        took.append((time.perf_counter() - began) * 1000)
    return took


if __name__ == "__main__":
    sys.exit(main())
