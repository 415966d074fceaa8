"""The recoverable prefix: what earlier attempts of this slot committed.

A successor lists the slot's attempt Leases (label ``agentrun.dev/slot``) and learns, per
key, whether a step is *done* (a record committed, its payload available and matching its
digest) or must be *repeated* (nothing was externalized, or what was cannot be had
intact). Only records it can trust count: those on an earlier attempt's *sealed* Lease
(tombstoned: holder cleared or an outcome recorded, so nothing more can be added there)
and those on its own. An earlier Lease not yet sealed (the operator has not fenced it
yet) is reported in :attr:`Prefix.unsealed` and its records are not used. Nor are those
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

:func:`prefix` is pure; :class:`Steps` makes "skip if committed, else do and commit" one
call; :func:`list_leases` is the one read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast

from agentrun.api import cuts, names
from agentrun.core.attempts import attemptobjects, observations
from agentrun.kube import rest
from agentrun.worker import _records as records

Record = records.Record
T = TypeVar("T")  # a step's result type: what ``do`` returns


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
    from agentrun.worker._journal import Head  # only a journaled attempt needs it

    try:
        head = Head.on_lease(lease)
    except records.RecordError as error:
        return {}, [f"attempt {number}: {error}"]
    if head is None or not trusted:
        return {}, []
    if journal is None:
        return {}, [f"attempt {number} committed {head.seq} time(s) to a journal, and this "
                    "attempt has none configured to read it: those steps are repeated"]
    return journal.chain(attempt=number, head=head, leave=leave)


def prefix(*, leases: Sequence[Mapping[str, Any]], attempt: int,
           journal: Chains | None = None) -> Prefix:
    """The prefix attempt ``attempt`` may trust from its slot's attempt ``leases``: each
    trusted Lease's own records and those reachable from its journal head (``journal``)."""
    committed: dict[str, Record] = {}
    origin: dict[str, int] = {}
    unsealed: list[int] = []
    problems: list[str] = []
    numbered = sorted(((n, lease) for lease in leases
                       if (n := _number(lease)) is not None and n <= attempt),
                      key=lambda found: found[0])
    leave = own_discards(numbered, attempt=attempt)
    for number, lease in numbered:
        if number < attempt and not observations.lease_view(lease).tombstoned:
            unsealed.append(number)
            continue
        if number == attempt:  # its own: admission lets no other pod write it
            found, unreadable = records.on_lease(lease)
            trusted = True
        else:  # sealed: its records count if its attempt's own pod wrote them
            pod_uid = attemptobjects.annotation(lease, names.POD_UID_ANNOTATION)
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


def list_leases(*, api: rest.Rest, namespace: str, slot: str,
                run: str) -> list[Mapping[str, Any]]:
    """The slot's attempt Leases (this run's: a same-named slot of another run is not)."""
    path = rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                           namespace=namespace)
    selector = f"{names.SLOT_LABEL}={slot},{names.RUN_LABEL}={run},{names.ATTEMPT_LABEL}"
    listed = api.request("GET", path, query={"labelSelector": selector})
    return list(listed.get("items") or [])


class Committer(Protocol):
    """Where an attempt's records go: ``commit`` returns once the record is durable;
    ``stage`` may return before (the journal's group commit: durable within its delay, or
    at the next ``flush``); ``close`` flushes at the attempt's end."""

    def commit(self, record: Record) -> Record: ...

    def stage(self, record: Record) -> Record: ...

    def flush(self) -> None: ...

    def close(self) -> None: ...


@dataclass(kw_only=True)
class Steps:
    """Steps of one attempt over its ``prefix``: each committed once, its result reused.

    ``prefix`` is this attempt's own view: what it read at the start, plus every record it
    has committed since (:meth:`commit`), so a later call in the same attempt sees a record
    exactly as a successor would. ``done`` and ``repeated`` say, per key, what this attempt
    found (for the worker's own report of its recovery: which steps it skipped and which
    it ran again). ``lock`` (reentrant) lets a caller check the view and commit as one act
    (the sidecar's effect sessions run in threads that share one ``Steps``).
    """

    prefix: Prefix
    ledger: Committer
    store: records.PayloadStore | None = None
    done: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False)
    _view: dict[str, Record] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        self._view = dict(self.prefix.committed)  # this attempt's own copy, grown in place
        self.prefix = replace(self.prefix, committed=self._view)

    def committed(self, key: str) -> tuple[bool, records.JSON]:
        """(True, the result) if ``key`` is committed and its result available intact. A
        store that does not answer is raised (:class:`records.StoreUnavailable`), never
        taken for "not committed": the step would be done and committed again."""
        found = self.prefix.get(key)
        if found is None:
            return False, None
        try:
            return True, records.payload(found, store=self.store)
        except records.StoreUnavailable:
            raise
        except records.RecordError:
            return False, None

    def step(self, key: str, *, do: Callable[[], T],
             kind: records.Kind = records.Kind.STEP_RESULT, durable: bool = True) -> T:
        """Skip if committed, else do and commit: ``do()``'s result, once. ``durable``:
        it is durable on return; else it may only be staged (durable within the
        committer's delay: a crash meanwhile repeats the step).

        A step is repeated when its record is missing or unreadable; ``do`` must then be
        safe to run again (an external effect is not a step: use the effect ledger).
        The result is typed as ``do``'s; a skipped step's is its record read back as JSON,
        the same type only if ``do`` returns plain JSON (a tuple comes back a list).
        """
        records.check_step_key(key)
        done, committed = self.committed(key)
        if done:
            self.done.append(key)
            if durable:  # it may be this attempt's, staged only: durable before returning
                self.ledger.flush()
            return cast(T, committed)  # read back as JSON: see the docstring
        if self.prefix.get(key) is not None:
            self.repeated.append(key)
        result = do()
        self.commit(records.make(key=key, kind=kind, attempt=self.prefix.attempt,
                                 payload=result, store=self.store), durable=durable)
        return result

    def commit(self, record: Record, *, durable: bool = True) -> Record:
        """Commit (``durable``) or stage ``record`` and :meth:`remember` it."""
        committed = self.ledger.commit(record) if durable else self.ledger.stage(record)
        self.remember(committed)
        return committed

    def remember(self, record: Record) -> None:
        """Count a record this attempt committed in its own view of the prefix: in place,
        under :attr:`lock` (a copy per step would make a long attempt quadratic); whoever
        iterates the view holds the lock too."""
        with self.lock:
            self._view[record.key] = record
