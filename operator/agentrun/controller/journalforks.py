"""Copying what a fork inherits: the store and API side of ``core.runs.runforks``.

For each node the fork inherits (``actions.ForkSlot``), the operator reads what it
inherits (``controller.forkprefixes``: the source slot's prefix as its next attempt would
read it, cut at the fork's step for the ``at`` node), then writes it into the fork's
journal as the slot's *attempt 0*:

- every payload and artifact a kept record names is copied inside the store (S3
  CopyObject, no byte through the operator) to ``<fork prefix>/<slot>/0/…`` under the
  same last name (a payload's digest, an artifact's key), and the record re-made for
  attempt 0 naming the copy;
- the records go into new nodes of attempt 0, in the source's commit order (a later
  rerun in the fork cuts by that order), at most :data:`NODE_ENTRIES` records each,
  stored once under their digest like any node;
- the records trusted only on a Lease (a question and its answer, an approval of an
  effect whose intent is inherited) go on the Lease ``<slot>-0`` with the head and usage,
  created last: the commit point.

Every name is deterministic and every write once (a node found already there is checked,
not written again; a payload found at its size is its digest's), so a copy cut short (an
operator restart, a store that stopped answering) is finished by the next look, which
keeps each slot whose Lease it made. Nothing of the source is changed.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from agentrun import objectstore, rest
from agentrun.api import bounds, cuts, journalnodes, names, records
from agentrun.api.runs import AgentRun, ForkStatus, Inherited, JournalPin
from agentrun.controller import journalstores
from agentrun.controller.forkprefixes import CopyError, Walk, inherit, owned
from agentrun.core.base import actions
from agentrun.core.runs import runforks
from agentrun.core.runs.resolution import Problem
from agentrun.kube import crashpoints

MOST_OBJECTS = 2_000  # payloads and artifacts of one slot it copies (3 requests each)
DEADLINE_SECONDS = 30.0  # one look's copying, checked between slots (the rest: next look)
COPY_BYTES = 5 * 1024**3  # S3 copies at most this much in one CopyObject
BATCH_BYTES = journalnodes.NODE_BYTES - 64 * 1024  # as the SDK batches a commit
NODE_ENTRIES = journalnodes.NODE_ENTRIES


def _tail(record: records.Record, *, pin: JournalPin, slot: str) -> str:
    """What follows ``<attempt>/`` in the name of the object ``record`` names, checked to
    be the source slot's own (a payload by its digest, an artifact by its key)."""
    own = re.escape(f"s3://{pin.bucket}/{pin.prefix}/{slot}/") + bounds.ATTEMPT_NUMBER_PATH
    found = re.fullmatch(own + r"/(sha256/[0-9a-f]{64}|artifact/" + re.escape(record.key)
                         + ")", record.ref or "")
    if found is None:
        raise CopyError(runforks.CANNOT_COPY, (
            f"record {record.key} names {bounds.clip(record.ref or '', limit=200)}, which is "
            f"not slot {slot}'s journal: not copied (delete this run)"))
    return found.group(2)


def _store_node(store: objectstore.ObjectStore, key: str, data: bytes) -> None:
    """Store a node once; a name found taken must hold these very bytes."""
    if not store.put(key, data, if_none_match=True) and store.get(
            key, limit=len(data) + 1) != data:
        raise CopyError(runforks.CANNOT_COPY, f"{key} is taken by other content: not copied "
                        "(delete this run)")


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
                raise CopyError(runforks.CANNOT_COPY, (
                    f"the source's journal is at {src.endpoint}, this run's at {pin.endpoint}: "
                    "a fork copies inside one store (delete this run)"))
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
        mine = (owned(found, (run.metadata.uid or "",)) and all(
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
        walk = Walk(store=source_store, prefix=f"{src.prefix}/{slot.source_slot}")
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
        # Made even when nothing is inherited (the at node forked at its first step): the
        # copy's commit point, so a later look keeps it as it was instead of checking again.
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
