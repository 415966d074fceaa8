"""People read a slot's journal through the API server, under RBAC, with no store keys.

A worker pod on the node commits twelve steps into the cluster's store (inline, by
reference, one of 1 MiB). The operator serves its history API (``--history-port``) on
the node's address; the test registers it as the chart does (the APIService, its
Service, here without a selector and with an EndpointSlice naming the operator process
on the host) and waits for the API server to call it Available. Then, through the real
API server's authentication, RBAC and front proxy:

- alice, with no rights in the namespace, is refused by the API server itself (403 on
  ``slothistories``) and by ``kubectl agentrun history`` (exit 1);
- alice given ``get slothistories`` but not ``get slots`` is refused by the operator's
  own SubjectAccessReview (403, its message naming what is missing): the history needs
  what reading the slot needs;
- bob, bound to the standard ``view`` role (which the chart's ``agentrun-viewer``
  aggregates into), reads every step with its kind, size and where its payload is, newest
  first; ``--limit`` bounds it; ``kubectl get slothistory`` shows the same object;
  ``history --record`` prints one record's exact bytes with its digest checked, to
  approvers only (the verb ``approve``: bob is refused until bound to it);
- nobody reaches the history's port directly: without the front proxy's certificate it
  answers 401.

Serial: the APIService is cluster-wide, and while it exists without a server the API
server's discovery (hence namespace deletion) fails.
"""

from __future__ import annotations

import json
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from agentrun.api import names
from tests.integration.node import stale
from tests.integration.node.test_journal import installed
from tests.support import historyapi
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import wait_printed
from tests.support.cluster import store
from tests.support.cluster.localnode import LocalNode
from tests.support.cluster.processes import free_port
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
owner = stale.owner
__all__ = ["installed", "owner"]  # fixtures this module takes from others
PLUGIN = Path(sys.executable).parent / "kubectl-agentrun"
SIZES = [100, 5 * 1024, 1024 * 1024] * 4  # inline, by reference, by reference (1 MiB)
SCRIPT = f"""
SIZES = {SIZES!r}
with Worker.from_env(commit_delay=0) as worker:  # a commit per step: history by commit
    for i, size in enumerate(SIZES):
        worker.step("h%02d" % i, do=lambda i=i, size=size: {{"i": i, "text": "x" * size}})
    say(done=len(SIZES))
"""
RESOURCE = f"{names.HISTORY_RESOURCE}.{names.HISTORY_GROUP}"


def _apply(scenario: Scenario, documents: list[dict[str, Any]]) -> None:
    applied = scenario.cluster.kubectl("apply", "-f", "-",
                                       input=yaml.safe_dump_all(documents))
    assert applied.returncode == 0, applied.stderr


@pytest.fixture
def history(scenario: Scenario, installed: None, node: LocalNode,
            tmp_path: Path) -> Iterator[tuple[OperatorProcess, int]]:
    """The operator with the journal and the history API, registered and Available."""
    address, port = node.network.node_ip, free_port()
    documents = historyapi.registration(address, port)
    _apply(scenario, documents)
    process = OperatorProcess(
        cluster=scenario.cluster, namespace=scenario.namespace, log=tmp_path / "operator.log",
        args=["--journal-endpoint", store.STORE_ENDPOINT, "--journal-bucket", store.BUCKET,
              "--history-port", str(port), "--history-address", address])
    try:
        process.start()
        historyapi.wait_available(scenario.cluster)
        yield process, port
    finally:
        process.stop()
        print(f"--- operator log (tail) ---\n{process.tail(40)}")
        removed = scenario.cluster.kubectl("delete", "--ignore-not-found", "-f", "-",
                                           input=yaml.safe_dump_all(documents))
        assert removed.returncode == 0, removed.stderr


def plugin(scenario: Scenario, user: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(scenario.cluster.kubeconfig), "--context", user,
         "-n", scenario.namespace, *args], capture_output=True, text=True, check=False,
        timeout=120)


def raw(scenario: Scenario, user: str, slot: str, *,
        limit: int = 100) -> subprocess.CompletedProcess[str]:
    return scenario.cluster.kubectl(
        "get", "--raw", f"/apis/{names.HISTORY_GROUP}/{names.HISTORY_VERSION}/namespaces/"
        f"{scenario.namespace}/{names.HISTORY_RESOURCE}/{slot}?limit={limit}", user=user)


def bind(scenario: Scenario, user: str, *, role: str, kind: str = "ClusterRole") -> None:
    _apply(scenario, [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"{user}-{role}", "namespace": scenario.namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                      "name": user}]}])


def test_a_journal_is_read_through_rbac_and_only_so(
        scenario: Scenario, history: tuple[OperatorProcess, int], worker_image: str,
        node: LocalNode, owner: stale.TimedOwner) -> None:
    slot = stale.sdk_run(scenario, image=worker_image, script=SCRIPT, owner=owner,
                         max_attempts=1)
    assert wait_printed(scenario, f"{slot}-1", "done", timeout=180)["done"] == len(SIZES)

    # alice, no rights: the API server refuses before the operator is asked.
    refused = raw(scenario, "alice", slot)
    assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), refused.stderr
    assert RESOURCE in refused.stderr, refused.stderr
    denied = plugin(scenario, "alice", "history", slot)
    assert denied.returncode == 1, (denied.stdout, denied.stderr)

    # alice with the history but not the slot: the operator's own review refuses.
    _apply(scenario, [{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                       "metadata": {"name": "history-only", "namespace": scenario.namespace},
                       "rules": [{"apiGroups": [names.HISTORY_GROUP],
                                  "resources": [names.HISTORY_RESOURCE], "verbs": ["get"]}]}])
    bind(scenario, "alice", role="history-only", kind="Role")
    only = wait_for(lambda: (r := raw(scenario, "alice", slot)).returncode != 0
                    and "get on the slot" in r.stderr and r, timeout=30,
                    message="alice refused by the operator, not the API server")
    assert f"alice cannot get slot {slot}" in only.stderr, only.stderr

    # bob with `view`: every step, newest first, with its size and where it is stored.
    bind(scenario, "bob", role="view")
    shown = wait_for(lambda: (r := raw(scenario, "bob", slot)).returncode == 0 and r,
                     timeout=30, message="bob reads the history")
    found = json.loads(shown.stdout)
    assert found["kind"] == names.HISTORY_KIND and not found["truncated"]
    assert found["journal"]["bucket"] == store.BUCKET
    assert [a["commits"] for a in found["attempts"]] == [len(SIZES)]
    # The usage beside the head: every record and the bytes of every payload.
    (attempt,) = found["attempts"]
    assert attempt["records"] == len(SIZES)
    assert attempt["bytes"] == sum(e["size"] for e in found["entries"])
    entries = found["entries"]
    assert [e["key"] for e in entries] == [f"h{i:02d}" for i in reversed(range(len(SIZES)))]
    assert {e["kind"] for e in entries} == {"step-result"}
    by_key = {e["key"]: e for e in entries}
    assert by_key["h00"]["stored"] == "inline" and by_key["h01"]["stored"] == "object"
    assert by_key["h02"]["size"] > 1024 * 1024  # the 1 MiB payload's canonical JSON
    limited = json.loads(raw(scenario, "bob", slot, limit=3).stdout)
    assert len(limited["entries"]) == 3 and limited["truncated"]
    got = scenario.cluster.kubectl("-n", scenario.namespace, "get", RESOURCE, slot,
                                   "-o", "json", user="bob")
    assert got.returncode == 0 and json.loads(got.stdout)["entries"] == entries, got.stderr
    text = plugin(scenario, "bob", "history", slot, "--limit", "5")
    assert text.returncode == 0, (text.stdout, text.stderr)
    assert "Journal s3://" in text.stdout and "h11" in text.stdout, text.stdout
    assert "h06" not in text.stdout and "older entries not shown" in text.stdout
    # One record's exact bytes, by reference in the store, its sha256 checked by the plugin
    # (what an approver reads of an effect's payload before approving its digest): for
    # approvers only, so bob with `view` is refused until bound to agentrun-approver.
    viewer = plugin(scenario, "bob", "history", slot, "--record", "h01")
    assert viewer.returncode == 1 and "for approvers" in viewer.stderr, viewer.stderr
    bind(scenario, "bob", role="agentrun-approver")
    one = wait_for(lambda: (r := plugin(scenario, "bob", "history", slot, "--record", "h01",
                                        "-o", "json")).returncode == 0 and r, timeout=30,
                   message="bob, an approver, reads the record")
    assert one.returncode == 0, (one.stdout, one.stderr)
    record = json.loads(one.stdout)
    assert record["verified"] and record["digest"] == by_key["h01"]["digest"]
    assert json.loads(record["text"]) == {"i": 1, "text": "x" * SIZES[1]}
    missing = plugin(scenario, "bob", "history", slot, "--record", "nothing")
    assert missing.returncode == 2 and "no record nothing" in missing.stderr, missing.stderr

    # The port itself, without the API server's front-proxy certificate: nobody.
    _, port = history
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    url = (f"https://{node.network.node_ip}:{port}/apis/{names.HISTORY_GROUP}/"
           f"{names.HISTORY_VERSION}/namespaces/{scenario.namespace}/"
           f"{names.HISTORY_RESOURCE}/{slot}")
    request = urllib.request.Request(url, headers={"X-Remote-User": "system:admin",
                                                   "X-Remote-Group": "system:masters"})
    with pytest.raises(urllib.error.HTTPError) as direct:
        urllib.request.urlopen(request, context=context, timeout=10)
    assert direct.value.code == 401
    print(f"history of {len(SIZES)} steps read by bob (view); alice refused by the API "
          f"server ({refused.stderr.strip()[:120]}) and by the operator "
          f"({only.stderr.strip()[:160]})")
