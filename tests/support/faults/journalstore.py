"""What a slot's journal holds, read from the store itself, for the ``journal-matrix`` check.

Why not the successor's own view (``prefix``): the scenario's claim is about the store,
that nothing a head reaches is missing or altered and that every object no head reaches
(an orphan: a node stored before its head advance that never came, a payload put for a
step never committed) is exactly that, unreachable. So the checker lists the slot's
objects and walks each attempt's chain from its head on the Lease, with the SDK's own
node reader (``read_node``: every node verified against the digest that reached it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentrun import objectstore as s3
from agentrun.worker import _journal as journal
from agentrun.worker import _records as records
from tests.support.cluster import store

LIST_LIMIT = 100_000  # a play stores a few thousand objects


def objects() -> s3.ObjectStore:
    """The bundled store, as this host reaches it (anonymous, as its workers are)."""
    return s3.ObjectStore(endpoint=store.host_endpoint(), bucket=store.BUCKET,
                          credentials=s3.credentials_from(None))


@dataclass
class Audit:
    """The slot's objects (``listed``), those a head reaches (``reachable``: nodes and the
    payloads their records name), and the records, the latest attempt's per key."""

    listed: set[str] = field(default_factory=set)
    reachable: set[str] = field(default_factory=set)
    records: dict[str, records.Record] = field(default_factory=dict)

    @property
    def orphans(self) -> set[str]:
        return self.listed - self.reachable

    @property
    def missing(self) -> set[str]:
        return self.reachable - self.listed


def audit(found: s3.ObjectStore, *, prefix: str, slot: str,
          heads: dict[int, journal.Head | None]) -> Audit:
    """List the slot's objects under the run's ``prefix`` and walk every attempt's chain
    from its head (``heads``: attempt -> head on its Lease, None: it committed nothing)."""
    slot_journal = journal.Journal(objects=found, prefix=prefix, slot=slot)
    result = Audit(listed=set(found.list(f"{prefix}/{slot}/", limit=LIST_LIMIT)))
    for attempt, head in sorted(heads.items()):
        if head is None:
            continue
        mine: dict[str, records.Record] = {}
        digest: str | None = head.digest
        for seq in range(head.seq, 0, -1):
            assert digest is not None
            name = f"{slot_journal.attempt_key(attempt)}/{digest}"
            data = slot_journal.get(name, size=journal.NODE_BYTES)
            digest, entries = journal.read_node(data, attempt=attempt, seq=seq, digest=digest)
            result.reachable.add(name)
            for entry in entries:
                if entry.ref:
                    result.reachable.add(entry.ref.removeprefix(f"s3://{found.bucket}/"))
                mine.setdefault(entry.key, entry)  # walked head first: the latest wins
        result.records |= mine  # a later attempt's record wins, as in a successor's prefix
    return result


def attempt_of(name: str, *, prefix: str, slot: str) -> int:
    """The attempt whose names ``name`` (``<prefix>/<slot>/<attempt>/sha256/<digest>``) is."""
    return int(name.removeprefix(f"{prefix}/{slot}/").split("/", 1)[0])
