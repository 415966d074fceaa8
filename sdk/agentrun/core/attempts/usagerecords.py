"""An attempt's model usage, read off its Lease into the slot's status.

The worker keeps its attempt's sum of model usage on the attempt's Lease
(:data:`agentrun.api.modelusage.ANNOTATION`, moved only with the journal's head, never
smaller: admission). The operator copies it into the attempt's record whenever it writes
the slot's status while it can see that Lease (the attempt's end, a give-up, the run's
deadline, any other write of the slot) and never writes the status for usage alone: a
head advance per step would otherwise be a status write per step. So an ended attempt's
record holds what its Lease said when the attempt was judged ended, and the slot's
``usage`` is the running sum of its attempts' (kept whole however many attempt records
the status keeps: each change adds the difference).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrun.api import modelusage
from agentrun.api.slots import SlotStatus


def observed(status: SlotStatus, *, name: str | None,
             lease: Mapping[str, Any] | None) -> SlotStatus:
    """``status`` with the usage on ``lease`` (the Lease of attempt ``name``, as read) in
    that attempt's record and in the slot's sum; unchanged when the Lease says nothing
    new (none, an unreadable one, another currency than the slot's sum, or no more)."""
    found = modelusage.ModelUsage.on_lease(lease)
    record = next((a for a in status.attempts if a.pod == name), None)
    added = None if record is None else modelusage.growth(record.usage, found)
    if added is None or (status.usage is not None and status.usage.currency != added.currency):
        return status
    return status.model_copy(update={
        "attempts": [a.model_copy(update={"usage": found}) if a is record else a
                     for a in status.attempts],
        "usage": added if status.usage is None else status.usage.plus(added)})
