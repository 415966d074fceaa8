"""The operator's part between attempts: claim a Lease, end it, read what was committed.

As the operator does (``core.attempts.attemptobjects.lease_body``, ``core.slots.attemptlife``):
an attempt's Lease is created before its worker starts, held by ``<slot>-<n>``, labelled
with the run, slot, node and attempt number, without ``renewTime`` (the worker's first
renewal says it started); once its process has exited, the Lease is *tombstoned*: its
holder cleared and ``agentrun.dev/outcome`` (Succeeded or Failed, by the exit code, as a
pod's phase says) and ``agentrun.dev/ended-at`` written. Only then do its records count
for a successor (an unsealed earlier Lease's do not), and only then is the next attempt
claimed. An attempt a killed harness left unsealed is tombstoned ``Lost`` at the next start.

What an attempt did is read as its successor would read it
(``core.attempts.prefixes.prefix`` over the Leases and the journal): the keys the
recoverable prefix held when it started and it did not commit again (*skipped*, or never
asked for), the keys it committed anew over the prefix's (*repeated*), and the rest
(*committed*).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from types import FrameType
from typing import Any

from agentrun import objectstore
from agentrun.api import bounds, names, records
from agentrun.api.slots import Outcome
from agentrun.core.attempts import prefixes
from agentrun.worker import _journal as journals
from agentrun.worker._local import settings
from agentrun.worker._local.leases import Leases, Object
from agentrun.worker._local.workspace import SetupError, Workspace

READ_RETRY_SECONDS = 5.0  # the store is in this process: a silence is a bug, not an outage


@dataclass(kw_only=True)
class Ended:
    """One attempt, as the harness reports it (and keeps in ``attempts.json``)."""

    attempt: int
    lease: str
    exit_code: int
    outcome: str
    renewed: bool  # the worker renewed its Lease (it used the SDK or ``agentrun-worker run``)
    skipped: list[str] = field(default_factory=list)
    repeated: list[str] = field(default_factory=list)
    committed: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """What the author reads after the attempt's own output."""
        def keys(found: list[str]) -> str:
            return ", ".join(found) or "-"
        head = (f"attempt {self.attempt} ({self.lease}) ended: exit code {self.exit_code}, "
                f"outcome {self.outcome}")
        if not self.renewed:
            head += "; it never renewed its Lease (no Worker.from_env() in it?)"
        return [head, f"  skipped (committed earlier): {keys(self.skipped)}",
                f"  repeated: {keys(self.repeated)}",
                f"  committed: {keys(self.committed)}",
                *(f"  problem: {problem}" for problem in self.problems)]

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _slot_leases(leases: Leases, workspace: Workspace) -> list[Object]:
    selector = (f"{names.SLOT_LABEL}={workspace.slot},{names.RUN_LABEL}={workspace.run},"
                f"{names.ATTEMPT_LABEL}")
    items: list[Object] = leases.list(settings.NAMESPACE, labels=selector)["items"]
    return items


def _number(lease: Mapping[str, Any]) -> int:
    return int(lease["metadata"]["labels"][names.ATTEMPT_LABEL])


def next_attempt(leases: Leases, workspace: Workspace) -> int:
    """The number after the slot's last attempt (1 for a new slot)."""
    number = max((_number(lease) for lease in _slot_leases(leases, workspace)), default=0) + 1
    if number > bounds.MAX_ATTEMPT_NUMBER:
        raise SetupError(f"the slot has had {number - 1} attempts, the most a slot has: "
                         "start over with --fresh")
    return number


def seal_leftovers(leases: Leases, workspace: Workspace) -> list[str]:
    """Tombstone the slot's Leases an interrupted harness left held (outcome Lost, as the
    operator ends an attempt whose pod is gone): their names."""
    sealed = []
    for lease in _slot_leases(leases, workspace):
        if (lease.get("spec") or {}).get("holderIdentity"):
            end(leases, name=lease["metadata"]["name"], outcome=Outcome.LOST)
            sealed.append(lease["metadata"]["name"])
    return sealed


def claim(leases: Leases, workspace: Workspace, *, attempt: int) -> str:
    """Create attempt ``attempt``'s Lease, held by its (would-be) pod's name."""
    name = workspace.lease(attempt)
    leases.create(settings.NAMESPACE, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": name, "namespace": settings.NAMESPACE, "labels": {
            names.RUN_LABEL: workspace.run, names.SLOT_LABEL: workspace.slot,
            names.ATTEMPT_LABEL: str(attempt), names.NODE_LABEL: workspace.node}},
        "spec": {"holderIdentity": name,
                 "leaseDurationSeconds": settings.LEASE_DURATION_SECONDS}})
    return name


def end(leases: Leases, *, name: str, outcome: Outcome) -> bool:
    """Tombstone the Lease ``name`` with ``outcome``; whether its worker ever renewed."""
    def tombstone(lease: Object) -> Object:
        annotations = lease["metadata"].setdefault("annotations", {})
        annotations |= {names.OUTCOME_ANNOTATION: str(outcome),
                        names.ENDED_AT_ANNOTATION: _now()}
        lease["spec"].pop("holderIdentity", None)
        return lease
    return bool(leases.operate(settings.NAMESPACE, name, tombstone)["spec"].get("renewTime"))


def recoverable(leases: Leases, workspace: Workspace, *, s3: str,
                attempt: int) -> prefixes.Prefix | str:
    """The prefix attempt ``attempt`` reads (its Lease need not exist yet), or why it
    cannot be read (the worker would fail the same way)."""
    journal = journals.Journal(
        objects=objectstore.ObjectStore(endpoint=s3, bucket=settings.BUCKET,
                                        region=settings.REGION, credentials=lambda: None),
        prefix=workspace.journal_prefix, slot=workspace.slot,
        retry_seconds=READ_RETRY_SECONDS)
    try:
        return prefixes.prefix(leases=_slot_leases(leases, workspace), attempt=attempt,
                               journal=journal)
    except records.RecordError as error:
        return str(error)


def ended(*, attempt: int, lease: str, exit_code: int, renewed: bool,
          before: prefixes.Prefix | str, after: prefixes.Prefix | str) -> Ended:
    """The report of ``attempt``, from the prefix it started with and the one after."""
    found = Ended(attempt=attempt, lease=lease, exit_code=exit_code, renewed=renewed,
                  outcome=str(Outcome.SUCCEEDED if exit_code == 0 else Outcome.FAILED))
    for view in (before, after):
        if isinstance(view, str):
            found.problems.append(view)
    if isinstance(before, str) or isinstance(after, str):
        return found
    found.problems += [p for p in after.problems if p not in before.problems]
    for key, record in sorted(after.committed.items()):
        if record.attempt != attempt:
            if key in before.committed:
                found.skipped.append(key)
        elif key in before.committed:
            found.repeated.append(key)
        else:
            found.committed.append(key)
    return found


FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def run_child(command: Sequence[str], *, env: Mapping[str, str]) -> tuple[int, bool]:
    """Run ``command`` (a pod's container) to its end: its exit code (128 + N after
    signal N) and whether the harness was told to stop.

    The child runs in a session of its own, so a terminal's Ctrl-C (sent to the harness's
    process group) reaches it once: passed on by the harness, as SIGINT, SIGTERM and
    SIGHUP are, to the child's process group. After the first, the child has
    :data:`settings.STOP_SECONDS` to exit before it is killed (as a pod's grace period).
    """
    child: subprocess.Popen[bytes] | None = None
    told: list[int] = []  # the signals the harness was sent
    killer: list[threading.Timer] = []

    def signal_group(signum: int) -> None:
        if child is not None and child.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child.pid, signum)

    def stop(signum: int) -> None:
        signal_group(signum)
        if not killer:
            killer.append(threading.Timer(settings.STOP_SECONDS, signal_group,
                                          (signal.SIGKILL,)))
            killer[0].daemon = True
            killer[0].start()

    def forward(signum: int, _frame: FrameType | None) -> None:
        told.append(signum)
        if child is not None:
            stop(signum)

    previous = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        try:
            child = subprocess.Popen(list(command), env=dict(env), start_new_session=True)
        except OSError as error:
            raise SetupError(f"cannot start {command[0]!r}: {error.strerror or error}"
                             ) from None
        if told and not killer:  # told while the child was being started
            stop(told[-1])
        code = child.wait()
    finally:
        for timer in killer:
            timer.cancel()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return (code if code >= 0 else 128 - code), bool(told)
