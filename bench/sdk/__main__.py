"""Benchmark: what a worker image installs and imports for the SDK, beside the operator's.

Fresh virtualenvs, each installed with no index from the same wheels (the project's two,
built here by ``pip wheel``, whose build backend pip may fetch, and their dependencies'
from the image build's wheel cache,
:func:`tests.support.cluster.images.dependency_wheels`): an empty one (what ``python -m
venv`` holds: pip and setuptools), the worker SDK alone (``agentrun-worker``), the
operator's distribution (``agentrun-operator``, which brings the SDK), and with each
``--before REF`` what a worker image installed at that git commit: the SDK's distribution
there, or the operator's at a commit from before the SDK was a distribution of its own.
For each: the megabytes its packages add to ``site-packages`` (bytecode included: pip
compiles it at install), how many distributions, the time of ``from agentrun.worker import
Worker`` in a new interpreter, and the time of ``agentrun-worker ready`` (the sidecar's
startup probe, run in the sidecar's container every second while it starts; here with
nothing listening, so it exits 1), each the least of :data:`RUNS`, less a bare
interpreter's least. A benchmark prints figures, it is never a test:

    make bench-sdk
    .venv/bin/python -m bench.sdk --before 9171881 --before 9b242ab --out /tmp/benchmarks.md
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from tests.support.cluster import images

SECTION = "## The worker SDK's install and import (bench/sdk)"
REPO = Path(__file__).resolve().parents[2]
RUNS = 9
IMPORT = "from agentrun.worker import Worker"
# The probe as the console script runs it, against a port where nothing listens.
PROBE = ("import sys; from agentrun.worker.cli import main; "
         "sys.exit(main(['ready', '--port', '1099']) != 1)")
HEAVY = ("kubernetes", "kopf", "aiohttp", "prometheus_client", "cryptography")


def run(*args: str) -> str:
    return subprocess.run(args, check=True, capture_output=True, text=True).stdout


def venv(where: Path, *requirements: str, links: list[Path]) -> Path:
    """A fresh virtualenv at ``where`` with ``requirements`` installed offline."""
    run(sys.executable, "-m", "venv", str(where))
    python = where / "bin" / "python"
    if requirements:
        run(str(python), "-m", "pip", "install", "--quiet", "--no-index",
            "--disable-pip-version-check",
            *(f"--find-links={link}" for link in links), *requirements)
    return python


def kib(python: Path) -> int:
    site = run(str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    return int(run("du", "-s", "--block-size=1K", site.strip()).split()[0])


def distributions(python: Path) -> set[str]:
    listed = run(str(python), "-m", "pip", "list", "--format=freeze",
                 "--disable-pip-version-check")
    return {line.split("==")[0].lower() for line in listed.splitlines() if line}


def least_seconds(python: Path, code: str) -> float:
    took = []
    for _ in range(RUNS):
        began = time.perf_counter()
        subprocess.run([str(python), "-c", code], check=True)
        took.append(time.perf_counter() - began)
    return min(took)


def probe_seconds(python: Path) -> float:
    """:data:`PROBE`'s least, or NaN for a distribution without ``agentrun-worker ready``."""
    try:
        return least_seconds(python, PROBE)
    except subprocess.CalledProcessError:
        return float("nan")


def wheels(out: Path, *sources: Path) -> Path:
    for source in sources:
        run(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
            "--disable-pip-version-check", "--wheel-dir", str(out), str(source))
    return out


Row = tuple[str, float, int, float, float, list[str]]


def measure(work: Path, *, before: list[str]) -> list[Row]:
    dependencies = images.dependency_wheels()
    now = [wheels(work / "built", REPO / "sdk", REPO), dependencies]
    installs = [("agentrun-worker (the SDK)", "agentrun-worker", now),
                ("agentrun-operator (the operator, with the SDK)", "agentrun-operator", now)]
    for index, ref in enumerate(before):
        tree = work / f"before-tree-{index}"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(REPO), "archive", ref],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        if (tree / "sdk" / "pyproject.toml").exists():  # the SDK was its own distribution
            built = wheels(work / f"before-{index}", tree / "sdk")
            installs.append((f"agentrun-worker at {ref}", "agentrun-worker",
                             [built, dependencies]))
        else:
            built = wheels(work / f"before-{index}", tree)
            installs.append((f"agentrun-operator at {ref} (before the split)",
                             "agentrun-operator", [built, dependencies]))
    empty = venv(work / "empty", links=[dependencies])
    base_kib, base_dists = kib(empty), distributions(empty)
    rows = []
    for index, (name, requirement, links) in enumerate(installs):
        python = venv(work / f"venv-{index}", requirement, links=links)
        bare = least_seconds(python, "pass")
        heavy = sorted(module for module in HEAVY if run(
            str(python), "-c", f"import importlib.util as u; print(u.find_spec({module!r}) "
            "is not None)").strip() == "True")
        rows.append((name, (kib(python) - base_kib) / 1024,
                     len(distributions(python) - base_dists),
                     least_seconds(python, IMPORT) - bare, probe_seconds(python) - bare,
                     heavy))
    return rows


def table(rows: list[Row]) -> str:
    lines = ["| installed | adds to site-packages | distributions | `" + IMPORT + "` | "
             "`agentrun-worker ready` | of kubernetes, kopf, aiohttp, prometheus_client, "
             "cryptography |",
             "|---|---:|---:|---:|---:|---|"]
    lines += [f"| {name} | {mib:.1f} MiB | {count} | {seconds * 1000:.0f} ms | "
              f"{'-' if math.isnan(probe) else f'{probe * 1000:.0f} ms'} | "
              f"{', '.join(heavy) or 'none'} |"
              for name, mib, count, seconds, probe, heavy in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.sdk")
    parser.add_argument("--out", type=Path, default=BENCHMARKS)
    parser.add_argument("--before", metavar="REF", action="append", default=[],
                        help="also what a worker image installed at this git commit "
                             "(repeatable)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="agentrun-bench-sdk-") as work:
        rows = measure(Path(work), before=args.before)
    text = "\n\n".join([
        SECTION,
        f"{machine_commit_date()} Made by `python -m bench.sdk` (`make bench-sdk`): fresh "
        "virtualenvs, each installed with no index from the same wheels.",
        table(rows),
        f"Load average (1 min) {load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end, "
        f"on {os.cpu_count()} cores. Size: what the installed packages add to an empty "
        f"virtualenv's site-packages, bytecode included. Import and probe: the least of {RUNS} "
        "new interpreters, less a bare interpreter's least (the probe with nothing listening "
        "on its port: the time to start and load, not the sidecar's answer)."])
    print(text)
    write_section(args.out, heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
