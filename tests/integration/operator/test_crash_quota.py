"""A crash right after a claim was found refused by a ResourceQuota (``quota-exceeded``).

The claim's Lease exists (its commit point) when the quota refuses the Pod. The slot then
says so in a status write of its own (QuotaExceeded), and since that write must carry the
claim under way it shows it as ``Claiming`` (attempt n+1 pending, not spent): the state an
older operator wrote first, finished by the same steps. The restarted operator keeps the
claim waiting (same attempt number, no pod) and, once the quota allows a pod, makes that
same attempt Active: nothing was spent on the quota.
"""

from __future__ import annotations

from clusters import Cluster
from convergence import assert_converged, assert_nothing_stray, condition, crashed, publish, status
from operators import OperatorProcess
from scenarios import Scenario
from waiting import wait_for


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
