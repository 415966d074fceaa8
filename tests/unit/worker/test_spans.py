"""A worker's spans: off unless its pod names an endpoint and a W3C parent; never fatal."""

from __future__ import annotations

import logging

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agentrun import telemetry
from agentrun.api import traces
from agentrun.worker._spans import AttemptSpans

PARENT = traces.Parent(trace=traces.trace_id("run"), span=traces.attempt_span("slot", 2))
GOOD = {"TRACEPARENT": traces.traceparent(trace=PARENT.trace, span=PARENT.span),
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9"}


@pytest.mark.parametrize("environ", [{}, {"TRACEPARENT": GOOD["TRACEPARENT"]},
                                     {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}])
def test_off_without_both_an_endpoint_and_a_parent(environ: dict[str, str]) -> None:
    spans = AttemptSpans.from_env(environ)
    assert not spans.on
    with spans.step("a", skipped=False), spans.effect("e", key="k"):
        spans.model_call("m", {})


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


def test_on_it_parses_its_parent() -> None:
    spans = AttemptSpans.from_env(GOOD)
    try:
        assert spans.on and spans.parent == PARENT
    finally:
        spans.close()


def test_steps_and_effects_are_spans_under_the_attempt_with_derived_ids() -> None:
    memory = InMemorySpanExporter()
    spans = AttemptSpans(parent=PARENT, where={"agentrun.attempt": 2},
                         sink=telemetry.Telemetry.over(SimpleSpanProcessor(memory), service="w"))
    with spans.step("gather", skipped=True):
        pass
    with spans.step("draft", skipped=False):
        spans.model_call("m", {"agentrun.model.input_tokens": 10})
    with pytest.raises(RuntimeError), spans.effect("publish", key="k-1"):
        raise RuntimeError("the owner said no")
    spans.model_call("n", {})  # outside any step: under the attempt
    spans.close()
    gather, in_draft, draft, effect, outside = memory.get_finished_spans()
    assert [s.name for s in (gather, draft, effect)] == ["step gather", "step draft",
                                                         "effect k-1"]
    assert {s.parent.span_id for s in (gather, draft, effect)} == {PARENT.span}
    assert {s.context.trace_id for s in (gather, draft, effect)} == {PARENT.trace}
    assert gather.context.span_id == traces.child_span(PARENT.span, "step", "gather")
    assert (gather.attributes or {})["agentrun.step.outcome"] == "skipped"
    assert (draft.attributes or {})["agentrun.step.outcome"] == "ran"
    assert (draft.attributes or {})["agentrun.attempt"] == 2
    assert (in_draft.name, in_draft.parent.span_id) == ("model m", draft.context.span_id)
    assert (in_draft.attributes or {})["agentrun.model.input_tokens"] == 10
    assert (outside.name, outside.parent.span_id) == ("model n", PARENT.span)
    assert (effect.attributes or {})["agentrun.effect.name"] == "publish"
    assert not effect.status.is_ok
