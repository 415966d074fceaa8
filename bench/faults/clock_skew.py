"""``make faults``' scenario ``clock-skew``: the operator under libfaketime, its wall clock
``+600s``, stepped to ``-600s`` and back mid-run (the monotonic clock left alone), with
``--clock-skew-slots`` real SDK workers on the node under libfaketime too, their clocks
``-600s`` stepped the other way at the same moments, one of them SIGSTOPped at the end
(``tests/support/faults/clockskew.py`` plays and checks it;
``tests/integration/node/test_fault_clock_skew.py`` is its reduced form).
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, bounded, seconds, served
from tests.support.faults import clockskew, fakeclock


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--clock-skew-slots", type=bounded(2, 40), default=10,
                        help="clock-skew: real worker pods of the first run, 2 to 40 "
                             "(default 10)")
    parser.add_argument("--clock-skew-lease", type=bounded(5, 60), default=10,
                        help="clock-skew: the workers' lease, 5 to 60 s (default 10)")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not fakeclock.LIBFAKETIME.exists():
        parser.error(f"clock-skew needs libfaketime ({fakeclock.LIBFAKETIME}): run "
                     "`make nodedeps`")


def figures(played: clockskew.Play) -> str:
    offsets = ", ".join(f"{m:+d}" for m in sorted(played.worker_offsets))
    return (f"operator clock {' -> '.join(played.steps)}, workers' "
            f"{' -> '.join(played.worker_steps)} (their renewTime seen at {offsets} min); "
            f"the later attempt unrenewed at the forward step: {played.unrenewed_at_step}; "
            f"a stopped worker's slot had attempt 2 {seconds(played.recovered_after)} after "
            f"the stop; every slot Succeeded {seconds(played.settled_after)} after the word "
            "to finish")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.node is not None
    timestamp = context.workdir / f"clock-skew-{number}.faketime"
    timestamp.write_text(clockskew.SKEW + "\n")
    with served(context, log=f"clock-skew-operator-{number}.log",
                env=clockskew.operator_env(timestamp)) as on:
        played = clockskew.play(on.scenario, node=cluster.node, image=context.image,
                                owner=on.owner, timestamp_file=timestamp,
                                slots=args.clock_skew_slots, lease_seconds=args.clock_skew_lease)
        return Outcome(violations=played.violations, figures=figures(played))


FAULT = Fault(name="clock-skew", play=play, bounds="tests/support/faults/clockskew.py",
              add_arguments=add_arguments, check=check,
              describe=lambda a: (f"--clock-skew-slots {a.clock_skew_slots} "
                                  f"--clock-skew-lease {a.clock_skew_lease}"))
