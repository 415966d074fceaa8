"""The Event a decision asks the operator to emit about the object it decided on.

A decision (a command's, a step's, a run's) says what happened in words a person reads
with ``kubectl describe``: ``type`` (Normal or Warning), a CamelCase ``reason`` and a
``message``. It is data here; posting it, repeats folded, is ``agentrun.kube.events``.
An Event is a notice to a person, never state the operator decides from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True, kw_only=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str
