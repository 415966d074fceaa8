"""What one applied slot status write counts for, in the operator's metrics: a pure diff.

A *tally* is read off the status the operator just wrote (``new``) against the status it
read (``old``): nothing is remembered between writes, so a reconcile that is retried
(and reads ``new`` back) finds nothing new to count. Terms:

- *transition*: ``("Slot", state)`` when the state changed, ``("Attempt", outcome)`` for
  each attempt record that gained its outcome in this write.
- *command*: each ledger entry in ``new`` that was not in ``old`` (``(kind, outcome,
  predicate)``; the predicate is ``""`` for an accepted command). A duplicate command
  writes nothing, so it is never counted.
- *lease expiry*: an attempt that ended ``Lost`` or ``StartTimeout``, the two outcomes
  that mean its lease was not held when it ended (``core.attempts.ending.judge``), as opposed
  to a pod that finished by itself or a give-up.
- *claim latency*: for each attempt started in this write (its record added without an
  outcome, by ``transitions.finish_claim``), the seconds from when the slot became
  claimable to the attempt's ``startedAt`` (the Pod and Lease exist). *Became claimable*
  is the latest of: the previous attempt's ``endedAt``, ``old.retryAt``, and each
  accepted Claim, Reassign or Release recorded after the previous attempt ended (a
  person opened the slot then). For a first attempt with none of these it is the slot's
  creation when it has no dependencies; otherwise it is not known and nothing is counted
  (the core records no time for "dependencies met").
- *unresolved effect*: an effect entry, new in this write, in state ``Unresolved``.
- *model usage*: what the slot's usage sum grew by in this write (its attempts' model
  calls, read off their Leases): input and output tokens, and the cost in its currency.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from agentrun.api import modelusage
from agentrun.api.modelusage import ModelUsage
from agentrun.api.slots import (
    AttemptRecord,
    EffectState,
    Outcome,
    SlotStatus,
)
from agentrun.core.commands import registry

LEASE_OUTCOMES = frozenset({Outcome.LOST, Outcome.START_TIMEOUT})
OPENING_COMMANDS = frozenset(spec.kind for spec in registry.COMMANDS if spec.opens)


@dataclass(frozen=True, kw_only=True)
class Tally:
    """What one write counts for (see the module docstring for each term)."""

    transitions: list[tuple[str, str]] = field(default_factory=list)
    commands: list[tuple[str, str, str]] = field(default_factory=list)
    claim_latencies: list[float] = field(default_factory=list)
    attempt_durations: list[tuple[str, float]] = field(default_factory=list)
    lease_expiries: int = 0
    effects_unresolved: int = 0
    questions_asked: int = 0
    approvals_requested: int = 0  # effects' approval requests (entries with approvers)
    usage: ModelUsage | None = None  # what the slot's usage grew by (never negative)


def of_slot_write(*, old: SlotStatus, new: SlotStatus, created: datetime | None,
                  has_dependencies: bool) -> Tally:
    """The tally of writing ``new`` over ``old`` (``created``: the slot's creation time)."""
    transitions: list[tuple[str, str]] = []
    if old.state is not new.state:
        transitions.append(("Slot", str(new.state)))
    before = {a.number: a for a in old.attempts}
    durations: list[tuple[str, float]] = []
    latencies: list[float] = []
    expiries = 0
    for attempt in new.attempts:
        earlier = before.get(attempt.number)
        if attempt.outcome is not None and (earlier is None or earlier.outcome is None):
            transitions.append(("Attempt", str(attempt.outcome)))
            if attempt.ended_at is not None:
                durations.append((str(attempt.outcome), _seconds(attempt.started_at,
                                                                 attempt.ended_at)))
            expiries += attempt.outcome in LEASE_OUTCOMES
        elif earlier is None and attempt.outcome is None:
            since = claimable_since(old=old, new=new, started=attempt, created=created,
                                    has_dependencies=has_dependencies)
            if since is not None:
                latencies.append(_seconds(since, attempt.started_at))
    seen = {(c.request_id, c.kind, c.time) for c in old.commands}
    commands = [(str(c.kind), str(c.outcome), str(c.predicate or ""))
                for c in new.commands if (c.request_id, c.kind, c.time) not in seen]
    known = {(e.key, e.attempt) for e in old.effects}
    unresolved = sum(1 for e in new.effects if (e.key, e.attempt) not in known
                     and e.state is EffectState.UNRESOLVED)
    asked = {(q.key, q.attempt) for q in old.questions}
    return Tally(usage=modelusage.growth(old.usage, new.usage), transitions=transitions,
                 commands=commands, claim_latencies=latencies,
                 attempt_durations=durations, lease_expiries=expiries,
                 effects_unresolved=unresolved,
                 questions_asked=sum(1 for q in new.questions if q.approvers is None
                                     and (q.key, q.attempt) not in asked),
                 approvals_requested=sum(1 for q in new.questions if q.approvers is not None
                                         and (q.key, q.attempt) not in asked))


def claimable_since(*, old: SlotStatus, new: SlotStatus, started: AttemptRecord,
                    created: datetime | None, has_dependencies: bool) -> datetime | None:
    """When the slot became claimable before ``started`` (module docstring), or None."""
    previous = [a for a in new.attempts if a.number < started.number]
    ended = previous[-1].ended_at if previous else None
    moments = [m for m in (ended, old.retry_at) if m is not None]
    moments += [c.time for c in new.commands
                if c.outcome == "Accepted" and c.kind in OPENING_COMMANDS
                and (ended is None or c.time >= ended) and c.time <= started.started_at]
    if moments:
        return max(moments)
    if not previous and not has_dependencies:
        return created
    return None


def _seconds(start: datetime, end: datetime) -> float:
    """Seconds from ``start`` to ``end``, never negative (clocks of two writers may skew)."""
    return max(0.0, (end - start).total_seconds())
