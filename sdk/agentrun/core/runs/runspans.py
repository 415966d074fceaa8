"""The spans one applied run status write completed (as ``core.slots.slotspans`` for a slot).

- *run*: the root of the run's trace, reported when the run became Succeeded or Failed in
  this write, from its creation to now (a run reopened by a rerun reports it again at its
  next end, with the same id);
- *command*: each entry new in the run's own ledger (a budget raise), a moment under it.
"""

from __future__ import annotations

from datetime import datetime

from agentrun.api import conditions, traces
from agentrun.api.runs import AgentRun, AgentRunStatus
from agentrun.api.traces import Attribute, SpanRecord
from agentrun.core.slots import slotspans

ENDS = ("Succeeded", "Failed")


def ended(status: AgentRunStatus) -> str | None:
    """``Succeeded`` or ``Failed`` when the status says the run ended, else None."""
    return next((end for end in ENDS if conditions.is_true(status.conditions, end)), None)


def of_run_write(*, run: AgentRun, new: AgentRunStatus, now: datetime) -> list[SpanRecord]:
    """The spans completed by writing ``new`` over ``run``'s status (module docstring)."""
    uid = run.metadata.uid
    if not uid:
        return []
    trace, span = traces.trace_id(uid), traces.run_span(uid)
    where: dict[str, Attribute] = {"k8s.namespace.name": run.metadata.namespace or "",
                                   "agentrun.run": run.metadata.name}
    spans = slotspans.commands(old=run.status.commands, new=new.commands, trace=trace,
                               parent=span, where=where)
    end = ended(new)
    if end is not None and ended(run.status) is None:
        created = run.metadata.creation_timestamp or now
        attributes = {**where, "agentrun.state": end, "agentrun.done": new.done or ""}
        if new.usage is not None:
            attributes["agentrun.model.input_tokens"] = new.usage.input_tokens
            attributes["agentrun.model.output_tokens"] = new.usage.output_tokens
        spans.append(SpanRecord(trace=trace, span=span, parent=None,
                                name=f"run {run.metadata.name}", start=min(created, now),
                                end=now, attributes=attributes,
                                error="the run failed" if end == "Failed" else None))
    return spans
