"""The example LangGraph agent on real pods, its journal in the cluster's own store.

The operator pins the bundled store on the run (``--journal-*``); each attempt is a real
pod running ``python3 -m agentrun.examples.langgraph_agent`` from the project's image
(it carries the ``langgraph`` extra), publishing through the ledger to an
``agentrun.owner`` app on uvicorn at the node bridge's address. Attempts 1 and 2 block
as a node of a seeded superstep starts (the example's fault hook,
``AGENTRUN_EXAMPLE_PAUSE=superstep:<s>@<n>``) and are SIGKILLed from the host there; the
run's retry starts the next. Each attempt's node events are read while it is blocked:
once killed, its lease lapses and the operator may delete its pod (fencing), and its log
with it. Shown: each successor starts at the superstep its predecessor was killed in
(nothing committed is lost, one superstep repeated); the last attempt finishes and the
owner applied the publish once.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from agentrun.owner import EffectMiddleware, MemoryStore, Owner
from tests.integration.node import test_journal
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.ownerapp import Publisher, serving
from tests.support.actors.workers import (
    agent_configs,
    agent_events,
    container_pid,
    grant_worker_role,
    kill_on_node,
    node_address,
    node_launch_spec,
    wait_pod_phase,
    wait_printed,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.faults.langgraphkills import gone_or_failed, supersteps
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
journaled, installed = test_journal.journaled, test_journal.installed
ROUNDS, SEED = 60, 26  # 123 supersteps


def test_the_langgraph_agent_on_pods_killed_twice_resumes_and_publishes_once(
        scenario: Scenario, journaled: OperatorProcess, worker_image: str, node: LocalNode,
        tmp_path: Path) -> None:
    grant_worker_role(scenario)
    app = Publisher()
    draw = random.Random(SEED)  # one kill early in the loop, one late
    targets = [draw.randrange(4, ROUNDS // 2), draw.randrange(ROUNDS, 3 * ROUNDS // 2)]
    pause = ",".join(f"superstep:{target}@{n}" for n, target in enumerate(targets, 1))
    ran: dict[int, list[int]] = {}
    with serving(EffectMiddleware(app, owner=Owner(store=MemoryStore())),
                 host=node_address(scenario)) as url:
        agent_configs(scenario, owner_url=url.removesuffix("/effects"))
        node_launch_spec(scenario, "cpu-workers", classes=["cpu"], container={
            "name": "worker", "image": worker_image, "imagePullPolicy": "Never",
            "command": ["python3", "-m", "agentrun.examples.langgraph_agent"],
            "env": [{"name": "AGENTRUN_EXAMPLE_ROUNDS", "value": str(ROUNDS)},
                    {"name": "AGENTRUN_EXAMPLE_PAUSE", "value": pause}]})
        scenario.run("study", max_attempts=3, initial_backoff=0)
        slot = scenario.slot_name_eventually("study", "research")
        for number, target in enumerate(targets, 1):
            pod = f"{slot}-{number}"
            paused = wait_printed(scenario, pod, "point", timeout=180)
            assert paused["point"] == f"superstep:{target}", paused
            ran[number] = supersteps(scenario, pod)  # blocked: all it will ever print
            running = scenario.pod(pod)
            assert running is not None
            kill_on_node(container_pid(node, running), pod_uid=running["metadata"]["uid"])
            wait_for(lambda pod=pod: gone_or_failed(scenario, pod), timeout=90,
                     message=f"{pod} Failed or deleted")
        last = f"{slot}-{len(targets) + 1}"
        finished = wait_pod_phase(scenario, last, {"Succeeded", "Failed"}, timeout=240)
        events = agent_events(scenario, last)
        assert finished["status"]["phase"] == "Succeeded", events[-5:]
    ran[len(targets) + 1] = supersteps(scenario, last)
    for number, target in enumerate(targets, 1):
        killed_in, resumed_at = ran[number][-1], ran[number + 1][0]
        assert killed_in == target and resumed_at == target, (number, ran[number][-3:],
                                                              ran[number + 1][:3])
    assert events[-1]["event"] == "done" and len(app.calls) == 1
    print(f"\nlanggraph agent on pods: killed at supersteps {targets}; attempts began at "
          f"{[ran[n][0] for n in ran]} and ended at {[ran[n][-1] for n in ran]}; "
          f"published {len(app.calls)} time(s)")
