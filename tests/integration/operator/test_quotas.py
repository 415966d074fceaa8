"""A ResourceQuota that refuses an attempt's pod: the claim waits, no attempt is spent.

Covers, on a real API server (its ResourceQuota admission and quota controller): with a
quota of zero pods the slot stays Claiming under ``QuotaExceeded`` (saying which quota),
attempt 1 is still the pending one and no pod exists; once the quota allows one pod the
same attempt 1 becomes Active and the condition is gone.
"""

from __future__ import annotations

import pytest
from operators import OperatorProcess
from scenarios import Scenario, condition_of
from waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration


def quota(scenario: Scenario, pods: int) -> None:
    body = {"metadata": {"name": "compute"}, "spec": {"hard": {"pods": str(pods)}}}
    try:
        scenario.core.read_namespaced_resource_quota("compute", scenario.namespace)
    except Exception:
        scenario.core.create_namespaced_resource_quota(scenario.namespace, body)
    else:
        scenario.core.patch_namespaced_resource_quota("compute", scenario.namespace, body)

    def enforced() -> bool:
        found = scenario.core.read_namespaced_resource_quota("compute", scenario.namespace)
        return bool(found.status and found.status.hard
                    and found.status.hard.get("pods") == str(pods))
    wait_for(enforced, timeout=30, message=f"the quota of {pods} pods in force")


def test_a_pod_refused_by_a_quota_waits_and_spends_no_attempt(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    quota(scenario, 0)
    scenario.configs()
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    waiting = scenario.wait_slot(slot, lambda s: (condition_of(
        s.get("status", {}), "QuotaExceeded") or {}).get("status") == "True",
        message="QuotaExceeded")
    status = waiting["status"]
    assert (status["state"], status["attemptCount"], status["pendingWorker"]) == (
        "Claiming", 1, f"{slot}-1")
    said = condition_of(status, "QuotaExceeded")
    assert said is not None and "exceeded quota: compute" in said["message"]
    assert scenario.pods() == []
    scenario.wait_event("QuotaExceeded", f"{slot}-1")

    quota(scenario, 1)
    active = scenario.wait_state(slot, "Active", timeout=60)["status"]
    assert (active["attemptCount"], active["activeWorker"]) == (1, f"{slot}-1")
    assert condition_of(active, "QuotaExceeded") is None
    assert [a["number"] for a in active["attempts"]] == [1]
