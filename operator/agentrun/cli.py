"""``agentrun-operator``: run the operator in the foreground.

``agentrun-operator run [--context NAME] [--namespace GLOB ...] [--tick SECONDS]`` starts
Kopf with the handlers of :mod:`agentrun.controller.handlers`, peering off (one replica),
JSON logs on stderr. Without ``--namespace`` it watches every namespace.

``agentrun-operator stamping [--context NAME] [--timeout SECONDS]`` mints the stamping
epoch when due and waits until actor stamping is in force (exit 0), else prints why not
(exit 1): for install scripts and tests that need commands trusted before the operator runs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from types import SimpleNamespace

import kopf

from agentrun.controller import handlers
from agentrun.controller import stamping as stamping_keeper
from agentrun.kube import clients, reads, rest, writes


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentrun-operator", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the operator in the foreground")
    run.add_argument("--context", help="kubeconfig context (default: current, else in-cluster)")
    run.add_argument("--namespace", "-n", action="append", default=[],
                     help="namespace name or glob to serve (repeatable; default: all)")
    run.add_argument("--tick", type=float, default=1.0,
                     help="seconds between timer-loop passes (lease and deadline checks)")
    run.add_argument("--verbose", "-v", action="store_true")
    stamp = sub.add_parser("stamping", help="mint the stamping epoch when due; wait until "
                                            "actor stamping is in force")
    stamp.add_argument("--context", help="kubeconfig context (default: current, else in-cluster)")
    stamp.add_argument("--timeout", type=float, default=60.0)
    return parser.parse_args(argv)


def stamping(*, context: str | None, timeout: float) -> int:
    api = clients.configure(context=context)
    client = rest.Rest(api)
    keeper = stamping_keeper.Keeper(reader=reads.Reader(client), writer=writes.Writer(client),
                                    logger=logging.getLogger("agentrun"))
    found = keeper.until_in_force(timeout=timeout)
    if found.epoch is None:
        print(f"actor stamping is not in force: {found.problem}", file=sys.stderr)
        return 1
    print("actor stamping is in force")
    return 0


def configure_logging(*, verbose: bool) -> None:
    """JSON logs through Kopf's own formatter (it knows the object references it attaches).

    Kopf's per-event "handler succeeded" lines are noise at this operator's event rate: its
    loggers stay at WARNING unless ``--verbose``; ours report every transition at INFO.
    """
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON)
    logging.getLogger().setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("kubernetes").setLevel(logging.WARNING)
    logging.getLogger("urllib3").setLevel(logging.WARNING)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.command == "stamping":
        configure_logging(verbose=False)
        return stamping(context=args.context, timeout=args.timeout)
    configure_logging(verbose=args.verbose)
    memo = SimpleNamespace(context=args.context, tick=args.tick)
    asyncio.run(kopf.operator(
        registry=handlers.registry(),
        standalone=True,
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        memo=kopf.Memo(vars(memo)),
    ))
    return 0


if __name__ == "__main__":
    sys.exit(main())
