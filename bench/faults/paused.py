"""``make faults``' scenario ``paused-apiserver``: the API server (with its etcd)
SIGSTOPped for ``--pause`` seconds, longer than the ``--lease``, then SIGCONTed, with
``--slots`` real SDK workers on the node (``tests/support/faults/pausedserver.py`` plays and
checks it; ``tests/integration/node/test_fault_paused_apiserver.py`` is its reduced form).
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, bounded, seconds, served
from tests.support.faults import pausedserver
from tests.support.faults.processfaults import apiserver

# Kubernetes 1.37's node-monitor grace period is 50 s: a longer pause would also have the
# node marked NotReady (another scenario); keep a margin for the kubelet's next report.
MAX_PAUSE_SECONDS = 40.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--slots", type=bounded(1, 40), default=10,
                        help="paused-apiserver: real worker pods per play, 1 to 40 (default 10)")
    parser.add_argument("--lease", type=bounded(5, 60), default=10,
                        help="paused-apiserver: the workers' lease, 5 to 60 s (default 10)")
    parser.add_argument("--pause", type=float, default=25.0,
                        help="paused-apiserver: seconds the API server stays stopped (default "
                             "25; more than the lease, under the node-monitor grace period)")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.lease < args.pause <= MAX_PAUSE_SECONDS:
        parser.error(f"--pause must be more than --lease ({args.lease}) and at most "
                     f"{MAX_PAUSE_SECONDS:g} s (under the node-monitor grace period, 50 s)")


def figures(play: pausedserver.Play) -> str:
    paused = seconds(play.pause.seconds if play.pause else None)
    return (f"paused {paused}; every lease renewed {seconds(play.renewed_after)} after the "
            f"resume; a run made after it claimed (Active) in {seconds(play.served_after)}; "
            f"every slot Succeeded {seconds(play.settled_after)} after the word to finish; "
            f"{play.lapsed} workers' keepers lapsed (effects paused) and resumed; an "
            f"attempt not yet renewed (start deadline {pausedserver.STARTING_DEADLINE} s) "
            f"{seconds(play.unblind_at_pause)} old at the pause renewed "
            f"{seconds(play.begun_after)} after the word to begin")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.local is not None
    with served(context, log=f"paused-operator-{number}.log") as on:
        played = pausedserver.play(on.scenario, apiserver=apiserver(cluster.local),
                                   image=context.image, owner=on.owner, slots=args.slots,
                                   lease_seconds=args.lease, pause_seconds=args.pause)
        return Outcome(violations=played.violations, figures=figures(played))


FAULT = Fault(name="paused-apiserver", play=play, bounds="tests/support/faults/pausedserver.py",
              add_arguments=add_arguments, check=check,
              describe=lambda a: f"--slots {a.slots} --lease {a.lease} --pause {a.pause:g}")
