"""Two operators racing on one namespace: the reduced form of
``make faults``' ``racing-operators`` (``tests/support/faults/racing.py``).

Two operator processes, same install, same namespace, peering off: eight slots, every
second one's pod fails (a retry), two of those fail again and are reassigned. Covers: no
double claim (one pod and one Lease per attempt, attempt numbers 1..n, no pod for an
attempt the slot does not record), one ledger entry per command, no slot stuck.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.faults.racing import play
from tests.support.plays.scenarios import Scenario

SLOTS = 8
LEASE_SECONDS = 10


@pytest.fixture
def two_operators(cluster: Cluster, namespace: str, installed: None,
                  tmp_path: Path) -> Iterator[list[OperatorProcess]]:
    both = [OperatorProcess(cluster=cluster, namespace=namespace,
                            log=tmp_path / f"operator-{n}.log").start() for n in (1, 2)]
    try:
        yield both
    finally:
        for process in both:
            process.stop()
            print(f"--- {process.log.name} (tail) ---\n{process.tail(30)}")


def test_two_operators_never_claim_twice(scenario: Scenario,
                                         two_operators: list[OperatorProcess]) -> None:
    outcome = play(scenario, slots=SLOTS, lease_seconds=LEASE_SECONDS)
    print(outcome)
    assert outcome.violations == []
    assert all(p.alive for p in two_operators), [p.tail() for p in two_operators]
