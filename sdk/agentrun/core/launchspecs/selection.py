"""Launch-spec selection: which LaunchSpec starts the next worker of a slot.

A LaunchSpec *lists* a worker class when the class is in ``spec.claim.workerClasses``.
It is *in scope* for a run and node when ``spec.scope.runs`` is empty or names the run,
and ``spec.scope.nodes`` is empty or names the node. Only specs in the slot's own
namespace count: a LaunchSpec never serves another namespace (another tenant).

Among the specs that list the class and are in scope, the most specific wins: runs and
nodes both listed, then one of them, then neither; then the higher priority; then the
name (alphabetically), so the choice is deterministic and explainable. Two failures
are told apart, because a person fixes them differently: *unknown class* (no spec in the
namespace lists it: a typo, or a class nobody provides) and *incompatible* (specs list
it, but none may serve this run and node: a scope to widen).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.slots import Predicate


@dataclass(frozen=True, kw_only=True)
class Choice:
    """The selected spec and a sentence saying why it was chosen."""

    spec: LaunchSpec
    reason: str


@dataclass(frozen=True, kw_only=True)
class NoChoice:
    """No spec can serve: ``predicate`` is UnknownWorkerClass or NoCompatibleLaunchSpec."""

    predicate: Predicate
    message: str


SPECIFICITY = {2: "its scope names both this run and this node",
               1: "its scope names this run or this node",
               0: "its scope covers every run and node"}


def lists_class(spec: LaunchSpec, worker_class: str) -> bool:
    return worker_class in spec.spec.claim.worker_classes


def in_scope(spec: LaunchSpec, *, run: str, node: str) -> bool:
    scope = spec.spec.scope
    return (not scope.runs or run in scope.runs) and (not scope.nodes or node in scope.nodes)


def specificity(spec: LaunchSpec) -> int:
    """2 when the scope lists runs and nodes, 1 when it lists one of them, 0 for neither."""
    return int(bool(spec.spec.scope.runs)) + int(bool(spec.spec.scope.nodes))


def select(
    *, specs: Iterable[LaunchSpec], namespace: str | None, run: str, node: str,
    worker_class: str,
) -> Choice | NoChoice:
    """Choose the LaunchSpec for ``worker_class`` on (run, node), or say why none can serve.

    A spec without a namespace (as in a test's fixture) counts as the slot's own.
    """
    local = [s for s in specs if s.metadata.namespace in (None, namespace)]
    listing = [s for s in local if lists_class(s, worker_class)]
    if not listing:
        return NoChoice(
            predicate=Predicate.UNKNOWN_WORKER_CLASS,
            message=(f"no LaunchSpec in namespace {namespace!r} lists worker class "
                     f"{worker_class!r}; check the class name or add it to a LaunchSpec's "
                     "spec.claim.workerClasses"),
        )
    candidates = [s for s in listing if in_scope(s, run=run, node=node)]
    if not candidates:
        listed = ", ".join(sorted(s.metadata.name for s in listing))
        return NoChoice(
            predicate=Predicate.NO_COMPATIBLE_LAUNCH_SPEC,
            message=(f"LaunchSpecs list worker class {worker_class!r} ({listed}) but none "
                     f"has run {run!r} and node {node!r} in its scope; widen a spec's "
                     "spec.scope"),
        )
    best = min(candidates,
               key=lambda s: (-specificity(s), -s.spec.priority, s.metadata.name))
    others = len(candidates) - 1
    return Choice(
        spec=best,
        reason=(f"LaunchSpec {best.metadata.name!r} lists worker class {worker_class!r}; "
                f"{SPECIFICITY[specificity(best)]}, priority {best.spec.priority}"
                + (f"; preferred over {others} other candidate(s) by scope, priority, name"
                   if others else "")),
    )
