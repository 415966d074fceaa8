"""The seed paper's recovery trace, end to end, with real users on a real API server,
served by the operator as a subprocess (the trace itself: ``tests/support/plays/recovery.py``)."""

from __future__ import annotations

from tests.support.actors.operators import OperatorProcess
from tests.support.plays.recovery import play_recovery_trace
from tests.support.plays.scenarios import Scenario


def test_recovery_trace(scenario: Scenario, operator: OperatorProcess) -> None:
    play_recovery_trace(scenario)
