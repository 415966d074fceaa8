"""``make faults``' scenarios ``watch-cut`` and ``half-open``: the operator's connections to
the API server, through a fault proxy on loopback, cut (RST and FIN, watches included)
``--watch-cut-cuts`` times, or black-holed (no FIN, no RST) for ``--half-open-seconds``,
more than the lease, then healed, cut or stranded (``--half-open-then``), with
``--*-slots`` workers played by hand (no node: their pods never run; the scenario renews
their leases). ``tests/support/faults/netplay.py`` plays and checks them;
``tests/integration/operator/test_fault_network.py`` is their reduced form.
"""

from __future__ import annotations

import argparse
import sys

from bench.faults.support import Context, Fault, Outcome, bounded, drop, fresh_namespace, seconds
from tests.support.faults import netplay
from tests.support.faults.netfaults import THEN
from tests.support.plays.scenarios import Scenario

MAX_HOLE_SECONDS = 120.0  # bounded: two minutes of partition is a long one already


def add_cut_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--watch-cut-slots", type=bounded(2, 100), default=20,
                        help="watch-cut: slots Active with renewed leases, 2 to 100 "
                             "(default 20)")
    parser.add_argument("--watch-cut-cuts", type=bounded(1, 50), default=5,
                        help="watch-cut: cuts of every connection, 2 s apart, alternately "
                             "RST and FIN, 1 to 50 (default 5)")
    parser.add_argument("--watch-cut-lease", type=bounded(5, 60), default=10,
                        help="watch-cut: the workers' lease, 5 to 60 s (default 10)")


def add_hole_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--half-open-slots", type=bounded(2, 100), default=20,
                        help="half-open: slots Active with renewed leases, 2 to 100 "
                             "(default 20)")
    parser.add_argument("--half-open-lease", type=bounded(5, 60), default=10,
                        help="half-open: the workers' lease, 5 to 60 s (default 10)")
    parser.add_argument("--half-open-seconds", type=float, default=25.0,
                        help="half-open: seconds the connections are black-holed (default "
                             f"25; more than the lease, at most {MAX_HOLE_SECONDS:g})")
    parser.add_argument("--half-open-then", choices=THEN, default="heal",
                        help="half-open: how the hole ends (default heal)")


def check_hole(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.half_open_lease < args.half_open_seconds <= MAX_HOLE_SECONDS:
        parser.error(f"--half-open-seconds must be more than --half-open-lease "
                     f"({args.half_open_lease}) and at most {MAX_HOLE_SECONDS:g}")


def figures(play: netplay.Play) -> str:
    recovered = ("" if play.recovered_after is None and play.cut_connections else
                 f"the let-go lease's slot on attempt 2 {seconds(play.recovered_after)} after "
                 f"the fault's end; ")
    return (f"{play.cut_connections} connections cut of {play.connections} made; a run made "
            f"after the fault claimed (Active) in {seconds(play.served_after)}; {recovered}"
            f"every slot Succeeded {seconds(play.settled_after)} after its worker exited")


def played(context: Context, number: int, *, name: str, slots: int, lease: int, cuts: int,
           hole: float | None = None, then: str = "heal") -> Outcome:
    cluster = context.cluster
    namespace = fresh_namespace(cluster)
    folder = context.workdir / f"{name}-{number}"
    folder.mkdir(parents=True, exist_ok=True)
    try:
        with netplay.operator_behind_proxy(cluster, namespace=namespace,
                                           folder=folder) as (proxy, operator):
            outcome = netplay.play(Scenario(cluster=cluster, namespace=namespace),
                                   proxy=proxy, slots=slots, lease_seconds=lease, cuts=cuts,
                                   black_hole=hole, then=then)
            if not operator.alive:
                outcome.violations.append("the operator exited")
                print(f"the operator had exited:\n{operator.tail(40)}", file=sys.stderr)
        return Outcome(violations=outcome.violations, figures=figures(outcome))
    finally:
        drop(cluster, namespace)


def play_cut(context: Context, number: int) -> Outcome:
    args = context.args
    return played(context, number, name="watch-cut", slots=args.watch_cut_slots,
                  lease=args.watch_cut_lease, cuts=args.watch_cut_cuts)


def play_hole(context: Context, number: int) -> Outcome:
    args = context.args
    return played(context, number, name="half-open", slots=args.half_open_slots,
                  lease=args.half_open_lease, cuts=0, hole=args.half_open_seconds,
                  then=args.half_open_then)


CUT = Fault(name="watch-cut", play=play_cut, bounds="tests/support/faults/netplay.py", node=False,
            add_arguments=add_cut_arguments,
            describe=lambda a: (f"--watch-cut-slots {a.watch_cut_slots} --watch-cut-cuts "
                                f"{a.watch_cut_cuts} --watch-cut-lease {a.watch_cut_lease}"))
HOLE = Fault(name="half-open", play=play_hole, bounds="tests/support/faults/netplay.py", node=False,
             add_arguments=add_hole_arguments, check=check_hole,
             describe=lambda a: (f"--half-open-slots {a.half_open_slots} --half-open-lease "
                                 f"{a.half_open_lease} --half-open-seconds "
                                 f"{a.half_open_seconds:g} --half-open-then "
                                 f"{a.half_open_then}"))
