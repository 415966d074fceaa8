"""Model usage, in a worker: price a model call and journal it with the step it was made in.

``worker.usage(model, input_tokens=..., output_tokens=...)`` (or the LangChain callback,
:mod:`agentrun.worker.langgraph`) is called after a model call returned. The report is
checked against its bounds, priced from the run's pinned price table (the bindings'
``prices``; a ``cost`` given by the caller is taken as is, in the table's currency), and
committed *durably* as a ``usage`` record (:class:`agentrun.api.modelusage.Call`) into the
attempt's journal before ``usage`` returns. The head's advance carries the attempt's new
sum on its Lease (``journal.agentrun.dev/model-usage``) in the same write, so what the
operator adds up is exactly what the journal holds. Why durable: a report that is lost is
usage no one pays attention to; a model call takes far longer than a commit.

Before a model call or an effect, :meth:`Meter.check` stops the attempt
(:class:`BudgetExceeded`) once the run's usage, the sums on all its attempts' Leases,
reached the budget the operator wrote on this attempt's Lease.

What is not counted, and cannot be: a call whose process died before it was reported.
Usage is the worker's own report (docs/design/usage.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import decimal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

from agentrun import rest
from agentrun.api import modelusage, names
from agentrun.api.modelusage import ModelUsage, PriceTable, UsageError
from agentrun.worker import _journalcommits as journalcommits
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from agentrun.worker import _renewer as renewer
from agentrun.worker._context import Context

__all__ = ["MAX_CALL_TOKENS", "BudgetExceeded", "Cost", "Meter", "ModelUsage", "UsageError",
           "in_step", "price_table"]

Cost = decimal.Decimal | str | int | float  # an amount of the run's currency
MAX_CALL_TOKENS = 10**9  # tokens of one kind in one call: no model reads a billion at once
LIST_TRIES = 3  # lists of the run's Leases a budget check makes before it gives up
LIST_PAUSE_SECONDS = 0.5  # times the try: 0.5 s, then 1 s
KEY_PREFIX = "usage"  # records usage.<attempt>.<n>: a dot, so never a step's key
# The step whose ``do`` is running in this thread (or task), if any: its usage is its.
_STEP: contextvars.ContextVar[str | None] = contextvars.ContextVar("agentrun_step",
                                                                   default=None)


class BudgetExceeded(Exception):
    """The run's usage reached its budget: the attempt must end (leave the ``with``
    block). Nothing is lost: the slot waits for a person to raise the budget, and the next
    attempt resumes from what this one committed. ``reason``: which bound, in words."""

    def __init__(self, message: str, *, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _larger(one: ModelUsage | None, other: ModelUsage | None) -> ModelUsage | None:
    """The larger of two sums of one attempt, field by field (None: the other)."""
    if one is None or other is None or one.currency != other.currency:
        return one or other
    return ModelUsage(input_tokens=max(one.input_tokens, other.input_tokens),
                      output_tokens=max(one.output_tokens, other.output_tokens),
                      cost_micros=max(one.cost_micros, other.cost_micros),
                      currency=one.currency)


@contextlib.contextmanager
def in_step(key: str) -> Iterator[None]:
    """Usage reported inside this block is the step ``key``'s."""
    token = _STEP.set(key)
    try:
        yield
    finally:
        _STEP.reset(token)


def price_table(context: Context) -> PriceTable:
    """The run's pinned price table (``prices`` in its bindings); an empty one (costs in
    USD, no model priced) when the bindings have none. Raises :class:`UsageError` when the
    mounted bindings hold one that fails its schema (the operator refuses to pin those)."""
    import yaml  # here, when an attempt's meter starts: not on every import of the SDK

    pinned = context.pinned.get("bindings")
    document = yaml.safe_load(pinned.text) if pinned is not None else None
    found = document.get("prices") if isinstance(document, dict) else None
    if found is None:
        return PriceTable()
    try:
        return PriceTable.model_validate(found)
    except ValueError as error:
        raise UsageError(f"the run's price table (bindings 'prices') is invalid: {error}"
                         ) from None


@dataclass(kw_only=True)
class Meter:
    """The attempt's usage reports: numbered, priced, committed."""

    steps: prefix.Steps
    context: Context
    prices: PriceTable
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _count: int = field(default=0, repr=False)
    _budget: tuple[modelusage.Limits | None] | None = field(default=None, repr=False)

    @property
    def attempt(self) -> int:
        return self.context.attempt

    def __post_init__(self) -> None:
        """Number on from this attempt's reports already committed (another ``Worker`` of
        the same attempt, the sidecar's): a record's key is written once."""
        mine = f"{KEY_PREFIX}.{self.attempt}."
        with self.steps.lock:
            numbers = [key.removeprefix(mine) for key in self.steps.prefix.committed
                       if key.startswith(mine)]
        self._count = max((int(n) for n in numbers if n.isdigit()), default=0)

    def report(self, model: str, *, input_tokens: int, output_tokens: int,
               cost: Cost | None = None,
               currency: str | None = None) -> ModelUsage:
        """Journal one call's usage (see the module docstring); the call's usage, priced."""
        modelusage.check_model(model)
        for name, count in (("input_tokens", input_tokens), ("output_tokens", output_tokens)):
            if isinstance(count, bool) or not isinstance(count, int) or not (
                    0 <= count <= MAX_CALL_TOKENS):
                raise UsageError(f"{name} is a whole number 0..{MAX_CALL_TOKENS}, "
                                 f"not {count!r}")
        if currency is not None and modelusage.check_currency(currency) != (
                self.prices.currency):
            raise UsageError(f"this run keeps its costs in {self.prices.currency} (its price "
                             f"table's currency), not {currency}: convert the cost")
        if cost is None:
            micros = self.prices.cost_micros(model=model, input_tokens=input_tokens,
                                             output_tokens=output_tokens)
            if micros is None:
                raise UsageError(f"model {model!r} has no price in the run's price table "
                                 "(bindings 'prices'): add it there, or give the call's cost")
            if micros > modelusage.MAX_COST_MICROS:
                raise UsageError(f"{input_tokens} and {output_tokens} tokens of {model!r} cost "
                                 f"more than {modelusage.MAX_COST_MICROS // 10**6} units by "
                                 "the run's price table: a report out of bounds")
        else:
            micros = modelusage.micros(cost)
        call = modelusage.Call(model=model, input_tokens=input_tokens,
                               output_tokens=output_tokens, cost_micros=micros,
                               currency=self.prices.currency, step=_STEP.get())
        if not isinstance(self.steps.ledger, journalcommits.JournalRecords):
            raise records.RecordError("usage goes into the run's journal, and this run was "
                                      "pinned without one (the operator has no journal store "
                                      "configured)")
        with self.lock:  # one number per report, in the order they are committed
            self._count += 1
            key = f"{KEY_PREFIX}.{self.attempt}.{self._count}"
            self.steps.commit(records.make(key=key, kind=records.Kind.USAGE,
                                           attempt=self.attempt,
                                           payload=call.model_dump(mode="json", by_alias=True,
                                                                   exclude_none=True)),
                              durable=True)
        return call.usage()

    def check(self) -> None:
        """Raise :class:`BudgetExceeded` if the run's usage reached its budget: before a
        model call or an effect. The budget is the one in force when this attempt was
        claimed (the operator's, on its Lease); the usage is the run's as it is now, the sum
        on every attempt Lease of the run. One list gives both (the slots running beside
        this one count at once, so a run overshoots by at most the calls its workers have
        in flight); an attempt given no budget lists nothing more after its first check.
        Stopping is durable first: everything staged, then the record ``budget.exceeded``
        on the Lease (the operator reads it there and parks the slot), so a successor
        resumes from all this attempt did."""
        if self._budget is not None and self._budget[0] is None:
            return  # no budget on its Lease: it never gets one
        budget, used = self.run_usage()
        if budget is None:
            return
        why = budget.reached(used)
        if why is None:
            return
        key = f"{names.BUDGET_KEY}{names.EXCEEDED_SUFFIX}"
        with self.lock:
            found = self.steps.prefix.get(key)
            if found is None or found.attempt != self.attempt:
                payload = {"reason": why, "budget": budget.text(), "used": (
                    used or ModelUsage(currency=budget.currency)).text()}
                self.steps.commit(records.make(key=key, kind=records.Kind.DECISION,
                                               attempt=self.attempt, payload=payload))
        raise BudgetExceeded(f"the run's budget is used up ({why}): the attempt stops here "
                             "and the slot waits for a person to raise it (kubectl agentrun "
                             "budget)", reason=why)

    def run_usage(self) -> tuple[modelusage.Limits | None, ModelUsage | None]:
        """The budget on this attempt's Lease (kept: it never changes) and the run's usage
        now, from one list of the run's attempt Leases (this attempt's own sum: the larger
        of its Lease's and what this process committed, so neither a second ``Worker`` of
        the attempt nor a list a moment old says less than is there). A list the API does
        not answer is tried :data:`LIST_TRIES` times, then raised: the call it guards is
        not made unchecked."""
        lease = self._lease()
        context = self.context
        path = rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                               namespace=context.namespace)
        query = {"labelSelector": f"{names.RUN_LABEL}={context.run},{names.ATTEMPT_LABEL}"}
        for tried in range(1, LIST_TRIES + 1):
            try:
                listed = lease.api.request("GET", path, query=query)
                break
            except renewer.FAILURES as error:
                status = getattr(error, "status", None)
                if tried == LIST_TRIES or status not in (None, 429, 500, 502, 503, 504):
                    raise
                time.sleep(LIST_PAUSE_SECONDS * tried)
        sums = []
        own = self.total()
        for item in listed.get("items") or []:
            found = ModelUsage.on_lease(item)
            if (item.get("metadata") or {}).get("name") != context.lease:
                sums.append(found)
                continue
            own = _larger(own, found)
            if self._budget is None:
                text = ((item.get("metadata") or {}).get("annotations") or {}).get(
                    names.BUDGET_ANNOTATION)
                self._budget = (None if text is None
                                else modelusage.Limits.parse(str(text)),)
        budget = None if self._budget is None else self._budget[0]
        if budget is None:
            return None, None
        return budget, modelusage.total([*sums, own], currency=budget.currency)

    def _lease(self) -> records.LeaseRecords:
        ledger = self.steps.ledger
        lease = ledger.lease if isinstance(ledger, journalcommits.JournalRecords) else ledger
        assert isinstance(lease, records.LeaseRecords)
        return lease

    def total(self) -> ModelUsage | None:
        """This attempt's sum as committed (what its Lease says), None before any report."""
        ledger = self.steps.ledger
        if isinstance(ledger, journalcommits.JournalRecords) and ledger.usage is not None:
            return ledger.usage.model
        return None
