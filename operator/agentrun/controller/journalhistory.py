"""A slot's journal as people read it: what each attempt committed, newest first.

The operator reads the journal for people who have no store credentials (they are the
platform's, not a tenant's): :mod:`agentrun.controller.historyserver` serves it once the
API server authenticated the person and the operator checked they may ``get`` the slot.
It trusts exactly what a successor would: each attempt's head on its Lease, and the chain
of nodes that head reaches, every node verified against the digest that named it.

A *history* is the object served (kind ``SlotHistory``): the run's pinned journal, one
row per attempt (its head's sequence number: how many commits it made; the records and
bytes they hold, from the usage beside the head), and the newest
*entries* (records) across attempts, at most ``limit``, each with its kind, size and
whether its payload is inline or an object beside the nodes. Reading walks chains from the
heads backwards, so its cost is the entries shown, never the journal's length: a history
of 100,000 steps costs what one of ``limit`` does. Payloads are read only when a person
names one record (``record``: its newest entry, at most :data:`RECORD_BYTES`, verified
against its digest), as an approver reads the exact payload of an effect waiting for them.
"""

from __future__ import annotations

import base64
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from agentrun import objectstore, rest
from agentrun.api import bounds, journalnodes, names, records
from agentrun.api.runs import JournalPin
from agentrun.controller import journalstores

GROUP = names.HISTORY_GROUP
VERSION = names.HISTORY_VERSION
KIND = names.HISTORY_KIND
LIMIT = 200  # entries shown when the request names no limit
MOST = 1000  # the most a request may ask for (and the most nodes one reads)
DEADLINE_SECONDS = 20.0  # a read stops here, shown as truncated: the API server waits ~60 s
RECORD_BYTES = 1024 * 1024  # the most of one record's payload a history shows

Object = dict[str, Any]


class HistoryError(Exception):
    """A history that cannot be served: its HTTP ``status``, the Kubernetes ``reason``
    (``NotFound``, ``BadRequest``, ``ServiceUnavailable``) and a message for the person."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.status, self.reason, self.message = status, reason, message


def parse_limit(text: str | None) -> int:
    """The ``limit`` query parameter: 1 to :data:`MOST` entries, :data:`LIMIT` when absent."""
    if text is None or text == "":
        return LIMIT
    if not text.isdigit() or not 1 <= int(text) <= MOST:
        raise HistoryError(400, "BadRequest", f"limit {bounds.clip(text, limit=20)!r} is not "
                                              f"a whole number from 1 to {MOST}")
    return int(text)


def _entry(record: records.Record, *, seq: int) -> Object:
    return {"attempt": record.attempt, "seq": seq, "key": record.key, "kind": str(record.kind),
            "size": record.size, "stored": "inline" if record.ref is None else "object",
            "digest": record.digest}


@dataclass(frozen=True, kw_only=True)
class Attempt:
    """One attempt as its Lease shows it: ``head`` None when it committed nothing."""

    number: int
    lease: str
    head: journalnodes.Head | None
    ended: bool
    usage: journalnodes.Usage | None = None  # None: a worker from before usage was kept
    # What its worker wrote may be trusted (``records.bound_to``): a successor leaves out
    # the journal of a Lease bound to another pod than the attempt's own.
    trusted: bool = True


def attempts(leases: list[Object]) -> list[Attempt]:
    """The slot's attempts with a Lease, newest first; a Lease whose head does not parse
    (admission keeps that from happening) is an error, not skipped."""
    found = []
    for lease in leases:
        metadata = lease.get("metadata") or {}
        label = (metadata.get("labels") or {}).get(names.ATTEMPT_LABEL, "")
        if not str(label).isdigit():
            continue
        try:
            head = journalnodes.Head.on_lease(lease)
        except records.RecordError as error:
            raise HistoryError(500, "InternalError", str(error)) from None
        annotations = metadata.get("annotations") or {}
        found.append(Attempt(number=int(label), lease=str(metadata.get("name")), head=head,
                             # attempt 0, a fork's copy, never ran: ended from the start
                             ended=names.OUTCOME_ANNOTATION in annotations or label == "0",
                             usage=journalnodes.Usage.on_lease(lease),
                             trusted=records.bound_to(lease, pod_uid=annotations.get(
                                 names.POD_UID_ANNOTATION))))
    return sorted(found, key=lambda a: a.number, reverse=True)


def nodes(*, chain: list[Attempt], read: Callable[[int, str], bytes],
          stop: Callable[[], bool],
          ) -> Iterator[tuple[int, int, list[records.Record]] | None]:
    """Each node reachable from the attempts' heads as ``(attempt, seq, its records)``, newest
    attempt first, each attempt's newest commit first, every node checked against the
    digest that named it; ``None`` (then nothing more) once ``stop()`` says so or
    :data:`MOST` nodes were read, before reading another. ``read(attempt, digest)`` is a
    node's bytes."""
    count = 0
    for attempt in chain:
        if attempt.head is None:
            continue
        seq, digest = attempt.head.seq, attempt.head.digest
        while True:
            if count >= MOST or stop():
                yield None
                return
            count += 1
            try:
                prev, found = journalnodes.read_node(read(attempt.number, digest),
                                                     attempt=attempt.number, seq=seq,
                                                     digest=digest)
            except records.RecordError as error:
                raise HistoryError(500, "InternalError",
                                   f"the journal cannot be read whole: {error}") from None
            yield attempt.number, seq, found
            if prev is None:
                break
            seq, digest = seq - 1, prev


def walk(*, chain: list[Attempt], read: Callable[[int, str], bytes], limit: int,
         deadline: float, clock: Callable[[], float] = time.monotonic,
         ) -> tuple[list[Object], bool]:
    """The newest ``limit`` entries reachable from the attempts' heads (:func:`nodes`'
    order), and whether more were left unread (the limit, :data:`MOST` nodes read, or the
    deadline reached: a node may hold no entry)."""
    entries: list[Object] = []
    for node in nodes(chain=chain, read=read,
                      stop=lambda: len(entries) >= limit or clock() > deadline):
        if node is None:
            return entries, True
        _, seq, found = node
        entries.extend(_entry(r, seq=seq) for r in reversed(found))
    return entries[:limit], len(entries) > limit


def parse_record(text: str | None) -> str | None:
    """The ``record`` query parameter: a record's key, or None when absent."""
    if text is None or text == "":
        return None
    try:
        return records.check_key(text)
    except records.RecordError as error:
        raise HistoryError(400, "BadRequest", str(error)) from None


def newest(*, chain: list[Attempt], read: Callable[[int, str], bytes], key: str,
           deadline: float, clock: Callable[[], float] = time.monotonic,
           ) -> records.Record | None:
    """The newest entry named ``key`` reachable from the heads (at most :data:`MOST`
    nodes read, within the deadline), or None."""
    for node in nodes(chain=chain, read=read, stop=lambda: clock() > deadline):
        if node is None:
            return None
        match = next((r for r in reversed(node[2]) if r.key == key), None)
        if match is not None:
            return match
    return None


def positions(*, chain: list[Attempt], read: Callable[[int, str], bytes],
              keys: tuple[str, ...], deadline: float,
              clock: Callable[[], float] = time.monotonic,
              ) -> dict[str, tuple[tuple[int, int, int], ...]] | str:
    """Every position (``api.cuts``: attempt, commit, place in it) where each of ``keys``
    was committed, read from the heads to each attempt's first commit; a text when the
    whole journal cannot be read within :data:`MOST` nodes and the deadline (a rerun from a
    step needs its first commit, so a partial read does not do)."""
    found: dict[str, list[tuple[int, int, int]]] = {key: [] for key in keys}
    trusted = [a for a in chain if a.trusted]  # as a successor reads the prefix
    for node in nodes(chain=trusted, read=read, stop=lambda: clock() > deadline):
        if node is None:
            return (f"the journal holds more than {MOST} commits or could not be read within "
                    f"{DEADLINE_SECONDS:.0f} s; rerun from the start, or fork the run")
        number, seq, entries = node
        for index, record in enumerate(entries):
            if record.key in found:
                found[record.key].append((number, seq, index))
    return {key: tuple(sorted(places)) for key, places in found.items()}


def payload_bytes(record: records.Record, *, get: Callable[[str, int], bytes]) -> bytes:
    """The exact bytes of ``record``'s payload (``get(key, limit)`` reads an object of
    the slot's journal), verified against its digest."""
    if record.ref is None:
        data = records.canonical(record.inline)
    elif record.size > RECORD_BYTES:
        raise HistoryError(413, "RequestEntityTooLarge", (
            f"record {record.key} is {record.size} bytes; a history shows at most "
            f"{RECORD_BYTES}: read it from the journal's store ({record.ref})"))
    else:
        data = get(record.ref, record.size)
    if records.digest(data) != record.digest:
        raise HistoryError(500, "InternalError", f"record {record.key}'s payload does not "
                           "match its digest: the journal was altered")
    return data


@dataclass(kw_only=True)
class Histories:
    """Reads histories through the operator's own API client and journal credentials."""

    client: rest.Rest
    stores: journalstores.JournalStores

    def _get(self, path: str, what: str) -> Object:
        found = self.client.get(path)
        if found is None:
            raise HistoryError(404, "NotFound", f"{what} not found")
        return found

    def commits(self, *, namespace: str, slot: str, pin: JournalPin | None,
                deleted: str | None, keys: tuple[str, ...],
                clock: Callable[[], float] = time.monotonic,
                ) -> dict[str, tuple[tuple[int, int, int], ...]] | str:
        """Where each of ``keys`` was committed in ``slot``'s journal (:func:`positions`), or why
        that cannot be read: the run has no journal (``pin``), it was ``deleted`` (the
        condition's message), the store fails."""
        if pin is None:
            return "the run has no journal (its steps are on its attempts' Leases)"
        if deleted is not None:
            return f"the run's journal was deleted: {deleted}"
        leases = (self.client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            query={"labelSelector": f"{names.SLOT_LABEL}={slot},{names.ATTEMPT_LABEL}"},
        ) or {}).get("items") or []
        try:
            store = self.stores.store(endpoint=pin.endpoint, bucket=pin.bucket,
                                      region=pin.region, secret=pin.secret,
                                      namespace=namespace)
            return positions(
                chain=attempts(leases), keys=keys, clock=clock,
                deadline=clock() + DEADLINE_SECONDS,
                read=lambda attempt, digest: store.get(
                    f"{pin.prefix}/{slot}/{attempt}/sha256/{digest}",
                    limit=journalnodes.NODE_BYTES))
        except (journalstores.Unusable, objectstore.S3Error, HistoryError) as error:
            return f"the journal's store at {pin.endpoint} did not serve it: {error}"

    def history(self, *, namespace: str, slot: str, limit: int, record: str | None = None,
                clock: Callable[[], float] = time.monotonic) -> Object:
        """The history of ``slot`` (see the module); :class:`HistoryError` when the slot,
        its run or its journal cannot be had."""
        base = f"/apis/{names.GROUP}/{names.VERSION}/namespaces/{namespace}"
        found = self._get(f"{base}/slots/{slot}", f"slot {namespace}/{slot}")
        run_name = str((found.get("spec") or {}).get("run") or "")
        run = self._get(f"{base}/agentruns/{run_name}", f"run {namespace}/{run_name}")
        pinned = ((run.get("status") or {}).get("pinned") or {}).get("journal")
        leases = (self.client.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
            query={"labelSelector": f"{names.SLOT_LABEL}={slot},{names.ATTEMPT_LABEL}"},
        ) or {}).get("items") or []
        chain = attempts(leases)
        history: Object = {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": KIND,
            "metadata": {"name": slot, "namespace": namespace},
            "journal": None, "attempts": [
                {"attempt": a.number, "lease": a.lease, "ended": a.ended,
                 "commits": a.head.seq if a.head else 0,
                 **({"records": a.usage.records, "bytes": a.usage.bytes} if a.usage else {})}
                for a in chain],
            "entries": [], "truncated": False,
        }
        if pinned is None:
            if record is not None:
                raise HistoryError(404, "NotFound", f"the run {run_name} has no journal: "
                                   "its records are on its attempts' Leases")
            return history  # its records are on its Leases (a run pinned without a journal)
        pin = JournalPin.model_validate(pinned)
        history["journal"] = {"endpoint": pin.endpoint, "bucket": pin.bucket,
                              "prefix": pin.prefix}
        deleted = [c for c in (run.get("status") or {}).get("conditions") or []
                   if c.get("type") == names.JOURNAL_DELETED_CONDITION
                   and c.get("status") == "True"]
        if deleted:  # by its retention: nothing to read, and the reason why
            history["journal"]["deleted"] = str(deleted[0].get("message") or "")
            if record is not None:
                raise HistoryError(410, "Gone", f"the run's journal was deleted: "
                                   f"{history['journal']['deleted']}")
            return history
        try:
            store = self.stores.store(endpoint=pin.endpoint, bucket=pin.bucket,
                                      region=pin.region, secret=pin.secret,
                                      namespace=namespace)
        except journalstores.Unusable as error:
            raise HistoryError(503, "ServiceUnavailable", str(error)) from None

        def read(attempt: int, digest: str) -> bytes:
            return store.get(f"{pin.prefix}/{slot}/{attempt}/sha256/{digest}",
                             limit=journalnodes.NODE_BYTES)

        def get(uri: str, size: int) -> bytes:
            own = f"s3://{pin.bucket}/{pin.prefix}/{slot}/"
            key = uri.removeprefix(f"s3://{pin.bucket}/")
            if not uri.startswith(own) or not re.fullmatch(
                    bounds.ATTEMPT_NUMBER_PATH + r"/sha256/[0-9a-f]{64}", uri.removeprefix(own)):
                raise HistoryError(500, "InternalError", f"{uri[:200]} is not this slot's "
                                   "journal: a payload is read only from it")
            return store.get(key, limit=size)

        try:
            if record is not None:
                named = newest(chain=chain, read=read, key=record,
                               deadline=clock() + DEADLINE_SECONDS, clock=clock)
                if named is None:
                    raise HistoryError(404, "NotFound", f"no record {record} in slot {slot}'s "
                                       "journal (its newest entries)")
                data = payload_bytes(named, get=get)
                history["record"] = {"key": named.key, "attempt": named.attempt,
                                     "kind": str(named.kind), "digest": named.digest,
                                     "size": len(data),
                                     "data": base64.b64encode(data).decode()}
                return history
            history["entries"], history["truncated"] = walk(
                chain=chain, read=read, limit=limit, deadline=clock() + DEADLINE_SECONDS,
                clock=clock)
        except objectstore.S3Error as error:
            status = 503 if isinstance(error, objectstore.S3Unavailable) else 502
            raise HistoryError(status, "ServiceUnavailable",
                               f"the journal's store at {pin.endpoint} did not serve "
                               f"it: {error}") from None
        return history
