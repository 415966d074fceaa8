"""The recoverable prefix: what earlier attempts of a slot committed, as a successor trusts it.

A successor lists the slot's attempt Leases (label ``agentrun.dev/slot``) and learns, per
key, whether a step is *done* (a record committed, its payload available and matching its
digest) or must be *repeated* (nothing was externalized, or what was cannot be had
intact). Only records it can trust count: those on an earlier attempt's *sealed* Lease
(tombstoned by the operator: holder cleared or an outcome recorded, so nothing more can be
added there, and its tombstone names the attempt's pod) and those on its own. An earlier
Lease not yet sealed (the operator has not fenced it yet; one its holder only released
is not) is reported in :attr:`Prefix.unsealed` and its records are not used. Nor are those
on a sealed Lease that a pod other than its attempt's own wrote (the Lease's holder uid is
not the pod uid on its tombstone, when one is there: ``records.written_by``): they are reported in
:attr:`Prefix.problems`.

The same key committed by two trusted attempts (a successor that repeated a step whose
record it could not read): the latest attempt's record wins, since the steps after it
were built on that one; the clash is reported in :attr:`Prefix.problems` (except for an
effect's intent or unresolved record: each attempt that sends an effect, or stops on one,
commits its own, so they differ by design; so do the records that are each attempt's own
on its Lease: a question asked again, an answer or an owner's answer delivered again).

A rerun (``api.cuts``) takes records out: the cuts on this attempt's own Lease (the
operator's, written at its claim) discard what earlier attempts committed from the step a
person reran from, in the journal's commit order; an effect's records and those trusted
only on a Lease are kept whatever the cut.

A fork's inherited records are attempt 0's: a Lease the operator wrote (no holder, so
sealed from the start) whose journal it filled with what the source's prefix held.

Pure, and shared: the worker SDK reads its own prefix with it (``agentrun.worker._prefix``),
the operator the prefix a fork copies (``agentrun.controller.forkprefixes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from agentrun.api import cuts, journalnodes, meta, names, records
from agentrun.core.attempts import observations

Record = records.Record


@dataclass(frozen=True, kw_only=True)
class Prefix:
    """What this attempt (``attempt``) may trust, by record key."""

    attempt: int
    committed: Mapping[str, Record] = field(default_factory=dict)
    unsealed: tuple[int, ...] = ()  # earlier attempts whose Lease is not yet tombstoned
    problems: tuple[str, ...] = ()  # records that could not be read, or clashed
    leave: cuts.Discards = cuts.NONE  # what reruns left out (and the effects sent again)

    def get(self, key: str) -> Record | None:
        return self.committed.get(key)


def _number(lease: Mapping[str, Any]) -> int | None:
    label = ((lease.get("metadata") or {}).get("labels") or {}).get(names.ATTEMPT_LABEL)
    return int(label) if isinstance(label, str) and label.isdigit() else None


class Chains(Protocol):
    """An attempt's journal records reachable from its head (``_journal.Journal``), less
    what a rerun's ``cut`` discards."""

    def chain(self, *, attempt: int, head: Any,
              leave: cuts.Discards = cuts.NONE) -> tuple[dict[str, Record], list[str]]: ...


def _journaled(lease: Mapping[str, Any], *, number: int, journal: Chains | None,
               trusted: bool, leave: cuts.Discards) -> tuple[dict[str, Record], list[str]]:
    """The records reachable from the journal head on ``lease`` (attempt ``number``), if
    it has one and its writer is ``trusted`` (the same rule as the Lease's own records)."""
    try:
        head = journalnodes.Head.on_lease(lease)
    except records.RecordError as error:
        return {}, [f"attempt {number}: {error}"]
    if head is None or not trusted:
        return {}, []
    if journal is None:
        return {}, [f"attempt {number} committed {head.seq} time(s) to a journal, and this "
                    "attempt has none configured to read it: those steps are repeated"]
    return journal.chain(attempt=number, head=head, leave=leave)


def take(found: dict[str, Record], problems: list[str], *, entries: Sequence[Record],
         attempt: int, seq: int, leave: cuts.Discards,
         places: dict[str, cuts.Position] | None = None) -> None:
    """Add to ``found`` what one journal node (``entries``, commit ``seq`` of ``attempt``)
    gives a reader walking its attempt's chain from the head back: a record not already
    ``found`` (in a node too, the later wins), unless a rerun's ``leave`` takes it out (it
    stays in the journal) or it is trusted only on the Lease (reported in ``problems``).
    ``places``: where each record taken was committed, for a reader that keeps the order."""
    for index in range(len(entries) - 1, -1, -1):
        entry = entries[index]
        if leave.out(entry, position=(attempt, seq, index)):
            continue
        if entry.key.endswith(names.LEASE_ONLY_SUFFIXES):
            problems.append(f"record {entry.key} in attempt {attempt}'s journal is not "
                            "used: it is trusted only on the Lease")
            continue
        if entry.key not in found:
            found[entry.key] = entry
            if places is not None:
                places[entry.key] = (attempt, seq, index)


def prefix(*, leases: Sequence[Mapping[str, Any]], attempt: int,
           journal: Chains | None = None, fork: cuts.Cut | None = None) -> Prefix:
    """The prefix attempt ``attempt`` may trust from its slot's attempt ``leases``: each
    trusted Lease's own records and those reachable from its journal head (``journal``);
    ``fork``: a fork's cut, which leaves out everything from its start (``api.cuts``)."""
    committed: dict[str, Record] = {}
    origin: dict[str, int] = {}
    unsealed: list[int] = []
    problems: list[str] = []
    numbered = sorted(((n, lease) for lease in leases
                       if (n := _number(lease)) is not None and n <= attempt),
                      key=lambda found: found[0])
    leave = own_discards(numbered, attempt=attempt)
    if fork is not None:
        leave = replace(leave, hard=(fork,))
    for number, lease in numbered:
        view = observations.lease_view(lease)
        # Sealed by the operator's tombstone, which records its pod's uid: a Lease only its
        # holder released is not yet (who wrote it is known once the operator ends it).
        if number < attempt and not (view.tombstoned and not view.released):
            unsealed.append(number)
            continue
        if number == attempt:  # its own: admission lets no other pod write it
            found, unreadable = records.on_lease(lease)
            trusted = True
        else:  # sealed: its records count if its attempt's own pod wrote them
            pod_uid = meta.annotation(lease, names.POD_UID_ANNOTATION)
            found, unreadable = records.written_by(lease, pod_uid=pod_uid)
            trusted = records.bound_to(lease, pod_uid=pod_uid)
        problems.extend(unreadable)
        found = {key: record for key, record in found.items()  # a Lease's: before its
                 if not leave.out(record, position=(number, 0, 0))}  # nodes
        journaled, unread = _journaled(lease, number=number, journal=journal, trusted=trusted,
                                       leave=leave)
        problems.extend(unread)
        found = {**journaled, **found}
        for key, record in sorted(found.items()):
            if (key in committed and committed[key].digest != record.digest
                    and record.kind is not records.Kind.EFFECT_INTENT
                    and not key.endswith((*names.LEASE_ONLY_SUFFIXES, names.PAYLOAD_SUFFIX))):
                problems.append(f"record {key}: attempt {number} committed other content "
                                f"than attempt {origin[key]}; attempt {number}'s is used")
            committed[key], origin[key] = record, number
    return Prefix(attempt=attempt, committed=committed, unsealed=tuple(unsealed),
                  problems=tuple(problems), leave=leave)


def own_discards(numbered: Sequence[tuple[int, Mapping[str, Any]]], *,
                 attempt: int) -> cuts.Discards:
    """The cuts and re-sends on this attempt's own Lease (the operator's: ``api.cuts``),
    none without one. One that does not parse stops the read: reading more than the
    operator meant would bring back work a person asked to redo."""
    own = next((lease for number, lease in numbered if number == attempt), None)
    annotations = {} if own is None else ((own.get("metadata") or {}).get("annotations")
                                           or {})
    try:
        return cuts.on_attempt_lease(annotations)
    except cuts.CutError as error:
        raise records.RecordError(f"this attempt's Lease: {error}") from None
