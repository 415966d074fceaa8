"""``make faults``' scenario ``journal-matrix``: one slot's worker commits 2,000 steps
(100 B to 8 MiB each, 161 MiB in all) into the journal in the cluster's bundled store and
is SIGKILLed from the node after a node object and before its head advance, after a head
advance and before the step returns, halfway through a large payload's PUT, and at
``--journal-matrix-kills`` random points from ``--journal-matrix-seed``; each successor
resumes from exactly what was committed, the 2,000 results end intact, and the store's
listing shows every orphan unreachable (``tests/support/faults/journalmatrix.py`` plays
and checks it; ``journalworker.py`` is the pod's side; ``tests/integration/node/
test_journal.py`` is its reduced form).

The seed, when not given, is drawn at random and printed (in the header's command too),
so any play can be played again; play n of ``--count`` uses seed + n - 1.
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, add_seed, bounded, draw_seed, served
from tests.support.faults import journalmatrix
from tests.support.faults import journalworker as worker


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_seed(parser, scenario="journal-matrix", what="the random kill points")
    parser.add_argument("--journal-matrix-kills", type=bounded(0, 20), default=3,
                        help="journal-matrix: random kill points besides the three named "
                             "ones, 0 to 20 (default 3)")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    draw_seed(args, scenario="journal-matrix")


def figures(played: journalmatrix.Play, seed: int) -> str:
    points: dict[str, str] = {}
    for phase in worker.PHASES:
        of = [k for k in played.kills if k.phase == phase]
        points[phase] = f"{len(of)} ({sum(k.named for k in of)} named)"
    return (f"seed {seed}; {played.distribution}; kills per point: "
            f"{', '.join(f'{p} {n}' for p, n in points.items())}; {played.attempts} "
            f"attempts; {played.seconds:.0f} s wall; store: {played.objects} objects, "
            f"{played.reachable} reachable, {played.orphans} orphans; mid-upload objects: "
            f"{', '.join(played.mid_upload) or '-'}; resume per successor: "
            f"{'; '.join(played.resumes)}; Lease writes: {played.leases}")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.node is not None
    seed = args.journal_matrix_seed + number - 1
    with served(context, log=f"journal-matrix-operator-{number}.log", journal=True) as on:
        played = journalmatrix.play(on.scenario, node=cluster.node, image=context.image,
                                    seed=seed, kills=args.journal_matrix_kills)
        return Outcome(violations=played.violations, figures=figures(played, seed))


FAULT = Fault(name="journal-matrix", play=play, bounds="tests/support/faults/journalmatrix.py",
              add_arguments=add_arguments, check=check, store=True,
              describe=lambda a: (f"--journal-matrix-seed {a.journal_matrix_seed} "
                                  f"--journal-matrix-kills {a.journal_matrix_kills}"))
