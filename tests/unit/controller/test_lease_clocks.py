"""Lease expiry on the pinned duration and the operator's monotonic clock.

Covers:
- a worker that writes ``leaseDurationSeconds: 86400`` on its own Lease is still judged by
  the pinned LaunchSpec's duration: its pod is fenced once no renewal was seen for that;
- without a readable pinned spec the Lease's own value is held to a LaunchSpec's bounds;
- a forward step of the wall clock does not end a renewing attempt: the reconciler's
  memory of renewals (injected wall clock and monotonic clock) and the core's judgement
  both measure on the monotonic clock, and the Wait's ``until`` is said in wall time;
- nor does a wall clock step move the start deadline of an attempt not yet renewed, once
  this process has seen its Lease (forward: no early fencing; back: no late one).
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta
from typing import Any, cast

from agentrun.api import bounds
from agentrun.controller import slots
from agentrun.core.base.actions import DeletePod, Wait
from agentrun.core.slots import steps
from agentrun.core.slots.inputs import World
from agentrun.kube import reads, writes
from tests.unit.core import corefakes as f
from tests.unit.core.corefakes import expect

PINNED_SECONDS = 5
SHORT_SPEC = f.launch_spec("cpu-spec", classes=["cpu"], lease_seconds=PINNED_SECONDS)


def renewing_world(*, own_duration: int, now_s: float, observed_s: float,
                   **kwargs: Any) -> World:
    return f.world(f.active(1), now=f.T0 + f.seconds(now_s),
                   observation=f.observed(f.T0 + f.seconds(observed_s)),
                   attempt=f.objects(1, pod=f.pod(1),
                                     lease=f.lease(1, renew_time="r", duration=own_duration)),
                   **kwargs)


def test_the_leases_own_duration_never_extends_the_pinned_one() -> None:
    held = renewing_world(own_duration=86400, now_s=4, observed_s=0,
                          launch_spec=SHORT_SPEC.spec)
    assert expect(steps.next_step(held), Wait).until == f.T0 + f.seconds(PINNED_SECONDS)
    expired = renewing_world(own_duration=86400, now_s=PINNED_SECONDS, observed_s=0,
                             launch_spec=SHORT_SPEC.spec)
    assert expect(steps.next_step(expired), DeletePod).name == f.worker(1)


def test_without_a_pinned_spec_the_leases_own_duration_is_held_to_the_bounds() -> None:
    world = renewing_world(own_duration=86400, now_s=bounds.MAX_LEASE_SECONDS, observed_s=0,
                           launch_spec=None, launch_spec_error="snapshot missing")
    assert isinstance(steps.next_step(world), DeletePod)


class Clocks:
    """A wall clock and a monotonic clock that tests move apart."""

    def __init__(self) -> None:
        self.wall = f.T0
        self.mono = f.T0

    def advance(self, seconds: float, *, wall_step: float = 0) -> None:
        self.mono += timedelta(seconds=seconds)
        self.wall += timedelta(seconds=seconds + wall_step)

    def wall_clock(self) -> datetime:
        return self.wall

    def ticks(self) -> datetime:
        return self.mono


def test_a_forward_wall_clock_step_does_not_end_a_renewing_attempt() -> None:
    clocks = Clocks()
    reconciler = slots.SlotReconciler(
        reader=cast(reads.Reader, None), writer=cast(writes.Writer, None),
        clock=clocks.wall_clock, ticks=clocks.ticks, logger=logging.getLogger("test"))
    lease = f.lease(1, renew_time="2030-01-01T12:00:00.000000Z")
    lease["metadata"]["uid"] = "uid-lease-1"

    def judge() -> object:
        observation = reconciler.observe(f.NS, f.worker(1), lease, clocks.ticks())
        world = f.world(f.active(1), now=clocks.wall, ticks=clocks.mono,
                        observation=observation, attempt=f.objects(1, pod=f.pod(1), lease=lease))
        return steps.next_step(world)

    assert isinstance(judge(), Wait)
    # The wall clock jumps an hour ahead while only 10 s pass; the worker renewed nothing
    # new in those 10 s, which is well within the pinned 45 s.
    clocks.advance(10, wall_step=3600)
    step = expect(judge(), Wait)
    assert step.until == clocks.wall + f.seconds(f.LEASE_SECONDS - 10)
    # The worker renews; 40 s later (monotonic) it is still held, whatever the wall says.
    lease["spec"]["renewTime"] = "2030-01-01T12:00:30.000000Z"
    assert isinstance(judge(), Wait)
    clocks.advance(40, wall_step=-7200)
    assert isinstance(judge(), Wait)
    # Then it stops renewing: expired after the pinned duration on the monotonic clock.
    clocks.advance(f.LEASE_SECONDS)
    assert isinstance(judge(), DeletePod)


def test_the_start_deadline_is_unchanged_by_ticks() -> None:
    """Before the first renewal the claim time (a wall time) governs, as before."""
    world = f.world(f.active(1), now=f.T0 + f.seconds(30), ticks=f.T0 + f.seconds(99999),
                    attempt=f.objects(1, pod=f.pod(1, "Pending"), lease=f.lease(1)))
    assert expect(steps.next_step(world), Wait).until == f.T0 + f.seconds(f.START_DEADLINE)
    late = dataclasses.replace(world, now=f.T0 + f.seconds(f.START_DEADLINE))
    assert isinstance(steps.next_step(late), DeletePod)


def test_a_wall_clock_step_moves_no_start_deadline_once_the_lease_was_seen() -> None:
    """The clock-skew scenario's finding: a starting attempt (no renewal yet) was judged
    on the wall clock, so a forward step past the start deadline fenced a pod still
    starting, and a backward step left a dead start waiting that much longer. Once this
    process has seen the Lease, the deadline runs on its monotonic clock."""
    clocks = Clocks()
    reconciler = slots.SlotReconciler(
        reader=cast(reads.Reader, None), writer=cast(writes.Writer, None),
        clock=clocks.wall_clock, ticks=clocks.ticks, logger=logging.getLogger("test"))
    lease = f.lease(1)  # created by the operator, never renewed
    lease["metadata"]["uid"] = "uid-lease-1"
    key = (f.NS, f.worker(1), "uid-lease-1")

    def judge() -> object:
        observation = reconciler.observe(f.NS, f.worker(1), lease, clocks.ticks())
        world = f.world(f.active(1), now=clocks.wall, ticks=clocks.mono,
                        observation=observation, first_seen=reconciler.first_seen[key],
                        first_ticks=reconciler.first_ticks[key],
                        attempt=f.objects(1, pod=f.pod(1, "Pending"), lease=lease))
        return steps.next_step(world)

    assert isinstance(judge(), Wait)  # first seen at the claim
    clocks.advance(10, wall_step=1200)  # 10 s since the claim; the wall says 20 minutes
    step = expect(judge(), Wait)
    assert step.until == clocks.wall + f.seconds(f.START_DEADLINE - 10)
    clocks.advance(f.START_DEADLINE - 20, wall_step=-2400)  # and now 20 minutes behind
    assert isinstance(judge(), Wait)
    clocks.advance(20)  # the deadline on the monotonic clock: a dead start is ended
    assert isinstance(judge(), DeletePod)
