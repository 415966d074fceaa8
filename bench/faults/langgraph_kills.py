"""``make langgraph-kills``: the scenario ``langgraph-kills``, the example LangGraph agent
on real pods SIGKILLed at ten seeded supersteps and once after its owner applied the
publish, then, where approval is required, asked again for its successor's other words
(``tests/support/faults/langgraphkills.py`` plays and checks it).

Not in ``make faults``' default set (a play takes about 3 min on 2 cores with its
cluster: fourteen worker pods, each importing LangGraph); ``make langgraph-kills`` plays it
alone. The seed, when
not given, is drawn at random and printed (in the header's command too); play n of
``--count`` uses seed + n - 1.
"""

from __future__ import annotations

import argparse

from bench.faults.support import Context, Fault, Outcome, add_seed, draw_seed, served
from tests.support.faults import langgraphkills


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_seed(parser, scenario="langgraph-kills", what="the supersteps killed")


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    draw_seed(args, scenario="langgraph-kills")


def figures(played: langgraphkills.Play, seed: int) -> str:
    return (f"seed {seed}; killed at supersteps {played.targets} and after the publish; "
            f"attempts began at {played.began}, ended at {played.ended}; "
            f"{played.entries} checkpointer records; owner: {played.owner}; approval: "
            f"{played.approval}; "
            f"{played.seconds:.0f} s wall")


def play(context: Context, number: int) -> Outcome:
    cluster, args = context.cluster, context.args
    assert cluster.node is not None
    seed = args.langgraph_kills_seed + number - 1
    with served(context, log=f"langgraph-kills-operator-{number}.log", journal=True) as on:
        played = langgraphkills.play(on.scenario, node=cluster.node, image=context.image,
                                     seed=seed)
        return Outcome(violations=played.violations, figures=figures(played, seed))


FAULT = Fault(name="langgraph-kills", play=play,
              bounds="tests/support/faults/langgraphkills.py", add_arguments=add_arguments,
              check=check, store=True, default=False,
              describe=lambda a: f"--langgraph-kills-seed {a.langgraph_kills_seed}")
