"""``make faults``: fault scenarios played against the operator, counted, not timed.

On a local control plane of its own WITH its node (``tests/support/cluster/localnode.running``:
the node's lock is held, so it waits for no other node but fails fast if one runs; no
node when none of the chosen scenarios needs one, ``Fault.node``; the bundled object
store only when one needs it, ``Fault.store``), with
agentrun installed as the tests install it, each scenario of :data:`FAULTS` (or of
``--scenarios``) is played ``--count`` times, each play in a fresh namespace, and its
invariants checked after it (the scenario's module says which). It prints a table
scenario x count x violations, the violations themselves, and each play's figures, and
stops by itself:

    make faults                                     # every usual scenario, --count 1
    make journal-scale                              # the long one, alone
    .venv/bin/python -m bench.faults --count 1 --scenarios paused-apiserver --slots 4
    .venv/bin/python -m bench.faults --write docs/benchmarks.md   # also that file's section

A scenario is a :class:`support.Fault` in a module ``bench/faults/<name>.py``, listed in
:data:`FAULTS`; those not ``default`` are played only when named. Nothing is written to
the repository unless ``--write`` names a file; there the section ``## Faults`` (or the
chosen scenarios' own, ``Fault.section``: ``## Failover``) is replaced (or appended), with
the machine, the commit and the date. The exit status is 1
when any play had a violation.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common.provenance import machine_commit_date
from bench.common.report import write_section
from bench.faults import clock_skew as fault_clock_skew
from bench.faults import failover as fault_failover
from bench.faults import journal_matrix as fault_journal_matrix
from bench.faults import journal_scale as fault_journal_scale
from bench.faults import kill_points as fault_kill_points
from bench.faults import langgraph_kills as fault_langgraph_kills
from bench.faults import network as fault_network
from bench.faults import paused as fault_paused
from bench.faults import racing as fault_racing
from bench.faults.support import Context, Fault, Outcome
from tests.support.actors.operators import install_crds, install_for_tests
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.images import project_image
from tests.support.cluster.localnode import running

REPO = Path(__file__).resolve().parents[2]
SECTION = "## Faults"
FAULTS: tuple[Fault, ...] = (fault_paused.FAULT, fault_network.CUT, fault_network.HOLE,
                             fault_racing.FAULT, fault_clock_skew.FAULT,
                             fault_kill_points.FAULT, fault_journal_matrix.FAULT,
                             fault_journal_scale.FAULT, fault_langgraph_kills.FAULT,
                             fault_failover.FAULT)


@dataclass
class Tally:
    """One scenario's plays."""

    fault: Fault
    plays: list[Outcome] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return sum(len(p.violations) for p in self.plays)


def table(tallies: list[Tally]) -> str:
    lines = ["| scenario | count | violations |", "| --- | ---: | ---: |"]
    lines += [f"| {t.fault.name} | {len(t.plays)} | {t.violations} |" for t in tallies]
    lines.append("")
    for tally in tallies:
        for number, play in enumerate(tally.plays, 1):
            lines.append(f"- {tally.fault.name} #{number}: {play.figures}")
            lines += [f"  - violation: {v}" for v in play.violations]
    return "\n".join(lines)


def section(chosen: list[Fault]) -> str:
    """Where --write puts the table: the chosen scenarios' own section when they share
    one, else :data:`SECTION`."""
    own = {f.section for f in chosen}
    shared = own.pop() if len(own) == 1 else None
    return shared or SECTION


def load() -> str:
    return "/".join(f"{x:.2f}" for x in os.getloadavg())


def header(args: argparse.Namespace, chosen: list[Fault], *, loads: tuple[str, str]) -> str:
    said = " ".join(f"{f.describe(args)}" for f in chosen if f.describe(args))
    names = ",".join(f.name for f in chosen)
    bounds = ", ".join(f"{f.name}: `{f.bounds}`" for f in chosen)
    return (f"{section(chosen)}\n\n{machine_commit_date()} Made by `python -m bench.faults --count "
            f"{args.count} --scenarios {names}{' ' + said if said else ''}` (`make faults`) "
            f"on a local control plane{' with its node' if any(f.node for f in chosen) else ''}"
            f"; load average (1/5/15 min) {loads[0]} before, {loads[1]} after; the bounds are "
            f"stated in {bounds}.\n")


def install(cluster: Cluster) -> None:
    install_crds(cluster.kubectl)
    install_for_tests(cluster)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, choices=range(1, 51), default=1,
                        metavar="{1..50}", help="plays of each scenario (default 1)")
    known = ", ".join(f.name for f in FAULTS)
    usual = ",".join(f.name for f in FAULTS if f.default)
    parser.add_argument("--scenarios", default=usual,
                        help=f"comma-separated scenarios to play, of {known} (default: "
                             f"{usual})")
    parser.add_argument("--write", type=Path, default=None,
                        help="also replace (or append) the '## Faults' section of this file")
    for fault in FAULTS:
        fault.add_arguments(parser)
    args = parser.parse_args(argv)
    by_name = {f.name: f for f in FAULTS}
    wanted = [n.strip() for n in args.scenarios.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in by_name]
    if unknown or not wanted:
        parser.error(f"--scenarios: unknown {unknown or 'none given'}; known: {known}")
    chosen = [by_name[n] for n in dict.fromkeys(wanted)]
    for fault in chosen:
        fault.check(parser, args)
    started, before = time.monotonic(), load()
    tallies = [Tally(fault=f) for f in chosen]
    with tempfile.TemporaryDirectory(prefix="agentrun-faults-") as folder:
        workdir = Path(folder)
        with running(workdir / "cluster", node=any(f.node for f in chosen),
                     with_store=any(f.store for f in chosen)) as (local, node):
            cluster = Cluster(kubeconfig=local.kubeconfig, kind="local",
                              has_kubelet=node is not None, local=local, node=node)
            install(cluster)
            image = ""
            if node is not None:
                archive = project_image()
                node.load_image(archive.path)
                image = archive.ref
            context = Context(cluster=cluster, image=image, workdir=workdir, args=args)
            for tally in tallies:
                for number in range(1, args.count + 1):
                    outcome = tally.fault.play(context, number)
                    tally.plays.append(outcome)
                    print(f"{tally.fault.name} #{number}: {len(outcome.violations)} "
                          f"violations; {outcome.figures}", flush=True)
    text = header(args, chosen, loads=(before, load())) + "\n" + table(tallies) + "\n"
    print(f"\n{text}\n({time.monotonic() - started:.0f} s in all)")
    if args.write is not None:
        write_section(args.write, heading=section(chosen), text=text)
    return 1 if any(t.violations for t in tallies) else 0


if __name__ == "__main__":
    sys.exit(main())
