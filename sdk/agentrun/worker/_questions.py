"""Questions: a worker asks a person, its attempt ends, and the next attempt gets the answer.

    approval = worker.ask("approve-plan", "Publish this plan?", schema={"type": "boolean"})

:meth:`Questions.ask` is a step whose result is a person's answer:

- committed before (this attempt or the recoverable prefix) as the answer to this very
  question (its *digest*: the question's text and schema): that answer, as any step's;
- an answer on this attempt's Lease (``<key>.answer``, written by the operator from the
  answer command) bound to this very question: the answer, committed durably as the step
  ``key`` (``{"digest": ..., "value": ...}``) before it is returned, so a later attempt
  skips it like any step;
- else the question is *asked*: checked against its bounds (``agentrun.api.questions``:
  refused at ask time with :class:`QuestionError`), then, after everything staged before it
  is durable, committed as ``<key>.question`` on the attempt's own Lease, and
  :class:`QuestionAsked` is raised. Let it end the attempt: leaving the ``with Worker``
  block flushes and stops renewing; the operator ends the attempt ``Asked`` (not a failure,
  not counted against ``maxAttempts``), shows the question (condition ``QuestionPending``),
  and keeps no pod while a person thinks. The answer reopens the slot; the claim's attempt
  runs the worker again from its recoverable prefix, and this call returns the answer.

An answer to another question (a successor that computes a different question or schema
under the same key, committed or on the Lease) is not taken: the question is asked again. A deadline
(``deadline_seconds``) ends the wait as the worker declares: the slot fails
(``on_expiry="fail"``) or takes ``default`` as the answer (``on_expiry="default"``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from agentrun.api import bounds, names
from agentrun.api import questions as rules
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records

QuestionError = rules.QuestionError
JSON = records.JSON


class QuestionAsked(Exception):
    """The attempt asked a person and must end; the next attempt's ``ask`` gets the answer.

    ``key``: the question's key; ``digest``: what an answer is bound to."""

    def __init__(self, message: str, *, key: str, digest: str) -> None:
        super().__init__(message)
        self.key = key
        self.digest = digest


@dataclass(kw_only=True)
class Questions:
    """The questions of one attempt over its ``steps``; ``answers``: where the pod finds
    the answers given by reference (the operator mounts each at ``<answers>/<key>/value``)."""

    steps: prefix.Steps
    answers: Path = Path(names.ANSWERS_MOUNT_ROOT)

    @property
    def attempt(self) -> int:
        return self.steps.prefix.attempt

    def _bound(self, key: str, digest: str) -> tuple[bool, JSON]:
        """(True, the value) if the record ``key`` (the answer committed as a step, or the
        operator's ``<key>.answer``) holds an answer to this very question (``digest``)."""
        done, payload = self.steps.committed(key)
        if not done or not isinstance(payload, dict) or payload.get("digest") != digest:
            return False, None
        given = payload.get("valueFrom")
        if isinstance(given, dict):  # an answer by reference: the file the pod mounts
            return True, self._mounted(key.removesuffix(names.ANSWERED_SUFFIX),
                                       sha256=str(given.get("sha256")))
        return True, payload.get("value")

    def _mounted(self, key: str, *, sha256: str) -> JSON:
        """The answer to ``key`` from its mounted file, verified against ``sha256``; a
        :class:`records.RecordError` when it cannot be read intact (never a guess)."""
        path = self.answers / key / names.ANSWERS_FILE
        try:
            with path.open("rb") as found:
                data = found.read(bounds.ANSWER_FILE_BYTES + 1)
        except OSError as error:
            raise records.RecordError(f"question {key}: its answer is given by reference and "
                                      f"{path} cannot be read ({error.strerror})") from None
        if hashlib.sha256(data).hexdigest() != sha256:
            raise records.RecordError(f"question {key}: {path} is not the answer given (its "
                                      f"sha256 is not {sha256})")
        try:
            value: JSON = json.loads(data)
        except ValueError as error:
            raise records.RecordError(f"question {key}: {path} is not JSON: {error}") from None
        return value

    def _asked_here(self) -> int:
        return sum(1 for name, record in self.steps.prefix.committed.items()
                   if name.endswith(names.QUESTION_SUFFIX) and record.attempt == self.attempt)

    def ask(self, key: str, question: str, *, schema: Mapping[str, Any] | None = None,
            deadline_seconds: int | None = None,
            on_expiry: Literal["fail", "default"] = "fail", default: JSON = None) -> JSON:
        """The answer to ``question`` (see the module docstring); raises
        :class:`QuestionAsked` when it is asked now, :class:`QuestionError` when the
        question is out of its bounds (nothing is committed then)."""
        records.check_step_key(key)
        plain = dict(schema) if schema is not None else None
        payload = _payload(question=question, schema=plain, deadline_seconds=deadline_seconds,
                           on_expiry=on_expiry, default=default)
        digest = rules.digest(question=question, schema=plain)
        with self.steps.lock:  # looked up and committed as one (the sidecar's threads share)
            done, value = self._bound(key, digest)
            if done:
                self.steps.done.append(key)
                return value
            answered, value = self._bound(f"{key}{names.ANSWERED_SUFFIX}", digest)
            if answered:
                if self.steps.prefix.get(key) is not None:
                    self.steps.repeated.append(key)  # committed for another question
                self.steps.commit(records.make(key=key, kind=records.Kind.DECISION,
                                               attempt=self.attempt,
                                               payload={"digest": digest, "value": value},
                                               store=self.steps.store))
                return value
        told = (f"question {key} (digest {digest}) is asked; this attempt ends and the slot "
                "waits for a person's answer (kubectl agentrun answer)")
        with self.steps.lock:  # counted and committed as one (the sidecar's sessions share)
            if self.steps.prefix.get(f"{key}{names.QUESTION_SUFFIX}") is not None and (
                    self.steps.prefix.committed[f"{key}{names.QUESTION_SUFFIX}"].attempt
                    == self.attempt):
                raise QuestionAsked(told, key=key, digest=digest)
            if self._asked_here() >= bounds.QUESTIONS_KEPT:
                raise QuestionError(f"question {key}: this attempt already asked "
                                    f"{bounds.QUESTIONS_KEPT}, as many as a slot shows")
            self.steps.commit(records.make(key=f"{key}{names.QUESTION_SUFFIX}",
                                           kind=records.Kind.DECISION, attempt=self.attempt,
                                           payload=payload))
        raise QuestionAsked(told, key=key, digest=digest)


def check(*, question: Any, schema: Mapping[str, Any] | None, deadline_seconds: Any,
          on_expiry: Any, default: JSON) -> None:
    """:class:`QuestionError` if :meth:`Questions.ask` would refuse these arguments (for a
    caller that asks several at once and must commit none when one is out of bounds)."""
    if not isinstance(question, str):
        raise QuestionError(f"a question is text, not {type(question).__name__}")
    _payload(question=question, schema=None if schema is None else dict(schema),
             deadline_seconds=deadline_seconds, on_expiry=on_expiry, default=default)


def _payload(*, question: str, schema: dict[str, Any] | None, deadline_seconds: int | None,
             on_expiry: str, default: JSON) -> dict[str, JSON]:
    """The ``<key>.question`` record's payload, or :class:`QuestionError` out of bounds."""
    rules.check_question(question=question, schema=schema)
    if deadline_seconds is not None and (
            isinstance(deadline_seconds, bool) or not isinstance(deadline_seconds, int)
            or not 0 < deadline_seconds <= bounds.MAX_DEADLINE_SECONDS):
        raise QuestionError(f"deadline_seconds must be whole seconds from 1 to "
                            f"{bounds.MAX_DEADLINE_SECONDS}, not {deadline_seconds!r}")
    if on_expiry not in ("fail", "default"):
        raise QuestionError(f"on_expiry must be 'fail' or 'default', not {on_expiry!r}")
    if on_expiry == "default":
        if deadline_seconds is None:
            raise QuestionError("on_expiry='default' needs deadline_seconds: a default is "
                                "taken only when a deadline passes")
        rules.check_value(default, what="the default answer")
        why = rules.violation(default, schema=schema)
        if why is not None:
            raise QuestionError(f"the default answer does not satisfy the schema: {why}")
    payload: dict[str, JSON] = {
        "question": question, "schema": schema, "deadlineSeconds": deadline_seconds,
        "onExpiry": on_expiry, "default": default if on_expiry == "default" else None}
    size = len(rules.canonical(payload))
    if size > bounds.INLINE_PAYLOAD_BYTES:
        raise QuestionError(f"the question, its schema and its default are {size} bytes of "
                            f"canonical JSON together; at most {bounds.INLINE_PAYLOAD_BYTES} "
                            "(the record the operator reads on the Lease): shorten them, and "
                            "put long context in a step's result or an artifact")
    return payload
