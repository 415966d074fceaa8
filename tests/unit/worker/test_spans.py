"""A worker's spans: off unless its pod names an endpoint and a W3C parent; never fatal."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrun import telemetry
from agentrun.api import traces
from agentrun.worker._context import Context
from agentrun.worker._prefix import Prefix, Steps
from agentrun.worker._records import Record
from agentrun.worker._sdk import Worker
from agentrun.worker._spans import AttemptSpans
from tests.support.ledgers import DurableOnReturn

PARENT = traces.Parent(trace=traces.trace_id("run"), span=traces.attempt_span("slot", 2))
GOOD = {"TRACEPARENT": traces.traceparent(trace=PARENT.trace, span=PARENT.span),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


@pytest.mark.parametrize("environ", [{}, {"TRACEPARENT": GOOD["TRACEPARENT"]},
                                     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}])
def test_off_without_both_an_endpoint_and_a_parent(environ: dict[str, str]) -> None:
    spans = AttemptSpans.from_env(environ)
    assert not spans.on
    with spans.step("a") as mark, spans.effect("e", key="k"):
        spans.model_call(model="m", attributes={})
    assert not mark.ran


@pytest.mark.parametrize(("environ", "said"), [
    ({**GOOD, "TRACEPARENT": "00-zz"}, "not a W3C traceparent"),
    ({**GOOD, "OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4318"}, "not an http(s) URL"),
])
def test_a_bad_value_is_logged_and_turns_tracing_off(
        environ: dict[str, str], said: str, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        spans = AttemptSpans.from_env(environ)
    assert not spans.on
    assert said in caplog.text


def test_malformed_sdk_settings_turn_tracing_off_never_the_attempt(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "-5")
    with caplog.at_level(logging.WARNING):
        spans = AttemptSpans.from_env(GOOD)
    assert not spans.on
    assert "tracing is off:" in caplog.text


def test_on_it_parses_its_parent() -> None:
    spans = AttemptSpans.from_env(GOOD)
    try:
        assert spans.on and spans.parent == PARENT
    finally:
        spans.close()


def test_steps_and_effects_are_spans_under_the_attempt() -> None:
    memory = InMemorySpanExporter()
    spans = AttemptSpans(parent=PARENT, where={"agentrun.attempt": 2},
                         sink=telemetry.Telemetry.over(SimpleSpanProcessor(memory), service="w"))
    with spans.step("gather"):
        pass  # read back from the prefix: the body did not run
    with spans.step("draft") as mark:
        mark.ran = True
        spans.model_call(model="m", attributes={"agentrun.model.input_tokens": 10})
    with pytest.raises(RuntimeError), spans.effect("publish", key="k-1"):
        raise RuntimeError("the owner said no")
    with pytest.raises(RuntimeError), spans.effect("publish", key="k-1"):  # retried
        raise RuntimeError("the owner said no")
    spans.model_call(model="n", attributes={})  # outside any step: under the attempt
    with spans.step("k" * 10_000):
        pass
    spans.close()
    gather, in_draft, draft, effect, retried, outside, long = memory.get_finished_spans()
    assert [s.name for s in (gather, draft, effect)] == ["step gather", "step draft",
                                                         "effect k-1"]
    assert {s.parent.span_id for s in (gather, draft, effect, outside)} == {PARENT.span}
    assert {s.context.trace_id for s in (gather, draft, effect)} == {PARENT.trace}
    assert (gather.attributes or {})["agentrun.step.outcome"] == "skipped"
    assert (draft.attributes or {})["agentrun.step.outcome"] == "ran"
    assert (draft.attributes or {})["agentrun.attempt"] == 2
    assert (in_draft.name, in_draft.parent.span_id) == ("model m", draft.context.span_id)
    assert (in_draft.attributes or {})["agentrun.model.input_tokens"] == 10
    assert (outside.name, outside.parent.span_id) == ("model n", PARENT.span)
    assert (effect.attributes or {})["agentrun.effect.name"] == "publish"
    assert not effect.status.is_ok
    # Each run of an effect (or of a step's key) is a span of its own.
    assert len({s.context.span_id for s in memory.get_finished_spans()}) == 7
    assert effect.context.span_id != retried.context.span_id
    assert len(long.name) == len("step ") + 256


class Stops:
    """A keeper that records when it stops renewing and lets the lease go."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def release(self) -> None:
        self.order.append("keeper")


class Recorded(telemetry.Telemetry):
    def __init__(self, processor: SimpleSpanProcessor, order: list[str]) -> None:
        super().__init__(provider=telemetry.Telemetry.over(processor, service="w")._provider)
        self.order = order

    def shutdown(self, *, timeout_seconds: float = telemetry.SHUTDOWN_SECONDS) -> None:
        self.order.append("spans")
        super().shutdown(timeout_seconds=timeout_seconds)


def test_a_workers_steps_are_marked_ran_or_skipped_and_its_spans_sent_before_the_lease_ends(
        ) -> None:
    outcomes, order = list[str](), list[str]()
    committed: dict[str, Record] = {}

    class Memory(DurableOnReturn):
        def commit(self, record: Record) -> Record:
            committed[record.key] = record
            return record

    for attempt in (1, 2):
        worker = Worker(context=Context(
            namespace="ns", run="r", run_uid="uid-r", slot="s", node="n", attempt=attempt,
            fencing_token=attempt, lease=f"s-{attempt}", config_dir=Path("/etc"), pinned={}),
            api=None, keeper=Stops(order))  # type: ignore[arg-type]
        worker._steps = Steps(prefix=Prefix(attempt=attempt, committed=dict(committed)),
                              ledger=Memory())
        memory = InMemorySpanExporter()  # (a provider's shutdown shuts its exporter)
        worker._tracing = AttemptSpans(parent=PARENT, sink=Recorded(
            SimpleSpanProcessor(memory), order))
        assert worker.step("gather", do=lambda: "notes") == "notes"
        worker.stop()
        outcomes += [str((s.attributes or {})["agentrun.step.outcome"])
                     for s in memory.get_finished_spans()]
    assert outcomes == ["ran", "skipped"]
    assert order == ["spans", "keeper", "spans", "keeper"]
