"""Launch-spec selection: most specific scope, then priority, then name; and why."""

from __future__ import annotations

from agentrun.api.slots import Predicate
from agentrun.core.launchspecs import selection
from tests.unit.core import corefakes as f


def pick(*specs: object, worker_class: str = "gpu") -> str:
    chosen = selection.select(specs=specs, namespace=f.NS, run=f.RUN, node=f.NODE,  # type: ignore[arg-type]
                              worker_class=worker_class)
    assert isinstance(chosen, selection.Choice), chosen
    return chosen.spec.metadata.name


def test_most_specific_scope_wins_over_priority() -> None:
    both = f.launch_spec("both", classes=["gpu"], runs=[f.RUN], nodes=[f.NODE], priority=-5)
    runs = f.launch_spec("runs", classes=["gpu"], runs=[f.RUN], priority=500)
    nodes = f.launch_spec("nodes", classes=["gpu"], nodes=[f.NODE], priority=500)
    open_ = f.launch_spec("open", classes=["gpu"], priority=1000)
    assert pick(open_, runs, both, nodes) == "both"
    assert pick(open_, runs) == "runs"
    assert pick(open_, nodes) == "nodes"
    assert pick(open_) == "open"


def test_then_priority_then_name() -> None:
    assert pick(f.launch_spec("b", classes=["gpu"], priority=1),
                f.launch_spec("a", classes=["gpu"])) == "b"
    assert pick(f.launch_spec("b", classes=["gpu"]), f.launch_spec("a", classes=["gpu"])) == "a"


def test_other_namespaces_never_serve() -> None:
    foreign = f.launch_spec("foreign", classes=["gpu"], namespace="team-b")
    chosen = selection.select(specs=[foreign], namespace=f.NS, run=f.RUN, node=f.NODE,
                              worker_class="gpu")
    assert isinstance(chosen, selection.NoChoice)
    assert chosen.predicate is Predicate.UNKNOWN_WORKER_CLASS


def test_unknown_versus_incompatible() -> None:
    wrong_node = f.launch_spec("elsewhere", classes=["gpu"], nodes=["other-node"])
    unknown = selection.select(specs=[wrong_node], namespace=f.NS, run=f.RUN, node=f.NODE,
                               worker_class="tpu")
    incompatible = selection.select(specs=[wrong_node], namespace=f.NS, run=f.RUN, node=f.NODE,
                                    worker_class="gpu")
    assert isinstance(unknown, selection.NoChoice)
    assert isinstance(incompatible, selection.NoChoice)
    assert unknown.predicate is Predicate.UNKNOWN_WORKER_CLASS
    assert incompatible.predicate is Predicate.NO_COMPATIBLE_LAUNCH_SPEC
    assert "elsewhere" in incompatible.message


def test_choice_says_why() -> None:
    chosen = selection.select(specs=[f.launch_spec("x", classes=["gpu"], runs=[f.RUN]),
                                     f.launch_spec("y", classes=["gpu"])],
                              namespace=f.NS, run=f.RUN, node=f.NODE, worker_class="gpu")
    assert isinstance(chosen, selection.Choice)
    assert "'x'" in chosen.reason and "names this run or this node" in chosen.reason
    assert "1 other candidate" in chosen.reason
