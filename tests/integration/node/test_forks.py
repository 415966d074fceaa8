"""A fork on real pods: a new run from another's journal, which outlives its source.

The three-node workflow of ``test_reruns`` (``gather -> draft -> review``, each node the SDK
in the project's image, ``draft`` publishing through the effect owner) runs to Succeeded.
Then alice forks it at ``draft:draft`` through the plugin. Covers:

- refused, each with a message and no slot made: a step the node never committed (the
  operator's ``StepNotCommitted``, the plugin's exit 1), a node the workflow lacks, a name
  taken (exit 1), a source that does not exist (exit 2);
- the operator killed once the first node's copy is committed (its attempt-0 Lease made)
  and once the provenance is written: each restart finishes the copy, the Lease made
  before the crash kept as it was (the plugin, waiting 3 s, says it timed out: exit 3);
- the fork: its snapshots pinned by digest from the source's; its provenance on its
  status (the source's uid, node, step, alice, the reason); each inherited node's
  records on its own attempt-0 Lease and in its own journal;
- the source deleted, its journal with it (nothing left under its prefix); then the fork
  runs: ``gather`` does no step again, ``draft`` skips ``outline`` and runs ``draft`` and
  ``polish`` again, ``review`` runs from its start, and ``publish``, after the fork's step,
  is the fork's own effect: sent under a new idempotency key; the fork succeeds.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiException

from agentrun.api import names
from agentrun.core.base import naming
from tests.integration.node import stale, test_journal
from tests.integration.node.test_reruns import NODES, ran, study
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
installed = operator_fixtures.installed
journaled = test_journal.journaled
owner = stale.owner
__all__ = ["installed", "journaled", "owner"]  # fixtures this module takes from others


def fork(cluster: Cluster, scenario: Scenario, source: str, name: str,
         *args: str) -> Any:
    return plugin(cluster, scenario, "fork", source, "--name", name, *args, "-o", "json")


def condition(scenario: Scenario, run: str, type_: str) -> dict[str, Any]:
    return condition_of(scenario.agentrun(run).get("status") or {}, type_) or {}


def gone(scenario: Scenario, run: str) -> bool:
    try:
        scenario.agentrun(run)
    except ApiException as error:
        return bool(error.status == 404)
    return False


def delete(scenario: Scenario, run: str) -> None:
    scenario.custom.delete_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "agentruns", run)
    wait_for(lambda: gone(scenario, run), timeout=120, message=f"run {run} deleted")


def test_a_fork_at_a_step_starts_from_its_prefix_and_outlives_its_source(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    study(scenario, worker_image=worker_image, owner=owner)
    wait_for(lambda: condition(scenario, "study", "Succeeded").get("status") == "True",
             timeout=240, message="the source run succeeded")
    source = scenario.agentrun("study")
    assert len(owner.worker_posts()) == 1

    bad = fork(cluster, scenario, "study", "study-x", "--at", "draft:nosuch", "--reason", "r")
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "StepNotCommitted" in json.loads(bad.stdout)["message"], bad.stdout
    listed: dict[str, Any] = scenario.custom.list_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "slots",
        label_selector="agentrun.dev/run=study-x")
    assert listed["items"] == []  # nothing laid out
    delete(scenario, "study-x")
    bad = fork(cluster, scenario, "study", "study-y", "--at", "nosuch:draft", "--reason", "r")
    assert bad.returncode == 1 and "nosuch" in json.loads(bad.stdout)["message"], bad.stdout
    delete(scenario, "study-y")
    taken = fork(cluster, scenario, "study", "study", "--reason", "r")
    assert taken.returncode == 1 and "already exists" in taken.stderr, taken.stderr
    missing = fork(cluster, scenario, "nosuch", "study-z", "--reason", "r")
    assert missing.returncode == 2 and "not found" in missing.stderr, missing.stderr

    # The operator dies once the first node's copy is committed (its attempt-0 Lease made,
    # the next node's not), then once the provenance is written (no slot laid out yet).
    journaled.stop()
    journaled.start(crash_at="fork-lease,fork")
    cut = fork(cluster, scenario, "study", "study-b", "--at", "draft:draft", "--reason",
               "try another draft", "--timeout", "3")
    assert cut.returncode == 3 and "has not copied" in cut.stderr, (cut.stdout, cut.stderr)
    journaled.wait_crashed()
    draft_lease = f"{naming.slot_name(run='study-b', node='draft')}-0"  # the at node's first
    first = scenario.lease(draft_lease)
    assert first is not None and scenario.lease(
        f"{naming.slot_name(run='study-b', node='gather')}-0") is None
    journaled.start(crash_at="fork")
    journaled.wait_crashed()
    status = scenario.agentrun("study-b")["status"]
    assert status["fork"]["run"] == "study" and condition(scenario, "study-b", "Forked")[
        "status"] == "True"
    again = scenario.lease(draft_lease)  # the copy finished on it, never made again
    assert again is not None and again["metadata"]["resourceVersion"] == first["metadata"][
        "resourceVersion"]
    journaled.start()
    assert "forked from run study" in condition(scenario, "study-b", "Forked")["message"]
    provenance = status["fork"]
    assert (provenance["run"], provenance["uid"], provenance["node"], provenance["step"],
            provenance["actor"], provenance["reason"]) == (
        "study", source["metadata"]["uid"], "draft", "draft", "alice", "try another draft")
    inherited = {each["node"]: each for each in provenance["inherited"]}
    assert set(inherited) == {"gather", "draft"}  # review, after draft: from its start
    for kind in ("package", "workflow", "bindings"):  # by digest, as the source pinned
        assert status["pinned"][kind]["sha256"] == source["status"]["pinned"][kind]["sha256"]
        assert status["pinned"][kind]["snapshot"] != source["status"]["pinned"][kind][
            "snapshot"]  # its own copy, owned by the fork
    gather, draft, review = (scenario.slot_name_eventually("study-b", n) for n, _, _ in NODES)
    lease = scenario.lease(f"{draft}-0")
    assert lease is not None and not (lease.get("spec") or {}).get("holderIdentity")
    assert names.JOURNAL_HEAD_ANNOTATION in lease["metadata"]["annotations"]
    assert scenario.lease(f"{review}-0") is None

    delete(scenario, "study")  # the source, and with it its journal
    source_prefix = source["status"]["pinned"]["journal"]["prefix"]
    assert test_journal.objects().list(f"{source_prefix}/") == []

    wait_for(lambda: condition(scenario, "study-b", "Succeeded").get("status") == "True",
             timeout=300, message="the fork succeeded")
    assert ran(scenario, f"{gather}-1") == []  # its whole prefix inherited
    assert ran(scenario, f"{draft}-1") == ["draft", "polish"]  # outline inherited
    assert ran(scenario, f"{review}-1") == ["check", "verdict"]
    posts = owner.worker_posts()
    assert len(posts) == 2 and posts[0].key != posts[1].key  # the fork's own effect
