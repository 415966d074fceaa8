"""``make faults``' scenario ``racing-operators``: two operator processes of the same
install serve one namespace at once (peering off), ``--racing-slots`` slots, pods failed
so retries happen, twice-failed slots reassigned, the workers played by hand (no node).
``tests/support/faults/racing.py`` plays and checks it;
``tests/integration/operator/test_fault_racing.py`` is its reduced form.
"""

from __future__ import annotations

import argparse
import sys

from bench.faults.support import Context, Fault, Outcome, bounded, drop, fresh_namespace, seconds
from tests.support.actors.operators import OperatorProcess
from tests.support.faults import racing
from tests.support.plays.scenarios import Scenario


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--racing-slots", type=bounded(2, 200), default=100,
                        help="racing-operators: slots, 2 to 200 (default 100)")
    parser.add_argument("--racing-lease", type=bounded(5, 60), default=10,
                        help="racing-operators: the workers' lease, 5 to 60 s (default 10)")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    namespace = fresh_namespace(cluster)
    both = [OperatorProcess(cluster=cluster, namespace=namespace,
                            log=context.workdir / f"racing-{number}-operator-{n}.log").start()
            for n in (1, 2)]
    try:
        played = racing.play(Scenario(cluster=cluster, namespace=namespace),
                             slots=args.racing_slots, lease_seconds=args.racing_lease)
        raced = sum(p.log.read_text(errors="replace").count("exists already") for p in both)
        for process in both:
            if not process.alive:
                played.violations.append(f"{process.log.name}: the operator exited")
                print(f"the operator had exited:\n{process.tail(40)}", file=sys.stderr)
        return Outcome(violations=played.violations, figures=(
            f"{raced} creates found the other operator's object first (409, read again); "
            f"every slot Succeeded {seconds(played.settled_after)} after its worker exited"))
    finally:
        for process in both:
            process.stop()
        drop(cluster, namespace)


FAULT = Fault(name="racing-operators", play=play, bounds="tests/support/faults/racing.py",
              add_arguments=add_arguments, node=False,
              describe=lambda a: f"--racing-slots {a.racing_slots} --racing-lease "
                                 f"{a.racing_lease}")
