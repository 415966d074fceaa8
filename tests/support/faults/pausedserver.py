"""The fault scenario "the API server paused for longer than a lease, then resumed".

One play (:func:`play`), shared by ``make faults`` (``bench/faults``, many plays) and
``make test`` (``tests/integration/node/test_fault_paused_apiserver.py``, one):

1. a run of ``slots`` nodes whose workers are real pods on the node running the SDK
   (:data:`WORKER`: its keeper the only renewer; the worker waits for the test's word,
   renewing, and exits 0), under a lease of ``lease_seconds``; once every attempt is
   Active and renewed, a second run's one slot whose worker (:data:`STARTING`) makes no
   renewal until the test's word, its attempt Active and judged by a start deadline of
   :data:`STARTING_DEADLINE` (shorter than the pause), and a hold command on the first
   slot, then
2. the API server (with its etcd) SIGSTOPped for ``pause_seconds`` and SIGCONTed
   (``faults.hold_paused``); then
3. every worker renews again, a release command, a third run made after the resume is
   served (its attempt Active), the starting worker told to begin (it renews within
   :data:`BEGUN_BOUND`: the blind time counted out of its start deadline as out of a
   lease's), the workers are told to finish, and every slot succeeds.

What is checked after it (:func:`violations`), each a line of what went wrong:
- *no early takeover* and *no attempt lost*: every slot Succeeded with one attempt, the
  attempt's pod never deleted (fenced) and its worker never told its lease was lost;
- *one pod and one lease record per attempt*: the slot's pods and Leases are exactly
  ``<slot>-1``, the Lease tombstoned ``Succeeded``;
- *one ledger entry per command*: the hold and the release each once in the first slot's
  ledger, no request id twice in any, no command annotation left;
- *the workers keep their attempts*: each lease renewed after the resume, within
  :data:`RENEWED_BOUND`; *the operator recovers on its own*: the later run's attempt
  Active within :data:`SERVED_BOUND` of its creation;
- *no slot stuck*: every slot Succeeded within :data:`SETTLED_BOUND` of the word to finish.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentrun.api import names
from tests.support.actors.effectowner import CLIENT, EffectOwner, word_key
from tests.support.actors.workers import OWNER_ENV, grant_worker_role, printed, real_launch_spec
from tests.support.faults.processfaults import Pause, hold_paused
from tests.support.plays.scenarios import Object, Scenario, request_id
from tests.support.waiting import ConditionTimeout, wait_for

FINISH, BEGIN = "finish", "begin"  # the test's words (effectowner.word_key)
FINISH_KEY, FINISH_FENCE = word_key(FINISH), "test"
BEGIN_KEY = word_key(BEGIN)
WORKER = CLIENT + f"""
import sys, time
from agentrun.worker import _keeper as keeper
from agentrun.worker._sdk import Worker
def say(**fields):
    print(json.dumps(fields), flush=True)
def finish():
    return said({FINISH!r})
worker = Worker.from_env()
worker.start(on_lapse=lambda why: say(told="lapse", at=time.time()),
             on_resume=lambda why: say(told="resume", at=time.time()),
             on_lost=lambda why: say(told="lost", at=time.time(), why=why))
say(started=time.time())
while not finish():
    try:
        worker.keeper.ensure_live()
    except keeper.LeaseLost as error:
        say(stopped="LeaseLost", at=time.time(), why=str(error))
        sys.exit(3)
    except keeper.LeaseLapsed:
        pass
    time.sleep(0.5)
worker.stop()
say(done=time.time())
"""
# A worker that makes its first renewal only once the owner says BEGIN: its attempt
# waits on the start deadline (STARTING_DEADLINE) until then.
STARTING = WORKER.replace("worker = Worker.from_env()\n", f"""while not said({BEGIN!r}):
    time.sleep(0.5)
worker = Worker.from_env()
""")
# Shorter than the pause, longer than the starting attempt's unblind time before the
# pause and until its first renewal after it: counted with the blind time it would end
# during the pause (an early takeover); without it, it never ends.
STARTING_DEADLINE = 20
BEGUN_BOUND = 10.0  # after the word to begin, the starting attempt renewed
ACTIVE_BOUND = 120.0  # seconds: the first run's pods started and renewing (a cold node)
RENEWED_BOUND = 30.0  # after the resume, every lease renewed again
SERVED_BOUND = 90.0  # a run created after the resume has its attempt Active
SETTLED_BOUND = 60.0  # after the word to finish, every slot Succeeded
COMMAND_BOUND = 30.0  # a command decided and its annotations removed


@dataclass
class Play:
    """One play's outcome: what went wrong (empty: nothing) and its figures (seconds)."""

    violations: list[str] = field(default_factory=list)
    pause: Pause | None = None
    renewed_after: float | None = None  # resume → every lease renewed again
    served_after: float | None = None  # the later run created → its attempt Active
    settled_after: float | None = None  # the word to finish → every slot Succeeded
    lapsed: int = 0  # workers told their lease lapsed (effects paused) during the pause
    unblind_at_pause: float | None = None  # the starting attempt Active -> the pause
    begun_after: float | None = None  # the word to begin -> its first renewal seen


def status(slot: Object) -> Object:
    found: Object = slot.get("status") or {}
    return found


def active(scenario: Scenario, slots: list[str]) -> bool:
    return all(status(scenario.slot(s)).get("state") == "Active" for s in slots)


def renew_times(scenario: Scenario, leases: list[str]) -> dict[str, Any]:
    return {name: ((scenario.lease(name) or {}).get("spec") or {}).get("renewTime")
            for name in leases}


def decided(scenario: Scenario, slot: str, request: str) -> bool:
    """Is the command in the slot's ledger, with its annotations removed?"""
    found = scenario.slot(slot)
    annotations = found["metadata"].get("annotations") or {}
    return any(c.get("requestId") == request for c in status(found).get("commands", [])) and (
        not any(k.startswith("agentrun.dev/") and k.endswith("-id") for k in annotations))


class Checked(Protocol):
    """A play's outcome that collects violations (this module's :class:`Play`, others')."""

    violations: list[str]


def timed(play: Checked, what: str, check: Any, *, timeout: float) -> float | None:
    """Seconds until ``check`` holds, or None with a violation saying what did not."""
    started = time.monotonic()
    try:
        wait_for(check, timeout=timeout, message=what, interval=0.25)
    except ConditionTimeout as error:
        play.violations.append(f"{what}: not within {timeout:.0f} s ({error})")
        return None
    return time.monotonic() - started


def play(scenario: Scenario, *, apiserver: subprocess.Popen[bytes] | int, image: str,
         owner: EffectOwner, slots: int, lease_seconds: int,
         pause_seconds: float) -> Play:
    """Play the scenario once in ``scenario``'s namespace (the operator serving it) and
    check it: see the module docstring."""
    result = Play()
    grant_worker_role(scenario)
    nodes: tuple[tuple[str, str, list[str]], ...] = tuple(
        (f"w{i:02d}", "cpu", []) for i in range(slots))
    scenario.configs(name="before", nodes=nodes)
    scenario.configs(name="after", nodes=(("late", "cpu", []),))
    scenario.configs(name="starting", nodes=(("first-renewal", "starting", []),))
    real_launch_spec(scenario, "paused-workers", classes=["cpu"], image=image, script=WORKER,
                     renewer=False, lease_seconds=lease_seconds,
                     env={OWNER_ENV: owner.url})
    real_launch_spec(scenario, "paused-starting", classes=["starting"], image=image,
                     script=STARTING, renewer=False, lease_seconds=lease_seconds,
                     env={OWNER_ENV: owner.url}, start_deadline_seconds=STARTING_DEADLINE)
    scenario.run("before", config="before", max_attempts=2)
    first = wait_for(lambda: (found := scenario.slot_names("before")) and len(found) == slots
                     and found, timeout=60, message=f"{slots} slots of run before")
    leases = [f"{slot}-1" for slot in first]
    wait_for(lambda: active(scenario, first), timeout=ACTIVE_BOUND,
             message="every slot of run before Active", interval=0.5)
    wait_for(lambda: all(any("started" in p for p in printed(scenario, lease))
                         for lease in leases), timeout=ACTIVE_BOUND,
             message="every worker started (its first renewal made)", interval=0.5)
    before = renew_times(scenario, leases)
    scenario.run("starting", config="starting", max_attempts=2)
    starting = wait_for(lambda: scenario.slot_names("starting"), timeout=60,
                        message="the slot of run starting")
    wait_for(lambda: active(scenario, starting), timeout=60, interval=0.1,
             message="the starting slot's attempt 1 Active (its worker waits to renew)")
    claimed = time.monotonic()
    hold, release = request_id(), request_id()
    held = scenario.annotate(first[0], user="admin", hold_id=hold,
                             hold_reason="the paused-server scenario")
    assert held.returncode == 0, held.stderr
    result.pause = pause = hold_paused(apiserver, seconds=pause_seconds)
    result.unblind_at_pause = pause.stopped - claimed

    # The API server is back: the workers renew, the operator serves.
    if timed(result, "every lease renewed after the resume",
             lambda: all(v != before[k] for k, v in renew_times(scenario, leases).items()),
             timeout=RENEWED_BOUND) is not None:
        result.renewed_after = time.monotonic() - pause.resumed
    made = release_then_run_after(scenario, result, slot=first[0], hold=hold, release=release)
    first_renewal(scenario, result, owner=owner, lease=f"{starting[0]}-1")
    late = wait_for(lambda: scenario.slot_names("after"), timeout=60,
                    message="the slot of run after")
    if timed(result, "the run made after the resume served (Active)",
             lambda: active(scenario, late), timeout=SERVED_BOUND) is not None:
        result.served_after = time.monotonic() - made
    timed(result, f"release {release} decided", lambda: decided(scenario, first[0], release),
          timeout=COMMAND_BOUND)
    status_code, _ = owner.effect(key=FINISH_KEY, token=0, fence=FINISH_FENCE, payload=None)
    assert status_code == 200, status_code
    every = [*first, *late, *starting]
    result.settled_after = timed(
        result, "every slot Succeeded after the word to finish",
        lambda: all(status(scenario.slot(s)).get("state") == "Succeeded" for s in every),
        timeout=SETTLED_BOUND)
    result.violations += violations(scenario, slots=every, commands={first[0]: [hold, release]})
    result.lapsed = sum(any(p.get("told") == "lapse" for p in printed(scenario, f"{s}-1"))
                        for s in first)
    return result


def first_renewal(scenario: Scenario, play: Play, *, owner: EffectOwner, lease: str) -> None:
    """The starting worker told to begin (its start deadline long past on the wall
    clock, not on the unblind one); its first renewal within :data:`BEGUN_BOUND`."""
    status_code, _ = owner.effect(key=BEGIN_KEY, token=0, fence=FINISH_FENCE, payload=None)
    assert status_code == 200, status_code
    play.begun_after = timed(
        play, f"{lease}: its first renewal after the word to begin",
        lambda: renew_times(scenario, [lease])[lease],
        timeout=BEGUN_BOUND)


def release_then_run_after(scenario: Scenario, play: Checked, *, slot: str, hold: str,
                           release: str) -> float:
    """After the fault: the hold decided (within the bound), the release sent, run
    ``after`` made; the monotonic moment it was made."""
    timed(play, f"hold {hold} decided", lambda: decided(scenario, slot, hold),
          timeout=COMMAND_BOUND)
    released = scenario.annotate(slot, user="admin", release_id=release)
    assert released.returncode == 0, released.stderr
    scenario.run("after", config="after", max_attempts=1)
    return time.monotonic()


def violations(scenario: Scenario, *, slots: list[str],
               commands: dict[str, list[str]]) -> list[str]:
    """The scenario's invariants over ``slots`` (see the module docstring); ``commands``:
    the request ids sent to each slot."""
    found: list[str] = []
    for name in slots:
        slot = scenario.slot(name)
        state = status(slot)
        attempt = f"{name}-1"
        if state.get("state") != "Succeeded" or state.get("attemptCount") != 1:
            found.append(f"{name}: {state.get('state')} after {state.get('attemptCount')} "
                         f"attempts (want Succeeded after 1: an early takeover or a lost "
                         f"attempt)")
        numbers = [a.get("number") for a in state.get("attempts", [])]
        if numbers != [1]:
            found.append(f"{name}: attempt records {numbers} (want [1])")
        selector = f"{names.SLOT_LABEL}={name}"
        pods = sorted(str(p.metadata and p.metadata.name) for p in
                      scenario.core.list_namespaced_pod(scenario.namespace,
                                                        label_selector=selector).items)
        leases = sorted(str(x.metadata and x.metadata.name) for x in
                        scenario.coordination.list_namespaced_lease(
                            scenario.namespace, label_selector=selector).items)
        if pods != [attempt] or leases != [attempt]:
            found.append(f"{name}: pods {pods}, leases {leases} (want one each: {attempt})")
        outcome = lease_outcome(scenario, attempt)
        if outcome != "Succeeded":
            found.append(f"{attempt}: lease outcome {outcome!r} (want 'Succeeded')")
        pod = scenario.pod(attempt) or {}
        if (pod.get("metadata") or {}).get("deletionTimestamp") or not pod:
            found.append(f"{attempt}: its pod was deleted (fenced) by the operator")
        said = printed(scenario, attempt)
        if any(p.get("stopped") == "LeaseLost" or p.get("told") == "lost" for p in said):
            found.append(f"{attempt}: the worker was told its lease was lost: {said}")
        found += command_violations(slot, sent=commands.get(name, []))
    return found


def lease_outcome(scenario: Scenario, lease: str) -> str | None:
    """The outcome a Lease was tombstoned with (None: not tombstoned, or no Lease)."""
    found = scenario.lease(lease) or {}
    outcome: str | None = ((found.get("metadata") or {}).get("annotations") or {}).get(
        names.OUTCOME_ANNOTATION)
    return outcome


def command_violations(slot: Object, *, sent: list[str]) -> list[str]:
    """One ledger entry per command sent (by request id), no command annotation left."""
    found: list[str] = []
    name = slot["metadata"]["name"]
    ids = [c.get("requestId") for c in status(slot).get("commands", [])]
    if sorted(ids) != sorted(sent):
        found.append(f"{name}: ledger {ids} (want each of {sent} once)")
    left = [k for k in (slot["metadata"].get("annotations") or {})
            if k.startswith("agentrun.dev/") and k.endswith("-id")]
    if left:
        found.append(f"{name}: command annotations left: {left}")
    return found
