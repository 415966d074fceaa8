"""``make demo``'s script against the suite's cluster: the trace plays, nothing stays.

The demo (``python -m demo.recovery --kubeconfig``) runs as a person runs it, a subprocess; it
publishes to this test's effect owner (``--owner-url``), so "published once" is read at
the owner, not from the demo's words. What the demo's objects went through is read from
the API while it runs (watches of the demo namespace's AgentRuns and Leases from before
it starts: the demo deletes that namespace at its end, so no later read could see them);
the run's journal, deleted with it, is read from the store to be gone.

The suite's session applied the operator's RBAC, local binding and stamping policy with
kubectl (``installed``); the demo's chart takes them over and its uninstall removes them,
so this test applies them again afterwards, for the tests after it.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import kubernetes
import pytest

from agentrun.api import names, records
from agentrun.worker import _effects as effects
from agentrun.worker import _journal as journals
from demo import stage
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import install_for_tests
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.helm import NAMESPACE as SYSTEM_NAMESPACE
from tests.support.cluster.helm import RELEASE, SELECTOR, helm_binary
from tests.support.plays.scenarios import GROUP, VERSION, condition

# serial: the demo installs the operator with its chart (CRDs, cluster roles, admission
# policies: cluster-wide) and uses the examples' fixed namespace, agentrun-demo.
pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
REPO = Path(__file__).resolve().parents[3]
DEMO = "demo.recovery"  # run by name from the repository root
NAMESPACE = "agentrun-demo"
DEMO_TIMEOUT = 420


class Watched:
    """Every version of one kind's objects in the demo namespace, from a LIST onwards."""

    def __init__(self, api: kubernetes.client.ApiClient, *, kind: str) -> None:
        self.api = api
        if kind == "Lease":
            self.list: Any = kubernetes.client.CoordinationV1Api(api).list_namespaced_lease
        else:
            custom = kubernetes.client.CustomObjectsApi(api)
            self.list = lambda namespace, **kw: custom.list_namespaced_custom_object(
                GROUP, VERSION, namespace, "agentruns", **kw)
        listed = self.list(NAMESPACE)
        meta = listed["metadata"] if isinstance(listed, dict) else listed.metadata.to_dict()
        self.version: str = meta["resource_version" if "resource_version" in meta
                                 else "resourceVersion"]
        self.seen: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in kubernetes.watch.Watch().stream(
                        self.list, NAMESPACE, resource_version=self.version,
                        timeout_seconds=5, allow_watch_bookmarks=True):
                    obj = event["object"]
                    body = obj if isinstance(obj, dict) else \
                        self.api.sanitize_for_serialization(obj)
                    self.version = body["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                        self.seen.append(body)
            except Exception as error:  # kept, and asserted empty at the end
                self.errors.append(error)
                return

    def stop(self) -> list[dict[str, Any]]:
        self._stop.set()
        self._thread.join(timeout=15)
        assert self.errors == [], self.errors
        return self.seen


def test_the_demo_plays_the_trace_publishes_once_and_leaves_nothing(
        cluster: Cluster, worker_image: str, installed: None) -> None:
    assert cluster.local is not None and cluster.local.node_ip
    api = cluster.client()
    owner = EffectOwner(host=cluster.local.node_ip).start()
    runs, leases = Watched(api, kind="AgentRun"), Watched(api, kind="Lease")
    try:
        played = subprocess.run(
            [sys.executable, "-m", DEMO, "--kubeconfig", str(cluster.kubeconfig),
             "--image", worker_image, "--owner-url", owner.url], cwd=REPO,
            capture_output=True, text=True, timeout=DEMO_TIMEOUT, check=False)
    finally:
        owner.stop()
        install_for_tests(cluster)  # what the chart's uninstall took: put back
    print(played.stdout[-6000:], played.stderr[-3000:])
    assert played.returncode == 0, played.stderr[-2000:]
    seen_runs, seen_leases = runs.stop(), leases.stop()

    # The run Succeeded, as the API said while it was there.
    succeeded = [r for r in seen_runs if condition(r.get("status", {}), "Succeeded") == "True"]
    assert succeeded, [r.get("status", {}).get("conditions") for r in seen_runs[-3:]]
    run = succeeded[-1]

    # Attempt 1 saved sources 1 and 2 in its journal (two commits); attempt 2 added only
    # the rest (the demo read them back while the run was there, and says so). The Leases
    # held only the heads: no record was on them. The journal went with the run: nothing
    # of it is left in the store.
    latest = {lease["metadata"]["name"]: lease for lease in seen_leases}
    (first,) = [n for n in latest if n.endswith("-1")]
    slot = first.removesuffix("-1")
    heads = {}
    for name, lease in latest.items():
        assert records.on_lease(lease) == ({}, []), name
        head = journals.Head.on_lease(lease)
        if head is not None:
            heads[name] = head.seq
    assert heads[first] == 2 and heads[f"{slot}-2"] >= 3, heads
    assert "skipped source-1, source-2; ran source-3, decision, report" in played.stdout
    pinned = run["status"]["pinned"]["journal"]
    assert stage.journal(pinned, slot=slot).objects.list(pinned["prefix"] + "/") == []
    assert run["metadata"]["finalizers"] == [names.JOURNAL_FINALIZER]

    # Published once, at the owner, under the slot's one key; only attempt 2 sent it.
    key = effects.idempotency_key(run_uid=run["metadata"]["uid"], slot=slot, key="publish")
    assert owner.applied == {key: 1}
    assert [(r.method, r.token, r.status) for r in owner.posts()] == [("POST", 2, 200)]

    # Nothing left: the Helm release, the operator's pod, the namespace, the demo's process.
    status = subprocess.run([str(helm_binary()), "--kubeconfig", str(cluster.kubeconfig),
                             "status", RELEASE, "-n", SYSTEM_NAMESPACE],
                            capture_output=True, text=True, check=False)
    assert status.returncode != 0 and "not found" in status.stderr, (status.stdout,
                                                                     status.stderr)
    core = kubernetes.client.CoreV1Api(api)
    with pytest.raises(kubernetes.client.ApiException) as gone:
        core.read_namespace(NAMESPACE)
    assert gone.value.status == 404
    assert core.list_namespaced_pod(SYSTEM_NAMESPACE, label_selector=SELECTOR).items == []
    still = subprocess.run(["pgrep", "-f", str(DEMO)], capture_output=True, text=True,
                           check=False)
    assert still.stdout == "", still.stdout
