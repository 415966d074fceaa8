"""Fakes for the sidecar's unit tests: a clock, an in-memory record store, a keeper and
a worker that talk to no API server (the real pod is
tests/integration/node/test_sidecar_worker.py); effects still run through the real
ledger, so the instruction sequence is the ledger's."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentrun.worker import _effects as effects
from agentrun.worker import _keeper as keeper
from agentrun.worker import _prefix as prefix
from agentrun.worker import _questions as questions
from agentrun.worker import _records as records
from agentrun.worker._renewals import Standing
from agentrun.worker._sidecar import CheckIns, Sidecar
from agentrun.worker._sidecarsessions import Reply
from tests.support.ledgers import DurableOnReturn

UID, SLOT, ATTEMPT = "uid-run", "study-research", 2
POD = f"{SLOT}-{ATTEMPT}"


@dataclass
class Clock:
    now: float = 100.0

    def __call__(self) -> float:
        return self.now


class Memory(DurableOnReturn):
    """The attempt's Lease records, in memory (write-once like LeaseRecords)."""

    def __init__(self) -> None:
        self.committed: dict[str, records.Record] = {}

    def commit(self, record: records.Record) -> records.Record:
        found = self.committed.get(record.key)
        if found is not None and found != record:
            raise records.RecordConflict(f"record {record.key} is already committed")
        self.committed[record.key] = record
        return record

@dataclass
class FakeKeeper:
    state: Standing = Standing.LIVE

    def standing(self) -> Standing:
        return self.state

    def ensure_live(self) -> None:
        if self.state is Standing.LOST:
            raise keeper.LeaseLost("lost")
        if self.state is not Standing.LIVE:
            raise keeper.LeaseLapsed("lapsed")


class Payloads:
    """A payload store in memory (the journal's part a record references)."""

    def __init__(self) -> None:
        self.objects: dict[str, bytes] = {}

    def put(self, *, sha256: str, data: bytes) -> str:
        self.objects[f"mem://{sha256}"] = data
        return f"mem://{sha256}"

    def get(self, uri: str, *, size: int) -> bytes:
        return self.objects[uri][:size + 1]


@dataclass
class FakeWorker:
    """A Worker whose prefix is ``earlier`` records and whose commits go to ``memory``;
    ``store``: its payload store (a run with a journal), None: records inline only."""

    earlier: dict[str, records.Record] = field(default_factory=dict)
    keeper: FakeKeeper = field(default_factory=FakeKeeper)
    memory: Memory = field(default_factory=Memory)
    owners: list[str | None] = field(default_factory=list)  # what each effect was given
    store: Payloads | None = None
    durables: list[bool] = field(default_factory=list)  # each step's ``durable``
    flushes: int = 0
    _steps: prefix.Steps | None = None

    @property
    def steps(self) -> prefix.Steps:
        if self._steps is None:
            self._steps = prefix.Steps(prefix=prefix.Prefix(attempt=ATTEMPT,
                                                            committed=self.earlier),
                                       ledger=self.memory, store=self.store)
        return self._steps

    def step(self, key: str, *, do: Callable[[], Any],
             kind: records.Kind = records.Kind.STEP_RESULT, durable: bool = False) -> Any:
        self.durables.append(durable)
        return self.steps.step(key, do=do, kind=kind, durable=durable)

    def flush(self) -> None:
        self.flushes += 1

    def effect(self, name: str, *, key: str, call: effects.Call,
               reconcile: effects.Reconcile | None = None, owner: str | None = None) -> Any:
        self.owners.append(owner)
        return effects.Ledger(steps=self.steps, keeper=self.keeper, run_uid=UID, slot=SLOT,
                              sleep=lambda _: None).effect(name, key=key, call=call,
                                                          reconcile=reconcile, owner=owner)

    def ask(self, key: str, question: str, **kwargs: Any) -> Any:
        return questions.Questions(steps=self.steps).ask(key, question, **kwargs)


def make(worker: FakeWorker | None = None, **kw: Any) -> tuple[Sidecar, FakeWorker]:
    worker = worker or FakeWorker()
    return Sidecar(worker=worker, check_ins=CheckIns(window_seconds=30), **kw), worker


def send(sidecar: Sidecar, method: str, path: str, body: Any = None) -> Reply:
    data = b"" if body is None else json.dumps(body).encode()
    return sidecar.handle(method, path, data)


def intent(key: str, attempt: int = 1) -> records.Record:
    idem = effects.idempotency_key(run_uid=UID, slot=SLOT, key=key)
    return records.make(key=f"{key}.intent", kind=records.Kind.EFFECT_INTENT, attempt=attempt,
                        payload={"effect": "publish", "idempotencyKey": idem,
                                 "fencingToken": attempt})


IDEM = effects.idempotency_key(run_uid=UID, slot=SLOT, key="publish")


# -- the check-in window and the keeper's gate -----------------------------------------------
