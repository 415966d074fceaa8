"""``ask`` in the worker: asked once per attempt with its record, answered from the Lease by
digest, the answer committed as the step, and a question out of bounds refused before
anything is committed.

Covers: a first ask commits ``<key>.question`` (question, schema, deadline, expiry, default)
and raises QuestionAsked; asked again in the same attempt, nothing more is committed; an
``<key>.answer`` record bound to this question's digest is returned and committed durably as
the step ``key`` (a later ask skips it); an answer to another question (other text or
schema) is not taken: asked again; a committed step is returned without looking further;
each bound refused with QuestionError and nothing committed; at most QUESTIONS_KEPT per
attempt."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from agentrun.api import bounds, questions
from agentrun.worker import _prefix as prefix
from agentrun.worker import _questions as asking
from agentrun.worker import _records as records
from tests.support.ledgers import Remembered

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}},
          "required": ["approved"]}




def asker(*, attempt: int = 2, committed: dict[str, records.Record] | None = None
          ) -> tuple[asking.Questions, Remembered]:
    memory = Remembered()
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=attempt, committed=committed or {}),
                         ledger=memory)
    return asking.Questions(steps=steps), memory


def answer(value: Any, *, question: str = "Publish?", schema: Any = SCHEMA,
           attempt: int = 2) -> dict[str, records.Record]:
    payload = {"value": value, "digest": questions.digest(question=question, schema=schema),
               "questionAttempt": 1, "expired": False, "actor": "alice"}
    return {"plan.answer": records.make(key="plan.answer", kind=records.Kind.DECISION,
                                        attempt=attempt, payload=payload)}


def test_a_first_ask_commits_the_question_and_stops() -> None:
    found, memory = asker()
    with pytest.raises(asking.QuestionAsked) as stopped:
        found.ask("plan", "Publish?", schema=SCHEMA, deadline_seconds=3600,
                  on_expiry="default", default={"approved": False})
    [record] = memory.committed
    assert (record.key, record.kind, record.attempt) == ("plan.question",
                                                         records.Kind.DECISION, 2)
    assert record.inline == {"question": "Publish?", "schema": SCHEMA, "deadlineSeconds": 3600,
                             "onExpiry": "default", "default": {"approved": False}}
    assert stopped.value.key == "plan"
    assert stopped.value.digest == questions.digest(question="Publish?", schema=SCHEMA)
    with pytest.raises(asking.QuestionAsked):  # asked again: nothing more is committed
        found.ask("plan", "Publish?", schema=SCHEMA, deadline_seconds=3600,
                  on_expiry="default", default={"approved": False})
    assert len(memory.committed) == 1


def test_an_answer_bound_to_the_question_is_returned_and_committed_as_the_step() -> None:
    found, memory = asker(committed=answer({"approved": True}))
    assert found.ask("plan", "Publish?", schema=SCHEMA) == {"approved": True}
    [record] = memory.committed
    assert (record.key, record.inline) == ("plan", {
        "digest": questions.digest(question="Publish?", schema=SCHEMA),
        "value": {"approved": True}})
    assert found.ask("plan", "Publish?", schema=SCHEMA) == {"approved": True}  # skipped now
    assert len(memory.committed) == 1


@pytest.mark.parametrize(("question", "schema"), [
    ("Publish now?", SCHEMA), ("Publish?", {"type": "boolean"}), ("Publish?", None)],
    ids=["other-text", "other-schema", "no-schema"])
def test_an_answer_to_another_question_is_not_taken(question: str, schema: Any) -> None:
    found, memory = asker(committed=answer({"approved": True}))
    with pytest.raises(asking.QuestionAsked):
        found.ask("plan", question, schema=schema)
    assert [r.key for r in memory.committed] == ["plan.question"]


def test_a_committed_answer_counts_only_for_its_own_question() -> None:
    digest = questions.digest(question="anything at all?", schema=None)
    step = records.make(key="plan", kind=records.Kind.DECISION, attempt=1,
                        payload={"digest": digest, "value": [1, 2]})
    found, memory = asker(committed={"plan": step})
    assert found.ask("plan", "anything at all?") == [1, 2]
    assert memory.committed == []
    with pytest.raises(asking.QuestionAsked):  # another question under the same key
        found.ask("plan", "anything else?")
    assert [r.key for r in memory.committed] == ["plan.question"]


@pytest.mark.parametrize(("kwargs", "says"), [
    ({"question": " "}, "non-blank"),
    ({"question": "é" * 300}, "600 bytes"),
    ({"schema": {"type": "string", "pattern": "(a)\\1"}}, "RE2"),
    ({"schema": {"$ref": "https://example.com/s.json"}}, "not local"),
    ({"schema": {"$defs": {"a": {"$ref": "#"}}, "$ref": "#"}}, "loop"),
    ({"schema": {"type": "nothing"}}, "not a valid JSON Schema"),
    ({"schema": {"properties": {"a": {"$ref": "#/$defs/missing"}}}}, "names nothing"),
    ({"schema": {"$ref": "#nope"}}, "names nothing"),
    ({"schema": {"enum": ["x" * 600]}}, "bytes of canonical JSON; at most 512"),
    ({"deadline_seconds": 0}, "deadline_seconds"),
    ({"deadline_seconds": True}, "deadline_seconds"),
    ({"on_expiry": "default"}, "needs deadline_seconds"),
    ({"on_expiry": "default", "deadline_seconds": 60, "default": {"approved": "yes"}},
     "default answer does not satisfy"),
    ({"on_expiry": "default", "deadline_seconds": 60, "default": "x" * 600}, "at most 512"),
    ({"question": "q" * 500, "schema": {"enum": ["y" * 490]}}, "together"),
], ids=["blank", "long", "backreference", "remote-ref", "ref-loop", "invalid", "dangling-ref",
        "dangling-anchor", "big-schema",
        "zero-deadline", "bool-deadline", "default-without-deadline", "bad-default",
        "big-default", "too-much-together"])
def test_a_question_out_of_bounds_is_refused_and_nothing_is_committed(
        kwargs: dict[str, Any], says: str) -> None:
    found, memory = asker()
    given: dict[str, Any] = {"question": "Publish?", "schema": SCHEMA, **kwargs}
    question = given.pop("question")
    with pytest.raises(asking.QuestionError, match=says):
        found.ask("plan", question, **given)
    assert memory.committed == []


def test_one_attempt_asks_at_most_as_many_as_a_slot_shows() -> None:
    found, memory = asker()
    for n in range(bounds.QUESTIONS_KEPT):
        with pytest.raises(asking.QuestionAsked):
            found.ask(f"q-{n}", "Go on?")
    with pytest.raises(asking.QuestionError, match="already asked"):
        found.ask("one-more", "Go on?")
    assert len(memory.committed) == bounds.QUESTIONS_KEPT


def test_a_schema_too_costly_for_an_answer_is_stopped_by_its_budget() -> None:
    """A short schema whose check doubles per level of the answer: bounded by steps."""
    costly = {"$defs": {"a": {"allOf": [{"items": {"$ref": "#/$defs/a"}},
                                        {"items": {"$ref": "#/$defs/a"}}]}},
              "$ref": "#/$defs/a"}
    questions.check_question(question="deep?", schema=costly)  # accepted when asked
    value: Any = 0
    for _ in range(questions.MAX_ANSWER_DEPTH - 1):
        value = [value]
    with pytest.raises(questions.QuestionError, match="too costly"):
        questions.violation(value, schema=costly)
    with pytest.raises(questions.QuestionError, match="nests deeper than 16"):
        questions.check_value([[value]], what="the answer")


def test_an_answer_by_reference_is_read_from_its_mounted_file_and_checked(
        tmp_path: Any) -> None:
    value = {"approved": True, "note": "n" * 3000}
    data = json.dumps(value).encode()
    sha = hashlib.sha256(data).hexdigest()
    payload = {"valueFrom": {"configMap": "cm", "sha256": sha, "path": "ignored"},
               "digest": questions.digest(question="Publish?", schema=SCHEMA),
               "questionAttempt": 1, "expired": False, "actor": "alice"}
    committed = {"plan.answer": records.make(key="plan.answer", kind=records.Kind.DECISION,
                                             attempt=2, payload=payload)}
    found, memory = asker(committed=committed)
    found.answers = tmp_path
    found.steps.store = records.FsspecStore(f"file://{tmp_path}/store")  # the journal's
    (tmp_path / "plan").mkdir()
    (tmp_path / "plan" / "value").write_bytes(data)
    assert found.ask("plan", "Publish?", schema=SCHEMA) == value
    [step] = memory.committed
    assert step.key == "plan" and step.inline is None  # 3 KiB: by reference, not inline
    (tmp_path / "plan" / "value").write_bytes(data + b" ")
    again, _ = asker(committed=committed)
    again.answers = tmp_path
    with pytest.raises(records.RecordError, match="is not the answer given"):
        again.ask("plan", "Publish?", schema=SCHEMA)
    (tmp_path / "plan" / "value").unlink()
    with pytest.raises(records.RecordError, match="cannot be read"):
        again.ask("plan", "Publish?", schema=SCHEMA)
