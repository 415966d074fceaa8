"""Workers SIGKILLed at the seed's interruption points, several slots at once.

The reduced form of ``make faults``' scenario ``kill-points`` (``tests/support/faults/
killpoints.py``; ``bench/faults`` plays every point with up to 50 slots): three slots
of one run at each of two points, ``after-step:source-2`` (which
``test_interruptions.py`` does not play) and ``after-call:publish`` (the point where a
resend would apply twice). Every attempt 1 is SIGKILLed at its point, attempt 2 completes.

Covers, per slot: attempts Failed (137) then Succeeded, one pod and one lease per attempt,
the successor skips the committed steps and repeats none, asks the owner before it sends
(and after a call, never resends), the owner applied the slot's key exactly once, the
ledger empty (no command sent), and no slot stuck beyond the scenario's bound.
"""

from __future__ import annotations

import pytest

from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.localnode import LocalNode
from tests.support.faults.killpoints import play
from tests.support.plays.scenarios import Scenario

pytestmark = pytest.mark.kubelet

SLOTS = 3
POINTS = ("after-step:source-2", "after-call:publish")


def test_every_slot_killed_at_its_point_completes_once_with_one_application(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: EffectOwner) -> None:
    outcome = play(scenario, node=node, image=worker_image, owner=owner, slots=SLOTS,
                   batch=SLOTS, points=POINTS)
    print(f"slots {outcome.slots}; applied once {outcome.applied}; settled "
          f"{[round(s, 1) for s in outcome.settled]} s after each batch's last kill")
    assert outcome.violations == []
    assert outcome.slots == dict.fromkeys(POINTS, SLOTS)
    assert outcome.applied == SLOTS * len(POINTS)
    assert len(owner.applied) == SLOTS * len(POINTS)  # one key per slot, none other
    assert operator.alive, operator.tail()
