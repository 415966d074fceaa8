"""Approvals: an effect that may be sent only once people approved its exact payload.

A worker's effect that requires approval (the worker asks for it, or the LaunchSpec's
``spec.approvals`` floor does: ``agentrun.worker``'s ``Ledger.effect``) stops before its
intent: it commits the payload's bytes to the journal (``<key>.payload``) and the request
``<key>.approval`` on its own Lease, with the payload's sha256 *digest*, a bounded,
redacted *view* of it and the number of distinct *approvers* it needs. Its attempt ends
``Asked``, as a question's does, and the request is kept as a question is
(``status.questions``, an entry with ``approvers`` set: :mod:`.questionrecords` shows it,
keeps it and hands on its decision), because it is one: a question whose answer is
approved or denied, asked of other people than the run's creator.

The approve and deny commands name the key and the digest the approver checked; an
approval counts only for that digest (a successor that computes different arguments asks
again, under a new digest). Separation of duties: the run's creator (``status.creator``,
stamped by admission) may not approve its own run's effects unless granted the verb
``approve-own``; a run without a verified creator fails closed (only ``approve-own``
approves); everyone else needs the verb ``approve``; the same person counts once. Once
enough distinct people approved, or anyone with ``approve`` (or the creator) denied, the
entry is decided, the slot reopens, and every later attempt's Lease carries
``<key>.approved`` with the decision bound to the digest. Pure: no I/O.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentrun.api import bounds, names, questions, records
from agentrun.api.slots import Predicate, QuestionEntry, QuestionState, SlotStatus
from agentrun.core.attempts import questionrecords

Failure = tuple[Predicate, str]
APPROVED, DENIED = "approved", "denied"


class Unknown:
    """The pinned LaunchSpec's floors could not be read: every effect needs the most
    approvers (a request is read once; it must never need fewer than the floor)."""


UNKNOWN = Unknown()


def approver_digest(actor: str) -> str:
    """How an approver is kept on the entry: enough of sha256(name) to tell people apart."""
    return hashlib.sha256(actor.encode()).hexdigest()[:bounds.APPROVER_DIGEST_CHARS]


def _entry(key: str, *, attempt: int, payload: Mapping[str, Any], now: datetime,
           floors: Mapping[str, int] | Unknown) -> QuestionEntry:
    """One approval request from its record's payload; what a worker wrote past the SDK's
    bounds is clipped or made safe (an unreadable digest can be approved by no one), and
    the approvers it needs are never fewer than the pinned LaunchSpec's floor for the
    effect (a worker that wrote the record itself cannot lower it)."""
    def text(field: str) -> str:
        value = payload.get(field)
        return value if isinstance(value, str) else ""
    effect = bounds.clip(text("effect") or "?", limit=bounds.EFFECT_NAME_CHARS)
    owner = bounds.clip(text("owner") or effect, limit=bounds.EFFECT_NAME_CHARS)
    view = bounds.printable(text("view"))
    digest = text("digest")
    if len(digest) != bounds.DIGEST_CHARS or not re.fullmatch(bounds.DIGEST_PATTERN, digest):
        digest = "0" * bounds.DIGEST_CHARS  # no payload has it
    wanted = payload.get("approvers")
    approvers = wanted if isinstance(wanted, int) and not isinstance(wanted, bool) and (
        1 <= wanted <= bounds.MAX_APPROVERS) else bounds.MAX_APPROVERS
    approvers = bounds.MAX_APPROVERS if isinstance(floors, Unknown) else max(
        approvers, floors.get(text("effect"), 0))
    question = bounds.clip_bytes(f"effect {effect} (owner {owner}): {view}",
                                 limit=bounds.QUESTION_BYTES)
    return QuestionEntry(key=key, attempt=attempt, question=question, digest=digest,
                         approvers=approvers, asked_at=now)


def requested_on(lease: Mapping[str, Any] | None, *, now: datetime, pod_uid: str | None,
                 floors: Mapping[str, int] | Unknown) -> list[QuestionEntry]:
    """The ``<key>.approval`` records the attempt's own pod committed on its Lease;
    ``floors``: the pinned LaunchSpec's (effect name -> approvers)."""
    if lease is None:
        return []
    found = []
    for key, record in records.decisions_of(lease, pod_uid=pod_uid,
                                            suffix=names.APPROVAL_SUFFIX):
        payload = record.inline if isinstance(record.inline, dict) else {}
        found.append(_entry(key, attempt=record.attempt, payload=payload, now=now,
                            floors=floors))
    return found[:bounds.QUESTIONS_KEPT]


def _waiting(status: SlotStatus, key: str) -> QuestionEntry | None:
    return next((q for q in questionrecords.waiting(status)
                 if q.key == key and q.approvers is not None), None)


def failure(*, key: str | None, digest: str | None, actor: str | None,
            granted: frozenset[str], creator: str | None, deny: bool, status: SlotStatus,
            slot: str) -> Failure | None:
    """Why an approve (or, ``deny``, a deny) of ``key`` for ``digest`` by ``actor`` cannot
    be accepted (after the run and reason checks); ``granted``: the verbs admission found
    the actor holds; ``creator``: the run's verified creator (None: it has none)."""
    if key is None or digest is None:
        return Predicate.MALFORMED, "the effect's key and the payload's digest are required"
    entry = _waiting(status, key)
    if entry is None:
        done = next((q for q in reversed(status.questions)
                     if q.key == key and q.approvers is not None), None)
        why = (f"it was {decision(done)} at {done.answered_at}: an approval is decided once"
               if done is not None and done.state is QuestionState.ANSWERED
               else "no approval with that key waits")
        shown = ", ".join(q.key for q in questionrecords.waiting(status)
                          if q.approvers is not None) or "none"
        return (Predicate.NO_PENDING_QUESTION,
                f"slot {slot!r} has no pending approval {key!r}: {why} (waiting: {shown}); "
                "see status.questions")
    if digest != entry.digest:
        return (Predicate.DIGEST_MISMATCH,
                f"the payload of effect key {key!r} waiting for approval has digest "
                f"{entry.digest}, not {digest}: it is not the payload you checked (an "
                "attempt computed other arguments); check that one and send its digest")
    approver = names.VERB_APPROVE in granted
    if actor is None:  # admission stamps every command's actor: never taken on trust
        return Predicate.NOT_APPROVER, "the command carries no stamped actor"
    if deny:
        if approver or (creator is not None and actor == creator):
            return None
        return (Predicate.NOT_APPROVER,
                f"{actor!r} may not deny it: denying needs the verb 'approve' on slots (the "
                "role agentrun-approver), or being the run's creator")
    own = names.VERB_APPROVE_OWN in granted
    if creator is None and not own:
        return (Predicate.SELF_APPROVAL,
                "the run has no verified creator (run condition CreatorVerified), so "
                "approving cannot be shown to be someone else's: only a person granted the "
                "verb 'approve-own' on slots may approve its effects")
    if actor == creator and not own:
        return (Predicate.SELF_APPROVAL,
                f"{actor!r} created this run and may not approve its own run's effects "
                "(separation of duties) unless granted the verb 'approve-own' on slots")
    if not approver:
        return (Predicate.NOT_APPROVER,
                f"{actor!r} may not approve effects: approving needs the verb 'approve' on "
                "slots (the role agentrun-approver)")
    if approver_digest(actor) in entry.approved_by:
        return (Predicate.ALREADY_APPROVED,
                f"{actor!r} already approved it: it needs {entry.approvers} distinct "
                f"approvers ({len(entry.approved_by)} so far)")
    return None


def decision(entry: QuestionEntry) -> str | None:
    """``approved`` or ``denied`` once decided, else None."""
    try:
        value = json.loads(entry.value or "null")
    except ValueError:
        return None
    found = value.get("decision") if isinstance(value, dict) else None
    return found if found in (APPROVED, DENIED) else None


def decided(status: SlotStatus, *, key: str, actor: str, deny: bool, reason: str,
            slot: str, now: datetime) -> tuple[SlotStatus, str | None]:
    """``actor``'s approval (or deny) of the waiting entry ``key`` counted; once enough
    distinct people approved, or at a deny, the entry is decided (its value the decision)
    and the condition updated. Returns the new status and the decision (None: more
    approvals are needed)."""
    entry = _waiting(status, key)
    assert entry is not None  # failure() said so
    by = [*entry.approved_by, approver_digest(actor)][:bounds.MAX_APPROVERS] if not deny else (
        entry.approved_by)
    if not deny and len(by) < (entry.approvers or bounds.MAX_APPROVERS):
        new = questionrecords.marked(status, key=key, update={"approved_by": by},
                                     approval=True)
        return questionrecords.with_condition(new, slot=slot, now=now), None
    verdict = DENIED if deny else APPROVED
    # What the next attempts' Leases carry: the decision, with how many were required and
    # how many approved, so a successor that needs more approvers than were required asks
    # again rather than taking it.
    update = {"state": QuestionState.ANSWERED, "approved_by": by, "answered_at": now,
              "value": questions.canonical({"decision": verdict, "required": entry.approvers,
                                            "approvals": len(by)}).decode(),
              "actor": bounds.clip(actor, limit=bounds.ACTOR_CHARS)}
    new = questionrecords.marked(status, key=key, update=update, approval=True)
    message = (f"effect key {key} {verdict} by {actor}: {reason}; the next claim's attempt "
               f"reads the decision (record {key}{names.APPROVED_SUFFIX})")
    return questionrecords.with_condition(new, slot=slot, now=now, message=message), verdict
