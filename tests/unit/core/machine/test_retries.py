"""The effective retry policy, its backoff schedule, and exhaustion by consumed attempt numbers."""

from __future__ import annotations

from datetime import timedelta

from agentrun.api.policies import Backoff, RetryPolicy
from agentrun.core.machine import retries, transitions
from tests.unit.core import corefakes as f


def test_effective_policy_layers() -> None:
    assert retries.effective(node=None, run=None) == retries.Effective(
        max_attempts=3, backoff=Backoff(initial_seconds=10, factor=2.0, max_seconds=300))
    run = RetryPolicy(max_attempts=5, backoff=Backoff(initial_seconds=1))
    node = RetryPolicy(max_attempts=7)
    got = retries.effective(node=node, run=run)
    assert (got.max_attempts, got.backoff.initial_seconds) == (7, 1)
    assert retries.effective(node=None, run=run).max_attempts == 5


def test_backoff_schedule() -> None:
    backoff = retries.DEFAULT_BACKOFF
    got = [retries.delay(backoff=backoff, consumed=n).total_seconds() for n in range(0, 8)]
    assert got == [0, 10, 20, 40, 80, 160, 300, 300]
    assert retries.delay(backoff=backoff, consumed=10_000) == timedelta(seconds=300)


def test_exhaustion_counts_every_consumed_number() -> None:
    policy = retries.effective(node=None, run=None)
    assert retries.retry_at(policy=policy, consumed=2, now=f.T0) == f.T0 + f.seconds(20)
    assert retries.retry_at(policy=policy, consumed=3, now=f.T0) is None
    status = f.retry_wait(attempts_used=2).model_copy(update={"prior_worker": None})
    started = transitions.start_claim(status, slot=f.SLOT, now=f.T0)
    failed = transitions.fail_claim(started, message="422", policy=policy, now=f.T0)
    assert failed.retry_at is None and failed.attempt_count == 3
    assert transitions.conditions.is_true(failed.conditions, transitions.AWAITING_REASSIGNMENT)
