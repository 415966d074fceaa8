"""Setting one condition on a SlotStatus, the rest of the status unchanged.

The general rule (a condition's ``lastTransitionTime`` moves only when its status does)
is :func:`agentrun.api.conditions.set_condition` over a list; this is the same over a
slot's status, which is what a step returns.
"""

from __future__ import annotations

from datetime import datetime

from agentrun.api import conditions
from agentrun.api.slots import SlotStatus


def set_condition(status: SlotStatus, type_: str, value: conditions.ConditionStatus, reason: str,
         message: str, now: datetime) -> SlotStatus:
    return status.model_copy(update={"conditions": conditions.set_condition(
        status.conditions, type_=type_, status=value, reason=reason, message=message, now=now)})
