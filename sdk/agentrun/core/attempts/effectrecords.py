"""Unresolved effects: what the operator reads, shows and hands on.

An *unresolved effect* is one a worker could not settle: an intent without an outcome
whose owner answered "unknown", or that had no ``reconcile`` to ask. The worker commits
the record ``<key>.unresolved`` on its own Lease and stops (``agentrun.worker._effects``).
The operator *observes* it (:func:`observed`) into ``status.effects`` (at most
:data:`~agentrun.api.bounds.EFFECTS_KEPT` entries) and the condition ``EffectUnresolved``;
while one is *open* (observed, not resolved) no claim starts, automatic or commanded.
A person records the owner's answer with the resolve-effect command (:func:`failure`,
:func:`resolve`); every later attempt's Lease then carries, per resolved key, the record
``<key>.resolved`` (:func:`resolved_annotations`), which the worker's ledger reads.

Entries are told apart by (key, attempt): a successor that re-sent and stopped again on
the same key opens a new entry. Only the Lease of the slot's latest attempt is observed,
and entries of that attempt are never dropped to make room, so none is observed twice.
To make room, only resolved entries of earlier attempts go. What does not fit (a worker
that recorded more than fit, which the SDK does not do) is *not shown*: counted in
``status.effectsNotShown`` and the condition, never an error; it does not hold claims,
since nobody could answer it now, and a later attempt that meets it records it again on
its own Lease (``agentrun.worker._effects``), where it is shown and answered.
Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentrun.api import bounds, conditions, cuts, names, records
from agentrun.api.slots import EffectEntry, EffectState, Predicate, SlotStatus

CONDITION = names.EFFECT_UNRESOLVED_CONDITION
NO_RECONCILE_CAUSE = "no-reconcile"  # the worker's "cause" when it had nobody to ask


def open_effects(status: SlotStatus) -> list[EffectEntry]:
    return [e for e in status.effects if e.state is EffectState.UNRESOLVED]


def blocking(status: SlotStatus, *, slot: str) -> str | None:
    """Why no attempt may start now (an open effect), or None."""
    opened = open_effects(status)
    if not opened:
        return None
    return (f"slot {slot!r} has an unresolved effect (record key {opened[0].key}): no "
            "attempt may start until a person records the owner's answer: "
            f"{command_line(slot=slot, key=opened[0].key)}; or give the slot up")


def command_line(*, slot: str, key: str) -> str:
    """The resolve-effect command a person runs, with what they must fill in."""
    return (f"kubectl annotate slot {slot} {names.RESOLVE_EFFECT_ID}=<new id> "
            f"{names.RESOLVE_EFFECT_KEY}={key} "
            f"{names.RESOLVE_EFFECT_OUTCOME}=<applied|not-applied> "
            f"{names.RESOLVE_EFFECT_REASON}=<why> [{names.RESOLVE_EFFECT_RESULT}=<result>]")


def describe(entry: EffectEntry, *, slot: str) -> str:
    """The condition's message for one open effect: what it is and what to do."""
    return (f"effect {entry.effect or '?'} (record key {entry.key}, idempotency key "
            f"{entry.idempotency_key or '?'}, owner {entry.owner or '?'}) of attempt "
            f"{entry.attempt} is unresolved: {entry.reason or 'no reason recorded'}. Ask its "
            f"owner whether it was applied, then record the answer: "
            f"{command_line(slot=slot, key=entry.key)}; or give the slot up "
            f"({names.GIVE_UP_ID}); a reassignment alone does not clear it")


def _text(payload: Mapping[str, Any], field: str, limit: int) -> str:
    value = payload.get(field)
    return bounds.clip(value, limit=limit) if isinstance(value, str) else ""


def unresolved_on(lease: Mapping[str, Any] | None, *, now: datetime,
                  pod_uid: str | None) -> list[EffectEntry]:
    """The ``<key>.unresolved`` records of one attempt Lease, as (open) entries; none
    when a pod other than the attempt's own (uid ``pod_uid``) wrote its records."""
    if lease is None:
        return []
    entries = []
    for key, record in records.decisions_of(lease, pod_uid=pod_uid,
                                            suffix=names.UNRESOLVED_SUFFIX):
        payload = record.inline if isinstance(record.inline, dict) else {}
        reason = _text(payload, "reason", bounds.RECORD_MESSAGE_CHARS) or (
            "its payload is stored by reference" if record.ref else "")
        entries.append(EffectEntry(
            key=key, attempt=record.attempt, effect=_text(payload, "effect", names.MAX_NAME),
            idempotency_key=_text(payload, "idempotencyKey",
                                  bounds.IDEMPOTENCY_KEY_CHARS) or None,
            owner=_text(payload, "owner", names.MAX_NAME), reason=reason,
            cause=_text(payload, "cause", names.MAX_NAME), observed_at=now))
    return entries


def merged(effects: list[EffectEntry], new: list[EffectEntry], *,
           latest: int) -> tuple[list[EffectEntry], list[EffectEntry]]:
    """(``effects`` with as many of ``new`` as fit in EFFECTS_KEPT, the ones taken).

    Room is made only by dropping resolved entries of attempts before ``latest`` (oldest
    first): an open entry still holds claims, and a resolved one of the latest attempt
    carries its answer to the next attempt's Lease. ``new`` is taken in its order.
    """
    droppable = [n for n, e in enumerate(effects)
                 if e.state is EffectState.RESOLVED and e.attempt < latest]
    room = max(bounds.EFFECTS_KEPT - len(effects) + len(droppable), 0)
    taken = new[:room]
    dropped = set(droppable[:max(len(effects) + len(taken) - bounds.EFFECTS_KEPT, 0)])
    return [e for n, e in enumerate(effects) if n not in dropped] + taken, taken


def not_shown(status: SlotStatus) -> str:
    """What the condition says of the latest attempt's effects that are not shown."""
    count = status.effects_not_shown
    if not count:
        return ""
    return (f"{count} more unresolved effect{'s' if count > 1 else ''} recorded by the "
            f"latest attempt {'are' if count > 1 else 'is'} not shown (status.effects "
            f"keeps {bounds.EFFECTS_KEPT}; status.effectsNotShown counts them): nobody can "
            "answer one now, so none holds claims; a later attempt that meets one records "
            "it again, and it is shown and answered then")


def with_condition(status: SlotStatus, *, slot: str, now: datetime,
                   resolved: str | None = None) -> SlotStatus:
    """``EffectUnresolved`` from the open entries: True naming the first, else False,
    reason NotShown while some are not shown, else Resolved (``resolved``: the message
    of the answer that closed the last one)."""
    opened = open_effects(status)
    hidden = not_shown(status)
    value: conditions.ConditionStatus = "False"
    if opened:
        first = opened[0]
        more = f" ({len(opened) - 1} more open: status.effects)" if len(opened) > 1 else ""
        reason = (names.EFFECT_NO_RECONCILE if first.cause == NO_RECONCILE_CAUSE
                  else names.EFFECT_OWNER_ANSWER_UNKNOWN)
        value = "True"
        message = describe(first, slot=slot) + more + (f"; {hidden}" if hidden else "")
    elif hidden:
        reason = names.EFFECT_NOT_SHOWN
        message = f"{resolved}; {hidden}" if resolved else f"no shown effect is open; {hidden}"
    elif resolved is not None or conditions.is_true(status.conditions, CONDITION) or (
            _reason(status) == names.EFFECT_NOT_SHOWN):
        reason, message = names.EFFECT_RESOLVED, resolved or "no effect is unresolved"
    else:
        return status
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=CONDITION, status=value, reason=reason,
        message=bounds.clip(message), now=now)})


def _reason(status: SlotStatus) -> str | None:
    found = next((c for c in status.conditions if c.type == CONDITION), None)
    return None if found is None else found.reason


def observed(status: SlotStatus, *, lease: Mapping[str, Any] | None, slot: str,
             now: datetime) -> tuple[SlotStatus, list[EffectEntry]]:
    """The status with the lease's unresolved effects not yet in it (as many as fit, the
    rest counted in ``effectsNotShown``), and the ones newly shown. Never raises: any
    number of records, any status."""
    seen = {(e.key, e.attempt) for e in status.effects}
    name = (lease or {}).get("metadata", {}).get("name")
    pod_uid = next((a.pod_uid for a in status.attempts if a.lease == name), None)
    new = [e for e in unresolved_on(lease, now=now, pod_uid=pod_uid)
           if (e.key, e.attempt) not in seen]
    effects, taken = merged(status.effects, new, latest=max(
        (e.attempt for e in new), default=bounds.MAX_ATTEMPT_NUMBER))
    hidden = len(new) - len(taken)
    if not taken and hidden == status.effects_not_shown:
        return status, []
    changed = status.model_copy(update={"effects": effects, "effects_not_shown": hidden})
    return with_condition(changed, slot=slot, now=now), taken


def failure(*, key: str | None, outcome: str | None, result: str | None,
            status: SlotStatus, slot: str) -> tuple[Predicate, str] | None:
    """Why a resolve-effect of ``key`` cannot be accepted (after owner and reason checks)."""
    if key is None or outcome is None:
        missing = names.RESOLVE_EFFECT_KEY if key is None else names.RESOLVE_EFFECT_OUTCOME
        return (Predicate.MALFORMED, f"{missing} is required (the effect's record key, and "
                                     "applied or not-applied)")
    if not any(e.key == key for e in open_effects(status)):
        opened = ", ".join(e.key for e in open_effects(status)) or "none"
        hidden = (f"; {status.effects_not_shown} more of the latest attempt are not shown "
                  "and cannot be answered before a later attempt records them again"
                  if status.effects_not_shown else "")
        return (Predicate.NO_UNRESOLVED_EFFECT,
                f"slot {slot!r} has no unresolved effect with record key {key!r} shown (open: "
                f"{opened}{hidden}); see status.effects")
    bare = {"answer": outcome, "result": result_value(result), "reason": "", "actor": "",
            "unresolvedAttempt": bounds.MAX_ATTEMPT_NUMBER}
    try:
        size = len(records.canonical(bare))
    except records.RecordError as error:  # nested too deep for the record that carries it
        return Predicate.MALFORMED, f"{names.RESOLVE_EFFECT_RESULT}: {error}"
    if size > bounds.INLINE_PAYLOAD_BYTES:
        return (Predicate.MALFORMED,
                f"{names.RESOLVE_EFFECT_RESULT} encodes to more than "
                f"{bounds.INLINE_PAYLOAD_BYTES} bytes of JSON; give a shorter result (or a "
                "reference to it)")
    return None


def result_value(text: str | None) -> records.JSON:
    """The result as the successor gets it: JSON when the text parses as JSON, else text."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def resolve(status: SlotStatus, *, key: str, outcome: str, reason: str, actor: str | None,
            result: str | None, slot: str, now: datetime) -> SlotStatus:
    """Mark the open entries of ``key`` resolved with the owner's answer; the condition
    goes False (reason Resolved) once none is open."""
    answered = {"state": EffectState.RESOLVED, "outcome": outcome,
                "result": result if outcome == "applied" else None,
                "resolution": bounds.clip_bytes(reason, limit=bounds.REASON_BYTES),
                "actor": bounds.optional_clip(actor, limit=bounds.ACTOR_CHARS),
                "resolved_at": now}
    effects = [e.model_copy(update=answered)
               if e.key == key and e.state is EffectState.UNRESOLVED else e
               for e in status.effects]
    new = status.model_copy(update={"effects": effects})
    message = (f"effect key {key} resolved {outcome} by {actor}: {reason}; claims resume "
               "as usual, and the next attempt reads the answer (record "
               f"{key}{names.RESOLVED_SUFFIX})")
    return with_condition(new, slot=slot, now=now, resolved=message)


def resolved_payload(entry: EffectEntry) -> dict[str, records.JSON]:
    """The ``<key>.resolved`` record's payload; clipped so it stays inline."""
    payload: dict[str, records.JSON] = {
        "answer": entry.outcome, "result": result_value(entry.result),
        "reason": entry.resolution or "", "actor": entry.actor or "",
        "unresolvedAttempt": entry.attempt}
    for field in ("reason", "actor"):  # the person's texts give way to the result
        while len(records.canonical(payload)) > bounds.INLINE_PAYLOAD_BYTES and payload[field]:
            text = str(payload[field])
            payload[field] = text[:len(text) // 2]
    return payload


def resolved_annotations(status: SlotStatus, *, attempt: int) -> dict[str, str]:
    """The ``<key>.resolved`` records for attempt ``attempt``'s Lease: per key, the
    answer to its latest resolved entry (as ``agentrun.worker._records`` encodes them)."""
    latest: dict[str, EffectEntry] = {}
    resent = cuts.resends_of(status.resends)
    for entry in status.effects:
        if entry.attempt <= resent.get(entry.key, 0):
            continue  # an effect sent again: that answer was about its earlier sending
        if entry.state is EffectState.RESOLVED and entry.attempt < attempt and (
                entry.key not in latest or latest[entry.key].attempt < entry.attempt):
            latest[entry.key] = entry
    found = {}
    for key, entry in sorted(latest.items()):
        data = records.canonical(resolved_payload(entry))
        record = records.Record(
            attempt=attempt, digest=records.digest(data), inline=resolved_payload(entry),
            key=f"{key}{names.RESOLVED_SUFFIX}", kind=records.Kind.DECISION, size=len(data))
        found[record.annotation] = records.encode(record)
    return found
