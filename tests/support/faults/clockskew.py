"""The fault scenario "the operator's and the workers' wall clocks skewed and stepped".

One play (:func:`play`), shared by ``make faults`` (``bench/faults``: ``clock-skew``)
and ``make test`` (``tests/integration/node/test_fault_clock_skew.py``). Every clock is
faked by libfaketime, the monotonic clock left alone (:mod:`fakeclock`): the operator's,
a process on the host (:func:`operator_env`), from ``+600s``; each worker's, a real SDK
pod on the node (the test base image carries the preloads), from :data:`WORKER_SKEW`
(``-600s``) in a file of its container (:func:`worker_container`) that the host rewrites
through ``/proc/<pid>/root`` (:func:`step_workers`). The two disagree by 20 minutes:

1. a run of ``slots`` workers (``pausedserver.WORKER``: renew, wait for the owner's word,
   exit 0), all Active and renewing; the operator's clock STEPPED to ``-600s`` (20
   minutes back), the workers' to ``+600s`` (20 minutes forward), and every worker seen
   renewing on its stepped clock (its ``renewTime`` ten minutes ahead of the host's);
2. a second run's one slot made; once its attempt is Active (its claim time written, its
   pod starting, the Lease not yet renewed: the start deadline judges it), the
   operator's clock stepped to ``+600s`` (20 minutes forward, far past its 60 s start
   deadline), the first run's workers' back to ``-600s``;
3. every lease renewed :data:`RENEWALS` more times (two leases' time on the workers'
   renewers), then the first worker SIGSTOPped (it stops renewing, its pod stays): its
   lease must be judged expired on the operator's own monotonic clock, attempt 2 made
   within :data:`RECOVERED_BOUND`; the stopped process is then killed;
4. the workers told to finish; every slot Succeeded within :data:`SETTLED_BOUND`.

What is checked (:func:`violations`): *no early takeover*: every slot but the stopped
one Succeeded after one attempt, its pod never deleted, its worker never told its lease
was lost; *one pod and one lease per attempt* (the stopped slot: ``-1`` and ``-2``);
*recovered within a bound*; *no slot stuck*; and that the fault happened: the workers'
``renewTime`` values were seen at both offsets (:attr:`Play.worker_offsets`), so a
library that failed to load (``ld.so`` ignores a missing preload) cannot pass unseen.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from agentrun.api import names
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.workers import (
    OWNER_ENV,
    container_pid,
    grant_worker_role,
    node_launch_spec,
    printed,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.faults.fakeclock import IMAGE_SLEEPFIX, faked_env, sleepfix_library, step
from tests.support.faults.pausedserver import (
    FINISH_FENCE,
    FINISH_KEY,
    WORKER,
    active,
    renew_times,
    status,
    timed,
)
from tests.support.plays.scenarios import Object, Scenario
from tests.support.waiting import wait_for

SKEW = "+600s"
STEPPED = "-600s"
WORKER_CLOCK = Path("/tmp/agentrun-faketime")  # in a worker's container
WORKER_SKEW = "-600s"  # the workers' clocks: the operator's opposite at every moment
WORKER_STEPPED = "+600s"
RENEWALS = 6  # renewals every lease/3: two leases' time after the steps
ACTIVE_BOUND = 120.0  # the first run's pods started and renewing (a cold node)
RECOVERED_BOUND = 30.0  # a stopped worker's slot has attempt 2 (a 10 s lease + margin)
SETTLED_BOUND = 90.0  # after the word to finish, every slot Succeeded


def operator_env(timestamp_file: Path) -> dict[str, str]:
    """The environment of an operator on the host reading its clock from ``timestamp_file``."""
    return faked_env(timestamp_file, sleepfix=sleepfix_library())


def worker_container(*, image: str, script: str, env: dict[str, str]) -> Object:
    """A container running the SDK worker ``script`` with its wall clock faked: its shell
    writes :data:`WORKER_CLOCK` (``WORKER_SKEW``) before Python starts, because
    libfaketime follows the file only if it exists when the process starts."""
    shell = f"printf '%s\\n' {WORKER_SKEW} > {WORKER_CLOCK} && exec python3 -c \"$0\""
    faked = {**env, **faked_env(WORKER_CLOCK, sleepfix=IMAGE_SLEEPFIX)}
    return {"name": "worker", "image": image, "imagePullPolicy": "Never",
            "command": ["sh", "-c", shell, script],
            "env": [{"name": k, "value": v} for k, v in sorted(faked.items())]}


def step_workers(scenario: Scenario, *, node: LocalNode, pods: list[str], offset: str) -> None:
    """Step the faked clock of each of ``pods``' running workers, from the host."""
    for name in pods:
        pod = scenario.pod(name)
        assert pod is not None, name
        step(Path(f"/proc/{container_pid(node, pod)}/root") / WORKER_CLOCK.relative_to("/"),
             offset)


def offset_minutes(renew_time: str) -> int:
    """How far (in whole minutes) a worker's ``renewTime`` is from the host's clock now."""
    at = datetime.fromisoformat(renew_time.replace("Z", "+00:00"))
    return round((at - datetime.now(UTC)).total_seconds() / 60)


@dataclass
class Play:
    violations: list[str] = field(default_factory=list)
    steps: list[str] = field(default_factory=list)  # the operator's offsets, in order
    worker_steps: list[str] = field(default_factory=list)  # the workers' offsets
    worker_offsets: set[int] = field(default_factory=set)  # renewTime - host, in minutes
    unrenewed_at_step: bool | None = None  # the late attempt's Lease unrenewed at step 2
    recovered_after: float | None = None  # the worker stopped -> its slot's attempt 2
    settled_after: float | None = None


def play(scenario: Scenario, *, node: LocalNode, image: str, owner: EffectOwner,
         timestamp_file: Path, slots: int, lease_seconds: int) -> Play:
    """Play once (module docstring); the operator serving ``scenario``'s namespace reads
    its wall clock from ``timestamp_file`` (:func:`operator_env`), now ``+600s``."""
    result = Play(steps=[timestamp_file.read_text().strip()], worker_steps=[WORKER_SKEW])
    grant_worker_role(scenario)
    scenario.configs(name="before", nodes=tuple((f"w{i:02d}", "cpu", []) for i in range(slots)))
    scenario.configs(name="late", nodes=(("late", "cpu", []),))
    node_launch_spec(scenario, "skewed-workers", classes=["cpu"], lease_seconds=lease_seconds,
                     container=worker_container(image=image, script=WORKER,
                                                env={OWNER_ENV: owner.url}))
    scenario.run("before", config="before", max_attempts=2)
    first: list[str] = wait_for(lambda: (found := scenario.slot_names("before"))
                                and len(found) == slots and found, timeout=60,
                                message=f"{slots} slots of run before")
    leases = [f"{s}-1" for s in first]

    def renewed_at(minutes: int) -> bool:  # every lease's renewTime that far from the host's
        times = list(renew_times(scenario, leases).values())
        offsets = {offset_minutes(t) for t in times if t}
        result.worker_offsets |= offsets
        return all(times) and offsets == {minutes}
    wait_for(lambda: active(scenario, first) and renewed_at(-10), timeout=ACTIVE_BOUND,
             interval=0.5, message="every slot of run before Active, renewed at -10 min")
    step(timestamp_file, STEPPED)
    result.steps.append(STEPPED)
    step_workers(scenario, node=node, pods=leases, offset=WORKER_STEPPED)
    result.worker_steps.append(WORKER_STEPPED)
    timed(result, "every worker renewed on its stepped clock (+10 min)",
          lambda: renewed_at(10), timeout=2 * lease_seconds)
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
    step_workers(scenario, node=node, pods=leases, offset=WORKER_SKEW)
    result.worker_steps.append(WORKER_SKEW)
    every = [*first, *late]
    wanted = {f"{s}-1": RENEWALS if s in first else 1 for s in every}
    seen: dict[str, list[object]] = {lease: [] for lease in wanted}

    def renewed() -> bool:  # renewTime changes seen since the steps, counted per lease
        for lease, values in seen.items():
            value = ((scenario.lease(lease) or {}).get("spec") or {}).get("renewTime")
            if not values or values[-1] != value:
                values.append(value)
                if value:
                    result.worker_offsets.add(offset_minutes(value))
        return all(len(seen[lease]) > n for lease, n in wanted.items())
    timed(result, f"every lease renewed {RENEWALS} more times after the steps", renewed,
          timeout=RENEWALS * lease_seconds / 3 + ACTIVE_BOUND)
    stopped = first[0]
    pod = scenario.pod(f"{stopped}-1")
    if pod is None or (pod.get("metadata") or {}).get("deletionTimestamp"):
        result.violations.append(f"{stopped}-1: its pod was deleted (fenced) before its "
                                 "worker was stopped: an early takeover")
    else:
        stop_and_recover(scenario, node=node, pod=pod, slot=stopped, result=result)
    code, _ = owner.effect(key=FINISH_KEY, token=0, fence=FINISH_FENCE, payload=None)
    assert code == 200, code
    result.settled_after = timed(
        result, "every slot Succeeded after the word to finish",
        lambda: all(status(scenario.slot(s)).get("state") == "Succeeded" for s in every),
        timeout=SETTLED_BOUND)
    result.violations += violations(scenario, live=every[1:], stopped=stopped)
    if result.worker_offsets != {-10, 10}:
        result.violations.append(f"the workers' renewTime offsets seen (min): "
                                 f"{sorted(result.worker_offsets)}, want [-10, 10]: their "
                                 "clocks were not faked as the play says")
    return result


def stop_and_recover(scenario: Scenario, *, node: LocalNode, pod: Object, slot: str,
                     result: Play) -> None:
    """SIGSTOP ``pod``'s worker (it renews nothing, its pod stays); ``slot``'s attempt 2
    within :data:`RECOVERED_BOUND`; then the stopped process killed."""
    pid = container_pid(node, pod)
    os.kill(pid, signal.SIGSTOP)
    since = time.monotonic()
    try:
        if timed(result, f"{slot}: attempt 2 after its worker stopped renewing",
                 lambda: (status(scenario.slot(slot)).get("attemptCount") or 0) >= 2,
                 timeout=RECOVERED_BOUND) is not None:
            result.recovered_after = time.monotonic() - since
    finally:
        with contextlib.suppress(ProcessLookupError):  # fenced: its pod deleted already
            os.kill(pid, signal.SIGKILL)


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
