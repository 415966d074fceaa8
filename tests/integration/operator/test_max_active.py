"""``spec.maxActive`` on a real API server: a run of two independent nodes with
``maxActive: 1`` has one attempt at a time; when it ends, the other slot claims.
"""

from __future__ import annotations

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.scenarios import Scenario, holds_throughout
from tests.support.waiting import wait_for, wait_for_default_service_account

pytestmark = pytest.mark.integration


def test_max_active_limits_the_runs_concurrent_attempts(
        scenario: Scenario, operator: OperatorProcess) -> None:
    wait_for_default_service_account(scenario.core.api_client, scenario.namespace)
    scenario.configs(nodes=(("one", "cpu", []), ("two", "cpu", [])))
    scenario.launch_spec("cpu-workers", classes=["cpu"])
    scenario.run("study", max_attempts=1, extra={"maxActive": 1})
    slots = [scenario.slot_name_eventually("study", n) for n in ("one", "two")]

    def states() -> list[str]:
        return [scenario.slot(s).get("status", {}).get("state", "") for s in slots]
    wait_for(lambda: "Active" in states(), timeout=30, message="one slot Active")
    running = slots[states().index("Active")]
    other = next(s for s in slots if s != running)
    scenario.wait_state(other, "Ready")
    holds_throughout(lambda: scenario.slot(other)["status"].get("state") == "Ready"
                     and scenario.pods() == [f"{running}-1"],
                     seconds=2, message="the other slot waits under maxActive")
    scenario.finish(f"{running}-1", "Succeeded", exit_code=0)
    active = scenario.wait_state(other, "Active", timeout=30)["status"]
    assert active["attemptCount"] == 1
