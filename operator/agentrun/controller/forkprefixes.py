"""What a fork inherits of one source slot: its prefix, read as its next attempt would.

The reading side of ``controller.journalforks`` (which writes the copy): the source slot's
attempt Leases (its own, by owner uid) and the chains their heads reach, through
``core.attempts.prefixes`` with the source's own cuts and re-sends, then the fork's cut at
its step (kind-blind: ``api.cuts.Discards.hard``), then the rules of
docs/design/reruns.md, "Fork", for what goes on a Lease. :func:`inherit` is pure over the
Leases and :class:`Walk`, the one reader of the store, which keeps each node it read for
the passes the cut needs (bounded: :data:`MOST_NODES`, :data:`MOST_NODE_BYTES`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentrun import objectstore
from agentrun.api import cuts, journalnodes, names, records
from agentrun.core.attempts import prefixes
from agentrun.core.base import actions
from agentrun.core.runs import runforks

MOST_NODES = 2_000  # journal nodes of one source slot a fork reads
MOST_NODE_BYTES = 64 * 1024 * 1024  # and their bytes (kept in memory for the second pass)
Position = cuts.Position


class CopyError(Exception):
    """Why a fork cannot be copied now: a ``Forked`` condition reason and its message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(kw_only=True)
class Walk:
    """The source slot's chains (``prefixes.Chains``), each node read once and kept for a
    second pass; where each record taken was committed (``places``, by attempt); every
    position where ``step`` was committed (``steps``)."""

    store: objectstore.ObjectStore
    prefix: str  # the source slot's: <source run prefix>/<slot>
    step: str | None = None
    places: dict[int, dict[str, Position]] = field(default_factory=dict)
    steps: set[Position] = field(default_factory=set)
    read: int = 0  # bytes of nodes read (and kept)
    _nodes: dict[tuple[int, str], tuple[str | None, list[records.Record]]] = field(
        default_factory=dict)

    def _node(self, attempt: int, seq: int, digest: str) -> tuple[str | None, list[records.Record]]:
        if (attempt, digest) not in self._nodes:
            if len(self._nodes) >= MOST_NODES or self.read > MOST_NODE_BYTES:
                raise CopyError(runforks.TOO_LARGE, (
                    f"the source slot's journal holds more than {MOST_NODES} commits or "
                    f"{MOST_NODE_BYTES // 2**20} MiB of them: a fork copies smaller journals"))
            data = self.store.get(f"{self.prefix}/{attempt}/sha256/{digest}",
                                  limit=journalnodes.NODE_BYTES)
            self.read += len(data)
            self._nodes[(attempt, digest)] = journalnodes.read_node(
                data, attempt=attempt, seq=seq, digest=digest)
        return self._nodes[(attempt, digest)]

    def chain(self, *, attempt: int, head: Any, leave: cuts.Discards = cuts.NONE,
              ) -> tuple[dict[str, records.Record], list[str]]:
        found: dict[str, records.Record] = {}
        problems: list[str] = []
        places: dict[str, Position] = {}
        digest: str | None = head.digest
        for seq in range(head.seq, 0, -1):
            assert digest is not None
            prev, entries = self._node(attempt, seq, digest)
            self.steps.update((attempt, seq, index) for index, entry in enumerate(entries)
                              if entry.key == self.step)
            prefixes.take(found, problems, entries=entries, attempt=attempt, seq=seq,
                          leave=leave, places=places)
            digest = prev
        self.places[attempt] = places
        return found, problems


def _own_lease(attempt: int, *, cut: Sequence[str], resends: Sequence[str]) -> dict[str, Any]:
    """The Lease the source's next attempt would have, as far as its prefix is concerned:
    its number and the cuts and re-sends the operator would write on it."""
    return {"metadata": {"labels": {names.ATTEMPT_LABEL: str(attempt)},
                         "annotations": cuts.annotation(cut, resends)}}


def owned(lease: Mapping[str, Any], owners: Sequence[str]) -> bool:
    """A Lease of the source slot's (its attempts') or its run's (a fork's attempt 0), by
    owner uid: a same-named slot's of a run deleted before is neither."""
    return any(ref.get("uid") in owners
               for ref in (lease.get("metadata") or {}).get("ownerReferences") or [])


def _answers(slot: actions.ForkSlot) -> dict[str, records.Record]:
    """The answers the source slot's status holds for its next attempt, as that attempt's
    Lease would carry them (the plan made them as attempt ``attempts + 1``'s)."""
    found = {}
    for value in slot.answers:
        key = str(json.loads(value)["key"])
        found[key] = records.decode(annotation=records.PREFIX + key, value=value,
                                    attempt=slot.attempts + 1)
    return found


def _kept(key: str, record: records.Record, *, kept: Mapping[str, records.Record],
          step: str | None) -> bool:
    """Whether a record of the source's prefix goes into the fork (the rules of
    docs/design/reruns.md, "Fork"): an owner's resolution never (it is about the source's
    key: an effect with no outcome stops the copy instead); an effect's other answers with
    its intent only (an approval of an effect the fork sends is its own to ask); an answer
    given by reference never (its file is the source slot's to mount), nor the question and
    answer of the fork's own step."""
    if key.endswith((names.RESOLVED_SUFFIX, names.UNRESOLVED_SUFFIX)):
        return False
    if step is not None and key in {f"{step}{suffix}" for suffix in names.LEASE_ONLY_SUFFIXES}:
        return False
    if not key.endswith(names.LEASE_ONLY_SUFFIXES):
        return True
    effect = cuts.effect_of(key)
    if effect is not None:
        return f"{effect}.intent" in kept
    if key.endswith(names.ANSWERED_SUFFIX) and (  # an answer goes with its question
            f"{key.removesuffix(names.ANSWERED_SUFFIX)}{names.QUESTION_SUFFIX}" not in kept):
        return False
    return not (isinstance(record.inline, dict) and "valueFrom" in record.inline)


def inherit(*, slot: actions.ForkSlot, leases: Sequence[Mapping[str, Any]],
            walk: Walk) -> list[records.Record]:
    """The records the fork's ``slot`` inherits, in the source's commit order (pure over
    ``leases`` and what ``walk`` reads)."""
    leases = [lease for lease in leases if not slot.owners or owned(lease, slot.owners)]
    numbers = [int(label) for lease in leases if str(label := (
        (lease.get("metadata") or {}).get("labels") or {}).get(names.ATTEMPT_LABEL, "")).isdigit()]
    reader = max([slot.attempts, *numbers]) + 1
    every = [*leases, _own_lease(reader, cut=slot.cuts, resends=slot.resends)]
    fork = None
    walk.step = slot.step  # noted on the way: where the fork's step was committed
    uncut = prefixes.prefix(leases=every, attempt=reader, journal=walk)
    if uncut.unsealed:  # an attempt ended but not fenced yet: its records are not read
        raise CopyError(runforks.SLOT_LIVE, (
            f"slot {slot.source_slot}'s attempts {list(uncut.unsealed)} are not sealed yet: "
            "wait for the operator to end them"))
    if slot.step is not None:  # the first commit of the step still standing: cut there
        start = cuts.earliest(walk.steps, cuts=cuts.parse_all(slot.cuts))
        if start is None:
            raise CopyError(runforks.STEP_NOT_COMMITTED, (
                f"step {slot.step} is not committed in slot {slot.source_slot}'s journal "
                "(or a rerun took it out): delete this run and fork at a step `kubectl "
                "agentrun history` shows"))
        fork = cuts.Cut(start=start, through=reader - 1)
    found = uncut if fork is None else prefixes.prefix(leases=every, attempt=reader,
                                                        journal=walk, fork=fork)
    whole = {**found.committed, **_answers(slot)}
    kept = {key: record for key, record in whole.items()
            if _kept(key, record, kept=whole, step=slot.step)}
    unsettled = sorted(key.removesuffix(".intent") for key, record in kept.items()
                       if record.kind is records.Kind.EFFECT_INTENT
                       and f"{key.removesuffix('.intent')}.outcome" not in kept)
    if unsettled and fork is not None:  # its outcome, recorded or to come, is cut: never
        raise CopyError(runforks.SPLIT_EFFECT, (
            f"effect {', '.join(unsettled)} of slot {slot.source_slot} was sent before step "
            f"{slot.step} and its outcome is not recorded before it: a fork there would "
            "inherit an effect with no outcome; delete this run and fork at an earlier step "
            "(before the effect), or at a later one once its outcome is recorded"))
    if unsettled:
        raise CopyError(runforks.WAITING, (
            f"slot {slot.source_slot} sent effect {', '.join(unsettled)} and has not recorded "
            "its outcome: its owner's answer is about the source's idempotency key, so the "
            "fork waits until the source's next attempt records it (resolve-effect, then a "
            "claim), or fork at an earlier step"))

    def place(record: records.Record) -> Position:
        return walk.places.get(record.attempt, {}).get(record.key, (record.attempt, 0, 0))
    return sorted(kept.values(), key=place)
