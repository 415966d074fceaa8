"""``make faults``' scenario ``kill-points``: every attempt 1 of ``--kill-points-slots``
slots per interruption point (``before-commit:source-2``, ``after-step:source-2``,
``after-intent:publish``, ``after-call:publish``) SIGKILLed there, attempt 2 completing,
in runs of at most ``--kill-points-batch`` slots at once (``tests/support/faults/killpoints.py``
plays and checks it; ``tests/integration/node/test_fault_kill_points.py`` is its reduced
form).
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, bounded, served
from tests.support.faults import killpoints


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kill-points-slots", type=bounded(1, 50), default=50,
                        help="kill-points: slots per interruption point, 1 to 50 (default 50)")
    parser.add_argument("--kill-points-batch", type=bounded(1, 50), default=25,
                        help="kill-points: slots of one run (pods at once), 1 to 50 "
                             "(default 25)")


def figures(played: killpoints.Play) -> str:
    per = ", ".join(f"{point} {n}" for point, n in played.slots.items())
    slowest = max(played.settled, default=None)
    settled = "-" if slowest is None else f"{slowest:.1f} s"
    return (f"slots killed per point: {per}; {played.applied} keys applied exactly once; "
            f"{len(played.settled)} batches, every slot ended at most {settled} after its "
            f"batch's last kill")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.node is not None
    with served(context, log=f"kill-points-operator-{number}.log") as on:
        played = killpoints.play(on.scenario, node=cluster.node, image=context.image,
                                 owner=on.owner, slots=args.kill_points_slots,
                                 batch=args.kill_points_batch)
        return Outcome(violations=played.violations, figures=figures(played))


FAULT = Fault(name="kill-points", play=play, bounds="tests/support/faults/killpoints.py",
              add_arguments=add_arguments,
              describe=lambda a: (f"--kill-points-slots {a.kill_points_slots} "
                                  f"--kill-points-batch {a.kill_points_batch}"))
