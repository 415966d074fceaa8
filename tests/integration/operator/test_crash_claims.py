"""Crash convergence of the claims a person asks for and of the slots that must wait.

Split from test_crashes.py (its ``test_every_crash_point_is_covered`` lists these points
too): a claim command's three writes (``claim-lease`` with the request id on the Lease,
``claim-pod``, ``active`` with the ledger entry; the annotations are removed after), and
the status a slot gets written on its own because it must wait: ``observed`` (waiting for
a dependency) and ``status`` (Ready, waiting for a claim command). SIGKILL right after the
write, the write visible, the next one not; the restart converges with nothing doubled.
"""

from __future__ import annotations

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import (
    ANN,
    Object,
    annotations_of,
    assert_converged,
    assert_nothing_stray,
    command_annotations,
    crashed,
    ledger,
    objects,
    publish,
    slots,
    status,
)
from tests.support.plays.scenarios import Scenario, request_id
from tests.support.waiting import wait_for

CLAIM_POINTS = ["claim-lease", "claim-pod", "active"]  # as in test_crashes.py


def _only_slot(scenario: Scenario) -> Object:
    found = slots(scenario)
    assert len(found) == 1, found
    return found[0]


@pytest.mark.parametrize("point", CLAIM_POINTS)
def test_crash_in_manual_claim(point: str, scenario: Scenario, cluster: Cluster,
                               process: OperatorProcess) -> None:
    """A claim command: Lease (with the request id), Pod, then Active with the ledger entry
    in one write; its annotations are removed after. Nothing is doubled on the restart."""
    publish(scenario, nodes=1)
    process.start(crash_at=point)
    scenario.run("study", claim_policy="Manual", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    scenario.wait_state(slot, "Ready")
    claim = request_id()
    assert scenario.annotate(slot, user="admin", claim_id=claim).returncode == 0
    crashed(process)

    after = scenario.slot(slot)
    st = status(after)
    assert annotations_of(after).get(f"{ANN}claim-id") == claim  # removed only after
    lease = scenario.lease(f"{slot}-1")
    assert lease is not None and annotations_of(lease).get(f"{ANN}claim-id") == claim
    if point == "active":
        assert (st["state"], ledger(after)) == ("Active", [claim]), st
    else:
        assert (st["state"], ledger(after)) == ("Ready", []), st
        assert (scenario.pod(f"{slot}-1") is not None) == (point == "claim-pod")

    process.start()
    scenario.wait_state(slot, "Active")
    wait_for(lambda: not command_annotations(scenario.slot(slot)), timeout=30,
             message="the claim's annotations removed")
    final = assert_converged(scenario, cluster, slot, count=1, state="Active",
                             requests=(claim,))
    entry = status(final)["commands"][-1]
    assert (entry["requestId"], entry["outcome"], entry["actor"]) == (claim, "Accepted", "admin")
    assert status(final)["attempts"][0]["ownerActor"] == "admin"
    assert_nothing_stray(scenario)


def test_crash_after_a_waiting_slots_first_status(scenario: Scenario, cluster: Cluster,
                                                  process: OperatorProcess) -> None:
    """``observed``: n1 waits for n0 (a dependency), so its first status is a write of its
    own; the restart claims n0 and leaves n1 Pending, observed once."""
    scenario.configs(nodes=(("n0", "cpu", []), ("n1", "cpu", ["n0"])))
    scenario.launch_spec("cpu-workers", classes=["cpu"], image="busybox:cpu", lease_seconds=5)
    process.start(crash_at="observed")
    scenario.run("study", max_attempts=1)
    crashed(process)
    waiting = scenario.slot_name_eventually("study", "n1")
    st = status(scenario.slot(waiting))
    assert st.get("observedGeneration") == scenario.slot(waiting)["metadata"]["generation"]
    assert st.get("state") in (None, "Pending"), st

    process.start()
    first = scenario.slot_name_eventually("study", "n0")
    scenario.wait_state(first, "Active", timeout=60)
    assert_converged(scenario, cluster, first, count=1, state="Active")
    assert status(scenario.slot(waiting)).get("state") in (None, "Pending")
    assert_nothing_stray(scenario)


def test_crash_after_a_ready_status_then_a_claim(scenario: Scenario, cluster: Cluster,
                                                 process: OperatorProcess) -> None:
    """``status``: under Manual the slot must wait for a claim command, so Ready (with its
    pin) is written on its own; after the restart a claim command makes it Active."""
    publish(scenario, nodes=1)
    process.start(crash_at="status")
    scenario.run("study", claim_policy="Manual", max_attempts=1)
    crashed(process)
    slot = _only_slot(scenario)
    assert status(slot)["state"] == "Ready", status(slot)
    assert objects(scenario, "pods") == {} and objects(scenario, "leases") == {}

    process.start()
    name = slot["metadata"]["name"]
    claim = request_id()
    assert scenario.annotate(name, user="admin", claim_id=claim).returncode == 0
    scenario.wait_state(name, "Active", timeout=60)
    wait_for(lambda: not command_annotations(scenario.slot(name)), timeout=30,
             message="the claim's annotations removed")
    assert_converged(scenario, cluster, name, count=1, state="Active", requests=(claim,))
    assert_nothing_stray(scenario)
