"""The API server paused (SIGSTOP) for longer than a lease, then resumed.

The reduced form of ``make faults``' first scenario (``tests/support/faults/pausedserver.py``;
``bench/faults`` plays it many times, with more slots): once, with three real SDK
workers on the node, a 10 s lease and a 25 s pause. 25 s is 2.5 leases, and well under
the controller-manager's node-monitor grace period (50 s in Kubernetes 1.37, its
``nodelifecycle`` defaults; 40 s before 1.32): a longer pause would also have the node
marked NotReady and its pods' fate decided by the node lifecycle, another scenario. The
session's own API server is paused, so the test is ``serial``: nothing else may run
against it meanwhile.

Covers: the operator counts none of its blind time toward expiry (no attempt 2, no attempt
Lost, no pod deleted while its worker lives), nor toward the start deadline of an attempt
not yet renewed (20 s, passed during the pause on the wall clock); the workers keep their
attempts (each renews again after the resume), the operator recovers on its own (a run
made after the resume is served), one pod and one lease record per attempt, one ledger
entry per command (a hold sent just before the pause, a release after it), and no slot
stuck beyond the scenario's bounds.
"""

from __future__ import annotations

import pytest

from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.faults.pausedserver import STARTING_DEADLINE, play
from tests.support.faults.processfaults import apiserver, state
from tests.support.plays.scenarios import Scenario

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]  # pauses the session's API server

SLOTS = 3
LEASE_SECONDS = 10
PAUSE_SECONDS = 25.0


def test_a_paused_api_server_costs_no_attempt_and_the_operator_recovers(
        scenario: Scenario, operator: OperatorProcess, worker_image: str,
        owner: EffectOwner) -> None:
    local = scenario.cluster.local
    assert local is not None, "pauses the local control plane's API server"
    server = apiserver(local)
    outcome = play(scenario, apiserver=server, image=worker_image, owner=owner,
                   slots=SLOTS, lease_seconds=LEASE_SECONDS, pause_seconds=PAUSE_SECONDS)
    assert state(server) != "T"  # resumed
    assert outcome.pause is not None and outcome.pause.seconds >= PAUSE_SECONDS
    print(f"paused {outcome.pause.seconds:.1f} s; renewed again {outcome.renewed_after} s "
          f"after the resume; a later run served in {outcome.served_after} s; settled in "
          f"{outcome.settled_after} s; {outcome.lapsed} of {SLOTS} workers lapsed; the "
          f"starting attempt {outcome.unblind_at_pause} s old at the pause, renewed "
          f"{outcome.begun_after} s after the word to begin")
    assert outcome.violations == []
    # The starting attempt's deadline passed during the pause on the wall clock.
    assert outcome.unblind_at_pause is not None
    assert outcome.unblind_at_pause + outcome.pause.seconds > STARTING_DEADLINE
    assert outcome.begun_after is not None
    assert operator.alive, operator.tail()
    # The pause was longer than a lease and the workers saw it: their keepers lapsed.
    assert outcome.lapsed == SLOTS
