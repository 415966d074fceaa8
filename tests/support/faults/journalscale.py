"""The fault scenario "an agent-scale journal: 20,000 group-committed steps and a 2 GiB
artifact, its worker SIGKILLed inside a commit window and mid multipart upload".

Played by ``make journal-scale`` (``bench/faults/journal_scale.py``) on real pods on the
local node, the operator pinning the cluster's bundled store (SeaweedFS) on the run. One
slot whose worker (``scaleworker``: sizes, payloads, artifact, kill plan, in-pod script)
commits :data:`~scaleworker.STEPS` steps with the SDK's default group commit and streams
one artifact between them; attempts 1-3 stop where the seeded plan says and are
SIGKILLed from the node (``workers.kill_on_node``): in a group-commit window before the
artifact, halfway through one of the artifact's parts, in a window after it. The run
allows exactly four attempts (backoff 0).

What is checked (:func:`play`), each failure a line:
- each attempt stopped where planned; an in-window one with at least its window's steps
  staged and not durable;
- each successor skipped exactly what its predecessors' heads reach, in commit order (a
  prefix of the order the pod commits in), repeating none; after an in-window kill that
  prefix ends before the window (the staged steps were lost, and done again): nothing
  durable is lost or redone, nothing not durable taken;
- the last attempt's 20,000 results (skipped ones read back from the store) are the ones
  known in advance, and so is the artifact it streams back whole (2 GiB, its digest and
  the record's); the slot Succeeded after three (Failed, 137);
- in the store's own listing: every object a head reaches is there, every record a head
  reaches is the expected digest, every orphan is of a killed attempt; the one incomplete
  multipart upload left is the cut attempt's artifact, and it is aborted;
- RSS: every attempt that streamed the artifact (up, down, or cut midway) kept its RSS
  high-water mark within :data:`RSS_GOAL` of the one it had right after holding a 10 MiB
  result (:func:`check_rss`);
- no worker went a whole lease between renewals (the audit log).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from agentrun import objectstore as s3
from agentrun.api import slots
from tests.support.actors.workers import (
    container_pid,
    grant_worker_role,
    kill_on_node,
    printed,
    real_launch_spec,
    wait_pod_phase,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.faults import journalstore
from tests.support.faults import scaleworker as worker
from tests.support.faults.journalmatrix import LEASE_SECONDS, heads, lease_writes, pod_name
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

RUN, NODE = "scale", "agent"
START_DEADLINE_SECONDS = 120
KILL_POINT_BOUND = 1200.0  # an attempt at its kill point: pod start, prefix, steps, upload
FINISHED_BOUND = 1800.0  # the last attempt: the prefix, the rest, the artifact read back
ENDED_BOUND = 60.0
RSS_GOAL = 64 * worker.MIB
ATTEMPTS = 4


@dataclass
class Play:
    """One play: what went wrong (empty: nothing) and what it measured."""

    violations: list[str] = field(default_factory=list)
    kills: list[worker.Kill] = field(default_factory=list)
    distribution: str = ""
    seconds: float = 0.0
    said: list[str] = field(default_factory=list)  # per attempt: where it stopped, resumed
    rss: list[str] = field(default_factory=list)  # per attempt that streamed the artifact
    artifact: list[str] = field(default_factory=list)  # per upload or read: its time
    store: str = "-"
    leases: str = "-"


def position(step: int) -> int:
    """Step ``step``'s place in the commit order (the artifact comes before its step)."""
    return step + (step >= worker.ARTIFACT_AT)


def play(scenario: Scenario, *, node: LocalNode, image: str, seed: int) -> Play:
    """Play the scenario once in ``scenario``'s namespace (its operator pinning the
    bundled store); ``seed`` chooses the kill points."""
    started = time.monotonic()
    sizes = worker.sizes()
    plan = worker.plan(seed=seed)
    result = Play(kills=plan, distribution=worker.bands(sizes))
    print(f"journal-scale: seed {seed}; {result.distribution}; plan {plan}", flush=True)
    grant_worker_role(scenario)
    scenario.configs(name=RUN, nodes=((NODE, "cpu", []),))
    real_launch_spec(scenario, "journal-scale", classes=["cpu"], image=image,
                     script=worker.script(kills=plan), renewer=False,
                     lease_seconds=LEASE_SECONDS,
                     start_deadline_seconds=START_DEADLINE_SECONDS)
    scenario.run(RUN, config=RUN, max_attempts=ATTEMPTS, initial_backoff=0)
    slot = scenario.slot_name_eventually(RUN, NODE)
    prefix = scenario.agentrun(RUN)["status"]["pinned"]["journal"]["prefix"]
    try:
        for kill in plan:
            line = wait_said(scenario, pod_name(slot, kill.attempt), "kill_point",
                             timeout=KILL_POINT_BOUND)
            check_stop(kill, line, result)
            resumed(scenario, slot, prefix, kill.attempt, line, plan, result)
            found = scenario.pod(pod_name(slot, kill.attempt))
            assert found is not None, kill
            kill_on_node(container_pid(node, found), pod_uid=found["metadata"]["uid"])
            wait_pod_phase(scenario, pod_name(slot, kill.attempt), {"Failed"},
                           timeout=ENDED_BOUND)
        finish(scenario, slot, prefix, plan, sizes, result)
        check_store(scenario, slot, prefix, plan, sizes, result)
        result.leases = lease_writes(scenario, slot, ATTEMPTS, violations=result.violations)
    except Exception as error:  # a wait that timed out, a line not as said, the store
        result.violations.append(f"{slot}: {type(error).__name__}: {error}")
        return result
    result.seconds = time.monotonic() - started
    return result


def wait_said(scenario: Scenario, pod: str, field: str, *, timeout: float) -> dict[str, Any]:
    """The first JSON object with ``field`` that ``pod`` printed, once it has; an
    AssertionError as soon as the pod ended without (a broken script fails the play at
    once, not after the bound)."""
    def check() -> dict[str, Any] | None:
        found = next((p for p in printed(scenario, pod) if field in p), None)
        phase = (scenario.pod(pod) or {}).get("status", {}).get("phase")
        return found or ({"ended": phase} if phase in ("Failed", "Succeeded") else None)
    line: dict[str, Any] = wait_for(check, timeout=timeout,
                                    message=f"pod {pod} printed {field!r}")
    if "ended" in line:  # it may have printed just before it ended
        line = next((p for p in printed(scenario, pod) if field in p), line)
    if "ended" in line:
        tail = scenario.cluster.kubectl("logs", "-n", scenario.namespace, pod).stdout[-800:]
        raise AssertionError(f"pod {pod} {line['ended']} before printing {field!r}: {tail}")
    return line


def check_stop(kill: worker.Kill, line: dict[str, Any], result: Play) -> None:
    """The attempt stopped at its planned point; in a window, with the window staged."""
    where = (line["kill_point"], line.get("step", line.get("part")))
    if where != (kill.phase, kill.at):
        result.violations.append(f"attempt {kill.attempt}: stopped at {where} (planned "
                                 f"{(kill.phase, kill.at)})")
    if kill.phase == worker.MID_UPLOAD and line.get("body") != s3.PART_BYTES:
        result.violations.append(f"attempt {kill.attempt}: cut a part of {line.get('body')} "
                                 f"B (want a whole {s3.PART_BYTES} B part)")
    if kill.phase == worker.IN_WINDOW and line.get("staged", 0) < kill.window + 1:
        result.violations.append(f"attempt {kill.attempt}: {line.get('staged')} staged at "
                                 f"its kill, want at least its window's {kill.window + 1}")
    result.said.append(f"#{kill.attempt} killed {kill.phase} at {kill.at} "
                       f"({line.get('staged')} staged)")


def resumed(scenario: Scenario, slot: str, prefix: str, attempt: int, line: dict[str, Any],
            plan: list[worker.Kill], result: Play) -> None:
    """What attempt ``attempt`` said it skipped against what its predecessors' heads reach
    in the store; its RSS against the goal."""
    if line.get("sizes") != worker.sizes_digest(worker.sizes()):
        result.violations.append(f"attempt {attempt}: its sizes are not the checker's")
    cut = attempt <= len(plan) and plan[attempt - 1].phase == worker.MID_UPLOAD
    check_rss(attempt, line.get("rss") or {}, cut=cut, result=result)
    if attempt == 1:
        return
    reached = journalstore.audit(journalstore.objects(), prefix=prefix, slot=slot,
                                 heads=heads(scenario, slot, attempt - 1))
    want = len(reached.records)
    order = worker.order()
    if set(reached.records) != set(order[:want]):
        result.violations.append(f"attempt {attempt}: its predecessors' heads reach "
                                 f"{want} records, not the first {want} in commit order")
    if line.get("done") != want or line.get("done_in_order") is not True \
            or line.get("repeated") != []:
        result.violations.append(
            f"attempt {attempt}: skipped {line.get('done')} (in order: "
            f"{line.get('done_in_order')}), repeated {line.get('repeated')}; want the {want} "
            f"its predecessors' heads reach, none repeated")
    before = plan[attempt - 2]
    if before.phase == worker.IN_WINDOW and want > position(before.at - before.window):
        result.violations.append(f"attempt {attempt}: {want} durable before it, past the "
                                 f"window held from step {before.at - before.window}")
    result.said.append(f"#{attempt} skipped {want} (prefix read {line.get('prefix_s', 0):.2f}"
                       f" s)")


def check_rss(attempt: int, rss: dict[str, int], *, cut: bool, result: Play) -> None:
    """The process's RSS high-water mark after streaming (``artifact``: up, or skipped;
    ``artifact_read``: down; ``at_kill`` when ``cut`` midway) within :data:`RSS_GOAL` of
    its high-water mark right after holding a 10 MiB result. High-water marks both: the
    baseline also holds whatever came before (the prefix read), so this bounds the peak
    while streaming, not the growth of the RSS at the time."""
    base = rss.get("with_10mib")
    kinds = ("artifact", "artifact_read", *(("at_kill",) if cut else ()))
    streamed = [rss[k] for k in kinds if k in rss]
    if base is None or not streamed:
        return
    grown = max(streamed) - base
    result.rss.append(f"#{attempt} {base / worker.MIB:.0f} MiB with 10 MiB, "
                      f"{max(streamed) / worker.MIB:.0f} MiB streaming (+{grown / worker.MIB:.0f})")
    if grown > RSS_GOAL:
        result.violations.append(f"attempt {attempt}: RSS grew {grown} B streaming the "
                                 f"artifact (goal {RSS_GOAL})")


def finish(scenario: Scenario, slot: str, prefix: str, plan: list[worker.Kill],
           sizes: list[int], result: Play) -> None:
    """The last attempt: what it skipped, its results and the artifact read back, the
    artifact's uploads, the slot's outcome."""
    pod = pod_name(slot, ATTEMPTS)
    line = wait_said(scenario, pod, "finished", timeout=FINISHED_BOUND)
    resumed(scenario, slot, prefix, ATTEMPTS, line, plan, result)
    chains = worker.expected_chains(sizes)
    wrong = sorted(k for k, v in chains.items() if (line.get("chains") or {}).get(k) != v)
    if wrong:
        result.violations.append(f"{pod}: the results of steps {wrong} (thousands) are not "
                                 "the ones expected")
    expected = worker.expected_artifact()
    if (line.get("read_sha256"), line.get("read_bytes")) != (expected, worker.ARTIFACT_BYTES):
        result.violations.append(f"{pod}: read the artifact back as {line.get('read_bytes')} "
                                 f"B, sha256 {line.get('read_sha256')} (want {expected})")
    read = worker.ARTIFACT_BYTES / worker.MIB / max(line.get("read_seconds", 0), 1e-3)
    result.artifact.append(f"#{ATTEMPTS} read back {line.get('read_seconds', 0):.0f} s "
                           f"({read:.0f} MiB/s)")
    for attempt in range(2, ATTEMPTS + 1):
        for said in [p for p in printed(scenario, pod_name(slot, attempt))
                     if "artifact" in p]:
            if said["artifact"] != expected or said["size"] != worker.ARTIFACT_BYTES:
                result.violations.append(f"attempt {attempt}: artifact {said} (want "
                                         f"{expected})")
            how = "skipped" if said["skipped"] else "uploaded"
            result.artifact.append(f"#{attempt} {how} {said['seconds']:.1f} s")
    slot_object = scenario.wait_state(slot, "Succeeded", timeout=ENDED_BOUND)
    attempts = [(a.get("number"), a.get("outcome"), a.get("exitCode"))
                for a in slot_object["status"].get("attempts", [])]
    want = [(k.attempt, "Failed", 137) for k in plan] + [(ATTEMPTS, "Succeeded", 0)]
    if attempts != want[-slots.ATTEMPTS_KEPT:]:
        result.violations.append(f"{slot}: attempts {attempts} (want {want})")


def check_store(scenario: Scenario, slot: str, prefix: str, plan: list[worker.Kill],
                sizes: list[int], result: Play) -> None:
    """Heads, reachable records and orphans; the cut upload left, then aborted."""
    store = journalstore.objects()
    audit = journalstore.audit(store, prefix=prefix, slot=slot,
                               heads=heads(scenario, slot, ATTEMPTS))
    if audit.missing:
        result.violations.append(f"{len(audit.missing)} objects a head reaches are not in "
                                 f"the store: {sorted(audit.missing)[:3]}")
    wrong = [k for i, k in enumerate(worker.key(i) for i in range(worker.STEPS))
             if k not in audit.records
             or audit.records[k].digest != worker.expected_digest(i, sizes[i])]
    made = audit.records.get(worker.ARTIFACT_KEY)
    if wrong or made is None or made.size != worker.ARTIFACT_BYTES \
            or made.digest != worker.expected_artifact():
        result.violations.append(f"the heads reach {len(audit.records)} records; {len(wrong)} "
                                 f"steps missing or not their digest; the artifact: {made}")
    stray = [o for o in audit.orphans
             if journalstore.attempt_of(o, prefix=prefix, slot=slot) == ATTEMPTS]
    if stray:
        result.violations.append(f"orphans of the attempt that finished: {stray[:3]}")
    cut = [f"{prefix}/{slot}/{k.attempt}/artifact/{worker.ARTIFACT_KEY}" for k in plan
           if k.phase == worker.MID_UPLOAD]
    left = sorted(key for key, _ in store.uploads(f"{prefix}/{slot}/"))
    if left != cut:
        result.violations.append(f"incomplete multipart uploads left: {left} (want the cut "
                                 f"one: {cut})")
    aborted = store.abort_uploads(f"{prefix}/{slot}/")
    result.store = (f"{len(audit.listed)} objects, {len(audit.reachable)} reachable, "
                    f"{len(audit.orphans)} orphans (all of killed attempts); "
                    f"{aborted} incomplete upload left, aborted")
