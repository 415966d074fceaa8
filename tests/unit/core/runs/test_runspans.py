"""The spans a run status write completes: its own when it ends, its ledger's moments."""

from __future__ import annotations

from agentrun.api import traces
from agentrun.api.conditions import Condition
from agentrun.api.slots import CommandKind, CommandRecord
from agentrun.core.runs import runspans
from tests.unit.core.corefakes import RUN_UID, T0, agent_run, seconds

NOW = T0 + seconds(900)


def ended(kind: str) -> Condition:
    return Condition(type=kind, status="True", reason="AllSlots", last_transition_time=NOW)


def test_the_run_span_is_the_root_reported_once_when_the_run_ends() -> None:
    run = agent_run()
    run = run.model_copy(update={"metadata": run.metadata.model_copy(
        update={"creation_timestamp": T0})})
    done = run.status.model_copy(update={"conditions": [ended("Succeeded")], "done": "1/1"})
    (span,) = runspans.of_run_write(run=run, new=done, now=NOW)
    assert (span.trace, span.span, span.parent) == (
        traces.trace_id(RUN_UID), traces.run_span(RUN_UID), None)
    assert (span.name, span.start, span.end, span.error) == ("run research-1", T0, NOW, None)
    assert span.attributes["agentrun.done"] == "1/1"
    again = run.model_copy(update={"status": done})
    assert runspans.of_run_write(run=again, new=done, now=NOW) == []
    failed = run.status.model_copy(update={"conditions": [ended("Failed")]})
    (span,) = runspans.of_run_write(run=run, new=failed, now=NOW)
    assert span.error == "the run failed"
    assert runspans.of_run_write(run=run, new=run.status, now=NOW) == []


def test_a_budget_raise_is_a_moment_under_the_run() -> None:
    run = agent_run()
    raised = CommandRecord(request_id="b-1", kind=CommandKind.BUDGET, actor="alice",
                           reason="one more try", outcome="Accepted", time=T0)
    (span,) = runspans.of_run_write(
        run=run, new=run.status.model_copy(update={"commands": [raised]}), now=NOW)
    assert (span.name, span.parent) == ("command Budget", traces.run_span(RUN_UID))
    assert span.attributes["agentrun.command.reason"] == "one more try"
