"""Spans sent with the ids their reporter derived (OpenTelemetry's SDK, in memory here;
``tests/integration/node/test_traces.py`` sends them to a real Collector)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from agentrun import telemetry
from agentrun.api import traces

T0 = datetime(2030, 1, 1, 12, tzinfo=UTC)


@pytest.fixture
def sent() -> Iterator[tuple[telemetry.Telemetry, InMemorySpanExporter]]:
    memory = InMemorySpanExporter()
    sink = telemetry.Telemetry.over(SimpleSpanProcessor(memory), service="test")
    yield sink, memory
    sink.shutdown()


def test_a_finished_span_keeps_its_derived_ids_times_events_and_status(
        sent: tuple[telemetry.Telemetry, InMemorySpanExporter]) -> None:
    sink, memory = sent
    trace, parent, span = traces.trace_id("r"), traces.slot_span("s"), traces.attempt_span("s", 1)
    sink.report(traces.SpanRecord(
        trace=trace, span=span, parent=parent, name="attempt 1", start=T0,
        end=T0 + timedelta(seconds=5), attributes={"agentrun.attempt": 1},
        events=(traces.SpanEvent(name="lease expired", time=T0 + timedelta(seconds=5)),),
        error="Lost"))
    sink.report(traces.SpanRecord(trace=trace, span=traces.run_span("r"), parent=None,
                                  name="run", start=T0, end=T0))
    first, root = memory.get_finished_spans()
    assert (first.context.trace_id, first.context.span_id, first.parent.span_id) == (
        trace, span, parent)
    assert (first.start_time, first.end_time) == (
        int(T0.timestamp() * 1e9), int((T0 + timedelta(seconds=5)).timestamp() * 1e9))
    assert [e.name for e in first.events] == ["lease expired"]
    assert (first.status.status_code, first.status.description) == (StatusCode.ERROR, "Lost")
    assert dict(first.attributes or {}) == {"agentrun.attempt": 1}
    assert (root.context.trace_id, root.context.span_id, root.parent) == (
        trace, traces.run_span("r"), None)
    assert first.resource.attributes["service.name"] == "test"


def test_a_live_span_is_current_and_records_an_error(
        sent: tuple[telemetry.Telemetry, InMemorySpanExporter]) -> None:
    sink, memory = sent
    with sink.span(trace=7, span=8, parent=9, name="step a", attributes={"k": "v"}):
        assert sink.current_span(trace=7) == 8
        assert sink.current_span(trace=6) is None  # another trace's span is not ours
    with pytest.raises(ValueError, match="boom"), sink.span(
            trace=7, span=10, parent=9, name="step b", attributes={}):
        raise ValueError("boom")
    assert sink.current_span(trace=7) is None  # none open
    a, b = memory.get_finished_spans()
    assert (a.context.span_id, a.parent.span_id) == (8, 9)
    assert b.status.status_code is StatusCode.ERROR
    assert [e.name for e in b.events] == ["exception"]


def test_off_everything_is_a_no_op() -> None:
    sink = telemetry.Telemetry.start(endpoint=None, service="x")
    assert not sink.on
    sink.report(traces.SpanRecord(trace=1, span=2, parent=None, name="n", start=T0, end=T0))
    with sink.span(trace=1, span=2, parent=None, name="n", attributes={}) as opened:
        assert opened is None
    assert sink.current_span(trace=1) is None
    sink.flush()
    sink.shutdown()
    assert telemetry.Telemetry.start(endpoint="", service="x").on is False


@pytest.mark.parametrize(("value", "said"), [
    ("ftp://collector:4318", "of a host with no query"),
    ("http://", "of a host with no query"),
    ("http://collector:4318/?x=1", "of a host with no query"),
    ("http://coll ector:4318", "of a host with no query"),
    ("http://c/" + "a" * 3000, "at most 2048"),
])
def test_a_bad_endpoint_says_what_is_wanted(value: str, said: str) -> None:
    with pytest.raises(telemetry.EndpointError, match=said):
        telemetry.check_endpoint(value)
    with pytest.raises(telemetry.EndpointError):
        telemetry.Telemetry.start(endpoint=value, service="x")


def test_a_good_endpoint_loses_its_trailing_slash() -> None:
    assert telemetry.check_endpoint("http://collector.obs:4318/") == "http://collector.obs:4318"
    assert telemetry.check_endpoint("https://c/base") == "https://c/base"


def test_a_naive_time_is_utc_and_an_end_before_its_start_is_its_start(
        sent: tuple[telemetry.Telemetry, InMemorySpanExporter]) -> None:
    sink, memory = sent
    sink.report(traces.SpanRecord(trace=1, span=2, parent=None, name="n",
                                  start=T0.replace(tzinfo=None), end=T0 - timedelta(hours=1)))
    (span,) = memory.get_finished_spans()
    assert span.start_time == span.end_time == 1_893_499_200 * 10**9


def test_the_end_waits_for_a_silent_collector_only_so_long() -> None:
    """A collector that accepts and never answers: the last spans are given up after
    SHUTDOWN_SECONDS (a worker's lease is still renewed meanwhile, and must not lapse)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        sink = telemetry.Telemetry.start(
            endpoint=f"http://127.0.0.1:{silent.getsockname()[1]}", service="x")
        for i in range(50):
            sink.report(traces.SpanRecord(trace=1, span=i + 1, parent=None, name="n",
                                          start=T0, end=T0))
        started = time.monotonic()
        sink.shutdown(timeout_seconds=0.5)
        assert time.monotonic() - started < 1.5
        assert not sink.on
        sink.report(traces.SpanRecord(trace=1, span=99, parent=None, name="after",
                                      start=T0, end=T0))  # after the end: nothing, no error


def test_a_fault_in_reporting_a_passs_spans_is_logged_never_raised(
        caplog: pytest.LogCaptureFixture) -> None:
    class Broken(telemetry.Telemetry):
        def report(self, record: traces.SpanRecord) -> None:
            raise RuntimeError("the SDK broke")

    record = traces.SpanRecord(trace=1, span=2, parent=None, name="n", start=T0, end=T0)
    Broken().report_all([record])  # the reconcile that made the write goes on
    assert "tracing: spans not reported" in caplog.text
    assert "the SDK broke" in caplog.text
