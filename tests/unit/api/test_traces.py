"""Derived trace and span ids, and the W3C traceparent a worker pod is given."""

from __future__ import annotations

import pytest

from agentrun.api import traces


def test_ids_are_derived_from_what_they_name_and_fit_w3c_widths() -> None:
    assert traces.trace_id("run-a") == traces.trace_id("run-a") != traces.trace_id("run-b")
    assert 0 < traces.trace_id("run-a") < 2**128
    spans = {traces.run_span("u"), traces.slot_span("u"), traces.attempt_span("u", 1),
             traces.attempt_span("u", 2), traces.child_span(1, "step", "a"),
             traces.child_span(1, "step", "b"), traces.child_span(2, "step", "a")}
    assert len(spans) == 7  # what each names is in its digest, the kind too
    assert all(0 < s < 2**64 for s in spans)
    # The parts are separated: ("ab", "c") and ("a", "bc") are different spans.
    assert traces.child_span(1, "ab", "c") != traces.child_span(1, "a", "bc")


def test_a_traceparent_round_trips() -> None:
    trace, span = traces.trace_id("run"), traces.attempt_span("slot", 3)
    value = traces.traceparent(trace=trace, span=span)
    assert value == f"00-{trace:032x}-{span:016x}-01"
    assert traces.parse_traceparent(value) == traces.Parent(trace=trace, span=span)
    assert traces.parse_traceparent(f"  {value}\n") == traces.Parent(trace=trace, span=span)


@pytest.mark.parametrize("value", [
    "", "garbage", "01-" + "a" * 32 + "-" + "b" * 16 + "-01",  # another version
    "00-" + "0" * 32 + "-" + "b" * 16 + "-01",  # an all-zero trace: W3C says ignore it
    "00-" + "a" * 32 + "-" + "0" * 16 + "-01",
    "00-" + "A" * 32 + "-" + "b" * 16 + "-01",  # upper case is not W3C's
    "00-" + "a" * 31 + "-" + "b" * 16 + "-01",
    "00-" + "a" * 32 + "-" + "b" * 16 + "-01" + " " * 100,  # too long to be read at all
])
def test_what_is_not_a_traceparent_is_none(value: str) -> None:
    assert traces.parse_traceparent(value) is None
