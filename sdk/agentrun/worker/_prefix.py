"""The recoverable prefix, in a worker: read it, then do each step once over it.

What a successor trusts of its slot's earlier attempts is decided purely in
``agentrun.core.attempts.prefixes`` (shared with the operator, which copies a fork's):
:func:`prefix` is that; :class:`Steps` makes "skip if committed, else do and commit" one
call; :func:`list_leases` is the one read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar, cast

from agentrun import rest
from agentrun.api import names
from agentrun.core.attempts import prefixes
from agentrun.worker import _records as records

Record = records.Record
T = TypeVar("T")  # a step's result type: what ``do`` returns


Prefix = prefixes.Prefix
Chains = prefixes.Chains
prefix = prefixes.prefix
own_discards = prefixes.own_discards


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
