"""Watch streams cut and a half-open connection between the operator and the API server:
the reduced forms of ``make faults``' ``watch-cut`` and ``half-open``.

The operator talks to the API server only through a fault proxy on loopback
(``tests/support/faults/netfaults.py``); the scenario (``tests/support/faults/netplay.py``) plays
the workers by hand, renewing their leases directly, so no node is needed. Small: four
slots, a 5 s lease.

- three cuts (RST, FIN, RST) of every connection, watches included, 2 s apart, with a
  hold command sent before them;
- a black hole of 8 s (more than the lease; no FIN, no RST) while one worker lets its
  lease expire, then healed, or cut (RST). (Stranded, the connections that lived through
  it silent for good while new ones are served, only the operator's own timeouts get it
  out, a watch's inactivity timeout of 70 s the longest: too long for ``make test``;
  ``make faults --half-open-then strand`` plays it.)

Covers: no early takeover (a renewed slot keeps attempt 1), the let-go lease recovered
(attempt 2) within its bound after the fault, one pod and one lease per attempt, one
ledger entry per command, a run made after the fault served within its bound, every slot
Succeeded in the end.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.faults.netfaults import Proxy
from tests.support.faults.netplay import operator_behind_proxy, play
from tests.support.plays.scenarios import Scenario

SLOTS = 4
LEASE_SECONDS = 5
HOLE_SECONDS = 8.0


@pytest.fixture
def behind_proxy(cluster: Cluster, namespace: str, installed: None,
                 tmp_path: Path) -> Iterator[tuple[Proxy, OperatorProcess]]:
    """The operator of the test's namespace, its every connection through a proxy."""
    with operator_behind_proxy(cluster, namespace=namespace, folder=tmp_path) as (proxy,
                                                                                 process):
        try:
            yield proxy, process
        finally:
            print(f"--- operator log (tail) ---\n{process.tail(60)}")


def test_watch_streams_cut_lose_nothing(scenario: Scenario,
                                        behind_proxy: tuple[Proxy, OperatorProcess]) -> None:
    proxy, operator = behind_proxy
    outcome = play(scenario, proxy=proxy, slots=SLOTS, lease_seconds=LEASE_SECONDS, cuts=3)
    print(outcome)
    assert outcome.violations == []
    assert outcome.cut_connections >= 3  # at least a watch each time: the cuts hit
    assert operator.alive, operator.tail()


@pytest.mark.parametrize("then", ["heal", "rst"])
def test_a_half_open_connection_costs_no_attempt_and_the_operator_recovers(
        scenario: Scenario, behind_proxy: tuple[Proxy, OperatorProcess], then: str) -> None:
    proxy, operator = behind_proxy
    outcome = play(scenario, proxy=proxy, slots=SLOTS, lease_seconds=LEASE_SECONDS, cuts=0,
                   black_hole=HOLE_SECONDS, then=then)
    print(outcome)
    assert outcome.violations == []
    assert outcome.recovered_after is not None
    assert operator.alive, operator.tail()
