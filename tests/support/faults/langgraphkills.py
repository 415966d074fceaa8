"""The fault scenario "the example LangGraph agent on real pods, SIGKILLed at ten seeded
supersteps and once after its owner applied the publish".

Played by ``make langgraph-kills`` (``bench/faults/langgraph_kills.py``) on real pods on
the local node, the operator pinning the cluster's bundled store (SeaweedFS) on the run.
One slot runs ``python3 -m agentrun.examples.langgraph_agent`` from the project's image:
a ``StateGraph`` of plan, a :data:`ROUNDS`-round tool loop and write (2 x ROUNDS + 3
supersteps, its state past 1 MiB), its stand-in model's words and tool arguments drawn
anew in every attempt; ``write`` publishes through the ledger to an owner built with the
kit (``agentrun.owner.EffectMiddleware`` on uvicorn at the node bridge's address). The
example's fault hook blocks attempt ``n`` (1..10) as a node of its seeded superstep
starts (``superstep:<s>@<n>``: every earlier superstep's checkpoint is committed, this
one's is not) and attempt 11 once the owner answered the publish (``after-call:publish``:
applied there, its outcome not committed); each is SIGKILLed from the node while blocked,
so a kill lands exactly where it is said to. The run allows :data:`ATTEMPTS` attempts.

What is checked (:func:`play`), each failure a line:
- every attempt blocked where planned; each successor's first superstep is the one its
  predecessor was killed in: nothing committed is lost, exactly one superstep repeated per
  kill (its node had started, its checkpoint was not committed);
- in the store's own listing, walked from every attempt's head on its Lease: every
  LangGraph entry and value record committed before a kill is there at the end with the
  same digest, and at the end every payload object a record names is listed and its
  bytes hash to the record's digest (committed bytes never change);
- the last attempt finished (``done``), the slot Succeeded; the owner's app published
  once; the successor asked the owner (a status query) instead of sending again; the
  report carries the owner's first reply, though the successor's model wrote other words.

Then, where approval is required (a second run, one round, its LaunchSpec's
``spec.approvals`` floor naming ``publish``): attempt 1 asks for approval of its words and
ends Asked; alice approves that digest with ``kubectl agentrun approve``; attempt 2's model
writes other words, so it is asked again at the same key under another digest, and the
owner got nothing from either (:func:`check_asked_again`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import time
from dataclasses import dataclass, field
from typing import Any

from agentrun.api import names
from agentrun.owner import EffectMiddleware, MemoryStore, Owner
from tests.support.actors.ownerapp import Counted, Publisher, serving
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import (
    agent_configs,
    agent_events,
    container_pid,
    grant_worker_role,
    kill_on_node,
    node_address,
    node_launch_spec,
    wait_pod_phase,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.faults import journalstore
from tests.support.faults.journalmatrix import heads, pod_name
from tests.support.faults.journalscale import wait_said
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

RUN, NODE, REVIEWED = "study", "research", "reviewed"
ROUNDS, KILLS = 110, 10
ATTEMPTS = KILLS + 2  # ten at supersteps, one after the owner applied, the last runs on
KILL_POINT_BOUND = 600.0  # an attempt at its pause: pod start, the prefix, its supersteps
FINISHED_BOUND = 900.0
ENDED_BOUND = 90.0
ENTRIES = "langgraph."  # the checkpointer's entries and value records in the journal


@dataclass
class Play:
    """One play: what went wrong (empty: nothing) and what it measured."""

    violations: list[str] = field(default_factory=list)
    targets: list[int] = field(default_factory=list)
    seconds: float = 0.0
    began: list[int] = field(default_factory=list)  # per attempt: its first superstep
    ended: list[int] = field(default_factory=list)  # per attempt: its last superstep
    entries: int = 0  # the checkpointer's records at the end
    owner: str = "-"
    approval: str = "-"


def kill_points(seed: int) -> list[int]:
    """:data:`KILLS` seeded supersteps of the loop, at least four apart."""
    draw = random.Random(seed)
    while True:
        found = sorted(draw.sample(range(3, 2 * ROUNDS), KILLS))
        if all(b - a >= 4 for a, b in itertools.pairwise(found)):
            return found


def pauses(targets: list[int]) -> str:
    """The example's ``AGENTRUN_EXAMPLE_PAUSE``: attempt ``n`` at ``targets[n-1]``, the
    next after the owner answered the publish."""
    return ",".join([*(f"superstep:{s}@{n}" for n, s in enumerate(targets, 1)),
                     f"after-call:publish@{len(targets) + 1}"])


def entries(scenario: Scenario, slot: str, prefix: str, attempts: int, *,
            violations: list[str] | None = None) -> dict[str, str]:
    """The checkpointer's records in the store, reached from the heads of attempts
    1..``attempts``: key -> digest. With ``violations``: each record's payload object
    read back too (listed, its bytes hashing to the record's digest), each failure a line."""
    store = journalstore.objects()
    reached = journalstore.audit(store, prefix=prefix, slot=slot,
                                 heads=heads(scenario, slot, attempts))
    found = {k: r for k, r in reached.records.items() if k.startswith(ENTRIES)}
    for key, record in found.items() if violations is not None else ():
        if record.ref is None:
            continue
        name = record.ref.removeprefix(f"s3://{store.bucket}/")
        data = store.get(name, limit=record.size + 1) if name in reached.listed else None
        if data is None or hashlib.sha256(data).hexdigest() != record.digest:
            violations.append(f"record {key}: its payload {name} is "
                              f"{'not listed' if data is None else 'not its digest'}")
    return {k: r.digest for k, r in found.items()}


def play(scenario: Scenario, *, node: LocalNode, image: str, seed: int) -> Play:
    """Play the scenario once in ``scenario``'s namespace (its operator pinning the
    bundled store); ``seed`` chooses the supersteps."""
    started = time.monotonic()
    result = Play(targets=kill_points(seed))
    print(f"langgraph-kills: seed {seed}; supersteps {result.targets}", flush=True)
    grant_worker_role(scenario)
    app = Publisher()
    counted = Counted(EffectMiddleware(app, owner=Owner(store=MemoryStore())))
    with serving(counted, host=node_address(scenario)) as url:
        agent_configs(scenario, owner_url=url.removesuffix("/effects"), name=RUN)
        node_launch_spec(scenario, "langgraph", classes=["cpu"], container={
            "name": "worker", "image": image, "imagePullPolicy": "Never",
            "command": ["python3", "-m", "agentrun.examples.langgraph_agent"],
            "env": [{"name": "AGENTRUN_EXAMPLE_ROUNDS", "value": str(ROUNDS)},
                    {"name": "AGENTRUN_EXAMPLE_PAUSE", "value": pauses(result.targets)}]})
        scenario.run(RUN, config=RUN, max_attempts=ATTEMPTS, initial_backoff=0)
        slot = scenario.slot_name_eventually(RUN, NODE)
        prefix = scenario.agentrun(RUN)["status"]["pinned"]["journal"]["prefix"]
        seen: dict[str, str] = {}
        ran: dict[int, list[int]] = {}  # per attempt, the supersteps it started
        try:
            for number in range(1, ATTEMPTS):
                ran[number] = kill(scenario, node=node, slot=slot, number=number,
                                   result=result)
                now = entries(scenario, slot, prefix, number)
                if number > 1 and len(now) <= len(seen):
                    result.violations.append(f"after kill {number}: {len(now)} checkpointer "
                                             f"records, no more than before ({len(seen)})")
                changed = sorted(k for k in seen.keys() & now.keys() if seen[k] != now[k])
                if changed:
                    result.violations.append(f"after kill {number}: records changed {changed}")
                seen |= now
            last = pod_name(slot, ATTEMPTS)
            ended = wait_pod_phase(scenario, last, {"Succeeded", "Failed"},
                                   timeout=FINISHED_BOUND)
            events = agent_events(scenario, last)
            if ended["status"]["phase"] != "Succeeded" or events[-1]["event"] != "done":
                result.violations.append(f"the last attempt ended {ended['status']['phase']}: "
                                         f"{events[-3:]}")
            scenario.wait_state(slot, "Succeeded", timeout=ENDED_BOUND)
            final = entries(scenario, slot, prefix, ATTEMPTS, violations=result.violations)
            result.entries = len(final)
            if len(final) < 2 * ROUNDS + 2:  # a put per superstep at least
                result.violations.append(f"{len(final)} checkpointer records in the store, "
                                         f"want {2 * ROUNDS + 2} or more")
            lost = sorted(k for k in seen if final.get(k) != seen[k])
            if lost:
                result.violations.append(f"committed records missing or changed at the end: "
                                         f"{lost[:5]} ({len(lost)})")
            ran[ATTEMPTS] = supersteps(scenario, last)
            check_supersteps(ran, result)
            check_owner(app, counted, events[-1], result)
            check_asked_again(scenario, image=image, app=app, result=result)
        except Exception as error:  # a wait that timed out, a line not as said, the store
            result.violations.append(f"{slot}: {type(error).__name__}: {error}")
        finally:
            result.seconds = time.monotonic() - started
    return result


def supersteps(scenario: Scenario, pod: str) -> list[int]:
    """The supersteps whose nodes ``pod`` started, from its log."""
    return [e["step"] for e in agent_events(scenario, pod) if e["event"] == "node"]


def gone_or_failed(scenario: Scenario, pod: str) -> bool:
    """The pod Failed, or is gone (the operator deletes a pod whose lease lapsed)."""
    found = scenario.pod(pod)
    return found is None or found.get("status", {}).get("phase") == "Failed"


def kill(scenario: Scenario, *, node: LocalNode, slot: str, number: int,
         result: Play) -> list[int]:
    """Attempt ``number`` blocked at its pause, SIGKILLed there, ended; the supersteps it
    started, read while it was blocked (once killed, its lease lapses and the operator may
    delete its pod, and its log with it, before the kubelet says it Failed)."""
    pod = pod_name(slot, number)
    line = wait_said(scenario, pod, "point", timeout=KILL_POINT_BOUND)
    want = (f"superstep:{result.targets[number - 1]}" if number <= KILLS
            else "after-call:publish")
    if line["point"] != want:
        result.violations.append(f"attempt {number}: blocked at {line['point']} (planned "
                                 f"{want})")
    started = supersteps(scenario, pod)
    found = scenario.pod(pod)
    assert found is not None, pod
    kill_on_node(container_pid(node, found), pod_uid=found["metadata"]["uid"])
    wait_for(lambda: gone_or_failed(scenario, pod), timeout=ENDED_BOUND,
             message=f"{pod} Failed or deleted")
    return started


def check_supersteps(ran: dict[int, list[int]], result: Play) -> None:
    """Each successor begins at the superstep its predecessor was killed in; each kill
    repeats exactly that one (``ran``: per attempt, the supersteps it started)."""
    result.began = [steps[0] if steps else -1 for steps in ran.values()]
    result.ended = [steps[-1] if steps else -1 for steps in ran.values()]
    for number in range(1, ATTEMPTS):
        killed_in, resumed_at = result.ended[number - 1], result.began[number]
        if resumed_at != killed_in:
            result.violations.append(f"attempt {number + 1} began at superstep {resumed_at}; "
                                     f"its predecessor was killed in {killed_in}")
        later = {s for n in range(number + 1, ATTEMPTS + 1) for s in ran[n]}
        repeated = sorted(set(ran[number]) & later)
        if repeated != [killed_in]:
            result.violations.append(f"attempt {number}: supersteps run again {repeated} "
                                     f"(want only {killed_in})")
    if max(result.ended) < 2 * ROUNDS + 2:
        result.violations.append(f"the graph ended at superstep {max(result.ended)}, want "
                                 f"{2 * ROUNDS + 2} or later")


def check_owner(app: Publisher, counted: Counted, done: dict[str, Any],
                result: Play) -> None:
    """Published once; the successor asked instead of sending again; the report carries
    the owner's first reply though the successor's model wrote other words."""
    posts = [r for r in counted.received if not r.query]
    queries = [r for r in counted.received if r.query]
    result.owner = (f"{len(app.calls)} published; {len(posts)} effect request(s) "
                    f"{[(r.token, r.status) for r in posts]}; {len(queries)} status "
                    f"queries {[r.status for r in queries]}")
    keys = {r.key for r in counted.received}
    if len(app.calls) != 1 or len(posts) != 1 or not queries or len(keys) != 1:
        result.violations.append(f"the owner: {result.owner}; keys {sorted(map(str, keys))}")
        return
    title = json.loads(app.calls[0])["title"]
    report = str(done.get("report", ""))
    if '"published": 1' not in report or report.startswith(title):
        result.violations.append(f"the report {report[:120]!r} is not the owner's first "
                                 f"reply under other words (first title {title!r})")


def check_asked_again(scenario: Scenario, *, image: str, app: Publisher, result: Play) -> None:
    """Where approval is required, the successor's other words are asked again (the
    module docstring); nothing reaches the owner's app meanwhile."""
    published = len(app.calls)
    scenario.grant_editor("alice")
    binding: Any = {
        "metadata": {"name": "alice-approver"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": "agentrun-approver"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": "alice"}]}
    scenario.rbac.create_namespaced_role_binding(scenario.namespace, binding)
    gone = scenario.cluster.kubectl("delete", "launchspec", "langgraph", "-n",
                                    scenario.namespace)
    assert gone.returncode == 0, gone.stderr
    node_launch_spec(scenario, "langgraph-approved", classes=["cpu"], container={
        "name": "worker", "image": image, "imagePullPolicy": "Never",
        "command": ["python3", "-m", "agentrun.examples.langgraph_agent"],
        "env": [{"name": "AGENTRUN_EXAMPLE_ROUNDS", "value": "1"}]},
        extra={"approvals": [{"effect": "publish", "approvers": 1}]})
    scenario.run(REVIEWED, config=RUN, max_attempts=2, initial_backoff=0)
    slot = scenario.slot_name_eventually(REVIEWED, NODE)
    key, first = asked(scenario, slot, 1)
    done = plugin(scenario.cluster, scenario, "approve", slot, "--key", key, "--digest",
                  first, "--reason", "read the words", "-o", "json", user="alice")
    entry = json.loads(done.stdout or "{}").get("entry") or {}
    if done.returncode != 0 or entry.get("outcome") != "Accepted":
        result.violations.append(f"alice's approval of {first[:12]}: {done.stdout[-300:]} "
                                 f"{done.stderr[-300:]}")
        return
    again, second = asked(scenario, slot, 2)
    result.approval = (f"asked {first[:12]} at {key}, approved by alice; attempt 2 asked "
                       f"{second[:12]} at {again}; {len(app.calls) - published} published")
    if (again, len(app.calls)) != (key, published) or second == first:
        result.violations.append(f"where approval is required: {result.approval} (want the "
                                 "same key, another digest, nothing more published)")


def asked(scenario: Scenario, slot: str, attempt: int) -> tuple[str, str]:
    """(key, digest) of the approval attempt ``attempt`` asked for, once it ended Asked
    (an AssertionError at once if it ended otherwise)."""
    def ended(found: dict[str, Any]) -> bool:
        attempts = found["status"].get("attempts") or []
        return len(attempts) >= attempt and attempts[attempt - 1].get("endedAt") is not None
    status = scenario.wait_slot(slot, ended, timeout=KILL_POINT_BOUND,
                                message=f"attempt {attempt} ended")["status"]
    outcome = status["attempts"][attempt - 1].get("outcome")
    pending = (condition_of(status, names.QUESTION_PENDING_CONDITION) or {}).get("status")
    assert (outcome, pending) == ("Asked", "True"), (
        f"attempt {attempt} ended {outcome} (QuestionPending {pending}), not Asked")
    mine = [q for q in status.get("questions") or [] if q["attempt"] == attempt]
    assert len(mine) == 1 and mine[0].get("approvers"), status.get("questions")
    return str(mine[0]["key"]), str(mine[0]["digest"])
