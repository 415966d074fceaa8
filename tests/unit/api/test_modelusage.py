"""Model usage's pure parts: the price table, pricing, the Lease's sum, the usage record and
the journal's usage that carries it; and the operator's copy of it into a slot's status."""

from __future__ import annotations

import decimal
from datetime import UTC, datetime

import pytest

from agentrun.api import journalnodes, modelusage, names, records
from agentrun.api.configs import BindingsDocument
from agentrun.api.modelusage import ModelUsage, PriceTable, UsageError
from agentrun.api.slots import AttemptRecord, SlotStatus
from agentrun.core.attempts import usagerecords

NOW = datetime(2026, 12, 6, tzinfo=UTC)
PRICES = {"currency": "EUR", "models": {
    "fake-large": {"inputPerMillion": "3", "outputPerMillion": "15.5"},
    "tiny": {"inputPerMillion": "0.000001", "outputPerMillion": "0"}}}


def test_a_price_per_million_tokens_is_micro_units_per_token_rounded_half_up_per_call() -> None:
    table = PriceTable.model_validate(PRICES)
    assert table.cost_micros(model="fake-large", input_tokens=1000, output_tokens=200) == (
        1000 * 3 + 200 * 15.5)
    assert table.cost_micros(model="tiny", input_tokens=499_999, output_tokens=9) == 0
    assert table.cost_micros(model="tiny", input_tokens=500_000, output_tokens=9) == 1
    assert table.cost_micros(model="unpriced", input_tokens=1, output_tokens=1) is None


@pytest.mark.parametrize(("table", "said"), [
    ({"currency": "XYZ"}, "not an ISO 4217 code"),
    ({"currency": "usd"}, "pattern"),
    ({"models": {"m": {"inputPerMillion": "-1", "outputPerMillion": "1"}}}, "pattern"),
    ({"models": {"m": {"inputPerMillion": "1e3", "outputPerMillion": "1"}}}, "pattern"),
    ({"models": {"m": {"inputPerMillion": "1.1234567", "outputPerMillion": "1"}}}, "pattern"),
    ({"models": {"m": {"inputPerMillion": "1"}}}, "outputPerMillion"),
    ({"models": {" spaced": {"inputPerMillion": "1", "outputPerMillion": "1"}}}, "a model's"),
    ({"models": {f"m{i}": {"inputPerMillion": "1", "outputPerMillion": "1"}
                 for i in range(modelusage.MAX_MODELS + 1)}}, "at most 64"),
    ({"currency": "USD", "extra": 1}, "Extra inputs"),
])
def test_a_price_table_out_of_its_schema_is_refused_with_why(table: dict[str, object],
                                                               said: str) -> None:
    with pytest.raises(ValueError, match=said):
        PriceTable.model_validate(table)
    with pytest.raises(ValueError, match=said):  # in the bindings: the run is not pinned
        BindingsDocument.model_validate({"nodes": [{"node": "a", "agent": {
            "name": "x", "revision": "1"}}], "prices": table})


@pytest.mark.parametrize(("amount", "micros"), [
    ("0.0015", 1500), (decimal.Decimal("2"), 2_000_000), (3, 3_000_000), (0.1, 100_000),
    ("0.0000005", 1), ("0.00000049", 0)])
def test_a_cost_is_kept_in_exact_micro_units(amount: object, micros: int) -> None:
    assert modelusage.micros(amount) == micros  # type: ignore[arg-type]


@pytest.mark.parametrize("amount", ["-1", "nan", "inf", "1e10", "ten", float("nan")])
def test_a_cost_out_of_bounds_is_refused(amount: object) -> None:
    with pytest.raises(UsageError):
        modelusage.micros(amount)  # type: ignore[arg-type]


def test_the_lease_sum_reads_back_what_it_writes_and_nothing_else() -> None:
    usage = ModelUsage(input_tokens=12, output_tokens=3, cost_micros=99, currency="JPY")
    lease = {"metadata": {"annotations": {names.MODEL_USAGE_ANNOTATION: usage.text()}}}
    assert usage.text() == "12 input tokens, 3 output tokens, 99 micro-JPY"
    assert ModelUsage.on_lease(lease) == usage
    for bad in ("12 input tokens", "1 input tokens, 2 output tokens, 3 micro-XYZ",
                "9" * 17 + " input tokens, 0 output tokens, 0 micro-USD"):
        assert ModelUsage.parse(bad) is None
    assert ModelUsage.on_lease({"metadata": {}}) is None and ModelUsage.on_lease(None) is None


def test_a_sum_stops_at_its_bound_and_says_so() -> None:
    big = ModelUsage(input_tokens=modelusage.MAX_TOKENS, cost_micros=modelusage.MAX_COST_MICROS)
    both = big.plus(ModelUsage(input_tokens=1, output_tokens=2, cost_micros=3))
    assert (both.input_tokens, both.output_tokens, both.cost_micros, both.saturated) == (
        modelusage.MAX_TOKENS, 2, modelusage.MAX_COST_MICROS, True)
    assert ModelUsage(input_tokens=1).plus(ModelUsage(output_tokens=1)).saturated is None


def test_a_total_adds_only_its_currency() -> None:
    usd = ModelUsage(input_tokens=1, cost_micros=5)
    eur = ModelUsage(input_tokens=100, cost_micros=500, currency="EUR")
    assert modelusage.total([None, usd, eur, usd]) == ModelUsage(input_tokens=2, cost_micros=10)
    assert modelusage.total([usd, eur], currency="EUR") == eur
    assert modelusage.total([None]) is None


def usage_record(key: str, **call: object) -> records.Record:
    payload = modelusage.Call.model_validate(
        {"model": "m", "inputTokens": 0, "outputTokens": 0, "costMicros": 0, "currency": "USD",
         **call}).model_dump(mode="json", by_alias=True, exclude_none=True)
    data = records.canonical(payload)
    return records.Record(attempt=1, digest=records.digest(data), inline=payload, key=key,
                          kind=records.Kind.USAGE, size=len(data))


def test_the_journal_usage_adds_the_usage_records_it_reaches() -> None:
    step = records.Record(attempt=1, digest="0" * 64, inline=None, key="gather",
                          kind=records.Kind.STEP_RESULT, size=4)
    usage = journalnodes.Usage()
    for record in (step, usage_record("usage.1.1", inputTokens=10, outputTokens=2,
                                      costMicros=7, step="gather"),
                   usage_record("usage.1.2", inputTokens=5, costMicros=1)):
        usage = usage.adding(record)
    assert usage.records == 3
    assert usage.model == ModelUsage(input_tokens=15, output_tokens=2, cost_micros=8)
    written = usage.annotations()
    assert written[names.MODEL_USAGE_ANNOTATION] == "15 input tokens, 2 output tokens, " \
        "8 micro-USD"
    assert journalnodes.Usage.on_lease({"metadata": {"annotations": written}}) == usage
    assert names.MODEL_USAGE_ANNOTATION not in journalnodes.Usage().adding(step).annotations()
    # A record of kind usage that is not a well-formed report is not counted.
    odd = step.model_copy(update={"kind": records.Kind.USAGE, "inline": {"tokens": 5}})
    assert journalnodes.Usage().adding(odd).model is None


def status_with(*usages: ModelUsage | None, total: ModelUsage | None = None) -> SlotStatus:
    return SlotStatus(attempts=[AttemptRecord(
        number=n, pod=f"s-{n}", lease=f"s-{n}", worker_class="w", launch_spec="l@1",
        started_at=NOW, usage=u) for n, u in enumerate(usages, start=1)], usage=total)


def lease_saying(usage: ModelUsage | str) -> dict[str, object]:
    text = usage if isinstance(usage, str) else usage.text()
    return {"metadata": {"annotations": {names.MODEL_USAGE_ANNOTATION: text}}}


def test_the_operator_adds_what_an_attempts_lease_grew_by_to_the_slots_sum() -> None:
    first = ModelUsage(input_tokens=10, output_tokens=1, cost_micros=100)
    status = status_with(first, None, total=first)
    grown = ModelUsage(input_tokens=30, output_tokens=2, cost_micros=150)
    seen = usagerecords.observed(status, name="s-2", lease=lease_saying(grown))
    assert seen.attempts[1].usage == grown and seen.usage == first.plus(grown)
    more = ModelUsage(input_tokens=31, output_tokens=2, cost_micros=151)
    again = usagerecords.observed(seen, name="s-2", lease=lease_saying(more))
    assert again.usage == ModelUsage(input_tokens=41, output_tokens=3, cost_micros=251)
    # Nothing new, nothing readable, a smaller sum, another currency: unchanged.
    for lease in (lease_saying(more), {"metadata": {}}, None, lease_saying("garbage"),
                  lease_saying(ModelUsage(input_tokens=1)),
                  lease_saying(more.model_copy(update={"currency": "EUR"}))):
        assert usagerecords.observed(again, name="s-2", lease=lease) == again
    assert usagerecords.observed(again, name="s-9", lease=lease_saying(more)) == again
