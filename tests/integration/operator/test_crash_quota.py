"""A crash right after a claim was found refused by a ResourceQuota (``quota-exceeded``).

The claim's Lease exists (its commit point) when the quota refuses the Pod. The slot then
says so in a status write of its own (QuotaExceeded), and since that write must carry the
claim under way it shows it as ``Claiming`` (attempt n+1 pending, not spent): the state an
older operator wrote first, finished by the same steps. The restarted operator keeps the
claim waiting (same attempt number, no pod) and, once the quota allows a pod, makes that
same attempt Active: nothing was spent on the quota.

A claim whose Pod the LaunchSpec can never make (a quota counting limits its worker does
not give) is crashed at each of its three writes: ``launch-spec-refused`` (the slot's
``LaunchSpecRefused``), and, once the LaunchSpec is fixed, ``launch-spec-repinned`` (the
slot pinned to the new generation) and ``annotate-lease`` (the claim's Lease records it).
The restarted operator makes that same attempt 1 Active from the fixed generation.
"""

from __future__ import annotations

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.plays.convergence import (
    assert_converged,
    assert_nothing_stray,
    condition,
    crashed,
    publish,
    status,
)
from tests.support.plays.quotas import IMAGE, limits_quota, patch_spec
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for


def test_crash_after_quota_exceeded(scenario: Scenario, cluster: Cluster,
                                    process: OperatorProcess) -> None:
    """``quota-exceeded``: a quota of zero pods; the restart keeps waiting, spends nothing."""
    scenario.core.create_namespaced_resource_quota(scenario.namespace, {
        "metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    wait_for(lambda: (scenario.core.read_namespaced_resource_quota(
        "no-pods", scenario.namespace).status.hard or {}).get("pods") == "0",
        timeout=30, message="the quota in force")
    publish(scenario, nodes=1)
    process.start(crash_at="quota-exceeded")
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    crashed(process)

    st = status(scenario.slot(slot))
    first = f"{slot}-1"
    assert (st["state"], st["pendingWorker"], st["attemptCount"]) == ("Claiming", first, 1), st
    assert condition(scenario.slot(slot), "QuotaExceeded") == "True"
    assert st.get("attempts", []) == [], st  # nothing spent
    assert scenario.lease(first) is not None and scenario.pod(first) is None

    process.start()
    scenario.core.patch_namespaced_resource_quota("no-pods", scenario.namespace,
                                                  {"spec": {"hard": {"pods": "1"}}})
    scenario.wait_state(slot, "Active", timeout=60)
    final = assert_converged(scenario, cluster, slot, count=1, state="Active")
    assert condition(final, "QuotaExceeded") is None
    assert_nothing_stray(scenario)


def _refused(scenario: Scenario, slot: str) -> None:
    scenario.wait_slot(slot, lambda s: (condition_of(
        s.get("status", {}), "LaunchSpecRefused") or {}).get("status") == "True",
        message="LaunchSpecRefused")


def _lease_spec(scenario: Scenario, lease: str) -> str:
    found = scenario.lease(lease)
    assert found is not None, lease
    return str(found["metadata"]["annotations"]["agentrun.dev/launch-spec"])


@pytest.mark.parametrize("point", ["launch-spec-refused", "launch-spec-repinned",
                                   "annotate-lease"])
def test_crash_in_a_claim_its_launch_spec_cannot_make(point: str, scenario: Scenario,
                                                      cluster: Cluster,
                                                      process: OperatorProcess) -> None:
    limits_quota(scenario)
    publish(scenario, nodes=1)  # its cpu-workers' worker gives no limits
    process.start(crash_at=point)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "n0")
    first = f"{slot}-1"
    if point != "launch-spec-refused":
        _refused(scenario, slot)
        patch_spec(scenario, "cpu-workers", sidecar={"image": IMAGE})  # the fix
    crashed(process)

    st = status(scenario.slot(slot))
    assert (st["state"], st["pendingWorker"], st["attemptCount"]) == ("Claiming", first, 1), st
    assert condition(scenario.slot(slot), "LaunchSpecRefused") == "True"
    assert st.get("attempts", []) == [], st  # nothing spent
    assert scenario.pod(first) is None
    pinned = {"launch-spec-refused": 1, "launch-spec-repinned": 2, "annotate-lease": 2}[point]
    assert st["launchSpec"]["generation"] == pinned, st
    recorded = 2 if point == "annotate-lease" else 1
    assert _lease_spec(scenario, first) == f"cpu-workers@{recorded}"

    process.start()
    if point == "launch-spec-refused":
        _refused(scenario, slot)
        patch_spec(scenario, "cpu-workers", sidecar={"image": IMAGE})
    active = scenario.wait_state(slot, "Active", timeout=60)
    converged = assert_converged(scenario, cluster, slot, count=1, state="Active",
                                 reannotated=(1,))
    assert [a["launchSpec"] for a in status(converged)["attempts"]] == ["cpu-workers@2"]
    assert condition(active, "LaunchSpecRefused") is None
    assert _lease_spec(scenario, first) == "cpu-workers@2"
    assert_nothing_stray(scenario)
