"""The example research-report agent's logic, with a fake Worker and a real effect owner.

The fake Worker is the SDK's own step and effect machinery (:class:`prefix.Steps`,
:class:`effects.Ledger`) over an in-memory record store instead of a Lease; the owner is
``tests/support/actors/effectowner.py`` on 127.0.0.1 (real HTTP). An attempt "killed" at a
point is one whose pause ends at once (:class:`faults.PausedTooLong`): what it committed
before the point is what its successor finds. The real-pod version of each case, with a
real SIGKILL, is ``tests/integration/node/test_interruptions.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import questions
from agentrun.examples import faults, research_report
from agentrun.examples.publisher import Publisher, PublishError
from agentrun.examples.research_report import Agent, Brief, ConfigError
from agentrun.owner import MemoryStore
from agentrun.owner._owner import Kept
from agentrun.worker import Answer, Reconciled
from agentrun.worker import _effects as effects
from agentrun.worker import _prefix as prefix
from agentrun.worker import _questions as asking
from agentrun.worker import _records as records
from agentrun.worker._context import Context
from tests.support.actors.effectowner import EffectOwner, word_key
from tests.support.ledgers import DurableOnReturn
from tests.support.waiting import wait_for

RUN_UID = "5f0c2d1e-0000-4000-8000-000000000001"
SLOT = "study-0a1b2c3d"
PACKAGE = "outcome: A short report\nconstraints: {maxSources: 4}\n"
K1, K2 = word_key("k1"), word_key("k2")  # keys as the kit takes them (64 hex digits)
BINDINGS = "nodes: [{node: research, agent: {name: r, revision: '1'}}]\npublish: {url: %s}\n"


class AlwaysLive:
    def ensure_live(self) -> None:
        return None


@dataclass
class Memory(DurableOnReturn):
    """Records committed, by key, across attempts (what the sealed Leases would hold)."""

    committed: dict[str, records.Record] = field(default_factory=dict)

    def commit(self, record: records.Record) -> records.Record:
        assert record.key not in self.committed or (
            self.committed[record.key].digest == record.digest
            or record.kind is records.Kind.EFFECT_INTENT), record.key
        self.committed[record.key] = record
        return record


@dataclass
class FakeWorker:
    context: Context
    steps: prefix.Steps
    durable: list[bool] = field(default_factory=list)  # each step's: the agent asks for True

    def step(self, key: str, *, do: Callable[[], records.JSON],
             kind: records.Kind = records.Kind.STEP_RESULT,
             durable: bool = False) -> records.JSON:
        self.durable.append(durable)
        return self.steps.step(key, do=do, kind=kind, durable=durable)

    def effect(self, name: str, *, key: str, call: effects.Call,
               reconcile: effects.Reconcile | None = None,
               owner: str | None = None) -> records.JSON:
        ledger = effects.Ledger(steps=self.steps, keeper=AlwaysLive(), run_uid=RUN_UID,
                                slot=SLOT, poll_seconds=0.0, sleep=lambda _: None)
        return ledger.effect(name, key=key, call=call, reconcile=reconcile, owner=owner)

    def ask(self, key: str, question: str, *, schema: Any = None) -> records.JSON:
        return asking.Questions(steps=self.steps).ask(key, question, schema=schema)


@pytest.fixture
def owner() -> Iterator[EffectOwner]:
    started = EffectOwner().start()
    yield started
    started.stop()


@dataclass
class Run:
    """The slot's attempts so far, over one record store."""

    owner: EffectOwner
    memory: Memory = field(default_factory=Memory)
    events: list[dict[str, Any]] = field(default_factory=list)
    durable: list[bool] = field(default_factory=list)  # each step's ``durable``, in order
    package: str = PACKAGE

    def attempt(self, number: int, *, pause: str = "") -> list[dict[str, Any]]:
        """Run attempt ``number`` (killed at ``pause`` if given); its events."""
        context = Context(namespace="ns", run="study", run_uid=RUN_UID, slot=SLOT,
                          node="research", attempt=number, fencing_token=number,
                          lease=f"{SLOT}-{number}", config_dir=Path("/none"), pinned={})
        steps = prefix.Steps(prefix=prefix.Prefix(attempt=number,
                                                  committed=dict(self.memory.committed)),
                             ledger=self.memory)
        mine: list[dict[str, Any]] = []
        pauses = faults.Pauses(attempt=number, points=faults.parse(pause), seconds=0.0,
                               announce=lambda p: mine.append({"event": "paused", "point": p}))
        worker = FakeWorker(context=context, steps=steps)
        agent = Agent(worker=worker, pauses=pauses,
                      brief=Brief.from_texts({"package": self.package,
                                              "bindings": BINDINGS % self.owner.url}),
                      emit=mine.append)
        if pause:
            with pytest.raises(faults.PausedTooLong):
                agent.run()
        else:
            agent.run()
        self.events += mine
        self.durable += worker.durable
        return mine


def statuses(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["key"]: e["status"] for e in events if e["event"] == "step"}


def methods(owner: EffectOwner) -> list[str]:
    return [r.method for r in owner.requests]


SOURCES = ["source-1", "source-2", "source-3"]


def test_a_first_attempt_does_every_step_and_publishes_once(owner: EffectOwner) -> None:
    run = Run(owner=owner)
    events = run.attempt(1)
    assert statuses(events) == dict.fromkeys([*SOURCES, "decision", "report"], "ran")
    assert {k: r.kind for k, r in run.memory.committed.items()} == {
        **dict.fromkeys(SOURCES, records.Kind.SOURCE_NOTES),
        "decision": records.Kind.DECISION, "report": records.Kind.STEP_RESULT,
        "publish.intent": records.Kind.EFFECT_INTENT,
        "publish.outcome": records.Kind.EFFECT_OUTCOME}
    assert methods(owner) == ["POST"] and list(owner.applied.values()) == [1]
    (post,) = owner.posts()
    assert (post.token, post.fence) == (1, f"{RUN_UID}/{SLOT}")
    assert post.key == effects.idempotency_key(run_uid=RUN_UID, slot=SLOT, key="publish")
    assert events[-2]["via"] == "call" and events[-1]["event"] == "finished"
    # Each step durable on return (no group commit): the story kills after a step returned.
    assert run.durable == [True] * 5


def test_a_successor_of_a_finished_attempt_skips_everything_and_sends_nothing(
        owner: EffectOwner) -> None:
    run = Run(owner=owner)
    run.attempt(1)
    events = run.attempt(2)
    assert set(statuses(events).values()) == {"skipped"}
    assert [e["via"] for e in events if e["event"] == "effect"] == ["recorded"]
    assert methods(owner) == ["POST"]  # attempt 1's only


def test_a_tool_result_obtained_but_not_committed_is_repeated(owner: EffectOwner) -> None:
    run = Run(owner=owner)
    first = run.attempt(1, pause="before-commit:source-2@1")
    assert first[-1] == {"event": "paused", "point": "before-commit:source-2"}
    assert statuses(first) == {"source-1": "ran"}
    second = run.attempt(2)
    assert statuses(second) == {"source-1": "skipped", "source-2": "ran", "source-3": "ran",
                                "decision": "ran", "report": "ran"}
    assert run.memory.committed["source-1"].attempt == 1
    assert run.memory.committed["source-2"].attempt == 2
    assert list(owner.applied.values()) == [1]


def test_a_committed_decision_is_kept_though_the_model_would_decide_otherwise(
        owner: EffectOwner) -> None:
    run = Run(owner=owner)
    run.attempt(1, pause="after-step:decision@1")
    decided = records.payload(run.memory.committed["decision"], store=None)
    run.attempt(2)
    assert records.payload(run.memory.committed["decision"], store=None) == decided
    assert run.memory.committed["report"].attempt == 2


def review_answer(run: Run, value: Any, *, attempt: int) -> None:
    """What the operator puts on attempt ``attempt``'s Lease once a person answered."""
    question = run.memory.committed["review.question"].inline
    assert isinstance(question, dict)
    digest = questions.digest(question=question["question"], schema=question["schema"])
    run.memory.committed["review.answer"] = records.make(
        key="review.answer", kind=records.Kind.DECISION, attempt=attempt,
        payload={"value": value, "digest": digest, "questionAttempt": 1, "expired": False,
                 "actor": "alice"})


@pytest.mark.parametrize(("publish", "sent"), [(True, 1), (False, 0)])
def test_with_review_it_asks_before_publishing_and_obeys_the_answer(
        owner: EffectOwner, publish: bool, sent: int) -> None:
    run = Run(owner=owner, package=PACKAGE + "review: true\n")
    with pytest.raises(asking.QuestionAsked):
        run.attempt(1)
    assert "review.question" in run.memory.committed and owner.applied == {}
    review_answer(run, {"publish": publish, "note": "checked"}, attempt=2)
    events = run.attempt(2)
    assert set(statuses(events).values()) == {"skipped"}
    assert [e["answer"] for e in events if e["event"] == "reviewed"] == [
        {"publish": publish, "note": "checked"}]
    assert sum(owner.applied.values()) == sent
    assert any(e["event"] == "declined" for e in events) is (not publish)


def test_the_stand_in_model_varies_between_calls() -> None:
    notes = [research_report.search_tool(t, n) for n, t in enumerate("abcdef", start=1)]
    draws = {research_report.stand_in_model(notes)["draw"] for _ in range(3)}
    assert len(draws) > 1  # 32 random bits each: equal three times is ~2**-64


def test_killed_after_intent_the_successor_reconciles_then_resends_the_same_key(
        owner: EffectOwner) -> None:
    run = Run(owner=owner)
    run.attempt(1, pause="after-intent:publish@1")
    assert methods(owner) == []  # the call never left
    events = run.attempt(2)
    assert methods(owner) == ["GET", "POST"]
    (get, post) = owner.requests
    assert get.key == post.key and post.token == 2
    assert [e.get("answer") for e in events if e["event"] == "effect-reconciled"] == [
        "not-applied"]
    assert [e["via"] for e in events if e["event"] == "effect"] == ["call"]
    assert owner.applied == {post.key: 1}


def test_killed_after_the_call_the_successor_reconciles_and_never_resends(
        owner: EffectOwner) -> None:
    run = Run(owner=owner)
    run.attempt(1, pause="after-call:publish@1")
    assert methods(owner) == ["POST"]
    events = run.attempt(2)
    assert methods(owner) == ["POST", "GET"]
    assert [e["via"] for e in events if e["event"] == "effect"] == ["reconcile"]
    assert list(owner.applied.values()) == [1]
    outcome = records.payload(run.memory.committed["publish.outcome"], store=None)
    assert isinstance(outcome, dict) and outcome["via"] == "reconcile"


def test_an_unknown_answer_stops_the_attempt_and_is_recorded(owner: EffectOwner) -> None:
    run = Run(owner=owner)
    run.attempt(1, pause="after-intent:publish@1")
    owner.unknown.add(effects.idempotency_key(run_uid=RUN_UID, slot=SLOT, key="publish"))
    with pytest.raises(effects.AmbiguousEffect, match="unknown"):
        run.attempt(2)
    assert methods(owner) == ["GET"] and "publish.unresolved" in run.memory.committed


def test_a_fenced_attempt_is_told_why(owner: EffectOwner) -> None:
    publisher = Publisher(url=owner.url, fence="f")
    assert publisher.call(K2, 2, {"x": 1})["payload"] == {"x": 1}
    with pytest.raises(PublishError, match=r"fenced this attempt off \(token 1, highest seen 2\)"):
        publisher.call(K1, 1, {"x": 1})
    assert [(r.key, r.token, r.fence, r.status) for r in owner.posts()] == [
        (K2, 2, "f", 200), (K1, 1, "f", 409)]
    with pytest.raises(PublishError, match=r"answered 400: .*BadEffectHeaders"):
        publisher.call("k1", 3, {"x": 1})  # the kit takes only the SDK's keys (64 hex)
    with pytest.raises(PublishError, match=r"reconcile answer \(400\) is not one of"):
        publisher.reconcile("k1")


def test_a_resend_while_the_owner_applies_and_a_lost_outcome_are_told_why() -> None:
    owner = EffectOwner(hold=threading.Event()).start()
    try:
        publisher = Publisher(url=owner.url, fence="f")
        sent = threading.Thread(target=publisher.call, args=(K1, 1, {"x": 1}))
        sent.start()
        wait_for(lambda: owner.posts(key=K1), timeout=10, message="the first call")
        assert publisher.reconcile(K1) == Reconciled(answer=Answer.IN_PROGRESS)
        with pytest.raises(PublishError, match=r"applying this key already \(EffectInProgress"):
            publisher.call(K1, 1, {"x": 1})
        assert owner.hold is not None
        owner.hold.set()
        sent.join(timeout=10)
        assert publisher.reconcile(K1) == Reconciled(
            answer=Answer.APPLIED, result={"published": K1[:12], "payload": {"x": 1}})
        assert publisher.call(K1, 1, {"x": 2}) == {"published": K1[:12], "payload": {"x": 1}}
    finally:
        owner.stop()
    store = MemoryStore(keys={K2: Kept(reply=None, lost=True)})  # begun by a gone process
    lost = EffectOwner(store=store).start()
    try:
        with pytest.raises(PublishError, match=r"\(EffectOutcomeUnknown: it restarted"):
            Publisher(url=lost.url, fence="f").call(K2, 1, {"x": 1})
    finally:
        lost.stop()


@pytest.mark.parametrize(("spec", "expected"), [
    ("", {}), ("start@1", {"start": {1}}),
    ("before-commit:source-2@1, after-call:publish@2,after-call:publish@3",
     {"before-commit:source-2": {1}, "after-call:publish": {2, 3}})])
def test_pause_specs_parse(spec: str, expected: dict[str, set[int]]) -> None:
    assert faults.parse(spec) == expected


@pytest.mark.parametrize(("spec", "message"), [
    ("start", "is not <point>@<attempt>"), ("start@0", "attempt 1..1000"),
    ("start@x", "is not <point>@<attempt>"), ("middle@1", "is not a point"),
    ("start:x@1", "is not a point"), ("after-step:Bad.Key@1", "is not a point"),
    ("after-step@1", "is not a point"), ("start@1," * 200, "at most 1024")])
def test_bad_pause_specs_are_refused_with_what_is_wrong(spec: str, message: str) -> None:
    with pytest.raises(faults.FaultSpecError, match=message):
        faults.parse(spec)


def test_pauses_pass_other_attempts_and_points() -> None:
    seen: list[str] = []
    pauses = faults.Pauses(attempt=2, points=faults.parse("start@1,after-step:report@2"),
                           seconds=0.0, announce=seen.append)
    pauses.at("start")
    pauses.at("after-step:decision")
    with pytest.raises(faults.PausedTooLong, match="after-step:report"):
        pauses.at("after-step:report")
    assert seen == ["after-step:report"]


@pytest.mark.parametrize(("package", "bindings", "message"), [
    (PACKAGE, "nodes: [{node: a, agent: {name: r, revision: '1'}}]\n",
     "no publishing service: add `publish"),
    (PACKAGE, BINDINGS % "ftp://x", "must parse"),
    ("outcome: x\nsources: [a, b, c]\nconstraints: {maxSources: 2}\n", BINDINGS % "http://x",
     "lists 3 sources; at most 2"),
    ("outcome: x\nsources: [1]\n", BINDINGS % "http://x", "a list of topics"),
    ("outcome: [", BINDINGS % "http://x", "must parse")])
def test_configuration_the_agent_cannot_use_is_refused(package: str, bindings: str,
                                                       message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Brief.from_texts({"package": package, "bindings": bindings})


def test_the_package_may_name_the_topics() -> None:
    brief = Brief.from_texts({"package": "outcome: x\nsources: [leases, fencing]\n",
                              "bindings": BINDINGS % "http://x"})
    assert brief.topics == ("leases", "fencing")


def test_the_report_stays_an_inline_record() -> None:
    notes = [research_report.search_tool("é" * 200, n) for n in range(1, 13)]
    decision = research_report.stand_in_model(notes)
    report = research_report.write_report(outcome="T" * 500, decision=decision, notes=notes)
    assert records.make(key="report", kind=records.Kind.STEP_RESULT, attempt=1,
                        payload=report).inline == report


def test_outside_a_worker_pod_it_says_what_is_missing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key in ("KUBECONFIG", "AGENTRUN_RUN", "AGENTRUN_SLOT"):
        monkeypatch.delenv(key, raising=False)
    assert research_report.main([]) == research_report.EXIT_CONFIG
    err = capsys.readouterr().err
    assert "not running in a claimed agentrun worker pod" in err and "$AGENTRUN_RUN" in err
    assert research_report.main(["x"]) == research_report.EXIT_CONFIG
