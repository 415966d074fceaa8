"""The sidecar's questions: ``POST /v1/questions/<key>`` is ``Worker.ask`` over HTTP.

Covers: a first request commits ``<key>.question`` and answers 202 with the digest (end
the attempt); asked again in the attempt, 202 and nothing more committed; an answer on the
Lease bound to the question: 200 with it, committed as the step; a question out of bounds:
400 QuestionError, nothing committed; a malformed request: 400 BadRequest; another method:
405; a lost lease: 410 before anything is committed."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import questions
from agentrun.worker import _records as records
from agentrun.worker._renewals import Standing

from .sidecarfakes import ATTEMPT, FakeWorker, make, send

ASK = {"question": "Publish it?", "schema": {"type": "boolean"}}


def test_a_question_is_committed_and_the_attempt_told_to_end() -> None:
    sidecar, worker = make()
    first = send(sidecar, "POST", "/v1/questions/review", ASK)
    assert first.status == 202, first.body
    assert first.body is not None and first.body["asked"] is True
    assert first.body["digest"] == questions.digest(question="Publish it?",
                                                    schema={"type": "boolean"})
    assert list(worker.memory.committed) == ["review.question"]
    again = send(sidecar, "POST", "/v1/questions/review", ASK)
    assert again.status == 202 and list(worker.memory.committed) == ["review.question"]


def test_an_answer_bound_to_the_question_is_returned_and_committed() -> None:
    payload = {"value": True, "digest": questions.digest(question="Publish it?",
                                                         schema={"type": "boolean"}),
               "questionAttempt": 1, "expired": False, "actor": "alice"}
    answer = records.make(key="review.answer", kind=records.Kind.DECISION, attempt=ATTEMPT,
                          payload=payload)
    sidecar, worker = make(FakeWorker(earlier={"review.answer": answer}))
    reply = send(sidecar, "POST", "/v1/questions/review", ASK)
    assert (reply.status, reply.body) == (200, {"answer": True})
    assert worker.memory.committed["review"].inline == {"digest": payload["digest"],
                                                        "value": True}


@pytest.mark.parametrize(("body", "status", "code"), [
    ({"question": " "}, 400, "QuestionError"),
    ({"question": "q", "schema": {"pattern": "(a)\\1"}}, 400, "QuestionError"),
    ({"question": "q", "deadlineSeconds": 0}, 400, "QuestionError"),
    ({"question": "q", "schema": "boolean"}, 400, "BadRequest"),
    ({"question": "q", "deadlineSeconds": "soon"}, 400, "BadRequest"),
    ({"question": "q", "onExpiry": "maybe"}, 400, "BadRequest"),
    ({"question": "q", "extra": 1}, 400, "BadRequest"),
    ({"schema": {}}, 400, "BadRequest"),
    ([1, 2], 400, "BadRequest"),
])
def test_bad_questions_are_refused_and_nothing_is_committed(body: Any, status: int,
                                                           code: str) -> None:
    sidecar, worker = make()
    reply = send(sidecar, "POST", "/v1/questions/review", body)
    assert reply.status == status and reply.body is not None and reply.body["error"] == code
    assert worker.memory.committed == {}


def test_only_post_and_only_a_live_lease() -> None:
    sidecar, worker = make()
    assert send(sidecar, "GET", "/v1/questions/review").status == 405
    worker.keeper.state = Standing.LOST
    assert send(sidecar, "POST", "/v1/questions/review", ASK).status == 410
    assert worker.memory.committed == {}
