"""``make faults``' scenario ``failover``: two elected replicas, the fence in force, the
leader lost ``--failover-kills`` times by SIGKILL, then once paused past its lease, then
once cut off by a half-open connection, all mid-burst of ``--failover-slots`` claims
under ``spec.maxActive`` ``--failover-max-active``; the workers played by hand (no node).
``tests/support/faults/failover.py`` plays and checks it; the figures are the time from a
loss until the new leader's first admitted write (p50, p99, max).
``tests/integration/operator/test_leader_election.py`` holds its reduced forms.
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, bounded, drop, fresh_namespace
from tests.support.faults import failover
from tests.support.plays.scenarios import Scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--failover-slots", type=bounded(10, 500), default=200,
                        help="failover: the burst's claims (slots), 10 to 500 (default 200)")
    parser.add_argument("--failover-max-active", type=bounded(1, 100), default=20,
                        help="failover: the run's spec.maxActive, 1 to 100 (default 20)")
    parser.add_argument("--failover-kills", type=bounded(1, 50), default=20,
                        help="failover: leaders SIGKILLed, 1 to 50 (default 20)")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if args.failover_slots < 2 * (args.failover_kills + 4):
        parser.error(f"--failover-slots {args.failover_slots}: too few for "
                     f"--failover-kills {args.failover_kills} (at least "
                     f"{2 * (args.failover_kills + 4)}: claims go on between two losses)")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    namespace = fresh_namespace(cluster)
    folder = context.workdir / f"failover-{number}"
    folder.mkdir()
    try:
        played = failover.play(Scenario(cluster=cluster, namespace=namespace), folder=folder,
                               slots=args.failover_slots, max_active=args.failover_max_active,
                               kills=args.failover_kills)
    finally:
        drop(cluster, namespace)
    kills = [s for i, s in played.acted_after.items() if played.losses[i].kind == "kill"]
    others = ", ".join(f"{played.losses[i].kind} {s:.1f} s" for i, s in
                       played.acted_after.items() if played.losses[i].kind != "kill")
    said = (f"standby's first write after a SIGKILL: p50 {failover.percentile(kills, 0.5):.1f}"
            f" s, p99 {failover.percentile(kills, 0.99):.1f} s, max {max(kills):.1f} s over "
            f"{len(kills)} kills (p99 by nearest rank: at 20 kills, the max; beside the "
            f"{failover.LEASE_SECONDS} s lease, which a standby waits out from the last "
            "renewal it saw)" if kills else "no kill measured")
    return Outcome(violations=played.violations, figures=(
        f"{said}; {others or 'no pause or half-open measured'}; writes refused by the "
        f"fence (a pod's, after another's fence was in force): {played.refused}; "
        f"{played.claims} claims, at "
        f"most {played.most_busy} slots Claiming or Active at once (maxActive "
        f"{args.failover_max_active})"))


FAULT = Fault(name="failover", play=play, bounds="tests/support/faults/failover.py",
              add_arguments=add_arguments, check=check, node=False,
              section="## Failover",
              describe=lambda a: f"--failover-slots {a.failover_slots} --failover-max-active "
                                 f"{a.failover_max_active} --failover-kills "
                                 f"{a.failover_kills}")
