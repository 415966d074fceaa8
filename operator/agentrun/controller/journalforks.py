"""Copying what a fork inherits: the store and API side of ``core.runs.runforks``.

For each node the fork inherits (``actions.ForkSlot``), the operator reads the source
slot's prefix exactly as the source's next attempt would (``core.attempts.prefixes``:
sealed, trusted Leases; every node verified against its digest; the slot's own reruns'
cuts and re-sends applied), with one more cut at the fork's step for the ``at`` node,
then writes it into the fork's journal as the slot's *attempt 0*:

- every payload and artifact a kept record names is copied inside the store (S3
  CopyObject, no byte through the operator) to ``<fork prefix>/<slot>/0/…`` under the
  same last name (a payload's digest, an artifact's key), and the record re-made for
  attempt 0 naming the copy;
- the records go into new nodes of attempt 0, in the source's commit order (a later
  rerun in the fork cuts by that order), at most :data:`NODE_ENTRIES` records each,
  stored once under their digest like any node;
- the records trusted only on a Lease (an effect's owner's answer, a question and its
  answer; never a worker's ``.unresolved``, since a fork waits until none is open) go on
  the Lease ``<slot>-0`` with the head and usage, created last: the commit point.

Every name is deterministic and every write once (a node or a copy found already there
is checked, not written again), so a copy cut short (an operator restart, a store that
stopped answering) is finished by the next look. Nothing of the source is changed.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from agentrun import objectstore
from agentrun.api import bounds, cuts, journalnodes, names, records
from agentrun.api.runs import AgentRun, ForkStatus, Inherited, JournalPin
from agentrun.controller import journalstores
from agentrun.core.attempts import prefixes
from agentrun.core.base import actions
from agentrun.core.runs import runforks
from agentrun.core.runs.resolution import Problem
from agentrun.kube import crashpoints, rest

MOST_NODES = 2_000  # journal nodes of one source slot a fork reads
MOST_OBJECTS = 2_000  # payloads and artifacts of one slot it copies (3 requests each)
MOST_NODE_BYTES = 64 * 1024 * 1024  # and their bytes (kept in memory for the second pass)
DEADLINE_SECONDS = 30.0  # one look's copying, checked between slots (the rest: next look)
COPY_BYTES = 5 * 1024**3  # S3 copies at most this much in one CopyObject
BATCH_BYTES = journalnodes.NODE_BYTES - 64 * 1024  # as the SDK batches a commit
NODE_ENTRIES = journalnodes.NODE_ENTRIES
Position = cuts.Position


class CopyError(Exception):
    """Why a fork cannot be copied now: a ``Forked`` condition reason and its message."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason, self.message = reason, message


@dataclass(kw_only=True)
class _Walk:
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


def _owned(lease: Mapping[str, Any], owners: Sequence[str]) -> bool:
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
            walk: _Walk) -> list[records.Record]:
    """The records the fork's ``slot`` inherits, in the source's commit order (pure over
    ``leases`` and what ``walk`` reads)."""
    leases = [lease for lease in leases if not slot.owners or _owned(lease, slot.owners)]
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
    split = [e for e in unsettled if f"{e}.outcome" in uncut.committed]
    if split:
        raise CopyError(runforks.SPLIT_EFFECT, (
            f"step {slot.step} was committed while effect {', '.join(split)} was being sent "
            "(after its intent, before its outcome): a fork there would inherit an effect "
            "with no outcome; delete this run and fork at an earlier or later step"))
    if unsettled:
        raise CopyError(runforks.WAITING, (
            f"slot {slot.source_slot} sent effect {', '.join(unsettled)} and has not recorded "
            "its outcome: its owner's answer is about the source's idempotency key, so the "
            "fork waits until the source's next attempt records it (resolve-effect, then a "
            "claim), or fork at an earlier step"))

    def place(record: records.Record) -> Position:
        return walk.places.get(record.attempt, {}).get(record.key, (record.attempt, 0, 0))
    return sorted(kept.values(), key=place)


def _tail(record: records.Record, *, pin: JournalPin, slot: str) -> str:
    """What follows ``<attempt>/`` in the name of the object ``record`` names, checked to
    be the source slot's own (a payload by its digest, an artifact by its key)."""
    own = re.escape(f"s3://{pin.bucket}/{pin.prefix}/{slot}/") + bounds.ATTEMPT_NUMBER_PATH
    found = re.fullmatch(own + r"/(sha256/[0-9a-f]{64}|artifact/" + re.escape(record.key)
                         + ")", record.ref or "")
    if found is None:
        raise CopyError(runforks.COPY_FAILED, (
            f"record {record.key} names {bounds.clip(record.ref or '', limit=200)}, which is "
            f"not slot {slot}'s journal: not copied"))
    return found.group(2)


def _store_node(store: objectstore.ObjectStore, key: str, data: bytes) -> None:
    """Store a node once; a name found taken must hold these very bytes."""
    if not store.put(key, data, if_none_match=True) and store.get(
            key, limit=len(data) + 1) != data:
        raise CopyError(runforks.COPY_FAILED, f"{key} is taken by other content: not copied")


@dataclass(kw_only=True)
class Copier:
    """Copies forks' journals with the operator's API client and journal credentials."""

    client: rest.Rest
    stores: journalstores.JournalStores
    clock: Callable[[], float] = time.monotonic

    def copy(self, *, run: AgentRun, planned: actions.ForkJournal,
             now: datetime) -> ForkStatus | Problem:
        """Copy the slots of ``planned`` not copied yet, for at most :data:`DEADLINE_SECONDS`
        (checked between slots: each slot's Lease commits it); the provenance once all are,
        else why it stopped."""
        fork = run.spec.fork
        assert fork is not None
        src, pin = planned.source, planned.journal
        deadline = self.clock() + DEADLINE_SECONDS
        inherited: list[Inherited] = []
        try:
            if (src.endpoint, src.region) != (pin.endpoint, pin.region):
                raise CopyError(runforks.COPY_FAILED, (
                    f"the source's journal is at {src.endpoint}, this run's at {pin.endpoint}: "
                    "a fork copies inside one store"))
            source_store = self.stores.store(endpoint=src.endpoint, bucket=src.bucket,
                                             region=src.region, secret=src.secret,
                                             namespace=planned.namespace)
            store = self.stores.store(endpoint=pin.endpoint, bucket=pin.bucket,
                                      region=pin.region, secret=pin.secret,
                                      namespace=planned.namespace)
            for slot in planned.slots:
                committed = self._committed(slot, run=run)
                if committed is not None:  # copied at an earlier look: it stands as it was
                    inherited.append(committed)
                    continue
                if slot.problem is not None:
                    raise CopyError(*slot.problem)
                if inherited and self.clock() > deadline:
                    return Problem(reason=runforks.COPYING, message=(
                        f"copied {len(inherited)} of {len(planned.slots)} nodes of run "
                        f"{planned.source_run}; the copy goes on"))
                inherited.append(self._slot(slot, run=run, planned=planned,
                                            source_store=source_store, store=store))
        except CopyError as error:
            return Problem(reason=error.reason, message=error.message)
        except (journalstores.Unusable, objectstore.S3Error, records.RecordError,
                cuts.CutError, rest.ApiError) as error:
            return Problem(reason=runforks.COPY_FAILED, message=(
                f"copying run {planned.source_run}'s journal failed (looked at again "
                f"soon): {bounds.clip(str(error), limit=bounds.MESSAGE_CHARS)}"))
        at = runforks.parse_at(fork.at)
        return ForkStatus(run=planned.source_run, uid=planned.source_uid,
                          node=None if at is None else at[0],
                          step=None if at is None else at[1], actor=run.status.creator,
                          reason=fork.reason, copied=now, inherited=inherited)

    def _path(self, slot: actions.ForkSlot) -> tuple[str, str]:
        metadata = slot.lease["metadata"]
        base = f"/apis/coordination.k8s.io/v1/namespaces/{metadata['namespace']}/leases"
        return base, f"{base}/{metadata['name']}"

    def _committed(self, slot: actions.ForkSlot, *, run: AgentRun) -> Inherited | None:
        """The slot's copy if its Lease, the commit point, was made by this fork before
        (a copy cut short, a restart): kept as it is, never made again. A Lease of that
        name that is not this fork's stops the copy (nothing trusts it: it is not this
        run's)."""
        found = self.client.get(self._path(slot)[1])
        if found is None:
            return None
        metadata = found.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        labels, wanted = metadata.get("labels") or {}, slot.lease["metadata"]["labels"]
        mine = (_owned(found, (run.metadata.uid or "",)) and all(
            labels.get(label) == wanted[label] for label in (
                names.RUN_LABEL, names.SLOT_LABEL, names.ATTEMPT_LABEL)) and annotations.get(
                    names.FORKED_FROM_ANNOTATION) == slot.lease["metadata"]["annotations"][
                    names.FORKED_FROM_ANNOTATION])
        if not mine:
            raise CopyError(runforks.NAME_SQUATTED, (
                f"Lease {metadata.get('name')} is in the way of this run's copy and is not "
                "its own: a deleted run's goes with it (the copy waits); any other, a cluster "
                "admin deletes"))
        head = journalnodes.Head.on_lease(found)
        usage = journalnodes.Usage.on_lease(found) or journalnodes.Usage()
        on_lease = sum(1 for key in annotations if key.startswith(records.PREFIX))
        return Inherited(node=slot.node, records=usage.records + on_lease, bytes=usage.bytes,
                         commits=0 if head is None else head.seq)

    def _slot(self, slot: actions.ForkSlot, *, run: AgentRun, planned: actions.ForkJournal,
              source_store: objectstore.ObjectStore,
              store: objectstore.ObjectStore) -> Inherited:
        src, pin = planned.source, planned.journal
        leases = (self.client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{planned.namespace}/leases",
            query={"labelSelector": f"{names.SLOT_LABEL}={slot.source_slot},"
                                    f"{names.RUN_LABEL}={planned.source_run},"
                                    f"{names.ATTEMPT_LABEL}"}) or {}).get("items") or []
        walk = _Walk(store=source_store, prefix=f"{src.prefix}/{slot.source_slot}")
        kept = inherit(slot=slot, leases=leases, walk=walk)
        on_lease = [r for r in kept if r.key.endswith(names.LEASE_ONLY_SUFFIXES)]
        if len(on_lease) > bounds.MAX_RECORDS:
            raise CopyError(runforks.TOO_LARGE, (
                f"slot {slot.source_slot} holds {len(on_lease)} questions and answers; a "
                f"Lease holds at most {bounds.MAX_RECORDS}"))
        objects = sum(1 for r in kept if r.ref is not None)
        if objects > MOST_OBJECTS:
            raise CopyError(runforks.TOO_LARGE, (
                f"slot {slot.source_slot} names {objects} payloads and artifacts; a fork copies "
                f"at most {MOST_OBJECTS} a slot"))
        own = f"{pin.prefix}/{slot.slot}/0"
        journaled = [self._copied(r, source_store=source_store, store=store, slot=slot,
                                  src=src, own=own, bucket=pin.bucket)
                     for r in kept if not r.key.endswith(names.LEASE_ONLY_SUFFIXES)]
        head, usage, commits = None, journalnodes.Usage(), 0
        batch: list[records.Record] = []
        size = 0
        for index, record in enumerate(journaled):
            batch.append(record)
            size += len(records.encode(record))
            usage = usage.adding(record)
            if (index < len(journaled) - 1 and len(batch) < NODE_ENTRIES
                    and size < BATCH_BYTES - bounds.RECORD_BYTES):
                continue  # room for the next one (a record encodes to at most RECORD_BYTES)
            commits += 1
            data = journalnodes.node(attempt=0, seq=commits, entries=batch,
                                     prev=None if head is None else head.digest)
            head = journalnodes.Head(seq=commits, digest=records.digest(data))
            _store_node(store, f"{own}/sha256/{head.digest}", data)
            batch, size = [], 0
        made = None
        if head is not None or on_lease:
            made = self._lease(slot, run=run, head=head, usage=usage, on_lease=on_lease)
        return made or Inherited(node=slot.node, records=usage.records + len(on_lease),
                                 bytes=usage.bytes, commits=commits)

    @staticmethod
    def _copied(record: records.Record, *, source_store: objectstore.ObjectStore,
                store: objectstore.ObjectStore, slot: actions.ForkSlot, src: JournalPin,
                own: str, bucket: str) -> records.Record:
        """``record`` as attempt 0's, the object it names copied beside the fork's nodes
        (a payload found there at its size is not copied again: its name is its digest; an
        artifact always is: its name is its key, and a copy cut short may hold another)."""
        ref = None
        if record.ref is not None:
            tail = _tail(record, pin=src, slot=slot.source_slot)
            key = f"{own}/{tail}"
            source_key = record.ref.removeprefix(f"s3://{src.bucket}/")
            size = source_store.head(source_key).size
            if size > COPY_BYTES:
                raise CopyError(runforks.TOO_LARGE, (
                    f"{record.key} is {size} bytes; a fork copies at most {COPY_BYTES} per "
                    "object"))
            if (record.kind is records.Kind.ARTIFACT or not store.exists(key)
                    or store.head(key).size != size):  # a payload's name is its digest
                store.copy(source_key, key, source_bucket=src.bucket)
            ref = f"s3://{bucket}/{key}"
        return records.Record.model_validate(
            {**record.model_dump(), "attempt": 0, "ref": ref})

    def _lease(self, slot: actions.ForkSlot, *, run: AgentRun, head: journalnodes.Head | None,
               usage: journalnodes.Usage, on_lease: Sequence[records.Record]
               ) -> Inherited | None:
        """Create ``<slot>-0``: the copy's commit point (one made meanwhile is judged as
        :meth:`_committed` judges it)."""
        body = {**slot.lease, "metadata": {**slot.lease["metadata"], "annotations": {
            **slot.lease["metadata"].get("annotations", {}),
            **({journalnodes.HEAD: head.text(), journalnodes.USAGE: usage.text()}
               if head is not None else {}),
            **{r.annotation: records.encode(r.model_copy(update={"attempt": 0}))
               for r in on_lease}}}}
        try:
            self.client.request("POST", self._path(slot)[0], body=body)
            crashpoints.reached(point="fork-lease")  # one slot copied, maybe not the rest
        except rest.ApiError as error:
            if error.status != 409:
                raise
            return self._committed(slot, run=run)  # ours (a request that had landed) or not
        return None
