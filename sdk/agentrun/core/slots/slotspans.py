"""The spans one applied slot status write completed, for the run's trace: a pure diff.

Like a tally (``tallies``), a span is read off the status the operator just wrote
(``new``) against the status it read (``old``), so a retried reconcile that reads ``new``
back reports nothing twice; ids are derived (``api.traces``), so spans reported by
different operator processes, before and after a restart, join the same trace. Spans:

- *attempt*: for each attempt that gained its outcome in this write, from its
  ``startedAt`` to its ``endedAt``, under the slot's span; a ``lease expired`` event when it
  ended ``Lost`` or ``StartTimeout``; status ERROR when its outcome is a failure.
- *claim*: for each attempt started in this write (not one that failed at its claim: its
  Pod or Lease was refused, and its attempt span says so), from when the slot became claimable
  (``tallies.claimable_since``; its ``startedAt`` when not known) to its ``startedAt`` (its
  Pod and Lease exist), under the attempt's span: who it belongs to, what it was pinned to.
- *command*: each ledger entry new in this write, a moment at its ``time`` under the slot's
  span: the actor, the reason, the outcome and the failed check (a rejected reassignment's
  predicate), in the words of the ledger.
- *slot*: when the slot reached Succeeded or Failed in this write, from its creation to
  now, under the run's span. A slot rerun and ended again reports its span again, with the
  same id and a later end (a backend keeps the later, or shows both).
- *fence*: the attempt's Lease tombstoned (its holder cleared: nothing more of that worker
  commits), a moment under the attempt's span (:func:`of_tombstone`).
"""

from __future__ import annotations

from datetime import datetime

from agentrun.api import traces
from agentrun.api.slots import (
    TERMINAL_STATES,
    AttemptRecord,
    CommandRecord,
    Outcome,
    Slot,
    SlotState,
    SlotStatus,
)
from agentrun.api.traces import Attribute, SpanEvent, SpanRecord
from agentrun.core.base import owners
from agentrun.core.slots import tallies

FAILURES = frozenset({Outcome.FAILED, Outcome.LOST, Outcome.START_TIMEOUT,
                      Outcome.CLAIM_FAILED})


def of_slot_write(*, slot: Slot, old: SlotStatus, new: SlotStatus,
                  now: datetime) -> list[SpanRecord]:
    """The spans completed by writing ``new`` over ``old`` (module docstring); none for a
    slot without a uid or a controlling run (nothing to derive the trace from)."""
    uid, run_uid = slot.metadata.uid, owners.controller_uid(slot.metadata)
    if not uid or not run_uid:
        return []
    trace, parent = traces.trace_id(run_uid), traces.slot_span(uid)
    where = _where(slot)
    spans: list[SpanRecord] = []
    before = {a.number: a for a in old.attempts}
    for attempt in new.attempts:
        earlier = before.get(attempt.number)
        if earlier is None and attempt.outcome is not Outcome.CLAIM_FAILED:
            since = tallies.claimable_since(
                old=old, new=new, started=attempt, created=slot.metadata.creation_timestamp,
                has_dependencies=bool(slot.spec.depends_on))
            spans.append(_claim(attempt, trace=trace, uid=uid, where=where,
                                since=since or attempt.started_at))
        if attempt.outcome is not None and (earlier is None or earlier.outcome is None):
            spans.append(_attempt(attempt, trace=trace, uid=uid, parent=parent, where=where,
                                  now=now))
    spans += commands(old=old.commands, new=new.commands, trace=trace, parent=parent,
                      where=where)
    if new.state in TERMINAL_STATES and old.state not in TERMINAL_STATES:
        created = slot.metadata.creation_timestamp or now
        spans.append(SpanRecord(
            trace=trace, span=parent, parent=traces.run_span(run_uid),
            name=f"slot {slot.spec.node}", start=min(created, now), end=now,
            attributes={**where, "agentrun.state": str(new.state),
                        "agentrun.attempts": len(new.attempts),
                        "agentrun.reruns": new.reruns},
            error=None if new.state is SlotState.SUCCEEDED else "the slot failed"))
    return spans


def of_tombstone(*, slot: Slot, lease: str, now: datetime) -> SpanRecord | None:
    """The fence: Lease ``lease`` (``<slot>-<attempt>``) tombstoned at ``now``."""
    uid, run_uid = slot.metadata.uid, owners.controller_uid(slot.metadata)
    number = lease.rpartition("-")[2]
    if not uid or not run_uid or not number.isdigit():
        return None
    parent = traces.attempt_span(uid, int(number))
    return SpanRecord(trace=traces.trace_id(run_uid),
                      span=traces.child_span(parent, "fence", lease), parent=parent,
                      name="fence", start=now, end=now,
                      attributes={**_where(slot), "agentrun.attempt": int(number),
                                  "agentrun.lease": lease})


def commands(*, old: list[CommandRecord], new: list[CommandRecord], trace: int, parent: int,
             where: dict[str, Attribute]) -> list[SpanRecord]:
    """A moment under ``parent`` for each ledger entry of ``new`` not in ``old`` (a slot's
    ledger, or a run's)."""
    seen = {(c.request_id, c.kind, c.time) for c in old}
    return [_command(c, trace=trace, parent=parent, where=where)
            for c in new if (c.request_id, c.kind, c.time) not in seen]


def _where(slot: Slot) -> dict[str, Attribute]:
    return {"k8s.namespace.name": slot.metadata.namespace or "",
            "agentrun.run": slot.spec.run, "agentrun.slot": slot.metadata.name,
            "agentrun.node": slot.spec.node}


def _claim(attempt: AttemptRecord, *, trace: int, uid: str, where: dict[str, Attribute],
           since: datetime) -> SpanRecord:
    parent = traces.attempt_span(uid, attempt.number)
    attributes: dict[str, Attribute] = {
        **where, "agentrun.attempt": attempt.number, "agentrun.worker_class":
        attempt.worker_class, "agentrun.launch_spec": attempt.launch_spec,
        "k8s.pod.name": attempt.pod}
    if attempt.owner_actor is not None:
        attributes["agentrun.owner"] = attempt.owner_actor
    return SpanRecord(trace=trace, span=traces.child_span(parent, "claim"), parent=parent,
                      name="claim", start=min(since, attempt.started_at),
                      end=attempt.started_at, attributes=attributes)


def _attempt(attempt: AttemptRecord, *, trace: int, uid: str, parent: int,
             where: dict[str, Attribute], now: datetime) -> SpanRecord:
    end = attempt.ended_at or now
    attributes: dict[str, Attribute] = {
        **where, "agentrun.attempt": attempt.number, "agentrun.outcome": str(attempt.outcome),
        "agentrun.worker_class": attempt.worker_class, "k8s.pod.name": attempt.pod}
    for key, value in (("agentrun.owner", attempt.owner_actor),
                       ("agentrun.reason", attempt.reason),
                       ("agentrun.exit_code", attempt.exit_code)):
        if value is not None:
            attributes[key] = value
    if attempt.usage is not None:
        attributes["agentrun.model.input_tokens"] = attempt.usage.input_tokens
        attributes["agentrun.model.output_tokens"] = attempt.usage.output_tokens
    events = (SpanEvent(name="lease expired", time=end),) if (
        attempt.outcome in tallies.LEASE_OUTCOMES) else ()
    return SpanRecord(trace=trace, span=traces.attempt_span(uid, attempt.number),
                      parent=parent, name=f"attempt {attempt.number}",
                      start=min(attempt.started_at, end), end=end, attributes=attributes,
                      events=events, error=(attempt.reason or str(attempt.outcome))
                      if attempt.outcome in FAILURES else None)


def _command(command: CommandRecord, *, trace: int, parent: int,
             where: dict[str, Attribute]) -> SpanRecord:
    attributes: dict[str, Attribute] = {
        **where, "agentrun.command.kind": str(command.kind),
        "agentrun.command.request_id": command.request_id,
        "agentrun.command.outcome": command.outcome}
    for key, value in (("agentrun.command.actor", command.actor),
                       ("agentrun.command.reason", command.reason),
                       ("agentrun.command.predicate", command.predicate),
                       ("agentrun.command.worker_class", command.worker_class),
                       ("agentrun.command.override", command.override),
                       ("agentrun.command.message", command.message or None)):
        if value is not None:
            attributes[key] = str(value) if key.endswith("predicate") else value
    return SpanRecord(trace=trace, span=traces.child_span(
        parent, "command", command.request_id, str(command.kind), command.time.isoformat()),
        parent=parent, name=f"command {command.kind}", start=command.time, end=command.time,
        attributes=attributes)
