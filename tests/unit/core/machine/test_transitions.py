"""The state machine: illegal transitions raise; claimable, retry time, success and deadline."""

from __future__ import annotations

import pytest

from agentrun.api.slots import Outcome, SlotState, SlotStatus
from agentrun.core.machine import retries, transitions
from tests.unit.core import corefakes as f

POLICY = retries.effective(node=None, run=None)


@pytest.mark.parametrize("state", list(SlotState))
def test_illegal_transitions_raise(state: SlotState) -> None:
    status = SlotStatus(state=state, launch_spec=f.PINNED, worker_class="cpu")
    calls = {
        "deps_met": (lambda: transitions.deps_met(status, worker_class="c", launch_spec=f.PINNED,
                                                  now=f.T0), {SlotState.PENDING}),
        "start_claim": (lambda: transitions.start_claim(status, slot=f.SLOT, now=f.T0),
                        {SlotState.READY, SlotState.RETRY_WAIT}),
        "reopen": (lambda: transitions.reopen(status, worker_class="c", launch_spec=f.PINNED,
                                              owner_actor=None, message="m", now=f.T0),
                   {SlotState.RETRY_WAIT}),
        "fail": (lambda: transitions.fail(status, reason="DeadlineExceeded", message="m",
                                          now=f.T0), transitions.OPEN_STATES),
    }
    for call, allowed in calls.values():
        if state in allowed:
            call()
        else:
            with pytest.raises(transitions.IllegalTransition, match=str(state)):
                call()
    if state is not SlotState.ACTIVE:
        with pytest.raises(transitions.IllegalTransition):
            transitions.end_attempt(status, outcome=Outcome.FAILED, message="m", exit_code=1,
                                    policy=POLICY, now=f.T0)
    if state is not SlotState.CLAIMING:
        with pytest.raises(transitions.IllegalTransition):
            transitions.finish_claim(status, now=f.T0)
        with pytest.raises(transitions.IllegalTransition):
            transitions.fail_claim(status, message="m", policy=POLICY, now=f.T0)


def test_claim_needs_a_free_slot_and_a_spec() -> None:
    busy = f.retry_wait().model_copy(update={"active_worker": "x"})
    with pytest.raises(transitions.IllegalTransition, match="already pending or active"):
        transitions.start_claim(busy, slot=f.SLOT, now=f.T0)
    bare = SlotStatus(state=SlotState.READY)
    with pytest.raises(transitions.IllegalTransition, match="no launch spec"):
        transitions.start_claim(bare, slot=f.SLOT, now=f.T0)
    assert not transitions.is_claimable(bare, now=f.T0, claim_policy="Automatic")


def test_claimable_after_retry_time() -> None:
    waiting = f.retry_wait(retry_at=f.T0 + f.seconds(10))
    assert not transitions.is_claimable(waiting, now=f.T0, claim_policy="Automatic")
    assert transitions.is_claimable(waiting, now=f.T0 + f.seconds(10), claim_policy="Automatic")
    pending = waiting.model_copy(update={"pending_worker": "p"})
    assert not transitions.is_claimable(pending, now=f.T0 + f.seconds(10),
                                        claim_policy="Automatic")
    for state in (SlotState.PENDING, SlotState.ACTIVE, SlotState.SUCCEEDED):
        other = waiting.model_copy(update={"state": state})
        assert not transitions.is_claimable(other, now=f.T0 + f.seconds(99),
                                            claim_policy="Automatic")


def test_success_and_deadline() -> None:
    active = transitions.finish_claim(transitions.start_claim(
        f.retry_wait(retry_at=f.T0), slot=f.SLOT, now=f.T0), now=f.T0)
    done = transitions.end_attempt(active, outcome=Outcome.SUCCEEDED, message="ok", exit_code=0,
                                   policy=POLICY, now=f.T0)
    assert done.state is SlotState.SUCCEEDED and done.prior_worker == f"{f.SLOT}-2"
    assert transitions.conditions.is_true(done.conditions, transitions.SUCCEEDED)
    failed = transitions.fail(f.retry_wait(), reason="DependencyFailed", message="dep x failed",
                              now=f.T0)
    assert failed.state is SlotState.FAILED and failed.attempts == f.retry_wait().attempts
