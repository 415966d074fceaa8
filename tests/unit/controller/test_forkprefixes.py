"""What a fork inherits of one source slot (``controller.forkprefixes.inherit``).

Nodes are made with the journal's own code and read by the copy's walk; only the store's
bytes are a dict (the copy against a real S3 server and API server: the node test
``tests/integration/node/test_forks.py``). What is shown: the whole prefix in the source's
commit order, a Lease's own records first; the source's own rerun cuts applied as its next
attempt would; a fork's step leaves out that step and everything after it, effects too,
and an effect's answer on a Lease goes with its intent; a step committed twice is cut from
its first commit; a step never committed or already cut out is refused; an attempt not
sealed yet is refused; a chain too long to copy is refused.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from agentrun.api import cuts
from agentrun.api.runs import AgentRun, JournalPin
from agentrun.controller import forkprefixes, journalforks
from agentrun.core.base import actions
from agentrun.core.runs import runforks
from agentrun.core.runs.resolution import Problem
from agentrun.worker import _records as records
from tests.unit.worker.test_journal import lease
from tests.unit.worker.test_rerun_prefix import Stored, effect, step, two_attempts

Kind = records.Kind
NOW = datetime(2026, 12, 5, tzinfo=UTC)


class Bytes:
    """The walk's store: ``get`` from a :class:`Stored` journal's dict."""

    def __init__(self, store: Stored) -> None:
        self.store = store

    def get(self, key: str, *, limit: int) -> bytes:
        return self.store.objects_by_key[key]


def walk(store: Stored) -> forkprefixes.Walk:
    return forkprefixes.Walk(store=Bytes(store), prefix="p/s")  # type: ignore[arg-type]


def sealed(store: Stored, **on_lease: records.Record) -> list[dict[str, Any]]:
    found = [lease(n, head=h.text()) for n, h in sorted(store.heads.items())]
    for record in on_lease.values():
        found[record.attempt - 1]["metadata"]["annotations"][record.annotation] = (
            records.encode(record))
    return found


def slot(step_key: str | None = None, *, attempts: int = 2,
         cut: tuple[str, ...] = ()) -> actions.ForkSlot:
    return actions.ForkSlot(node="draft", source_slot="s", slot="f", step=step_key,
                            attempts=attempts, cuts=cut)


def keys(found: list[records.Record]) -> list[str]:
    return [r.key for r in found]


def test_the_whole_prefix_in_commit_order_a_leases_own_first() -> None:
    store = two_attempts()
    on_lease = {key: effect(key, 1, Kind.DECISION) for key in (
        "plan.question", "plan.answer", "publish.resolved",  # this one: the source's key's
        "lost.answer")}  # an answer whose question is not kept goes too
    found = forkprefixes.inherit(slot=slot(), leases=sealed(store, **on_lease),
                                 walk=walk(store))
    assert keys(found) == ["plan.answer", "plan.question", "gather", "outline", "draft",
                           "publish.intent", "publish.outcome", "polish", "review"]


def test_an_effect_sent_with_no_outcome_recorded_stops_the_copy() -> None:
    store = Stored()
    store.commit(1, step("outline", 1), effect("publish.intent", 1, Kind.EFFECT_INTENT))
    with pytest.raises(forkprefixes.CopyError) as refused:
        forkprefixes.inherit(slot=slot(attempts=1), leases=sealed(store), walk=walk(store))
    assert refused.value.reason == runforks.WAITING and "publish" in refused.value.message
    cut = forkprefixes.inherit(slot=slot("outline", attempts=1), leases=sealed(store),
                               walk=walk(store))
    assert keys(cut) == []  # forked before it: the fork's own to send


def test_answers_the_slot_holds_ride_along_with_their_questions_not_by_reference() -> None:
    store = Stored()
    store.commit(1, step("outline", 1), step("plan", 1))
    store.commit(2, step("draft", 2))
    given = {"digest": "d" * 64, "value": "yes"}
    answers = tuple(records.encode(records.make(key=key, kind=Kind.DECISION, attempt=3,
                                                payload=payload)) for key, payload in (
        ("review.answer", given), ("late.answer", given),
        ("notes.answer", {"digest": "d" * 64, "valueFrom": {"sha256": "e" * 64}})))
    asked = {key: effect(key, attempt, Kind.DECISION) for key, attempt in (
        ("plan.question", 1), ("review.question", 1), ("notes.question", 1),
        ("late.question", 2))}  # late: asked after outline, by attempt 2

    def inherit(at: str | None) -> list[str]:
        return keys(forkprefixes.inherit(
            slot=actions.ForkSlot(node="draft", source_slot="s", slot="f", step=at,
                                  attempts=2, answers=answers),
            leases=sealed(store, **asked), walk=walk(store)))
    assert inherit(None) == ["notes.question", "plan.question", "review.question", "outline",
                             "plan", "late.question", "draft", "review.answer",
                             "late.answer"]  # a Lease's own before its attempt's nodes
    assert inherit("plan") == ["notes.question", "review.question", "outline",
                               "review.answer"]  # the fork's step's and late's go


@pytest.mark.parametrize("outcome", [False, True])
def test_an_effect_with_no_outcome_before_the_forks_step_splits_it_for_good(
        outcome: bool) -> None:
    """Its outcome never recorded, or recorded after the step: either way, after the
    fork's step, so cut; never something to wait for."""
    store = Stored()
    store.commit(1, step("outline", 1), effect("publish.intent", 1, Kind.EFFECT_INTENT),
                 step("notes", 1),
                 *([effect("publish.outcome", 1, Kind.EFFECT_OUTCOME)] if outcome else []))
    with pytest.raises(forkprefixes.CopyError) as refused:
        forkprefixes.inherit(slot=slot("notes", attempts=1), leases=sealed(store),
                             walk=walk(store))
    assert refused.value.reason == runforks.SPLIT_EFFECT


def test_only_the_source_slots_own_leases_are_read() -> None:
    store = two_attempts()
    found = sealed(store)
    found[0]["metadata"]["ownerReferences"] = [{"uid": "uid-slot"}]
    found[1]["metadata"]["ownerReferences"] = [{"uid": "uid-of-a-deleted-run"}]
    kept = forkprefixes.inherit(
        slot=actions.ForkSlot(node="draft", source_slot="s", slot="f", step=None, attempts=2,
                              owners=("uid-slot", "uid-run")), leases=found, walk=walk(store))
    assert "review" not in keys(kept) and "gather" in keys(kept)


def test_the_sources_own_rerun_cuts_apply_as_its_next_attempt_would() -> None:
    store = two_attempts()
    found = forkprefixes.inherit(slot=slot(cut=("1.2.0-2",)), leases=sealed(store),
                                 walk=walk(store))
    assert keys(found) == ["gather", "outline", "publish.intent", "publish.outcome"]


def test_a_forks_step_leaves_out_it_and_what_follows_effects_and_their_answers_too() -> None:
    store = two_attempts()
    answer = effect("publish.resolved", 1, Kind.DECISION)
    found = forkprefixes.inherit(slot=slot("draft"), leases=sealed(store, answer=answer),
                                 walk=walk(store))
    assert keys(found) == ["gather", "outline"]
    assert [r.attempt for r in found] == [1, 1]  # the copy re-makes them for attempt 0
    early = forkprefixes.inherit(slot=slot("outline"), leases=sealed(store), walk=walk(store))
    assert keys(early) == ["gather"]


def test_a_step_committed_twice_is_cut_from_its_first_commit() -> None:
    store = Stored()
    store.commit(1, step("outline", 1), step("draft", 1), step("notes", 1))
    store.commit(2, step("draft", 2, "again"), step("polish", 2))
    found = forkprefixes.inherit(slot=slot("draft"), leases=sealed(store), walk=walk(store))
    assert keys(found) == ["outline"]


@pytest.mark.parametrize(("step_key", "cut"), [("nosuch", ()), ("draft", ("1.2.0-2",))])
def test_a_step_not_in_the_prefix_is_refused(step_key: str, cut: tuple[str, ...]) -> None:
    store = two_attempts()
    with pytest.raises(forkprefixes.CopyError) as refused:
        forkprefixes.inherit(slot=slot(step_key, cut=cut), leases=sealed(store),
                             walk=walk(store))
    assert refused.value.reason == runforks.STEP_NOT_COMMITTED


@pytest.mark.parametrize("at", [None, "review"])  # review: committed by attempt 2 only
def test_an_attempt_not_sealed_is_waited_for(at: str | None) -> None:
    store = two_attempts()
    found = sealed(store)
    found[1] = lease(2, head=store.heads[2].text(), sealed=False)
    with pytest.raises(forkprefixes.CopyError) as refused:
        forkprefixes.inherit(slot=slot(at), leases=found, walk=walk(store))
    assert refused.value.reason == runforks.SLOT_LIVE  # not a final StepNotCommitted


def test_a_journal_too_long_to_copy_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(forkprefixes, "MOST_NODES", 2)
    store = two_attempts()  # three nodes
    with pytest.raises(forkprefixes.CopyError, match="more than 2 commits"):
        forkprefixes.inherit(slot=slot(), leases=sealed(store), walk=walk(store))


def test_the_fork_cut_is_kind_blind_where_a_rerun_cut_keeps_effects() -> None:
    record = effect("publish.intent", 1, Kind.EFFECT_INTENT)
    cut = cuts.Cut(start=(1, 1, 0), through=2)
    assert not cuts.Discards(cuts=(cut,)).out(record, position=(1, 2, 0))
    assert cuts.Discards(hard=(cut,)).out(record, position=(1, 2, 0))


def test_journals_in_two_stores_cannot_be_copied_and_say_so_once() -> None:
    source = JournalPin(endpoint="http://one:8333", bucket="journal", prefix="a/ns/uid-1")
    planned = actions.ForkJournal(
        source=source, journal=source.model_copy(update={"endpoint": "http://two:8333",
                                                          "prefix": "a/ns/uid-2"}),
        namespace="ns", source_run="study", source_uid="uid-1", slots=())
    copier = journalforks.Copier(client=None, stores=None)  # type: ignore[arg-type]
    found = copier.copy(run=AgentRun.model_validate({
        "metadata": {"name": "study-b", "namespace": "ns", "uid": "uid-2"},
        "spec": {**{kind: {"name": kind} for kind in ("package", "workflow", "bindings")},
                 "fork": {"run": "study", "reason": "r"}}}), planned=planned, now=NOW)
    assert isinstance(found, Problem) and found.reason == runforks.CANNOT_COPY
    assert found.reason in runforks.FINAL and "inside one store" in found.message
