"""When to look at an object next: the one place that turns a reconcile's result into it.

Every reconciler ends with (``retry``, ``until``): ``retry`` when it stopped on an error
(the work queue backs off, per key, exponentially), else ``until`` when the core's
``Wait`` named a time (a retry delay, a lease's expiry on the monotonic clock said as a
wall time, a deadline, a quota's wait), else nothing: only an event about the object (its
slot, pod, lease, run, LaunchSpec or configuration) or the queue's bounded resync brings
it back. No timer scans every object.
"""

from __future__ import annotations

from datetime import datetime

from agentrun.controller import queues

Key = tuple[str, str, str]  # kind, namespace, name
RUN_BATCH_SECONDS = 0.25  # a run's status waits this long for more of its slots to change


def next_look(*, retry: bool, until: datetime | None, now: datetime) -> queues.Next:
    """The queue's instruction for a key whose reconcile ended as said (see the module)."""
    if retry:
        return queues.Next(retry=True)
    if until is None:
        return queues.Next()
    return queues.Next(after=max(0.0, (until - now).total_seconds()))
