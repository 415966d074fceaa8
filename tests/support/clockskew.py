"""The fault scenario "the operator's wall clock skewed and stepped mid-run".

One play (:func:`play`), shared by ``make faults`` (``bench/faults.py``: ``clock-skew``)
and ``make test`` (``tests/integration/node/test_fault_clock_skew.py``). The operator runs
under libfaketime (:func:`faked_env`: ``LD_PRELOAD``, ``FAKETIME_TIMESTAMP_FILE`` read on
every call, ``FAKETIME_NO_CACHE=1``, the monotonic clock left alone), its wall clock
``+600s`` at the start; the workers are real SDK pods on the node whose clocks are the
host's (libfaketime is not in the project's image; see docs/decisions.md):

1. a run of ``slots`` workers (``pausedserver.WORKER``: renew, wait for the owner's word,
   exit 0), all Active and renewing; the clock STEPPED to ``-600s`` (20 minutes back);
2. a second run's one slot made; once its attempt is Active (its claim time written, its
   pod starting, the Lease not yet renewed: the start deadline judges it), the clock
   stepped to ``+600s``
   (20 minutes forward, far past its 60 s start deadline);
3. every lease renewed :data:`RENEWALS` more times (two leases' time on the workers'
   renewers), then the first worker SIGSTOPped (it stops renewing, its pod stays): its
   lease must be judged expired on the operator's own monotonic clock, attempt 2 made
   within :data:`RECOVERED_BOUND`; the stopped process is then killed;
4. the workers told to finish; every slot Succeeded within :data:`SETTLED_BOUND`.

What is checked (:func:`violations`): *no early takeover*: every slot but the stopped
one Succeeded after one attempt, its pod never deleted, its worker never told its lease
was lost; *one pod and one lease per attempt* (the stopped slot: ``-1`` and ``-2``);
*recovered within a bound*; *no slot stuck*.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from effectowner import EffectOwner
from localnode import LocalNode
from pausedserver import FINISH_FENCE, FINISH_KEY, WORKER, active, status, timed
from scenarios import Scenario
from waiting import wait_for
from workers import (
    OWNER_ENV,
    container_pid,
    grant_worker_role,
    printed,
    real_launch_spec,
)

from agentrun.api import names

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEW = "+600s"
STEPPED = "-600s"
RENEWALS = 6  # renewals every lease/3: two leases' time after the steps
ACTIVE_BOUND = 120.0  # the first run's pods started and renewing (a cold node)
RECOVERED_BOUND = 30.0  # a stopped worker's slot has attempt 2 (a 10 s lease + margin)
SETTLED_BOUND = 90.0  # after the word to finish, every slot Succeeded


def faked_env(timestamp_file: Path) -> dict[str, str]:
    """The environment that has a process's wall clock read from ``timestamp_file`` on
    every call (an offset such as ``+600s``; rewrite it to step the clock), its monotonic
    clock untouched."""
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(timestamp_file),
            "FAKETIME_NO_CACHE": "1", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def step(timestamp_file: Path, offset: str) -> None:
    """Step the faked clock: a new file, renamed over the old (never read half-written)."""
    fresh = timestamp_file.with_suffix(".new")
    fresh.write_text(offset + "\n")
    fresh.replace(timestamp_file)


@dataclass
class Play:
    violations: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)  # the offsets, in order
    unrenewed_at_step: bool | None = None  # the late attempt's Lease unrenewed at step 2
    recovered_after: float | None = None  # the worker stopped -> its slot's attempt 2
    settled_after: float | None = None


def play(scenario: Scenario, *, node: LocalNode, image: str, owner: EffectOwner,
         timestamp_file: Path, slots: int, lease_seconds: int) -> Play:
    """Play once (module docstring); the operator serving ``scenario``'s namespace reads
    its wall clock from ``timestamp_file`` (:func:`faked_env`), now ``+600s``."""
    result = Play(steps=[timestamp_file.read_text().strip()])
    grant_worker_role(scenario)
    scenario.configs(name="before", nodes=tuple((f"w{i:02d}", "cpu", []) for i in range(slots)))
    scenario.configs(name="late", nodes=(("late", "cpu", []),))
    real_launch_spec(scenario, "skewed-workers", classes=["cpu"], image=image, script=WORKER,
                     renewer=False, lease_seconds=lease_seconds, env={OWNER_ENV: owner.url})
    scenario.run("before", config="before", max_attempts=2)
    first: list[str] = wait_for(lambda: (found := scenario.slot_names("before"))
                                and len(found) == slots and found, timeout=60,
                                message=f"{slots} slots of run before")
    wait_for(lambda: active(scenario, first) and all(
        ((scenario.lease(f"{s}-1") or {}).get("spec") or {}).get("renewTime") for s in first),
        timeout=ACTIVE_BOUND, interval=0.5, message="every slot of run before Active and renewed")
    step(timestamp_file, STEPPED)
    result.steps.append(STEPPED)
    scenario.run("late", config="late", max_attempts=2)
    late: list[str] = wait_for(lambda: scenario.slot_names("late"), timeout=60,
                               message="the slot of run late")
    # Active: the attempt's claim time written (on the stepped-back clock), its pod made
    wait_for(lambda: status(scenario.slot(late[0])).get("state") == "Active", timeout=60,
             interval=0.1, message="the late slot's attempt 1 Active")
    lease = scenario.lease(f"{late[0]}-1") or {}
    result.unrenewed_at_step = not (lease.get("spec") or {}).get("renewTime")
    step(timestamp_file, SKEW)
    result.steps.append(SKEW)
    every = [*first, *late]
    wanted = {f"{s}-1": RENEWALS if s in first else 1 for s in every}
    seen: dict[str, list[object]] = {lease: [] for lease in wanted}

    def renewed() -> bool:  # renewTime changes seen since the steps, counted per lease
        for lease, values in seen.items():
            value = ((scenario.lease(lease) or {}).get("spec") or {}).get("renewTime")
            if not values or values[-1] != value:
                values.append(value)
        return all(len(seen[lease]) > n for lease, n in wanted.items())
    timed(result, f"every lease renewed {RENEWALS} more times after the steps", renewed,
          timeout=RENEWALS * lease_seconds / 3 + ACTIVE_BOUND)
    stopped = first[0]
    pod = scenario.pod(f"{stopped}-1")
    assert pod is not None
    pid = container_pid(node, pod)
    os.kill(pid, signal.SIGSTOP)
    since = time.monotonic()
    try:
        if timed(result, f"{stopped}: attempt 2 after its worker stopped renewing",
                 lambda: (status(scenario.slot(stopped)).get("attemptCount") or 0) >= 2,
                 timeout=RECOVERED_BOUND) is not None:
            result.recovered_after = time.monotonic() - since
    finally:
        with contextlib.suppress(ProcessLookupError):  # fenced: its pod deleted already
            os.kill(pid, signal.SIGKILL)
    code, _ = owner.effect(key=FINISH_KEY, token=0, fence=FINISH_FENCE, payload=None)
    assert code == 200, code
    result.settled_after = timed(
        result, "every slot Succeeded after the word to finish",
        lambda: all(status(scenario.slot(s)).get("state") == "Succeeded" for s in every),
        timeout=SETTLED_BOUND)
    result.violations += violations(scenario, live=every[1:], stopped=stopped)
    return result


def violations(scenario: Scenario, *, live: list[str], stopped: str) -> list[str]:
    """The invariants (module docstring): ``live`` slots kept their one attempt; the
    ``stopped`` one has exactly two."""
    found: list[str] = []
    for name in [*live, stopped]:
        state = status(scenario.slot(name))
        want = 2 if name == stopped else 1
        if state.get("state") != "Succeeded" or state.get("attemptCount") != want:
            found.append(f"{name}: {state.get('state')} after {state.get('attemptCount')} "
                         f"attempts (want Succeeded after {want}"
                         f"{'' if name == stopped else ': an early takeover'})")
        selector = f"{names.SLOT_LABEL}={name}"
        want_names = [f"{name}-{n}" for n in range(1, want + 1)]
        pods = sorted(str(p.metadata and p.metadata.name) for p in scenario.core.
                      list_namespaced_pod(scenario.namespace, label_selector=selector).items)
        leases = sorted(str(x.metadata and x.metadata.name) for x in scenario.coordination.
                        list_namespaced_lease(scenario.namespace,
                                              label_selector=selector).items)
        if leases != want_names or (name != stopped and pods != want_names):
            found.append(f"{name}: pods {pods}, leases {leases} (want {want_names})")
        if name == stopped:
            continue
        pod = scenario.pod(f"{name}-1") or {}
        if not pod or (pod.get("metadata") or {}).get("deletionTimestamp"):
            found.append(f"{name}-1: its pod was deleted (fenced) while its worker lived")
        said = printed(scenario, f"{name}-1")
        if any(p.get("stopped") == "LeaseLost" or p.get("told") == "lost" for p in said):
            found.append(f"{name}-1: its worker was told its lease was lost")
    return found
