"""``make test``'s driver: one local cluster, the suite in four parts, a summary.

Why: most integration tests wait on timers (leases, deadlines, a pod starting), not on
the machine, and each works in a namespace of its own with an operator of its own; run
one after another they kept the CPU about half idle. So the suite runs in parts
(``tests/support/parts.py`` says which test is in which):

- *parallel*: every integration test not marked ``serial`` or ``last``, in ``--workers``
  pytest-xdist workers at once, all attached to the one cluster and node started here
  (:mod:`tests.support.cluster.handle`);
- *serial*: the ``serial`` tests (they change cluster-wide objects: admission policies
  and bindings, the stamping epoch, the API server paused) and the ``last`` ones (they
  read what the whole session did, e.g. the audit log), one at a time in one process, on
  the same cluster, after the parallel part;
- *unit*: ``tests/unit`` (no cluster), in one process beside the serial part, whose
  tests mostly wait;
- *alone*: the modules that stop the session's cluster (``STOPS_THE_SESSION_CLUSTER``),
  in a pytest session of their own that starts and stops its own cluster, once this one
  has stopped.

Every collected test runs in exactly one part. Each part writes a JUnit report; the
summary sums them. The exit status is the first failing part's (a part with nothing
selected passes).

Usage: ``python -m tests.support.cluster.session [--workers N] [pytest arguments]``.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from tests.support import parts
from tests.support.actors.operators import install_for_tests
from tests.support.cluster import handle
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.crds import apply_crds
from tests.support.cluster.localnode import running
from tests.support.cluster.nodehost import NodeUnavailable

REPO = Path(__file__).resolve().parents[3]
NO_TESTS = 5  # pytest's exit status when the selection is empty
KEYS = ("tests", "failures", "errors", "skipped")
STOP_GRACE = 60.0
LIVE: list[Running] = []  # the parts started and not yet stopped


@dataclass(frozen=True)
class Outcome:
    part: str
    status: int
    seconds: float
    counts: dict[str, int]


def counts(report: Path) -> dict[str, int] | None:
    """Tests, failures, errors and skipped, from a part's JUnit report; None when the
    report is missing or unreadable (the part did not end as pytest ends)."""
    try:
        root = ElementTree.parse(report).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    suites = [root] if root.tag == "testsuite" else list(root)
    found = {key: sum(int(s.get(key, "0")) for s in suites) for key in KEYS}
    found["seconds"] = round(sum(float(s.get("time", "0")) for s in suites))
    return found


def start_part(part: str, *, args: list[str], workdir: Path, attached: Path | None,
               workers: int = 0, output: Path | None = None,
               after_parallel: bool = False) -> Running:
    """Start pytest on one part; ``output``: its output to that file, not to ours.

    Each part is a session (and process group) of its own, so that the driver alone
    decides when it stops: on the way out it interrupts every part still running
    (:meth:`Running.stop`) before it stops the cluster under them.
    """
    report = workdir / f"{part}.xml"
    env = {k: v for k, v in os.environ.items() if k not in (handle.ENV, parts.AFTER_PARALLEL)}
    if attached is not None:
        env[handle.ENV] = str(attached)
    if after_parallel:
        env[parts.AFTER_PARALLEL] = "1"
    # worksteal: an idle worker takes tests queued on a busy one (the integration tests'
    # lengths differ by 100 times, so a fixed share leaves workers idle at the end).
    concurrent = ["-n", str(workers), "--dist", "worksteal"] if workers > 1 else []
    argv = [sys.executable, "-m", "pytest", "--part", part, *concurrent,
            f"--junitxml={report}", *args]
    print(f"\n=== make test, part {part}: {' '.join(argv[1:])}"
          + (" (its output after the serial part's)" if output else ""), flush=True)
    sink = open(output, "w") if output else None  # noqa: SIM115 - closed in Running.wait
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=sink,
                               stderr=subprocess.STDOUT if sink else None,
                               start_new_session=True)
    running = Running(part=part, process=process, started=time.monotonic(), report=report,
                      output=output, sink=sink)
    LIVE.append(running)
    return running


@dataclass
class Running:
    part: str
    process: subprocess.Popen[bytes]
    started: float
    report: Path
    output: Path | None
    sink: IO[str] | None

    def wait(self) -> Outcome:
        """Its outcome once it ends; a report missing or unreadable fails it."""
        status = self.process.wait()
        seconds = time.monotonic() - self.started
        self.show_output()
        found = counts(self.report)
        if status == NO_TESTS:
            status = 0
        elif found is None:
            print(f"=== make test, part {self.part}: no readable report {self.report} "
                  f"(exit {status})", flush=True)
            status = status or 1
        return Outcome(part=self.part, status=status, seconds=seconds,
                       counts=found or dict.fromkeys((*KEYS, "seconds"), 0))

    def show_output(self) -> None:
        if self.sink is not None and self.output is not None:
            self.sink.close()
            self.sink = None
            print(f"\n=== make test, part {self.part}'s output:", flush=True)
            print(self.output.read_text(), end="", flush=True)

    def stop(self) -> None:
        """Interrupt it (its fixtures tear down: operators stop) and wait; kill what is
        left after :data:`STOP_GRACE` seconds."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(timeout=STOP_GRACE)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        self.show_output()


def stop_parts() -> None:
    """Stop every part still running (interrupted, or the driver failed)."""
    while LIVE:
        LIVE.pop().stop()


@contextlib.contextmanager
def shared_cluster(workdir: Path) -> Iterator[Path]:
    """Start the control plane and node (and the object store on it), prepare them,
    describe them in a file: its path."""
    no_kubelet = os.environ.get("AGENTRUN_TEST_NO_KUBELET") == "1"
    reason = "AGENTRUN_TEST_NO_KUBELET=1" if no_kubelet else ""
    with contextlib.ExitStack() as stack:
        try:
            local, node = stack.enter_context(running(workdir / "cluster", node=not no_kubelet,
                                                      with_store=True))
        except NodeUnavailable as why:  # as the session fixture: the rest still runs
            reason = str(why)
            local, node = stack.enter_context(running(workdir / "cluster", node=False))
        cluster = Cluster(kubeconfig=local.kubeconfig, kind="local",
                          has_kubelet=node is not None, local=local, node=node)
        apply_crds(cluster.client())
        install_for_tests(cluster)
        path = workdir / "cluster.json"
        handle.write(path, cluster=local, node=node, no_kubelet_reason=reason)
        yield path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # A string default goes through `type` too: a bad AGENTRUN_TEST_WORKERS is refused by
    # argparse with its name and value, as a bad --workers is.
    parser.add_argument("--workers", type=int,
                        default=os.environ.get("AGENTRUN_TEST_WORKERS", "4"),
                        help="concurrent workers of the parallel part (default 4, or "
                             "AGENTRUN_TEST_WORKERS)")
    known, rest = parser.parse_known_args(argv)
    if not 1 <= known.workers <= 16:
        parser.error(f"--workers {known.workers}: between 1 and 16")

    def on_signal(signum: int, _frame: object) -> None:
        # The first one ends the run, cleanly: the parts, then the cluster. Later ones
        # are ignored so that they cannot cut that cleanup short.
        for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(each, signal.SIG_IGN)
        raise KeyboardInterrupt

    for each in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(each, on_signal)
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="agentrun-session-"))
    outcomes: list[Outcome] = []
    try:
        with shared_cluster(workdir) as attached:
            try:
                print(f"make test: one cluster for the parallel and serial parts, ready in "
                      f"{time.monotonic() - started:.0f} s", flush=True)
                parallel = start_part("parallel", args=rest, workdir=workdir,
                                      attached=attached, workers=known.workers).wait()
                outcomes.append(parallel)
                unit = start_part("unit", args=rest, workdir=workdir, attached=None,
                                  output=workdir / "unit.out")
                outcomes.append(start_part("serial", args=rest, workdir=workdir,
                                           attached=attached,
                                           after_parallel=parallel.status in (0, 1)).wait())
                outcomes.append(unit.wait())
                LIVE.clear()
            finally:
                stop_parts()  # before the cluster goes from under them
        try:
            outcomes.append(start_part("alone", args=rest, workdir=workdir,
                                       attached=None).wait())
            LIVE.clear()
        finally:
            stop_parts()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    total = {key: sum(o.counts[key] for o in outcomes) for key in KEYS}
    print("\n=== make test: " + "; ".join(
        f"{o.part} {o.counts['tests']} tests in {o.counts['seconds']} s of pytest, "
        f"{o.seconds:.0f} s until waited for (exit {o.status})"
        for o in outcomes))
    print(f"=== make test: {total['tests']} tests, {total['failures']} failed, "
          f"{total['errors']} errors, {total['skipped']} skipped; "
          f"{time.monotonic() - started:.0f} s in all", flush=True)
    return next((o.status for o in outcomes if o.status != 0), 0)


if __name__ == "__main__":
    sys.exit(main())
