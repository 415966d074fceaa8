"""The fault scenario "a journal of 2,000 steps, its worker SIGKILLed at every commit phase".

Played by ``make faults`` (``bench/faults/journal_matrix.py``) on real pods on the local
node, the operator pinning the cluster's bundled store (SeaweedFS) on the run. One slot
whose worker (``journalworker``: its sizes, payloads, kill plan and in-pod script)
commits :data:`~journalworker.STEPS` steps through ``worker.step``; each attempt but the
last stops at its planned step and phase and is SIGKILLed there from the node
(``workers.kill_on_node``): the three named points, after the node object and before the
head advance, after the head advance and before the step returns, and halfway through a
large payload's PUT body, and ``kills`` random (step, phase) points from the seed. The
run allows exactly kills + 1 attempts (backoff 0).

What is checked (:func:`play`), each failure a line:
- each attempt stopped where planned, and each successor skipped exactly the steps
  committed before its predecessor's kill (in order), repeating none: nothing committed
  is lost or redone, nothing uncommitted taken;
- every attempt's head on its Lease is at the number of steps it committed;
- the last attempt's 2,000 result digests (skipped ones read back from the store) are the
  ones known in advance; the slot Succeeded after kills x (Failed, 137) (its status
  keeps the latest ``ATTEMPTS_KEPT`` attempts: those are compared);
- in the store's own listing: every object a head reaches is there, every record a head
  reaches is the expected digest, and the orphans (listed, unreachable) are exactly what
  the kills left: the node (and payload) of each after-node kill; the mid-upload object
  is absent, or an unreachable orphan if the store kept a part of it.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import Any

from agentrun.api import bounds, slots
from agentrun.worker import _journal as journal
from tests.support.actors.workers import (
    audit_log,
    container_pid,
    grant_worker_role,
    kill_on_node,
    printed,
    real_launch_spec,
    wait_pod_phase,
    wait_printed,
    worker_user,
)
from tests.support.cluster.audit import writes
from tests.support.cluster.localnode import LocalNode
from tests.support.faults import journalstore
from tests.support.faults import journalworker as worker
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import ConditionTimeout

RUN, NODE = "matrix", "research"
# A 15 s lease (the SDK's keeper renews in the background while the main thread hashes
# and uploads 8 MiB payloads) and 120 s to start (a cold pod on 2 busy cores); the
# prefix is read after the first renewal, so neither bounds the successor's read of it.
LEASE_SECONDS = 15
START_DEADLINE_SECONDS = 120
KILL_POINT_BOUND = 600.0  # an attempt reaches its kill point: pod start, prefix, its steps
FINISHED_BOUND = 900.0  # the last attempt reads the prefix and commits the remaining steps
ENDED_BOUND = 60.0  # a killed pod Failed; the finished slot Succeeded


@dataclass
class Play:
    """One play: what went wrong (empty: nothing) and what it measured."""

    violations: list[str] = field(default_factory=list)
    kills: list[worker.Kill] = field(default_factory=list)
    distribution: str = ""
    attempts: int = 0
    seconds: float = 0.0
    objects: int = 0
    reachable: int = 0
    orphans: int = 0
    mid_upload: list[str] = field(default_factory=list)  # per mid-upload kill: its object
    resumes: list[str] = field(default_factory=list)  # per successor: prefix, caught up
    leases: str = "-"  # the workers' Lease writes: renewals, head advances, 409s, gaps


def pod_name(slot: str, attempt: int) -> str:
    return f"{slot}-{attempt}"


def play(scenario: Scenario, *, node: LocalNode, image: str, seed: int, kills: int) -> Play:
    """Play the scenario once in ``scenario``'s namespace (its operator pinning the
    bundled store); ``seed`` chooses the random points, ``kills`` how many."""
    started = time.monotonic()
    sizes = worker.sizes()
    plan = worker.plan(seed=seed, kills=kills, found=sizes)
    result = Play(kills=plan, distribution=worker.bands(sizes))
    print(f"journal-matrix: seed {seed}; {result.distribution}; plan "
          f"{[(k.attempt, k.step, k.phase) for k in plan]}", flush=True)
    grant_worker_role(scenario)
    scenario.configs(name=RUN, nodes=((NODE, "cpu", []),))
    real_launch_spec(scenario, "journal-matrix", classes=["cpu"], image=image,
                     script=worker.script(found=sizes, kills=plan), renewer=False,
                     lease_seconds=LEASE_SECONDS,
                     start_deadline_seconds=START_DEADLINE_SECONDS)
    scenario.run(RUN, config=RUN, max_attempts=len(plan) + 1, initial_backoff=0)
    slot = scenario.slot_name_eventually(RUN, NODE)
    try:
        for kill in plan:
            stop(scenario, node, slot, kill, plan, result)
        finish(scenario, slot, plan, sizes, result)
    except (ConditionTimeout, AssertionError) as error:
        result.violations.append(f"{slot}: {error}")
        return result
    check_store(scenario, slot, plan, sizes, result)
    result.leases = lease_writes(scenario, slot, len(plan) + 1,
                                 violations=result.violations)
    result.seconds = time.monotonic() - started
    return result


def expected_done(plan: list[worker.Kill], attempt: int) -> int:
    """Steps attempt ``attempt`` must skip: those committed before its predecessor's kill."""
    return plan[attempt - 2].committed() if attempt > 1 else 0


def resumed(line: dict[str, Any], plan: list[worker.Kill], attempt: int,
            result: Play) -> None:
    """Check what an attempt said it skipped and repeated; note its resume times."""
    want = expected_done(plan, attempt)
    if line.get("done") != want or line.get("done_in_order") is not True \
            or line.get("repeated") != []:
        result.violations.append(
            f"attempt {attempt}: skipped {line.get('done')} steps (in order: "
            f"{line.get('done_in_order')}), repeated {line.get('repeated')}; want the "
            f"{want} committed before, in order, none repeated")
    if attempt > 1:
        caught = line.get("caught_up_s")
        result.resumes.append(f"#{attempt} prefix {line.get('prefix_s') or 0:.2f} s, "
                              f"caught up {caught or 0:.2f} s ({want} skipped)")


def stop(scenario: Scenario, node: LocalNode, slot: str, kill: worker.Kill,
         plan: list[worker.Kill], result: Play) -> None:
    """Wait for ``kill``'s attempt at its point, check it, SIGKILL it from the node."""
    pod = pod_name(slot, kill.attempt)
    line = wait_printed(scenario, pod, "kill_point", timeout=KILL_POINT_BOUND)
    if (line["kill_point"], line["step"]) != (kill.phase, kill.step):
        result.violations.append(f"{pod}: stopped at {line['kill_point']} of step "
                                 f"{line['step']} (planned {kill.phase} of {kill.step})")
    resumed(line, plan, kill.attempt, result)
    found = scenario.pod(pod)
    assert found is not None, pod
    kill_on_node(container_pid(node, found), pod_uid=found["metadata"]["uid"])
    wait_pod_phase(scenario, pod, {"Failed"}, timeout=ENDED_BOUND)
    result.attempts += 1


def finish(scenario: Scenario, slot: str, plan: list[worker.Kill], sizes: list[int],
           result: Play) -> None:
    """The last attempt: what it skipped, its digests, the slot's outcome."""
    last = len(plan) + 1
    pod = pod_name(slot, last)
    line = wait_printed(scenario, pod, "finished", timeout=FINISHED_BOUND)
    resumed(line, plan, last, result)
    result.attempts += 1
    digests: dict[str, str] = {}
    for said in printed(scenario, pod):
        digests |= said.get("digests", {})
    wrong = [i for i in range(worker.STEPS)
             if digests.get(str(i)) != worker.expected_digest(i, sizes[i])]
    if wrong:
        result.violations.append(f"{pod}: {len(wrong)} results not the expected digest "
                                 f"(steps {wrong[:10]}...)")
    slot_object = scenario.wait_state(slot, "Succeeded", timeout=ENDED_BOUND)
    attempts = [(a.get("number"), a.get("outcome"), a.get("exitCode"))
                for a in slot_object["status"].get("attempts", [])]
    want = [(k.attempt, "Failed", 137) for k in plan] + [(len(plan) + 1, "Succeeded", 0)]
    want = want[-slots.ATTEMPTS_KEPT:]  # the slot's status keeps the latest ones only
    if attempts != want:
        result.violations.append(f"{slot}: attempts {attempts} (want {want})")


def heads(scenario: Scenario, slot: str, attempts: int) -> dict[int, journal.Head | None]:
    found: dict[int, journal.Head | None] = {}
    for attempt in range(1, attempts + 1):
        lease = scenario.lease(pod_name(slot, attempt))
        assert lease is not None, f"lease {pod_name(slot, attempt)}"
        found[attempt] = journal.Head.on_lease(lease)
    return found


def check_store(scenario: Scenario, slot: str, plan: list[worker.Kill], sizes: list[int],
                result: Play) -> None:
    """Heads, reachable records and orphans against the kills (module docstring)."""
    prefix = scenario.agentrun(RUN)["status"]["pinned"]["journal"]["prefix"]
    found = heads(scenario, slot, len(plan) + 1)
    bounds_of = [0] + [k.committed() for k in plan] + [worker.STEPS]
    for attempt, head in found.items():
        want = bounds_of[attempt] - bounds_of[attempt - 1]
        if (head.seq if head else 0) != want:
            result.violations.append(f"attempt {attempt}: head {head} (want {want} commits)")
    store = journalstore.objects()
    audit = journalstore.audit(store, prefix=prefix, slot=slot, heads=found)
    result.objects, result.reachable = len(audit.listed), len(audit.reachable)
    result.orphans = len(audit.orphans)
    if audit.missing:
        result.violations.append(f"{len(audit.missing)} objects a head reaches are not in "
                                 f"the store: {sorted(audit.missing)[:3]}")
    keys = [worker.key(i) for i in range(worker.STEPS)]
    wrong = [k for i, k in enumerate(keys) if k not in audit.records
             or audit.records[k].digest != worker.expected_digest(i, sizes[i])]
    if wrong or len(audit.records) != worker.STEPS:
        result.violations.append(f"the heads reach {len(audit.records)} records; "
                                 f"{len(wrong)} steps missing or not their digest")

    def payload_name(kill: worker.Kill) -> str:
        digest = worker.expected_digest(kill.step, sizes[kill.step])
        return f"{prefix}/{slot}/{kill.attempt}/sha256/{digest}"

    expected: set[str] = set()  # orphans the kills left whose names are known
    unnamed = 0  # after-node kills' nodes (their names are the worker's to know)
    for kill in plan:
        has_payload = sizes[kill.step] > bounds.INLINE_PAYLOAD_BYTES
        if kill.phase == worker.AFTER_NODE:
            unnamed += 1
            expected |= {payload_name(kill)} if has_payload else set()
        elif kill.phase == worker.MID_UPLOAD:
            name = payload_name(kill)
            if name in audit.listed:  # a store keeping a part of a cut PUT: unreachable
                kept = len(store.get(name, limit=sizes[kill.step]))
                result.mid_upload.append(f"{kept} of {sizes[kill.step]} B kept, unreachable")
                expected.add(name)
            else:
                result.mid_upload.append(f"absent ({sizes[kill.step]} B put cut halfway)")
    stray = {o for o in audit.orphans - expected
             if journalstore.attempt_of(o, prefix=prefix, slot=slot)
             not in {k.attempt for k in plan if k.phase == worker.AFTER_NODE}}
    if not expected <= audit.orphans or len(audit.orphans) != len(expected) + unnamed \
            or stray or audit.orphans & audit.reachable:
        result.violations.append(
            f"orphans {len(audit.orphans)} (want {len(expected)} payloads and {unnamed} "
            f"nodes of after-node kills); not orphaned: {sorted(expected - audit.orphans)}; "
            f"stray: {sorted(stray)[:3]}")


def lease_writes(scenario: Scenario, slot: str, attempts: int, *,
                 violations: list[str]) -> str:
    """From the audit log, said in a line: the workers' renewals (updates) and head
    advances (patches) of their Leases, how many met a 409 (the other writer in between),
    and the longest gap between an attempt's successful renewals. Both writers guard on
    the resourceVersion, so every commit can make a renewal in flight fail: a gap of a
    whole lease would let the operator fence a live worker, a fault of the SDK, not of
    this scenario."""
    mine = [w for w in writes(audit_log(scenario), namespace=scenario.namespace,
                              user=worker_user(scenario.namespace)) if w.resource == "leases"]
    count: dict[tuple[str, int], int] = {}
    longest, at = 0.0, 0
    for attempt in range(1, attempts + 1):
        own = [w for w in mine if w.name == pod_name(slot, attempt)]
        for w in own:
            count[(w.verb, w.code)] = count.get((w.verb, w.code), 0) + 1
        renewed = [w.at for w in own if w.verb == "update" and w.code == 200]
        gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(renewed)]
        if gaps and max(gaps) > longest:
            longest, at = max(gaps), attempt
    said = (f"renewals {count.get(('update', 200), 0)} ok, "
            f"{count.get(('update', 409), 0)} 409; head advances "
            f"{count.get(('patch', 200), 0)} ok, {count.get(('patch', 409), 0)} 409; "
            f"longest gap between renewals {longest:.1f} s (attempt {at}; lease "
            f"{LEASE_SECONDS} s)")
    if longest >= LEASE_SECONDS:
        violations.append(f"attempt {at}: {longest:.1f} s between renewals, a whole "
                          f"{LEASE_SECONDS} s lease: its worker could be fenced alive")
    return said
