"""Questions a worker asked: what the operator reads, shows, checks answers against, and hands on.

A *question* is asked by a worker that needs a person's answer to go on
(``agentrun.worker.Worker.ask``): it commits the record ``<key>.question`` on its own
Lease and its attempt ends, with outcome ``Asked`` (:func:`asked_on` read at the end):
neither a failure nor a use of ``maxAttempts``, and no pod waits while a person thinks.
The operator keeps it in ``status.questions`` (at most
:data:`~agentrun.api.bounds.QUESTIONS_KEPT`) with the condition ``QuestionPending``; the
slot waits in RetryWait, claimable by nobody, until the answer command is accepted
(:func:`failure`, :func:`answered`), which reopens it; or until the question's deadline,
when it fails or takes the worker's default (:func:`expired`). Every later attempt's Lease
carries, per answered key, the record ``<key>.answer`` (:func:`answer_annotations`): the
value byte for byte as the person gave it (canonical JSON), bound to the question's
digest, so a successor that asks something else is asked again.

A question is *waiting* while it is Pending, of the slot's latest attempt, and the slot
waits in RetryWait not reopened: only then can it be answered or expire. A reassignment
reopens the slot without an answer; the next attempt asks again, and its question replaces
the one it asks again. Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

from agentrun.api import bounds, conditions, cuts, names, questions, records
from agentrun.api.slots import (
    Predicate,
    QuestionEntry,
    QuestionState,
    SlotState,
    SlotStatus,
)
from agentrun.core.machine import transitions

CONDITION = names.QUESTION_PENDING_CONDITION


def _latest(status: SlotStatus) -> int | None:
    return next((a.number for a in status.attempts if a.pod == status.prior_worker), None)


def waiting(status: SlotStatus) -> list[QuestionEntry]:
    """The questions a person may answer now (see the module docstring)."""
    latest = _latest(status)
    if status.state is not SlotState.RETRY_WAIT or latest is None or transitions.is_reopened(
            status):
        return []
    return [q for q in status.questions if q.state is QuestionState.PENDING
            and q.attempt == latest]


def command_line(*, slot: str, key: str) -> str:
    return (f"kubectl agentrun answer {slot} --key {key} --value '<JSON>' --reason '<why>' "
            f"(or annotate {names.ANSWER_ID}, {names.ANSWER_KEY}, {names.ANSWER_VALUE}, "
            f"{names.ANSWER_REASON}, {names.ANSWER_RUN})")


def describe(entry: QuestionEntry, *, slot: str) -> str:
    if entry.approvers is not None:
        return (f"attempt {entry.attempt} asks for approval (key {entry.key}; payload digest "
                f"{entry.digest}; {entry.approvers} distinct approvers needed, "
                f"{len(entry.approved_by)} so far: kubectl agentrun approve {slot} --key "
                f"{entry.key} --digest {entry.digest} --reason '<why>', or kubectl agentrun "
                f"deny; the exact bytes: kubectl agentrun history {slot} --record "
                f"{entry.key}.payload): {bounds.printable(entry.question)}")
    schema = f"; answer schema (digest {entry.digest}): {entry.json_schema}" if (
        entry.json_schema) else f"; any JSON answers it (digest {entry.digest})"
    deadline = "" if entry.deadline is None else (
        f"; unanswered at {entry.deadline.isoformat()} the slot "
        + ("fails" if entry.on_expiry == "fail" else f"takes the default {entry.default}"))
    return (f"attempt {entry.attempt} asks (key {entry.key}; answer: "
            f"{command_line(slot=slot, key=entry.key)}){deadline}: "
            f"{bounds.printable(entry.question)}{schema}")


def _text(payload: Mapping[str, Any], field: str) -> str | None:
    value = payload.get(field)
    return value if isinstance(value, str) else None


def _entry(key: str, *, attempt: int, payload: Mapping[str, Any], now: datetime) -> QuestionEntry:
    """One entry from a record's payload; what a worker wrote past the SDK's bounds is
    clipped, and an unusable schema kept as written, so every answer to it is refused with
    why (never a question that cannot be shown)."""
    question = bounds.clip_bytes(_text(payload, "question") or "", limit=bounds.QUESTION_BYTES)
    schema = payload.get("schema")
    schema_text = None if schema is None else bounds.clip_bytes(
        questions.canonical(schema).decode(), limit=bounds.SCHEMA_BYTES)
    seconds = payload.get("deadlineSeconds")
    deadline = now + timedelta(seconds=seconds) if isinstance(seconds, int) and (
        0 < seconds <= bounds.MAX_DEADLINE_SECONDS) else None
    default = payload.get("default")
    default_text = None if default is None else questions.canonical(default).decode()
    on_default = payload.get("onExpiry") == "default" and default_text is not None and len(
        default_text.encode()) <= bounds.ANSWER_VALUE_BYTES
    return QuestionEntry(
        key=key, attempt=attempt, question=question, json_schema=schema_text,
        digest=questions.digest(question=question, schema=schema if isinstance(
            schema, dict) else None),
        deadline=deadline, on_expiry="default" if on_default else "fail",
        default=default_text if on_default else None, asked_at=now)


def asked_on(lease: Mapping[str, Any] | None, *, now: datetime,
             pod_uid: str | None) -> list[QuestionEntry]:
    """The ``<key>.question`` records the attempt's own pod (uid ``pod_uid``) committed on
    its Lease, as Pending entries (at most QUESTIONS_KEPT, in key order)."""
    if lease is None:
        return []
    entries = []
    for key, record in records.decisions_of(lease, pod_uid=pod_uid,
                                            suffix=names.QUESTION_SUFFIX):
        payload = record.inline if isinstance(record.inline, dict) else {
            "question": "(the question's record is stored by reference: not shown)"}
        entries.append(_entry(key, attempt=record.attempt, payload=payload, now=now))
    return entries[:bounds.QUESTIONS_KEPT]


def with_condition(status: SlotStatus, *, slot: str, now: datetime,
                   message: str | None = None) -> SlotStatus:
    """``QuestionPending`` True naming the first waiting question, else False (reason
    Answered) once one was set; ``message``: what closed the last one."""
    open_ = waiting(status)
    if open_:
        more = f" ({len(open_) - 1} more: status.questions)" if len(open_) > 1 else ""
        capped = (f"the slot has used all {bounds.MAX_ATTEMPT_NUMBER} attempt numbers, so no "
                  "answer can be accepted: give it up and start a new run; "
                  if status.attempt_count >= bounds.MAX_ATTEMPT_NUMBER else "")
        return status.model_copy(update={"conditions": conditions.set_condition(
            status.conditions, type_=CONDITION, status="True", reason=names.QUESTION_ASKED,
            message=bounds.clip(capped + describe(open_[0], slot=slot) + more), now=now)})
    if message is None and not conditions.is_true(status.conditions, CONDITION):
        return status
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=CONDITION, status="False", reason=names.QUESTION_ANSWERED,
        message=bounds.clip(message or "no question is waiting"), now=now)})


def observed(status: SlotStatus, *, asked: list[QuestionEntry]) -> SlotStatus:
    """``asked`` (one attempt's new questions) kept in ``status.questions``: an earlier
    Pending entry of the same key is replaced (it was asked again), and room is made by
    dropping the oldest entries that are no longer Pending (those without an answer
    first), then the oldest of all."""
    keys = {q.key for q in asked}
    kept = [q for q in status.questions
            if not (q.key in keys and q.state is QuestionState.PENDING)]
    while len(kept) + len(asked) > bounds.QUESTIONS_KEPT and kept:
        # (an answer by reference is an answer: its value is in valueFrom)
        # First what carries no answer (Closed, expired to a failure), then the oldest
        # answered: answers are what later attempts' Leases are built from.
        done = next((n for n, q in enumerate(kept)
                     if q.state is not QuestionState.PENDING and q.value is None
                     and q.value_from is None),
                    next((n for n, q in enumerate(kept)
                          if q.state is not QuestionState.PENDING), 0))
        kept.pop(done)
    return status.model_copy(update={"questions": [*kept, *asked][-bounds.QUESTIONS_KEPT:]})


Given = Callable[[], "str | tuple[Predicate, str]"]  # an answer by reference, resolved late


def failure(*, key: str | None, value: str | Given | None, digest: str | None,
            status: SlotStatus, slot: str, now: datetime,
            limit: int = bounds.ANSWER_VALUE_BYTES) -> tuple[Predicate, str] | None:
    """Why an answer of ``key`` with ``value`` (JSON text) cannot be accepted (after the
    run, reason and owner checks); ``digest``: the question the person read, if given.
    ``value`` may be a function that resolves it (an answer by reference): called only
    once the question is known to wait, so a wrong key, a stale digest or an expired
    question is said first, as for any answer; what it returns instead of the text is the
    refusal."""
    if key is None or value is None:
        missing = names.ANSWER_KEY if key is None else names.ANSWER_VALUE
        return Predicate.MALFORMED, f"{missing} is required (the question's key, and the answer)"
    open_ = [q for q in waiting(status) if q.approvers is None]
    entry = next((q for q in open_ if q.key == key), None)
    if entry is None and any(q.key == key and q.approvers is not None for q in waiting(status)):
        return (Predicate.NO_PENDING_QUESTION,
                f"slot {slot!r}'s key {key!r} waits for an approval, not an answer: "
                "kubectl agentrun approve (or deny) it")
    if entry is None:
        done = next((q for q in reversed(status.questions)
                     if q.key == key and q.approvers is None), None)
        if done is not None and done.state is QuestionState.ANSWERED:
            why = (f"it was answered by {done.actor} at {done.answered_at}: a question is "
                   "answered once")
        elif done is not None and done.state is QuestionState.EXPIRED:
            return (Predicate.QUESTION_EXPIRED,
                    f"slot {slot!r}'s question {key!r} expired at {done.deadline}")
        else:
            why = "no question with that key is waiting"
        shown = ", ".join(q.key for q in open_) or "none"
        return (Predicate.NO_PENDING_QUESTION,
                f"slot {slot!r} has no pending question {key!r}: {why} (waiting: {shown}); "
                "see status.questions")
    if digest is not None and digest != entry.digest:
        return (Predicate.NO_PENDING_QUESTION,
                f"slot {slot!r}'s question {key!r} waiting now has digest {entry.digest}, "
                f"not {digest}: it is not the question you read (it was asked again, "
                "maybe differently); read status.questions and answer that one")
    if entry.deadline is not None and now >= entry.deadline:
        return (Predicate.QUESTION_EXPIRED,
                f"slot {slot!r}'s question {key!r} expired at {entry.deadline.isoformat()}")
    if callable(value):
        resolved = value()
        if isinstance(resolved, tuple):
            return resolved
        value = resolved
    try:
        parsed = json.loads(value)
        questions.check_value(parsed, what=names.ANSWER_VALUE, limit=limit)
    except ValueError as error:  # not JSON, or too large
        return Predicate.MALFORMED, f"{names.ANSWER_VALUE}: {error}"
    try:
        schema = None if entry.json_schema is None else json.loads(entry.json_schema)
        if schema is not None:
            questions.check_question(question=entry.question or "?", schema=schema)
        refused = questions.violation(parsed, schema=schema)
    except ValueError as error:  # past the SDK's bounds, or too costly for this answer
        return (Predicate.ANSWER_INVALID,
                f"question {key!r}'s schema cannot check this answer ({error}); give "
                "another answer, or give the slot up, or reassign it to ask again")
    if refused is not None:
        return (Predicate.ANSWER_INVALID,
                f"the answer does not satisfy question {key!r}'s schema: {refused}")
    return None


def answered(status: SlotStatus, *, key: str, value: str, actor: str | None, reason: str,
             slot: str, now: datetime, expired: bool = False,
             value_from: str | None = None) -> SlotStatus:
    """The waiting entry of ``key`` answered with ``value`` (stored canonical, as the
    worker will read it), the condition updated; ``value_from``: the answer came by
    reference (the next attempt's pod mounts it; larger than the status holds, only the
    reference is kept)."""
    canonical = questions.canonical(json.loads(value)).decode()
    large = value_from is not None and len(canonical.encode()) > bounds.ANSWER_VALUE_BYTES
    update = {"state": QuestionState.EXPIRED if expired else QuestionState.ANSWERED,
              "value": None if large else canonical, "value_from": value_from if large else None,
              "actor": bounds.optional_clip(actor, limit=bounds.ACTOR_CHARS),
              "answered_at": now}
    new = marked(status, key=key, update=update)
    message = (f"question {key} answered by {actor or 'its deadline (the default)'}: "
               f"{reason}; the next claim's attempt reads the answer (record "
               f"{key}{names.ANSWERED_SUFFIX})")
    return with_condition(new, slot=slot, now=now, message=message)


def reopened(status: SlotStatus, *, owner: str | None, message: str,
             now: datetime) -> SlotStatus:
    """Reopened on its pin as a reassignment reopens it (the asking attempt's ``owner``
    kept), once no question waits; else as it is."""
    if waiting(status) or status.launch_spec is None:
        return status
    return transitions.reopen(status, worker_class=status.worker_class or "",
                              launch_spec=status.launch_spec, owner_actor=owner,
                              message=message, now=now, reason=names.QUESTION_ANSWERED)


def marked(status: SlotStatus, *, key: str, update: dict[str, Any],
           approval: bool = False) -> SlotStatus:
    """The waiting questions (``approval``: approvals) of ``key`` updated with ``update``."""
    open_ = {(q.key, q.attempt) for q in waiting(status)
             if q.key == key and (q.approvers is not None) == approval}
    return status.model_copy(update={"questions": [
        q.model_copy(update=update) if (q.key, q.attempt) in open_ and (
            q.approvers is not None) == approval else q
        for q in status.questions]})


def expire(status: SlotStatus, *, key: str) -> SlotStatus:
    """The waiting entries of ``key`` marked Expired, without an answer (the slot fails
    next: ``transitions.fail`` removes the condition)."""
    return marked(status, key=key, update={"state": QuestionState.EXPIRED})


def expired(status: SlotStatus, *, now: datetime) -> QuestionEntry | None:
    """The first waiting question whose deadline has passed, if any."""
    return next((q for q in waiting(status) if q.deadline is not None and now >= q.deadline),
                None)


def next_deadline(status: SlotStatus) -> datetime | None:
    return min((q.deadline for q in waiting(status) if q.deadline is not None), default=None)


def answer_payload(entry: QuestionEntry) -> dict[str, records.JSON]:
    """The ``<key>.answer`` record's payload; the person's texts clipped so it stays inline.
    An answer by reference names the file the pod mounts and its sha256 instead."""
    given: dict[str, records.JSON] = {"value": json.loads(entry.value or "null")}
    if entry.value_from is not None:
        where, sha256 = entry.value_from.split("@sha256:")
        given = {"valueFrom": {"configMap": where.split("/", 1)[0], "sha256": sha256,
                               "path": f"{names.ANSWERS_MOUNT_ROOT}/{entry.key}/"
                                       f"{names.ANSWERS_FILE}"}}
    payload: dict[str, records.JSON] = {
        **given, "digest": entry.digest,
        "questionAttempt": entry.attempt, "expired": entry.state is QuestionState.EXPIRED,
        "actor": entry.actor or ""}
    while len(records.canonical(payload)) > bounds.INLINE_PAYLOAD_BYTES and payload["actor"]:
        text = str(payload["actor"])  # who answered gives way to the answer
        payload["actor"] = text[:len(text) // 2]
    return payload


def _handed(status: SlotStatus, *, attempt: int) -> dict[tuple[str, bool], QuestionEntry]:
    """Per key (and kind: an answer, or an approval), the latest decided entry of an
    attempt before ``attempt``: what that attempt is handed."""
    latest: dict[tuple[str, bool], QuestionEntry] = {}
    resent = cuts.resends_of(status.resends)
    for entry in status.questions:
        which = (entry.key, entry.approvers is not None)
        given = entry.value is not None or entry.value_from is not None
        if entry.approvers is not None and entry.attempt <= resent.get(entry.key, 0):
            continue  # an effect sent again is approved again
        if given and entry.attempt < attempt and (
                which not in latest or latest[which].attempt < entry.attempt):
            latest[which] = entry
    return latest


def answer_mounts(status: SlotStatus, *, attempt: int) -> list[tuple[str, str, str]]:
    """The answers by reference attempt ``attempt``'s pod mounts: (question key,
    ConfigMap, the key in it), at ``<ANSWERS_MOUNT_ROOT>/<question key>/value``."""
    found = []
    for (key, _), entry in sorted(_handed(status, attempt=attempt).items()):
        if entry.value_from is not None:
            configmap, item = entry.value_from.split("@sha256:")[0].split("/", 1)
            found.append((key, configmap, item))
    return found


def answer_annotations(status: SlotStatus, *, attempt: int) -> dict[str, str]:
    """The ``<key>.answer`` records for attempt ``attempt``'s Lease: per key, its latest
    answered question of an earlier attempt."""
    found = {}
    for (key, _), entry in sorted(_handed(status, attempt=attempt).items()):
        payload = answer_payload(entry)
        data = records.canonical(payload)
        suffix = names.ANSWERED_SUFFIX if entry.approvers is None else names.APPROVED_SUFFIX
        record = records.Record(
            attempt=attempt, digest=records.digest(data), inline=payload,
            key=f"{key}{suffix}", kind=records.Kind.DECISION, size=len(data))
        found[record.annotation] = records.encode(record)
    return found
