"""The LangGraph checkpointer over real attempt Leases (pod-bound tokens, shipped policies)
and a real store (a loopback SeaweedFS, the cluster store's binary).

No operator and no node: the admin plays the operator (tests/integration/operator/
test_worker_records.py's ``Attempt``). Covers:

- LangGraph's own conformance suite (``langgraph-checkpoint-conformance``) against the
  production ``JournalSaver``, no capability skipped: each capability's suite on a fresh
  attempt whose predecessor was tombstoned, so every suite after the first runs over a
  saver that replayed all the suites before it from the journal; every base and extended
  capability passes, and a last successor lists every thread exactly as the last suite's
  saver left it;
- a stale attempt's checkpoint write, while its successor runs, raises ``LeaseLost`` and
  is never visible to the successor nor to the one after it;
- a real ``StateGraph`` whose attempt dies at its third node: its successor resumes from
  the last committed superstep (the two nodes before run once in all) and finishes.
"""

from __future__ import annotations

import asyncio
import itertools
import operator
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.checkpoint.base import CheckpointTuple
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.report import ProgressCallbacks
from langgraph.graph import END, START, StateGraph

from agentrun.objectstore import ObjectStore
from agentrun.worker import LeaseLost
from agentrun.worker import _journal as journal
from agentrun.worker._sdk import Worker
from agentrun.worker.langgraph import JournalSaver
from tests.integration.operator import test_worker_records as worker_records
from tests.integration.operator.test_worker_records import Attempt, worker_of
from tests.support.s3fixtures import endpoint

pytestmark = pytest.mark.serial
attempts = worker_records.attempts
__all__ = ["attempts", "endpoint"]  # fixtures this module takes from others


@pytest.fixture
def location(endpoint: str) -> journal.Location:
    bucket = f"lg-{uuid.uuid4().hex[:12]}"
    ObjectStore(endpoint=endpoint, bucket=bucket, credentials=lambda: None).ensure_bucket()
    return journal.Location(endpoint=endpoint, bucket=bucket, prefix="agentrun/ns/uid")


class Attempts:
    """The slot's attempts one after another: each next one made once its predecessor's
    worker stopped (its staged entries durable) and its Lease was tombstoned."""

    def __init__(self, make: Callable[[int], Attempt], location: journal.Location,
                 tmp_path: Path) -> None:
        self.make, self.location, self.tmp_path = make, location, tmp_path
        self.live: tuple[Attempt, Worker] | None = None
        self.number = 0

    def next(self) -> Worker:
        if self.live is not None:
            attempt, worker = self.live
            worker.stop()
            attempt.tombstone()
        self.number += 1
        attempt = self.make(self.number)
        worker = worker_of(attempt, self.tmp_path)
        worker.journal = self.location
        self.live = (attempt, worker)
        return worker


def seen(found: list[CheckpointTuple]) -> list[tuple[Any, ...]]:
    """What a listing says, comparable across savers."""
    return [(t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
            for t in found]


async def test_langgraphs_conformance_suite_passes_on_the_journal_every_capability(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    slot = Attempts(attempts, location, tmp_path)
    savers: list[JournalSaver] = []

    @checkpointer_test(name="JournalSaver")
    async def fresh() -> AsyncIterator[JournalSaver]:
        worker = await asyncio.to_thread(slot.next)
        saver = JournalSaver(worker)
        savers.append(saver)
        yield saver

    assert fresh.skip_capabilities == set()
    with capsys.disabled():  # the report in make test's output, passed or not
        report = await validate(fresh, progress=ProgressCallbacks.verbose())
        report.print_report()
    assert report.passed_all(), {c: r.failures for c, r in report.results.items()}
    assert all(r.detected and r.passed for r in report.results.values()), report.results
    assert len(savers) == 8  # a fresh attempt for each capability's suite

    last = savers[-1]
    successor = JournalSaver(await asyncio.to_thread(slot.next))
    before = seen([t async for t in last.alist(None)])
    assert len(before) > 50  # what the suites left, every thread
    assert seen([t async for t in successor.alist(None)]) == before
    slot.next().stop()  # the successor's worker stopped, its Lease tombstoned


def test_a_stale_attempts_checkpoint_write_is_refused_and_never_seen(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    first = attempts(1)
    worker = worker_of(first, tmp_path)
    worker.journal = location
    stale = JournalSaver(worker)
    config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
    graph = counting_graph(stale, calls=[], fail_at=None)
    graph.invoke({"steps": []}, config, durability="sync")
    committed = stale.get_tuple(config)
    assert committed is not None
    first.tombstone()  # the operator ended attempt 1; its pod (and token) are still there

    second = attempts(2)
    successor_worker = worker_of(second, tmp_path)
    successor_worker.journal = location
    successor = JournalSaver(successor_worker)
    assert seen([successor.get_tuple(config)]) == seen([committed])  # type: ignore[list-item]
    late = dict(committed.checkpoint, id=str(uuid.uuid4()))
    with pytest.raises(LeaseLost, match=r"agentrun-attempt-leases.*tombstoned"):
        stale.put(committed.config, late, {"source": "loop", "step": 99}, {})
    assert stale.get_tuple(config) == committed  # not applied in the stale attempt either
    successor.put(committed.config, dict(committed.checkpoint, id=str(uuid.uuid4())),
                  {"source": "loop", "step": 4}, {})
    successor_worker.stop()
    second.tombstone()

    third = worker_of(attempts(3), tmp_path)
    third.journal = location
    ids = [t.config["configurable"]["checkpoint_id"] for t in JournalSaver(third).list(config)]
    assert late["id"] not in ids and len(ids) == len(list(successor.list(config)))
    third.stop()


class State(TypedDict):
    steps: Annotated[list[str], operator.add]


def chained(saver: JournalSaver, nodes: dict[str, Callable[[Any], Any]],
            state: type = dict) -> Any:
    """START -> each of ``nodes`` in order -> END, compiled with ``saver``."""
    builder = StateGraph(state)
    for name, run in nodes.items():
        builder.add_node(name, run)
    order = [START, *nodes, END]
    for before, after in itertools.pairwise(order):
        builder.add_edge(before, after)
    return builder.compile(checkpointer=saver)


def counting_graph(saver: JournalSaver, *, calls: list[str], fail_at: str | None) -> Any:
    """plan -> act -> check -> write; each node counts its calls and ``fail_at`` raises
    (the attempt dies there)."""
    def node(name: str) -> Callable[[State], dict[str, list[str]]]:
        def run(state: State) -> dict[str, list[str]]:
            calls.append(name)
            if name == fail_at:
                raise RuntimeError(f"attempt died in {name}")
            return {"steps": [name]}
        return run

    return chained(saver, {name: node(name) for name in ["plan", "act", "check", "write"]},
                   State)


def test_a_graph_resumes_in_the_next_attempt_from_its_last_committed_superstep(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    slot = Attempts(attempts, location, tmp_path)
    config = {"configurable": {"thread_id": "agent"}}
    calls: list[str] = []
    graph = counting_graph(JournalSaver(slot.next()), calls=calls, fail_at="check")
    with pytest.raises(RuntimeError, match="attempt died in check"):
        graph.invoke({"steps": []}, config, durability="sync")
    assert calls == ["plan", "act", "check"]

    graph = counting_graph(JournalSaver(slot.next()), calls=calls, fail_at=None)
    assert graph.get_state(config).next == ("check",)  # what the successor resumes at
    assert graph.invoke(None, config, durability="sync") == {
        "steps": ["plan", "act", "check", "write"]}
    assert calls == ["plan", "act", "check", "check", "write"]  # plan and act ran once
    slot.next().stop()


def test_bad_input_is_refused_before_anything_is_committed(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    slot = Attempts(attempts, location, tmp_path)
    saver = JournalSaver(slot.next())
    graph = counting_graph(saver, calls=[], fail_at=None)
    config = {"configurable": {"thread_id": 42}}  # a number, as LangGraph's savers take it
    graph.invoke({"steps": []}, config, durability="sync")
    assert slot.live is not None
    head = slot.live[0].lease()["metadata"]["annotations"][journal.HEAD]
    committed = saver.get_tuple(config)
    assert committed is not None
    late = dict(committed.checkpoint, id=str(uuid.uuid4()))
    long = {"configurable": {"thread_id": "42", "checkpoint_ns": "",
                             "checkpoint_id": "c" * 1025}}
    for refused, message in [
            (lambda: saver.put(long, late, {}, {}), "parent is 1025 characters"),
            (lambda: saver.put(committed.config, late, {}, {"ch": True}), "version must be"),
            (lambda: saver.put_writes(committed.config, [("c" * 257, 1)], "task"), "at most 256"),
            (lambda: saver.prune("42", strategy="delete"), "not one string"),
            (lambda: saver.delete_for_runs(["r"] * 1001), "more than 1000"),
            (lambda: saver.prune(["42"], strategy="all"), "one of keep_latest, delete")]:
        with pytest.raises(ValueError, match=message):
            refused()
    assert slot.live[0].lease()["metadata"]["annotations"][journal.HEAD] == head  # nothing
    successor = JournalSaver(slot.next())
    assert seen(list(successor.list(config))) == seen(list(saver.list(config)))
    successor.delete_thread(42)
    assert successor.get_tuple(config) is None
    slot.next().stop()


def test_a_group_committed_put_is_durable_at_the_flush_and_the_successor_resumes_there(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    slot = Attempts(attempts, location, tmp_path)
    worker = slot.next()
    worker.commit_delay = 10.0  # nothing flushes by itself while the test looks
    saver = JournalSaver(worker, group_commit=True)
    graph = counting_graph(saver, calls=[], fail_at=None)
    config = {"configurable": {"thread_id": "grouped"}}
    graph.invoke({"steps": []}, config, durability="sync")
    assert slot.live is not None
    assert journal.HEAD not in slot.live[0].lease()["metadata"].get("annotations", {})
    worker.flush()  # what an effect's call, a question or the attempt's end does first
    assert journal.HEAD in slot.live[0].lease()["metadata"]["annotations"]
    successor = JournalSaver(slot.next())
    assert seen(list(successor.list(config))) == seen(list(saver.list(config)))
    slot.next().stop()
