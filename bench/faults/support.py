"""What every ``make faults`` scenario is made of (``bench/faults`` plays them).

A :class:`Fault` is a named scenario: ``add_arguments`` adds its own options (prefixed by
its name, so scenarios never clash), ``play`` plays it once in a fresh namespace of the
shared control plane (a :class:`Context`) and returns an :class:`Outcome`: the violations
of its invariants (empty: none) and one line of figures; ``check`` refuses bad option
values. ``bounds`` names where the
scenario's bounds are stated (a module's constants), for the report.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes

from agentrun.api import names
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import store
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for, wait_for_default_service_account

NAMESPACE_GONE_SECONDS = 120.0


@dataclass
class Context:
    """What a play gets: the control plane with its node, the project image (loaded on
    the node), a folder for its logs, and the parsed command line. Without a node (no
    chosen scenario needs one): ``cluster.node`` is None and ``image`` is empty."""

    cluster: Cluster
    image: str
    workdir: Path
    args: argparse.Namespace


@dataclass
class Outcome:
    """One play: what went wrong (each a line; empty: nothing) and its figures."""

    violations: list[str] = field(default_factory=list)
    figures: str = ""


@dataclass(frozen=True)
class Fault:
    name: str
    play: Callable[[Context, int], Outcome]  # (context, play number from 1)
    bounds: str  # where its bounds are stated, e.g. "tests/support/faults/pausedserver.py"
    add_arguments: Callable[[argparse.ArgumentParser], None] = lambda parser: None
    describe: Callable[[argparse.Namespace], str] = lambda args: ""  # its options, said
    # refuses bad option values with parser.error (a clear message, exit 2)
    check: Callable[[argparse.ArgumentParser, argparse.Namespace], None] = (
        lambda parser, args: None)
    node: bool = True  # needs the node (real pods); when no chosen scenario does, none starts
    # needs the cluster's bundled object store (tests/support/cluster/store.py: the
    # journals' SeaweedFS, with the node only); started only when a chosen scenario does
    store: bool = False
    # played when --scenarios is not given; a long one (journal-scale) has its own target
    default: bool = True
    # the docs/benchmarks.md section --write replaces when only scenarios of this section
    # are played (None: "## Faults", with the others)
    section: str | None = None


def fresh_namespace(cluster: Cluster, *, prefix: str = "faults") -> str:
    core = kubernetes.client.CoreV1Api(cluster.client())
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    body: Any = {"metadata": {"name": name, "labels": {names.TENANT_LABEL: name}}}
    core.create_namespace(body)
    wait_for_default_service_account(cluster.client(), name)
    return name


def drop(cluster: Cluster, namespace: str) -> None:
    """Delete a play's namespace and wait until it is gone: the next play starts clean."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except kubernetes.client.ApiException as error:
            return bool(error.status == 404)
        return False
    wait_for(gone, timeout=NAMESPACE_GONE_SECONDS, message=f"namespace {namespace} gone",
             interval=0.5)


def bounded(low: int, high: int) -> Any:
    """An argparse type: an integer from ``low`` to ``high``, else a clear error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value
    return parse


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


@dataclass
class Served:
    """What a play runs against: its namespace's Scenario, an effect owner on the node
    bridge, and an operator serving the namespace."""

    scenario: Scenario
    owner: EffectOwner
    operator: OperatorProcess


SEED_BOUND = 2**31 - 1


def add_seed(parser: argparse.ArgumentParser, *, scenario: str, what: str) -> None:
    """``--<scenario>-seed``: the seed of ``what`` (default: drawn at random, see
    :func:`draw_seed`)."""
    parser.add_argument(f"--{scenario}-seed", type=bounded(0, SEED_BOUND), default=None,
                        help=f"{scenario}: the seed of {what} (default: drawn at random and "
                             "printed)")


def draw_seed(args: argparse.Namespace, *, scenario: str) -> None:
    """Draw ``--<scenario>-seed`` now when none was given: the header then names the one
    played, so any play can be played again."""
    attribute = f"{scenario.replace('-', '_')}_seed"
    if getattr(args, attribute) is None:
        setattr(args, attribute, random.SystemRandom().randrange(SEED_BOUND))


# the operator's flags that pin the cluster's bundled store (tests/support/cluster/store.py)
JOURNAL_ARGS = ("--journal-endpoint", store.STORE_ENDPOINT, "--journal-bucket", store.BUCKET)


@contextlib.contextmanager
def served(context: Context, *, log: str, env: dict[str, str] | None = None,
           journal: bool = False) -> Iterator[Served]:
    """A fresh namespace with an owner and an operator (``env``: more of its environment;
    ``journal``: pinning the cluster's bundled store on its runs; its log ``log`` in the
    workdir); afterwards the namespace dropped while the operator still serves it (a run
    with a journal holds its finalizer until the operator has deleted the journal: with
    no operator, the namespace would never go), then all stopped."""
    cluster = context.cluster
    assert cluster.local is not None and cluster.local.node_ip
    namespace = fresh_namespace(cluster)
    owner = EffectOwner(host=cluster.local.node_ip).start()
    operator = OperatorProcess(cluster=cluster, namespace=namespace,
                               log=context.workdir / log, env=env,
                               args=JOURNAL_ARGS if journal else ()).start()
    try:
        yield Served(scenario=Scenario(cluster=cluster, namespace=namespace), owner=owner,
                     operator=operator)
    finally:
        alive = operator.alive
        if not alive:
            print(f"the operator had exited:\n{operator.tail(40)}", file=sys.stderr)
        try:
            drop(cluster, namespace)
        finally:
            operator.stop()
            owner.stop()
