"""The fault scenario "workers SIGKILLed at the seed's interruption points, at scale".

One play (:func:`play`), shared by ``make faults`` (``bench/faults``: ``kill-points``,
many slots per point) and ``make test``
(``tests/integration/node/test_fault_kill_points.py``: a few slots at two points). What
``tests/integration/node/test_interruptions.py`` shows once with one slot per point, here
for every slot of runs of ``batch`` slots (as many pods at once as the play admits):

1. for each point of :data:`POINTS` (``before-commit:<step>``, ``after-step:<step>``,
   ``after-intent:publish``, ``after-call:publish``, see ``agentrun.examples.faults``),
   runs of the example agent (``agentrun.examples.research_report``, real pods on the
   node, one owner) whose every attempt 1 pauses at the point and is SIGKILLed there from
   the host (``workers.kill_when_paused``); attempt 2 comes by the run's retry (backoff 0);
2. every slot Succeeded within :data:`SETTLED_BOUND` of the batch's last kill.

What is checked (:func:`violations`), per slot, each a line of what went wrong:
- *attempts*: ``[(Failed, 137), (Succeeded, 0)]``; *one pod and one lease per attempt*:
  the slot's pods and Leases are exactly ``<slot>-1`` and ``<slot>-2``;
- *the successor skips what was committed, repeats what was not* (:func:`expected_steps`);
- *it asks the owner before sending*: the owner's requests under the slot's key are
  :func:`expected_requests` (a GET before any POST of attempt 2 after an intent or a call);
- *the owner applied the publication exactly once under one key*: ``applied == 1`` for
  the key ``effects.idempotency_key(run uid, slot, "publish")`` and no other key of it;
- *one ledger entry per command*: no command was sent, so the ledger is empty.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import yaml

from agentrun.worker import _effects as effects
from tests.support.actors.effectowner import EffectOwner, Request
from tests.support.actors.workers import (
    agent_events,
    agent_launch_spec,
    grant_worker_role,
    kill_when_paused,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Object, Scenario, workflow
from tests.support.waiting import ConditionTimeout, wait_for

STEPS = ("source-1", "source-2", "source-3", "decision", "report")
EFFECT = "publish"
POINTS = ("before-commit:source-2", "after-step:source-2", f"after-intent:{EFFECT}",
          f"after-call:{EFFECT}")
# The workers' lease: 15 s, not workers.LEASE_SECONDS (5 s, renewed every 1.7 s): with 10
# pods starting at once on 2 cores shared with other work, a 5 s lease of a live worker
# expired (its renewer starved) and its attempt was fenced: a true expiry, not this fault.
LEASE_SECONDS = 15
SLOTS_BOUND = 60.0  # a run's slots made
PAUSED_BOUND = 180.0  # a batch's attempt 1 paused at its point (cold pods, 2 cores)
SETTLED_BOUND = 180.0  # after a batch's last kill, every slot of it Succeeded


@dataclass
class Play:
    """One play's outcome: what went wrong (empty: nothing) and its figures."""

    violations: list[str] = field(default_factory=list)
    slots: dict[str, int] = field(default_factory=dict)  # point -> slots played
    applied: int = 0  # slots whose key the owner applied exactly once
    settled: list[float] = field(default_factory=list)  # per batch: last kill -> Succeeded


def expected_steps(point: str) -> dict[str, str]:
    """What the successor of an attempt killed at ``point`` does with each step."""
    kind, _, key = point.partition(":")
    if kind not in ("before-commit", "after-step"):
        return dict.fromkeys(STEPS, "skipped")  # every step committed before the effect
    done = STEPS.index(key) + (kind == "after-step")
    return {s: "skipped" if i < done else "ran" for i, s in enumerate(STEPS)}


def expected_requests(point: str) -> list[tuple[str, int | None]]:
    """The owner's requests (method, token) under a slot's key, attempt 1's then 2's."""
    if point.startswith("after-intent:"):  # never sent: ask, then send with token 2
        return [("GET", None), ("POST", 2)]
    if point.startswith("after-call:"):  # sent and applied: ask, never resend
        return [("POST", 1), ("GET", None)]
    return [("POST", 2)]  # the effect came after the kill: attempt 2 sends it


def agent_configs(scenario: Scenario, *, name: str, nodes: list[str], worker_class: str,
                  owner_url: str) -> None:
    """Package, a workflow of ``nodes`` (of ``worker_class``) each bound to the example
    agent, and bindings publishing to the owner: revision 1 of ``name``."""
    scenario.config(kind="package", name=name, revision=1, text=yaml.safe_dump(
        {"outcome": "A sourced report on recovery", "sources": ["leases", "records", "effects"]}))
    scenario.config(kind="workflow", name=name, revision=1,
                    text=workflow(*((n, worker_class, []) for n in nodes)))
    scenario.config(kind="bindings", name=name, revision=1, text=yaml.safe_dump({
        "nodes": [{"node": n, "agent": {"name": "researcher", "revision": "1"}}
                  for n in nodes], "publish": {"url": owner_url}}))


def play(scenario: Scenario, *, node: LocalNode, image: str, owner: EffectOwner,
         slots: int, batch: int, points: tuple[str, ...] = POINTS,
         lease_seconds: int = LEASE_SECONDS) -> Play:
    """Play ``slots`` slots at each of ``points`` in runs of at most ``batch`` slots, in
    ``scenario``'s namespace (the operator serving it); check them (module docstring)."""
    result = Play()
    grant_worker_role(scenario)
    for index, point in enumerate(points):
        # a worker class per point: each point's pods from its own LaunchSpec
        worker_class = f"kill-{index}"
        agent_launch_spec(scenario, worker_class, classes=[worker_class], image=image,
                          pause=f"{point}@1", lease_seconds=lease_seconds)
        sizes = [min(batch, slots - start) for start in range(0, slots, batch)]
        for number, size in enumerate(sizes):
            run = f"p{index}-b{number}"
            played = batch_play(scenario, node=node, owner=owner, run=run, point=point,
                                worker_class=worker_class, size=size, result=result)
            result.slots[point] = result.slots.get(point, 0) + played
    return result


def batch_play(scenario: Scenario, *, node: LocalNode, owner: EffectOwner, run: str,
               point: str, worker_class: str, size: int, result: Play) -> int:
    """One run of ``size`` slots, each attempt 1 killed at ``point``; the slots checked."""
    nodes = [f"n{i:02d}" for i in range(size)]
    agent_configs(scenario, name=run, nodes=nodes, worker_class=worker_class,
                  owner_url=owner.url)
    scenario.run(run, config=run, max_attempts=2, initial_backoff=0)
    try:
        made: list[str] = wait_for(
            lambda: (found := scenario.slot_names(run)) and len(found) == size and found,
            timeout=SLOTS_BOUND, message=f"{size} slots of run {run}")
    except ConditionTimeout as error:
        result.violations.append(f"{run}: {error}")
        return 0
    for slot in made:
        try:
            kill_when_paused(scenario, node, f"{slot}-1", point=point, timeout=PAUSED_BOUND)
        except (ConditionTimeout, AssertionError) as error:
            result.violations.append(f"{slot}-1: not killed at {point}: {error}")
    killed = time.monotonic()
    try:
        wait_for(lambda: all(state(scenario.slot(s)).get("state") in ("Succeeded", "Failed")
                             for s in made), timeout=SETTLED_BOUND, interval=0.5,
                 message=f"every slot of {run} ended")
        result.settled.append(time.monotonic() - killed)
    except ConditionTimeout as error:
        result.violations.append(f"{run}: a slot stuck: {error}")
    uid = scenario.agentrun(run)["metadata"]["uid"]
    for slot in made:
        key = effects.idempotency_key(run_uid=uid, slot=slot, key=EFFECT)
        found = violations(scenario, owner=owner, slot=slot, point=point, key=key)
        result.violations += found
        result.applied += owner.applied.get(key) == 1
    return len(made)


def state(slot: Object) -> Object:
    found: Object = slot.get("status") or {}
    return found


def steps(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["key"]: e["status"] for e in events if e["event"] == "step"}


def violations(scenario: Scenario, *, owner: EffectOwner, slot: str, point: str,
               key: str) -> list[str]:
    """The invariants of one slot whose attempt 1 was killed at ``point`` (module
    docstring); ``key`` is the slot's idempotency key for the publication."""
    found: list[str] = []
    status = state(scenario.slot(slot))
    first, second = f"{slot}-1", f"{slot}-2"
    attempts = [(a.get("outcome"), a.get("exitCode")) for a in status.get("attempts", [])]
    if status.get("state") != "Succeeded" or attempts != [("Failed", 137), ("Succeeded", 0)]:
        found.append(f"{slot}: {status.get('state')} after attempts {attempts} (want "
                     f"Succeeded after [(Failed, 137), (Succeeded, 0)])")
    selector = f"agentrun.dev/slot={slot}"
    pods = sorted(p.metadata.name for p in scenario.core.list_namespaced_pod(
        scenario.namespace, label_selector=selector).items)
    leases = sorted(x.metadata.name for x in scenario.coordination.list_namespaced_lease(
        scenario.namespace, label_selector=selector).items)
    if pods != [first, second] or leases != [first, second]:
        found.append(f"{slot}: pods {pods}, leases {leases} (want one each per attempt)")
    events = agent_events(scenario, second)
    if steps(events) != expected_steps(point):
        found.append(f"{second}: steps {steps(events)} (want {expected_steps(point)})")
    mine: list[Request] = [r for r in owner.requests if r.key == key]
    asked = [(r.method, r.token) for r in mine]
    if asked != expected_requests(point):
        found.append(f"{slot}: the owner's requests {asked} under its key (want "
                     f"{expected_requests(point)})")
    if owner.applied.get(key) != 1:
        found.append(f"{slot}: key {key} applied {owner.applied.get(key, 0)} times (want 1)")
    sent = [e.get("idempotencyKey") for e in events if e["event"].startswith("effect")
            and e.get("idempotencyKey")]
    if any(k != key for k in sent):
        found.append(f"{second}: effect events under other keys {sorted(set(sent))}")
    if status.get("commands"):
        found.append(f"{slot}: ledger {status['commands']} (no command was sent)")
    return found
