"""``make journal-scale``: the scenario ``journal-scale``, a slot at an agent's scale on
real pods: 20,000 group-committed steps (552 MiB of results, 100 B to 10 MiB each) and a
2 GiB artifact streamed between them, into the cluster's bundled store; its worker is
SIGKILLed inside a group-commit window before the artifact, halfway through one of the
artifact's parts, and inside a window after it, at points drawn from
``--journal-scale-seed``; each successor resumes from exactly what was durable, the
results and the artifact end intact, RSS while streaming stays within 64 MiB of the RSS
with a 10 MiB result (``tests/support/faults/journalscale.py`` plays and checks it;
``scaleworker.py`` is the pod's side).

Not in ``make faults``' default set (it moves about 5 GiB through the store: a play takes
about 3 min on 2 cores, 4 with the cluster); ``make journal-scale`` plays it alone. The
seed, when not given, is drawn at random and printed (in the header's command too); play
n of ``--count`` uses seed + n - 1.
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, add_seed, draw_seed, served
from tests.support.faults import journalscale


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_seed(parser, scenario="journal-scale", what="the kill points")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    draw_seed(args, scenario="journal-scale")


def figures(played: journalscale.Play, seed: int) -> str:
    return (f"seed {seed}; {played.distribution}; {played.seconds:.0f} s wall; attempts: "
            f"{'; '.join(played.said)}; artifact: {'; '.join(played.artifact)}; RSS: "
            f"{'; '.join(played.rss)}; store: {played.store}; Lease writes: {played.leases}")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.node is not None
    seed = args.journal_scale_seed + number - 1
    with served(context, log=f"journal-scale-operator-{number}.log", journal=True) as on:
        played = journalscale.play(on.scenario, node=cluster.node, image=context.image,
                                   seed=seed)
        return Outcome(violations=played.violations, figures=figures(played, seed))


FAULT = Fault(name="journal-scale", play=play, bounds="tests/support/faults/journalscale.py",
              add_arguments=add_arguments, check=check, store=True, default=False,
              describe=lambda a: f"--journal-scale-seed {a.journal_scale_seed}")
