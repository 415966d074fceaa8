"""LangGraph's ``interrupt()`` as the slot's questions, and tool calls as ledger effects,
over real attempt Leases (pod-bound tokens, shipped policies) and a real store.

No operator and no node: the admin plays the operator (it tombstones an attempt and puts
a person's answer on the next attempt's Lease, as the operator does from ``kubectl
agentrun answer``). Covers:

- a graph paused at ``interrupt()``: ``invoke`` commits the slot's question on the
  attempt's Lease and raises ``QuestionAsked`` (the attempt ends); the next attempt, its
  Lease holding the answer, resumes the graph with it, the nodes before the interrupt
  not run again;
- a tool effect that needs approval: asked (the attempt ends); approved, but the
  successor's stand-in model wrote other arguments, so it is asked again and nothing is
  sent; drafted in a superstep of its own, the approved arguments hold across attempts
  and the effect is sent once;
- a tool effect whose attempt died after the owner applied it: the successor, whose
  stand-in model passes other arguments, runs the task again from the same checkpoint,
  meets the same key and gets the recorded result; the owner was called once, with the
  idempotency key and fencing token of the first attempt.
"""

from __future__ import annotations

import operator
import random
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langgraph.types import interrupt

from agentrun.api import bounds, names, records
from agentrun.worker import QuestionAsked
from agentrun.worker import _journal as journal
from agentrun.worker.langgraph import JournalSaver, current, effect, invoke
from tests.integration.operator import test_worker_records as worker_records
from tests.integration.operator.test_langgraph_saver import Attempts, chained, location
from tests.integration.operator.test_worker_records import Attempt
from tests.support.s3fixtures import endpoint

pytestmark = pytest.mark.serial
attempts = worker_records.attempts
__all__ = ["attempts", "endpoint", "location"]  # fixtures this module takes from others


class State(TypedDict):
    steps: Annotated[list[Any], operator.add]


def answer_on(attempt: Attempt, *, key: str, digest: str, value: Any,
              suffix: str = names.ANSWERED_SUFFIX) -> None:
    """The admin, as the operator, puts a person's answer (or, with ``suffix``
    ``.approved``, people's decision on an effect) on ``attempt``'s Lease."""
    payload = {"value": value, "digest": digest, "questionAttempt": attempt.number - 1,
               "expired": False, "actor": "alice"}
    data = records.canonical(payload)
    record = records.Record(attempt=attempt.number, digest=records.digest(data), inline=payload,
                            key=f"{key}{suffix}", kind=records.Kind.DECISION,
                            size=len(data))
    attempt.leases.patch_namespaced_lease(attempt.name, attempt.namespace, {"metadata": {
        "annotations": {record.annotation: records.encode(record)}}})


def test_an_interrupt_is_the_slots_question_and_its_answer_resumes_the_graph(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    calls: list[str] = []

    def plan(state: State) -> dict[str, list[Any]]:
        calls.append("plan")
        return {"steps": ["plan"]}

    def review(state: State) -> dict[str, list[Any]]:
        calls.append("review")
        approved = interrupt({"question": "Publish the plan?", "schema": {"type": "boolean"}})
        return {"steps": [{"approved": approved}]}

    def graph_of(worker: Any) -> Any:
        return chained(JournalSaver(worker), {"plan": plan, "review": review}, State)

    slot = Attempts(attempts, location, tmp_path)
    config = {"configurable": {"thread_id": "agent"}}
    worker = slot.next()
    with pytest.raises(QuestionAsked) as asked:
        invoke(graph_of(worker), {"steps": []}, worker=worker, config=config)
    first = slot.live[0] if slot.live else pytest.fail("no attempt")
    question = first.lease()["metadata"]["annotations"][
        f"{bounds.RECORD_ANNOTATION_PREFIX}{asked.value.key}{names.QUESTION_SUFFIX}"]
    assert '"question":"Publish the plan?"' in question  # what the slot shows a person
    assert calls == ["plan", "review"]

    worker = slot.next()
    second = slot.live[0] if slot.live else pytest.fail("no attempt")
    answer_on(second, key=asked.value.key, digest=asked.value.digest, value=True)
    done = invoke(graph_of(worker), {"steps": []}, worker=worker, config=config)
    assert done == {"steps": ["plan", {"approved": True}]}
    assert calls == ["plan", "review", "review"]  # plan ran once; review resumed
    assert worker.steps.done == []  # the answer was taken from the Lease, then committed
    slot.next().stop()


def test_a_tool_effect_is_applied_once_though_the_successors_arguments_differ(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    applied: list[tuple[str, int, str]] = []  # the owner: (key, token, arguments)
    rng = random.Random(7)

    def act(worker: Any, *, die: bool) -> Callable[[State], dict[str, list[Any]]]:
        def run(state: State) -> dict[str, list[Any]]:
            title = f"report {uuid.UUID(int=rng.getrandbits(128))}"  # differs per attempt

            def send() -> dict[str, Any]:
                sent = current()
                assert sent is not None
                applied.append((sent.idempotency_key, sent.fencing_token, title))
                return {"id": len(applied), "title": title}

            result = effect("publish", worker=worker, call=send)
            if die:
                raise RuntimeError("the attempt died after the owner applied it")
            return {"steps": [result]}
        return run

    def graph_of(worker: Any, *, die: bool) -> Any:
        return chained(JournalSaver(worker), {"plan": lambda state: {"steps": ["plan"]},
                                              "act": act(worker, die=die)}, State)

    slot = Attempts(attempts, location, tmp_path)
    config = {"configurable": {"thread_id": "agent"}}
    worker = slot.next()
    with pytest.raises(RuntimeError, match="died after the owner applied it"):
        invoke(graph_of(worker, die=True), {"steps": []}, worker=worker, config=config)
    assert len(applied) == 1 and applied[0][1] == 1  # sent once, with attempt 1's token

    worker = slot.next()
    done = invoke(graph_of(worker, die=False), {"steps": []}, worker=worker, config=config)
    first_title = applied[0][2]
    assert done == {"steps": ["plan", {"id": 1, "title": first_title}]}  # the recorded result
    assert len(applied) == 1  # never sent again, though this attempt's title differed
    effects = [key for key in worker.steps.prefix.committed if key.startswith("tool-")]
    assert len(effects) == 2 and all(k.endswith((".intent", ".outcome")) for k in effects)
    slot.next().stop()


def test_a_tool_needing_approval_is_asked_again_for_other_arguments_and_sent_once_approved(
        attempts: Callable[[int], Attempt], location: journal.Location,
        tmp_path: Path) -> None:
    sent: list[dict[str, Any]] = []  # the owner
    rng = random.Random(11)
    approved = {"decision": "approved", "approvals": 1}

    def publish(worker: Any, title: str) -> dict[str, Any]:
        def send() -> dict[str, Any]:
            said = current()
            assert said is not None and said.digest is not None  # the owner can check it
            sent.append({"title": title, "digest": said.digest})
            return {"id": len(sent)}
        return effect("publish", worker=worker, call=send, payload={"title": title},
                      approvers=1)

    def drafted_in_place(worker: Any) -> Any:
        def act(state: State) -> dict[str, list[Any]]:  # the model's words, then the call
            return {"steps": [publish(worker, f"report {rng.getrandbits(64):x}")]}
        return chained(JournalSaver(worker), {"plan": lambda state: {"steps": ["plan"]},
                                              "act": act}, State)

    slot = Attempts(attempts, location, tmp_path)
    config = {"configurable": {"thread_id": "in-place"}}
    worker = slot.next()
    with pytest.raises(QuestionAsked) as first:
        invoke(drafted_in_place(worker), {"steps": []}, worker=worker, config=config)
    asking = slot.live[0] if slot.live else pytest.fail("no attempt")
    request = asking.lease()["metadata"]["annotations"].get(
        f"{bounds.RECORD_ANNOTATION_PREFIX}{first.value.key}{names.APPROVAL_SUFFIX}")
    assert request is not None and first.value.digest in request  # what the operator reads
    worker = slot.next()
    second = slot.live[0] if slot.live else pytest.fail("no attempt")
    answer_on(second, key=first.value.key, digest=first.value.digest, value=approved,
              suffix=names.APPROVED_SUFFIX)
    with pytest.raises(QuestionAsked) as again:
        invoke(drafted_in_place(worker), {"steps": []}, worker=worker, config=config)
    assert again.value.key == first.value.key  # the same effect, at the same position
    assert again.value.digest != first.value.digest  # other words: asked again
    assert sent == []  # nothing sent on an approval of other words

    def drafted_first(worker: Any) -> Any:
        def draft(state: State) -> dict[str, list[Any]]:
            return {"steps": [f"report {rng.getrandbits(64):x}"]}

        def act(state: State) -> dict[str, list[Any]]:  # the call from committed words
            return {"steps": [publish(worker, state["steps"][-1])]}
        return chained(JournalSaver(worker), {"draft": draft, "act": act}, State)

    config = {"configurable": {"thread_id": "drafted-first"}}
    worker = slot.next()
    with pytest.raises(QuestionAsked) as asked:
        invoke(drafted_first(worker), {"steps": []}, worker=worker, config=config)
    worker = slot.next()
    live = slot.live[0] if slot.live else pytest.fail("no attempt")
    answer_on(live, key=asked.value.key, digest=asked.value.digest, value=approved,
              suffix=names.APPROVED_SUFFIX)
    done = invoke(drafted_first(worker), {"steps": []}, worker=worker, config=config)
    title = done["steps"][0]
    assert done["steps"][1] == {"id": 1}
    assert sent == [{"title": title, "digest": asked.value.digest}]  # the approved words, once
    slot.next().stop()
