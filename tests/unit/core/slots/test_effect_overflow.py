"""More unresolved effects than a slot shows: bounded, counted, resolvable, never raising.

Covers:
- the wedge: eight observed from a live attempt's Lease, then a ninth recorded: the
  reconcile writes the count (``effectsNotShown`` 1; the condition and a Warning Event
  say so) instead of raising, and a give-up is decided after it;
- nine at once: eight shown in key order, one counted; each shown one resolved through
  the command path; the condition then False, reason NotShown, counting it; a
  resolve-effect of the ninth is NoUnresolvedEffect saying why; the claim goes on, its
  Lease carrying the eight answers; the successor's record of the ninth is shown (an old
  answer makes room), the count is 0, and its answer rides on the next claim;
- a later attempt without unresolved records clears the count and the NotShown reason;
- every record count 0..64 on a Lease: one write, at most EFFECTS_KEPT shown, the rest
  counted; and :func:`effectrecords.observed` over any status (hypothesis): no open entry
  and no entry of the latest attempt dropped, new ones taken in key order, the rest
  counted exactly, a valid status, idempotent.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentrun.api import bounds, names, records
from agentrun.api.slots import EffectEntry, EffectState, Predicate, SlotState, SlotStatus
from agentrun.core.attempts import effectrecords
from agentrun.core.base.actions import Create, WriteStatus
from agentrun.core.slots import effectsteps, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

from .test_effect_unresolved import lease_with, unresolved_record

CONDITION = names.EFFECT_UNRESOLVED_CONDITION
KEPT = bounds.EFFECTS_KEPT


def keys(count: int) -> list[str]:
    return [f"k{n:02d}" for n in range(count)]


def failed(status: SlotStatus, lease: dict[str, Any], *, number: int = 1,
           annotations: dict[str, str] | None = None) -> Any:
    return f.world(status, annotations=annotations, attempt=f.objects(
        number, pod=f.pod(number, "Failed"), lease=lease))


def test_a_record_past_the_window_on_a_live_lease_is_counted_not_raised() -> None:
    lease = f.lease(1)
    live = f.active(1, owner="alice")

    def world(status: SlotStatus, count: int, **kwargs: Any) -> Any:
        """``count`` records; the ninth recorded (k00) sorts before the first eight."""
        found = keys(KEPT + 1)[1:] if count == KEPT else keys(count)
        lease["metadata"]["annotations"] = dict(unresolved_record(key=k) for k in found)
        return f.world(status, attempt=f.objects(1, pod=f.pod(1), lease=lease), **kwargs)

    shown = expect(steps.next_step(world(live, KEPT)), WriteStatus).status
    assert len(shown.effects) == KEPT and shown.effects_not_shown == 0
    ninth = expect(steps.next_step(world(shown, KEPT + 1)), WriteStatus)
    assert ninth.status.effects == shown.effects and ninth.status.effects_not_shown == 1
    told = f.condition(ninth.status, CONDITION)
    assert told.status == "True" and "1 more unresolved effect" in told.message
    assert ninth.event is not None and "is not shown" in ninth.event.message
    assert effectsteps.observe_step(world(ninth.status, KEPT + 1)) is None  # told once
    give_up = world(ninth.status, KEPT + 1, annotations=f.command(
        "give-up", reason="nobody can answer these"))
    decided = expect(steps.next_step(give_up), WriteStatus)
    assert decided.status.commands[-1].outcome == "Accepted"


def resolved_by_command(status: SlotStatus, lease: dict[str, Any], key: str, *,
                        number: int = 1, request_id: str = "r") -> WriteStatus:
    world = failed(status, lease, number=number, annotations=f.command(
        "resolve-effect", request_id, key=key, outcome="not-applied",
        reason="the owner has no trace of it"))
    return expect(steps.next_step(world), WriteStatus)


def test_nine_at_once_are_all_resolved_across_two_attempts() -> None:
    first = lease_with(*(unresolved_record(key=k) for k in keys(KEPT + 1)))
    status = expect(steps.next_step(failed(f.retry_wait(retry_at=f.T0, owner="alice"),
                                           first)), WriteStatus).status
    assert [e.key for e in status.effects] == keys(KEPT)
    assert status.effects_not_shown == 1
    for n, key in enumerate(keys(KEPT)):
        step = resolved_by_command(status, first, key, request_id=f"r-{n}")
        assert step.status.commands[-1].outcome == "Accepted"
        status = step.status
    told = f.condition(status, CONDITION)
    assert (told.status, told.reason) == ("False", names.EFFECT_NOT_SHOWN)
    assert "resolved not-applied by alice" in told.message
    assert "1 more unresolved effect recorded by the latest attempt is not shown" in \
        told.message
    hidden = resolved_by_command(status, first, "k08", request_id="r-hidden").status
    assert hidden.commands[-1].predicate is Predicate.NO_UNRESOLVED_EFFECT
    assert "1 more of the latest attempt are not shown" in hidden.commands[-1].message

    claim = expect(steps.next_step(failed(status, first)), Create)
    assert claim.point == "claim-lease"
    carried, problems = records.on_lease(claim.body)
    assert problems == [] and sorted(carried) == [f"{k}.resolved" for k in keys(KEPT)]

    # Attempt 2 met k08 with no answer and recorded it again on its own Lease.
    second = status.model_copy(update={
        "state": SlotState.RETRY_WAIT, "prior_worker": f.worker(2), "attempt_count": 2,
        "attempts": [*status.attempts, f.attempt(2, owner="alice")]})
    again = lease_with(unresolved_record(attempt=2, key="k08"), number=2)
    status = expect(steps.next_step(failed(second, again, number=2)), WriteStatus).status
    assert status.effects_not_shown == 0 and len(status.effects) == KEPT
    assert [(e.key, e.attempt) for e in effectrecords.open_effects(status)] == [("k08", 2)]
    assert f.condition(status, CONDITION).status == "True"
    status = resolved_by_command(status, again, "k08", number=2).status
    claim = expect(steps.next_step(failed(status, again, number=2)), Create)
    answer = records.on_lease(claim.body)[0]["k08.resolved"]
    assert (answer.attempt, answer.inline["unresolvedAttempt"]) == (3, 2)


def test_a_later_attempt_without_records_clears_the_count() -> None:
    first = lease_with(*(unresolved_record(key=k) for k in keys(KEPT + 2)))
    status = expect(steps.next_step(failed(f.retry_wait(retry_at=f.T0, owner="alice"),
                                           first)), WriteStatus).status
    for n, key in enumerate(keys(KEPT)):
        status = resolved_by_command(status, first, key, request_id=f"r-{n}").status
    assert "2 more unresolved effects" in f.condition(status, CONDITION).message
    later = status.model_copy(update={"state": SlotState.ACTIVE, "active_worker": f.worker(2),
                                      "attempt_count": 2, "prior_worker": f.worker(1)})
    world = f.world(later, attempt=f.objects(2, pod=f.pod(2), lease=f.lease(2)))
    cleared = expect(effectsteps.observe_step(world), WriteStatus)
    assert cleared.status.effects_not_shown == 0 and cleared.event is None
    told = f.condition(cleared.status, CONDITION)
    assert (told.status, told.reason, told.message) == ("False", names.EFFECT_RESOLVED,
                                                        "no effect is unresolved")
    assert effectsteps.observe_step(f.world(cleared.status, attempt=world.attempt)) is None


@pytest.mark.parametrize("count", range(bounds.MAX_RECORDS + 1))
def test_every_record_count_is_one_write_and_a_bounded_status(count: int) -> None:
    lease = lease_with(*(unresolved_record(key=k) for k in keys(count)))
    status = f.retry_wait(retry_at=f.T0, owner="alice")
    step = steps.next_step(failed(status, lease))
    if count == 0:
        assert expect(step, Create).point == "claim-lease"
        return
    new = expect(step, WriteStatus).status
    assert [e.key for e in new.effects] == keys(min(count, KEPT))
    assert new.effects_not_shown == max(count - KEPT, 0)
    assert SlotStatus.model_validate(new.wire()) == new
    assert f"({min(count, KEPT) - 1} more open" in f.condition(new, CONDITION).message or \
        count == 1


POOL = keys(70)


@st.composite
def statuses(draw: st.DrawFn) -> tuple[SlotStatus, int, list[str]]:
    """A status (entries of attempts up to ``latest``) and the latest Lease's record keys,
    which hold every key the status shows for that attempt (records are write-once)."""
    latest = draw(st.integers(1, 3))
    chosen = draw(st.lists(st.tuples(st.sampled_from(POOL), st.integers(1, latest),
                                     st.booleans()),
                           max_size=KEPT, unique_by=lambda e: (e[0], e[1])))
    effects = [EffectEntry(key=k, attempt=a, observed_at=f.T0,
                           state=EffectState.RESOLVED if done else EffectState.UNRESOLVED,
                           outcome="applied" if done else None) for k, a, done in chosen]
    on_lease = {k for k, a, _ in chosen if a == latest}
    on_lease |= set(draw(st.lists(st.sampled_from(POOL), max_size=bounds.MAX_RECORDS
                                  - len(on_lease))))
    return SlotStatus(effects=effects), latest, sorted(on_lease)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(statuses())
def test_observed_keeps_what_it_must_and_counts_the_rest(
        drawn: tuple[SlotStatus, int, list[str]]) -> None:
    status, latest, on_lease = drawn
    lease = lease_with(*(unresolved_record(attempt=latest, key=k) for k in on_lease),
                       number=latest)
    new, taken = effectrecords.observed(status, lease=lease, slot=f.SLOT, now=f.T0)
    assert len(new.effects) <= KEPT
    must = [e for e in status.effects
            if e.state is EffectState.UNRESOLVED or e.attempt == latest]
    assert all(e in new.effects for e in must)
    assert all(e in status.effects or e in taken for e in new.effects)
    fresh = [k for k in on_lease if (k, latest) not in {(e.key, e.attempt)
                                                          for e in status.effects}]
    assert [e.key for e in taken] == fresh[:len(taken)]
    shown = {e.key for e in new.effects if e.attempt == latest}
    assert new.effects_not_shown == len(set(on_lease) - shown)
    assert new.effects_not_shown == 0 or len(new.effects) == KEPT
    assert SlotStatus.model_validate(new.wire()) == new
    assert effectrecords.observed(new, lease=lease, slot=f.SLOT, now=f.T0) == (new, [])
