"""``core.policies.leadership``: client-go's leader election rules, decided purely.

Covers: a missing Lease is created, one's own renewed, a released one taken at once, a
held one taken only once its mark (holder, renew time, transitions) has not changed for
the whole duration on the candidate's own clock (any write restarts the count, even one
with the same times: a holder whose clock stands still; the holder's timestamps are never
compared with ours); the bodies: a create
starts at 0 transitions, a take adds one, a renewal keeps the acquire time, every write
but a create carries the resourceVersion read; a release empties the holder; the timing
is refused unless retry < renew deadline < lease.
"""

from __future__ import annotations

import itertools
from datetime import UTC, datetime

import pytest

from agentrun.core.policies import leadership as lead
from agentrun.core.policies.leadership import Move

ME, OTHER = "operator-a", "operator-b"
NOW = datetime(2026, 12, 5, 21, 0, tzinfo=UTC)
TIMING = lead.Timing()


def found(holder: str = OTHER, *, renew: str = "r1", transitions: int = 3,
          duration: int = 15, version: str = "42") -> lead.Record:
    lease = {"metadata": {"resourceVersion": version},
             "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration,
                      "acquireTime": "a0", "renewTime": renew,
                      "leaseTransitions": transitions}}
    made = lead.record(lease)
    assert made is not None
    return made


def step(record: lead.Record | None, observed: lead.Observed | None,
         now: float) -> tuple[Move, lead.Observed | None]:
    seen = lead.observe(record, observed=observed, now=now)
    return lead.decide(record, observed=seen, me=ME, now=now), seen


def test_missing_own_and_released() -> None:
    assert step(None, None, 0.0)[0] is Move.CREATE
    assert step(found(ME), None, 0.0)[0] is Move.RENEW
    assert step(found(""), None, 0.0)[0] is Move.TAKE


@pytest.mark.parametrize(("duration", "waited"),
                         list(itertools.product([1, 15, 60], [0.0, 0.5, 14.9, 15.0, 61.0])))
def test_a_held_lease_is_taken_only_after_its_whole_duration_unchanged(
        duration: int, waited: float) -> None:
    move, seen = step(found(duration=duration), None, 100.0)
    assert move is Move.WAIT  # a first sight starts the count, however old its times
    move, _ = step(found(duration=duration), seen, 100.0 + waited)
    assert (move is Move.TAKE) is (waited >= duration)


@pytest.mark.parametrize("change", ["renewed", "taken", "other holder", "rewritten"])
def test_any_change_of_the_mark_restarts_the_count(change: str) -> None:
    _, seen = step(found(), None, 0.0)
    changed = {"renewed": found(renew="r2", version="43"),
               "taken": found(transitions=4, version="43"),
               "other holder": found("operator-c", version="43"),
               "rewritten": found(version="43")}[change]  # the same times: a new write
    move, again = step(changed, seen, 14.0)
    assert move is Move.WAIT and again is not None and again.at == 14.0
    assert step(changed, again, 14.0 + 14.9)[0] is Move.WAIT
    assert step(changed, again, 14.0 + 15.0)[0] is Move.TAKE


def test_the_bodies() -> None:
    made = lead.body(Move.CREATE, found=None, me=ME, name="lease", namespace="ns",
                     timing=TIMING, now=NOW)
    assert made["spec"] == {"holderIdentity": ME, "leaseDurationSeconds": 15,
                            "acquireTime": "2026-12-05T21:00:00.000000Z",
                            "renewTime": "2026-12-05T21:00:00.000000Z",
                            "leaseTransitions": 0}
    assert "resourceVersion" not in made["metadata"]
    taken = lead.body(Move.TAKE, found=found(), me=ME, name="lease", namespace="ns",
                      timing=TIMING, now=NOW)
    assert taken["spec"]["leaseTransitions"] == 4 and taken["spec"]["holderIdentity"] == ME
    assert taken["metadata"]["resourceVersion"] == "42"
    renewed = lead.body(Move.RENEW, found=found(ME), me=ME, name="lease", namespace="ns",
                        timing=TIMING, now=NOW)
    assert renewed["spec"]["acquireTime"] == "a0"  # kept
    assert renewed["spec"]["leaseTransitions"] == 3
    assert renewed["metadata"]["resourceVersion"] == "42"
    gone = lead.released(found(ME), name="lease", namespace="ns", now=NOW)
    assert gone["spec"]["holderIdentity"] == "" and gone["spec"]["leaseDurationSeconds"] == 1
    assert gone["spec"]["leaseTransitions"] == 3 and gone["metadata"]["resourceVersion"] == "42"


@pytest.mark.parametrize(("lease", "renew", "retry"),
                         [(15, 10, 10), (15, 15, 2), (10, 12, 2), (15, 10, 0)])
def test_the_timing_must_be_ordered(lease: float, renew: float, retry: float) -> None:
    with pytest.raises(ValueError, match="retry"):
        lead.Timing(lease=lease, renew_deadline=renew, retry=retry)


@pytest.mark.parametrize(("move", "holder", "transitions", "floor", "expected"), [
    (Move.CREATE, None, None, -1, 0), (Move.CREATE, None, None, 4, 5),
    (Move.TAKE, OTHER, 3, -1, 4), (Move.TAKE, OTHER, 3, 9, 10), (Move.TAKE, OTHER, 9, 3, 10),
    (Move.TAKE, "", 3, 2, 4), (Move.RENEW, ME, 3, -1, 3), (Move.RENEW, ME, 3, 9, 10)])
def test_a_new_term_is_above_the_lease_and_the_token(
        move: Move, holder: str | None, transitions: int | None, floor: int,
        expected: int) -> None:
    record = None if holder is None else found(holder, transitions=transitions or 0)
    assert lead.term(move, found=record, me=ME, floor=floor) == expected
    made = lead.body(move, found=record, me=ME, name="l", namespace="n", timing=TIMING,
                     now=NOW, floor=floor)
    assert made["spec"]["leaseTransitions"] == expected
