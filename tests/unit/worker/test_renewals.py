"""The lease renewer's pure decisions: how often it renews, when it stops, what it writes.

Covers: the interval is a third of the lease duration within [1 s, 10 s]; a lease is
renewed only while it exists, is not tombstoned and is held by this pod; 404 and 403 stop
renewal, 409 re-reads soon, anything else retries at the interval; a renewal changes
``spec.renewTime`` alone and keeps the resourceVersion it read; the keeper's margin and
lapse point (the send time plus the duration minus the margin) and its standing.
"""

from __future__ import annotations

import copy
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentrun.api import names
from agentrun.core.attempts import observations
from agentrun.core.attempts.observations import LeaseView
from agentrun.worker import _renewals as renewals
from agentrun.worker._renewals import Verdict

POD = "slot-a-1"


def lease(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": POD, "namespace": "ns", "resourceVersion": "42",
                         "annotations": {"agentrun.dev/launch-spec": "cpu@1"}},
            "spec": {"holderIdentity": POD, "leaseDurationSeconds": 30, **spec}}


@pytest.mark.parametrize(("duration", "expected"), [
    (30, 10.0), (6, 2.0), (5, 5 / 3), (3600, 10.0), (2, 1.0), (None, 10.0), (0, 10.0),
])
def test_interval_is_a_third_of_the_lease_within_bounds(
        duration: int | None, expected: float) -> None:
    assert renewals.interval(duration_seconds=duration) == pytest.approx(expected)


@given(st.integers(min_value=5, max_value=3600))
def test_two_renewals_can_fail_before_the_lease_expires(duration: int) -> None:
    assert 3 * renewals.interval(duration_seconds=duration) <= duration


def test_a_lease_held_by_this_pod_is_renewed() -> None:
    decision = renewals.judge(lease=observations.lease_view(lease(leaseDurationSeconds=6)),
                              identity=POD)
    assert decision.verdict is Verdict.RENEW
    assert decision.delay_seconds == pytest.approx(2.0)


@pytest.mark.parametrize(("body", "reason"), [
    (None, "no longer exists"),
    (lease(holderIdentity=None), "tombstoned"),
    ({**lease(), "metadata": {"name": POD, "annotations": {names.OUTCOME_ANNOTATION: "Lost"}}},
     "tombstoned"),
    (lease(holderIdentity="slot-a-2"), "held by 'slot-a-2', not by 'slot-a-1'"),
])
def test_a_lease_that_is_not_ours_stops_renewal(body: dict[str, Any] | None, reason: str) -> None:
    decision = renewals.judge(lease=observations.lease_view(body), identity=POD)
    assert decision.verdict is Verdict.STOP
    assert reason in decision.reason


def test_the_holder_must_match_exactly() -> None:
    view = LeaseView(exists=True, holder=POD + "x", duration_seconds=30)
    assert renewals.judge(lease=view, identity=POD).verdict is Verdict.STOP


@pytest.mark.parametrize("status", [404, 403])
def test_not_found_or_forbidden_stops_renewal(status: int) -> None:
    decision = renewals.judge_error(status=status, duration_seconds=30)
    assert decision.verdict is Verdict.STOP
    assert str(status) in decision.reason


def test_a_conflict_rereads_soon() -> None:
    decision = renewals.judge_error(status=409, duration_seconds=30)
    assert decision.verdict is Verdict.RETRY
    assert decision.delay_seconds == renewals.MIN_INTERVAL_SECONDS


@pytest.mark.parametrize("status", [None, 401, 429, 500, 503])
def test_other_failures_retry_at_the_interval(status: int | None) -> None:
    decision = renewals.judge_error(status=status, duration_seconds=12)
    assert decision.verdict is Verdict.RETRY
    assert decision.delay_seconds == pytest.approx(4.0)


def test_micro_time_is_utc_with_six_digits() -> None:
    moment = datetime(2026, 12, 1, 9, 30, 5, tzinfo=timezone(timedelta(hours=2)))
    assert renewals.micro_time(moment) == "2026-12-01T07:30:05.000000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z",
                        renewals.micro_time(datetime.now(UTC)))


@given(st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=4),
       st.datetimes(timezones=st.just(UTC)))
def test_a_renewal_changes_renew_time_alone(extra: dict[str, str], now: datetime) -> None:
    before = lease()
    before["spec"].update(extra, renewTime="2020-01-01T00:00:00.000000Z")
    pristine = copy.deepcopy(before)
    after = renewals.renewed(before, now=now)
    assert before == pristine  # the reading is not modified
    assert after["spec"]["renewTime"] == renewals.micro_time(now)
    assert after["metadata"] == before["metadata"]  # resourceVersion included
    assert {k: v for k, v in after["spec"].items() if k != "renewTime"} == \
        {k: v for k, v in before["spec"].items() if k != "renewTime"}
    assert {k: v for k, v in after.items() if k != "spec"} == \
        {k: v for k, v in before.items() if k != "spec"}


@pytest.mark.parametrize(("duration", "expected"), [
    (30, 6.0), (5, 1.0), (2, 1.0), (1, 0.5), (3600, 720.0), (None, 6.0), (0, 6.0),
])
def test_the_margin_is_a_fifth_of_the_lease_at_least_a_second_at_most_half(
        duration: int | None, expected: float) -> None:
    assert renewals.margin(duration_seconds=duration) == pytest.approx(expected)


@given(st.floats(min_value=0, max_value=1e6), st.integers(min_value=1, max_value=3600))
def test_the_lapse_point_is_before_the_operator_could_see_an_expiry(
        sent: float, duration: int) -> None:
    """The operator counts from when it saw the renewal, never before its send time."""
    lapse = renewals.lapse_at(sent_at=sent, duration_seconds=duration)
    rounding = 1e-9 * max(1.0, sent)  # (sent + 1) - 0.5 and sent + 0.5 differ in the last bit
    low, high = sent + duration / 2, sent + duration - min(1.0, duration / 2)
    assert low - rounding <= lapse <= high + rounding
    # two renewals may fail and a third still comes before the lapse point
    assert sent + 2 * renewals.interval(duration_seconds=duration) < lapse or duration < 5


@pytest.mark.parametrize(("now", "lapse", "lost", "expected"), [
    (0.0, None, False, renewals.Standing.STARTING),
    (5.0, 24.0, False, renewals.Standing.LIVE),
    (23.999, 24.0, False, renewals.Standing.LIVE),
    (24.0, 24.0, False, renewals.Standing.LAPSED),
    (100.0, 24.0, False, renewals.Standing.LAPSED),
    (5.0, 24.0, True, renewals.Standing.LOST),
    (0.0, None, True, renewals.Standing.LOST),
])
def test_standing(now: float, lapse: float | None, lost: bool,
                  expected: renewals.Standing) -> None:
    assert renewals.standing(now=now, lapse=lapse, lost=lost) is expected
