"""One real worker pod using the SDK: its context as the operator made it, and its keeper.

The pod runs ``python3 -c <script>`` (no ``agentrun-worker run``: the SDK's keeper is the
only renewer), which calls ``Worker.from_env()``: the environment and mounted snapshots
of a pod the operator built, digests verified; then renews through the pod's own
in-cluster configuration, and prints what it read. Covers: the context's values are the
slot's and attempt's; the texts are the run's pinned snapshots byte for byte, with their
pinned digests; the keeper's renewals are the pod's service account's, with its bound
token, until the operator's tombstone.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    LEASE_SECONDS,
    START_DEADLINE_SECONDS,
    WORKER_ACCOUNT,
    grant_worker_role,
    renewed_by_its_pod_then_tombstoned,
    wait_pod_phase,
)
from tests.support.cluster.localcluster import NODE_NAME
from tests.support.plays.scenarios import GROUP, VERSION, Scenario

pytestmark = pytest.mark.kubelet
# The SDK worker: reads its context, keeps its lease for a few renewals, prints, exits 0.
SDK_WORKER = """
import json, time
from agentrun.worker._sdk import Worker
with Worker.from_env() as worker:
    c = worker.context
    deadline = time.monotonic() + 6
    while time.monotonic() < deadline:  # the worker's work, effects guarded
        worker.keeper.ensure_live()
        time.sleep(0.5)  # in the pod: the worker's supervision of its lease while it works
    print(json.dumps({"run": c.run, "slot": c.slot, "node": c.node, "attempt": c.attempt,
                      "token": c.fencing_token, "lease": c.lease,
                      "config": {k: p.text for k, p in c.pinned.items()},
                      "sha256": {k: p.sha256 for k, p in c.pinned.items()}}), flush=True)
"""


def test_an_sdk_worker_reads_its_context_and_keeps_its_lease(
        scenario: Scenario, operator: OperatorProcess, worker_image: str) -> None:
    grant_worker_role(scenario)
    scenario.configs()
    container = {"name": "worker", "image": worker_image, "imagePullPolicy": "Never",
                 "command": ["python3", "-c", SDK_WORKER]}
    body: Any = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LaunchSpec",
                 "metadata": {"name": "sdk-workers"},
                 "spec": {"claim": {"workerClasses": ["cpu"]},
                          "lease": {"durationSeconds": LEASE_SECONDS},
                          "startDeadlineSeconds": START_DEADLINE_SECONDS,
                          "template": {"spec": {"restartPolicy": "Never",
                                                "serviceAccountName": WORKER_ACCOUNT,
                                                "terminationGracePeriodSeconds": 2,
                                                "containers": [container]}}}}
    scenario.custom.create_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", body)
    scenario.run("study", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    first = f"{slot}-1"
    pod = wait_pod_phase(scenario, first, {"Succeeded", "Failed"})
    logs = scenario.cluster.kubectl("logs", "-n", scenario.namespace, first)
    assert pod["status"]["phase"] == "Succeeded", logs.stdout + logs.stderr
    assert pod["spec"]["nodeName"] == NODE_NAME
    printed = json.loads(next(line for line in logs.stdout.splitlines() if line.startswith("{")))
    pins = scenario.agentrun("study")["status"]["pinned"]
    snapshots = {kind: (scenario.core.read_namespaced_config_map(
        pin["snapshot"], scenario.namespace).data or {})[f"{kind}.yaml"]
        for kind, pin in pins.items()}
    assert printed == {"run": "study", "slot": slot, "node": "research", "attempt": 1,
                       "token": 1, "lease": first, "config": snapshots,
                       "sha256": {kind: pin["sha256"] for kind, pin in pins.items()}}

    scenario.wait_state(slot, "Succeeded", timeout=60)
    renewed_by_its_pod_then_tombstoned(scenario, first, at_least=3)  # 6 s, one every 1.7 s
