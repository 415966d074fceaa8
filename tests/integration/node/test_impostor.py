"""An impostor pod on the real node: a namespace editor cannot hold a slot or forge records.

``alice``, an editor of the namespace (the standard ``edit`` role), deletes an
attempt's pod and creates an unlabelled pod of her own under the same name and
ServiceAccount, running the project's image: every second it renews the attempt's Lease
(the renewer's read and PUT) and tries to commit a record on it, with its own projected
token (bound to its pod, so its ``pod-name`` is the Lease's holder). The attempt's worker
was killed on the node first, so it could not release its Lease (a worker that exits, a
deleted pod's included, releases it, and an impostor then meets a sealed Lease): the
Lease is still live. The attempt's own pod renewed first, so the Lease is bound to that
pod's uid: each renewal and record is refused by ``agentrun-attempt-leases`` naming both
uids, the attempt ends Lost within a lease duration although the impostor is still
trying, and attempt 2 is claimed; the impostor's pod is not taken for the attempt's (it
is neither fenced nor waited for).
"""

from __future__ import annotations

import json

import pytest

from agentrun.api import names
from agentrun.core.policies.leasepolicy import ATTEMPT_LEASES
from agentrun.worker import _records as records
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    WORKER_ACCOUNT,
    container_pid,
    grant_worker_role,
    kill_on_node,
    printed,
    real_launch_spec,
    wait_pod_phase,
    wait_renewed,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]  # the shipped policies: cluster-wide
validating = operator_fixtures.validating
WORKER = "import time\nwhile True:\n    time.sleep(1)\n"  # kept alive by agentrun-worker run
IMPOSTOR = """
import json, os, time
from datetime import UTC, datetime
from agentrun import rest
from agentrun.worker import _records as records
from agentrun.worker import _renewals as renewals
from agentrun.worker._sdk import pod_api
api, lease = pod_api(), os.environ["LEASE"]
namespace = open("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read()
path = rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                       namespace=namespace, name=lease)
ledger = records.LeaseRecords(api=api, namespace=namespace, lease=lease, attempt=1)
forged = records.make(key="gather", kind=records.Kind.STEP_RESULT, attempt=1,
                      payload="forged by an impostor")
def renew():
    api.request("PUT", path, body=renewals.renewed(api.request("GET", path),
                                                   now=datetime.now(UTC)))
for _ in range(120):
    for what, write in (("renew", renew), ("record", lambda: ledger.commit(forged))):
        try:
            write()
            print(json.dumps({"write": what, "accepted": True}), flush=True)
        except (rest.ApiError, records.RecordRefused) as error:
            print(json.dumps({"write": what, "accepted": False, "error": str(error)}),
                  flush=True)
    time.sleep(1)  # its own write pace (a poll), inside the pod: no test waits on it
"""
# Long enough for the impostor's pod to start and write while the Lease is still live (its
# own pod's last renewal not yet expired): its writes then meet the binding, not a tombstone.
LEASE_SECONDS = 30
ENDED_WITHIN = LEASE_SECONDS + 30.0  # seconds after the impostor's first writes


def as_alice(scenario: Scenario, *args: str, input: str | None = None) -> str:
    result = scenario.cluster.kubectl("-n", scenario.namespace, *args, user="alice",
                                      input=input)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_an_impostor_pod_is_refused_and_the_slot_moves_on(
        scenario: Scenario, validating: None, operator: OperatorProcess,
        worker_image: str, node: LocalNode) -> None:
    scenario.grant_edit("alice")
    grant_worker_role(scenario)
    scenario.configs()
    real_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image,
                     script=WORKER, lease_seconds=LEASE_SECONDS)
    scenario.run("study", max_attempts=2)
    slot = scenario.slot_name_eventually("study", "research")
    first, second = f"{slot}-1", f"{slot}-2"
    running = wait_pod_phase(scenario, first, {"Running"})
    own = running["metadata"]["uid"]
    wait_renewed(scenario, first, times=1)
    assert (scenario.lease(first) or {})["metadata"]["annotations"][
        names.HOLDER_UID_ANNOTATION] == own
    kill_on_node(container_pid(node, running), pod_uid=own)  # no release: the Lease stays live
    wait_pod_phase(scenario, first, {"Failed"})
    assert names.RELEASED_ANNOTATION not in (scenario.lease(first) or {})["metadata"][
        "annotations"]

    as_alice(scenario, "delete", "pod", first, "--wait=true")
    created = json.loads(as_alice(scenario, "create", "-o", "json", "-f", "-",
                                  input=json.dumps({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": first},
        "spec": {"serviceAccountName": WORKER_ACCOUNT, "restartPolicy": "Never",
                 "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "mine", "image": worker_image,
                                 "imagePullPolicy": "Never",
                                 "command": ["python3", "-c", IMPOSTOR],
                                 "env": [{"name": "LEASE", "value": first}]}]}})))
    uid = created["metadata"]["uid"]
    assert uid != own and not created["metadata"].get("labels")

    def tried() -> list[dict[str, object]] | None:
        writes = [p for p in printed(scenario, first) if "write" in p]
        return writes[:2] if len(writes) >= 2 else None
    writes = wait_for(tried, timeout=90, message="the impostor renewed and recorded")
    assert [w["write"] for w in writes] == ["renew", "record"], writes
    for write in writes:  # while the Lease is live: refused by its binding
        assert write["accepted"] is False, write
        error = str(write["error"])
        assert ATTEMPT_LEASES in error, write
        assert f"bound to the pod of uid {own}" in error and uid in error, write
    assert str(writes[0]["error"]).startswith("422 Invalid"), writes[0]

    final = scenario.wait_slot(
        slot, lambda s: s.get("status", {}).get("activeWorker") == second,
        message="attempt 2 active", timeout=ENDED_WITHIN)["status"]
    assert final["attempts"][0]["outcome"] == "Lost", final["attempts"]
    assert scenario.pod(first) is not None  # the impostor was still there, trying

    def tombstone() -> dict[str, str] | None:
        found: dict[str, str] = (scenario.lease(first) or {}).get("metadata", {}).get(
            "annotations") or {}
        return found if names.OUTCOME_ANNOTATION in found else None
    annotations = wait_for(tombstone, timeout=30, message=f"Lease {first} tombstoned")
    assert annotations[names.POD_UID_ANNOTATION] == own  # the tombstone's: its own pod
    assert not any(k.startswith(records.PREFIX) for k in annotations)  # nothing forged
    later = [p for p in printed(scenario, first) if "write" in p]
    assert later and not any(p["accepted"] for p in later), later
    print(f"impostor {uid}: {len(later)} writes refused; attempt 1 Lost, attempt 2 "
          f"{final['activeWorker']}")
