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

import re
from collections.abc import Mapping, Sequence
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

MOST_NODES = 10_000  # journal nodes of one source slot a fork reads
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
    _nodes: dict[tuple[int, str], tuple[str | None, list[records.Record]]] = field(
        default_factory=dict)

    def _node(self, attempt: int, seq: int, digest: str) -> tuple[str | None, list[records.Record]]:
        if (attempt, digest) not in self._nodes:
            if len(self._nodes) >= MOST_NODES:
                raise CopyError(runforks.COPY_FAILED, (
                    f"the source slot's journal holds more than {MOST_NODES} commits: a fork "
                    "copies smaller journals"))
            data = self.store.get(f"{self.prefix}/{attempt}/sha256/{digest}",
                                  limit=journalnodes.NODE_BYTES)
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


def inherit(*, slot: actions.ForkSlot, leases: Sequence[Mapping[str, Any]],
            walk: _Walk) -> list[records.Record]:
    """The records the fork's ``slot`` inherits, in the source's commit order (pure over
    ``leases`` and what ``walk`` reads)."""
    numbers = [int(label) for lease in leases if str(label := (
        (lease.get("metadata") or {}).get("labels") or {}).get(names.ATTEMPT_LABEL, "")).isdigit()]
    reader = max([slot.attempts, *numbers]) + 1
    every = [*leases, _own_lease(reader, cut=slot.cuts, resends=slot.resends)]
    fork = None
    if slot.step is not None:  # first where the step was committed, then cut there
        walk.step = slot.step
        prefixes.prefix(leases=every, attempt=reader, journal=walk)
        start = cuts.earliest(walk.steps, cuts=cuts.parse_all(slot.cuts))
        if start is None:
            raise CopyError(runforks.STEP_NOT_COMMITTED, (
                f"step {slot.step} is not committed in slot {slot.source_slot}'s journal "
                "(or a rerun took it out): fork at a step its prefix holds"))
        fork = cuts.Cut(start=start, through=reader - 1)
    found = prefixes.prefix(leases=every, attempt=reader, journal=walk, fork=fork)
    if found.unsealed:
        raise CopyError(runforks.SLOT_LIVE, (
            f"slot {slot.source_slot}'s attempts {list(found.unsealed)} are not sealed yet: "
            "wait for the operator to end them"))
    kept = found.committed
    # An effect's answers on a Lease go with its intent: one the fork's cut took out is
    # the fork's own to send (a new key), and no owner's answer about the source's holds.
    kept = {key: record for key, record in kept.items()
            if not key.endswith(names.LEASE_ONLY_SUFFIXES) or (effect := cuts.effect_of(key))
            is None or f"{effect}.intent" in kept}

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

    def copy(self, *, run: AgentRun, source: AgentRun, planned: actions.ForkJournal,
             now: datetime) -> ForkStatus | Problem:
        """Copy every slot of ``planned``; the provenance, or why it stopped (retried)."""
        fork = run.spec.fork
        assert fork is not None
        src, pin = planned.source, planned.journal
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
            inherited = [self._slot(slot, planned=planned, source_store=source_store,
                                    store=store) for slot in planned.slots]
        except CopyError as error:
            return Problem(reason=error.reason, message=error.message)
        except (journalstores.Unusable, objectstore.S3Error, records.RecordError,
                cuts.CutError, rest.ApiError) as error:
            return Problem(reason=runforks.COPY_FAILED, message=(
                f"copying run {source.metadata.name}'s journal failed (looked at again "
                f"soon): {bounds.clip(str(error), limit=bounds.MESSAGE_CHARS)}"))
        at = runforks.parse_at(fork.at)
        return ForkStatus(run=source.metadata.name, uid=source.metadata.uid or "",
                          node=None if at is None else at[0],
                          step=None if at is None else at[1], actor=run.status.creator,
                          reason=fork.reason, copied=now, inherited=inherited)

    def _slot(self, slot: actions.ForkSlot, *, planned: actions.ForkJournal,
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
        on_lease = [r for r in kept if r.key.endswith(names.LEASE_ONLY_SUFFIXES)
                    and not r.key.endswith(names.UNRESOLVED_SUFFIX)]
        if len(on_lease) > bounds.MAX_RECORDS:
            raise CopyError(runforks.COPY_FAILED, (
                f"slot {slot.source_slot} holds {len(on_lease)} answers and questions; a "
                f"Lease holds at most {bounds.MAX_RECORDS}"))
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
        if head is not None or on_lease:
            self._lease(slot, head=head, usage=usage, on_lease=on_lease)
        return Inherited(node=slot.node, records=usage.records + len(on_lease),
                         bytes=usage.bytes, commits=commits)

    @staticmethod
    def _copied(record: records.Record, *, source_store: objectstore.ObjectStore,
                store: objectstore.ObjectStore, slot: actions.ForkSlot, src: JournalPin,
                own: str, bucket: str) -> records.Record:
        """``record`` as attempt 0's, the object it names copied beside the fork's nodes."""
        ref = None
        if record.ref is not None:
            tail = _tail(record, pin=src, slot=slot.source_slot)
            key = f"{own}/{tail}"
            source_key = record.ref.removeprefix(f"s3://{src.bucket}/")
            if not store.exists(key):
                size = source_store.head(source_key).size
                if size > COPY_BYTES:
                    raise CopyError(runforks.COPY_FAILED, (
                        f"{record.key} is {size} bytes; a fork copies at most {COPY_BYTES} "
                        "per object"))
                store.copy(source_key, key, source_bucket=src.bucket)
            ref = f"s3://{bucket}/{key}"
        return records.Record.model_validate(
            {**record.model_dump(), "attempt": 0, "ref": ref})

    def _lease(self, slot: actions.ForkSlot, *, head: journalnodes.Head | None,
               usage: journalnodes.Usage, on_lease: Sequence[records.Record]) -> None:
        """Create ``<slot>-0``: the copy's commit point. One found already there must be
        this copy's (the same head): else it is someone else's, and nothing is trusted."""
        body = {**slot.lease, "metadata": {**slot.lease["metadata"], "annotations": {
            **slot.lease["metadata"].get("annotations", {}),
            **({journalnodes.HEAD: head.text(), journalnodes.USAGE: usage.text()}
               if head is not None else {}),
            **{r.annotation: records.encode(r.model_copy(update={"attempt": 0}))
               for r in on_lease}}}}
        namespace = body["metadata"]["namespace"]
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
        try:
            self.client.request("POST", path, body=body)
            crashpoints.reached(point="fork-lease")  # one slot copied, maybe not the rest
        except rest.ApiError as error:
            if error.status != 409:
                raise
            found = self.client.get(f"{path}/{body['metadata']['name']}") or {}
            annotations = (found.get("metadata") or {}).get("annotations") or {}
            if annotations.get(journalnodes.HEAD) != (None if head is None else head.text()):
                raise CopyError("NameSquatted", (
                    f"Lease {namespace}/{body['metadata']['name']} exists and is not this "
                    "fork's copy: delete it (nothing trusts it) and the copy is made "
                    "again")) from None
