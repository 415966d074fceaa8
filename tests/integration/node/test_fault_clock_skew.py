"""The operator's and the workers' wall clocks skewed by 10 min (opposite ways) and
stepped by 20 min mid-run.

The reduced form of ``make faults``' scenario ``clock-skew`` (``tests/support/faults/
clockskew.py``): two real SDK workers on the node, a 10 s lease; the operator (its own
process, under libfaketime, its monotonic clock left alone) starts at ``+600s``, is
stepped to ``-600s`` once every worker renews, and back to ``+600s`` while a later run's
attempt is still starting; the workers (libfaketime in their pods) start at ``-600s`` and
are stepped the other way at the same moments; then one worker is SIGSTOPped.

Covers: no early takeover (no attempt 2, no pod fenced, no worker told lost) for the live
workers, the starting one included, whatever the wall clock says; one pod and one lease
per attempt; the stopped worker's slot recovered within the scenario's bound (expiry on
the operator's monotonic clock); no slot stuck.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localnode import LocalNode
from tests.support.faults.clockskew import SKEW, operator_env, play
from tests.support.faults.fakeclock import LIBFAKETIME
from tests.support.plays.scenarios import Scenario

pytestmark = pytest.mark.kubelet

SLOTS = 2
LEASE_SECONDS = 10


@pytest.fixture
def skewed(cluster: Cluster, namespace: str, installed: None,
           tmp_path: Path) -> Iterator[tuple[OperatorProcess, Path]]:
    """The operator serving ``namespace`` with its wall clock read from a file (``+600s``)."""
    if not LIBFAKETIME.exists():
        pytest.fail(f"needs libfaketime ({LIBFAKETIME}): run `make nodedeps`", pytrace=False)
    timestamp = tmp_path / "faketime"
    timestamp.write_text(SKEW + "\n")
    process = OperatorProcess(cluster=cluster, namespace=namespace, log=tmp_path / "op.log",
                              env=operator_env(timestamp)).start()
    yield process, timestamp
    process.stop()
    print(process.tail(40))


def test_a_stepped_operator_clock_takes_over_no_live_attempt_and_recovers_a_stopped_one(
        scenario: Scenario, skewed: tuple[OperatorProcess, Path], worker_image: str,
        node: LocalNode, owner: EffectOwner) -> None:
    operator, timestamp = skewed
    outcome = play(scenario, node=node, image=worker_image, owner=owner,
                   timestamp_file=timestamp, slots=SLOTS, lease_seconds=LEASE_SECONDS)
    print(f"steps {outcome.steps}, workers {outcome.worker_steps} (renewTime offsets seen "
          f"{sorted(outcome.worker_offsets)} min); late attempt unrenewed at the forward step: "
          f"{outcome.unrenewed_at_step}; recovered {outcome.recovered_after} s after the "
          f"stop; settled {outcome.settled_after} s")
    assert outcome.violations == []
    assert outcome.steps == ["+600s", "-600s", "+600s"]
    assert outcome.worker_steps == ["-600s", "+600s", "-600s"]
    assert outcome.worker_offsets == {-10, 10}
    assert outcome.recovered_after is not None
    assert operator.alive, operator.tail()
