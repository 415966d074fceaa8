"""A claim refused by a ResourceQuota waits under ``QuotaExceeded`` and spends no attempt.

Covers: the first refusal writes the condition (and a Warning Event) and keeps the slot
Claiming with the same attempt number; the next identical refusal only waits
(``QUOTA_WAIT``); the claim that finally succeeds clears the condition. How a full quota
is told from other refusals: test_refusedclaims.py.
"""

from __future__ import annotations

from agentrun.api import conditions
from agentrun.api.slots import SlotState
from agentrun.core.base.actions import Wait, WriteStatus
from agentrun.core.machine import transitions
from agentrun.core.slots import attemptlife, steps
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

REFUSED = ('pods "x-1" is forbidden: exceeded quota: compute, requested: pods=1, '
           "used: pods=0, limited: pods=0")


def test_a_quota_refusal_waits_without_spending_an_attempt() -> None:
    world = f.world(f.claiming(2), attempt=f.objects(2, pod=None, lease=f.lease(2)))
    first = expect(attemptlife.quota_refused(world, kind="Pod", message=REFUSED), WriteStatus)
    assert first.status.state is SlotState.CLAIMING
    assert (first.status.attempt_count, first.status.pending_worker) == (2, f.worker(2))
    quota = f.condition(first.status, transitions.QUOTA_EXCEEDED)
    assert (quota.status, quota.reason) == ("True", "QuotaExceeded")
    assert "ResourceQuota" in quota.message and "exceeded quota" in quota.message
    assert first.event is not None and first.event.reason == "QuotaExceeded"
    again = f.world(first.status, attempt=world.attempt)
    waited = expect(attemptlife.quota_refused(again, kind="Pod", message=REFUSED), Wait)
    assert waited.until == f.T0 + attemptlife.QUOTA_WAIT


def test_the_claim_that_succeeds_clears_the_condition() -> None:
    status = f.claiming(1)
    status = status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=transitions.QUOTA_EXCEEDED, status="True",
        reason="QuotaExceeded", message="wait", now=f.T0)})
    world = f.world(status, attempt=f.objects(1, pod=f.pod(1, "Pending"), lease=f.lease(1)))
    step = expect(steps.next_step(world), WriteStatus)
    assert step.status.state is SlotState.ACTIVE
    assert conditions.find(step.status.conditions, transitions.QUOTA_EXCEEDED) is None
