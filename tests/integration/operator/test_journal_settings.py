"""A journal setting that cannot work is refused before any claim, over the real API server.

The operator checks its journal setting before it pins a run (``controller.journalchecks``):

- an endpoint where nothing answers (a loopback port nobody listens on): the run shows
  ``Pinned`` False ``JournalUnreachable`` naming the endpoint, with a Warning Event, and
  nothing is created (no snapshot, no slot, no Lease, no Pod);
- a Secret (``--journal-secret agentrun-journal``) missing from the run's namespace: the
  same with ``JournalSecretMissing`` and the command that creates it; one without its two
  keys is refused the same way; once it is created whole the run is pinned without being
  touched, and its slot is claimed with the Secret mounted;
- against a loopback SeaweedFS that checks SigV4: keys it does not know are
  ``JournalCredentialsRefused``; the right keys but no bucket, ``JournalBucketMissing``;
  the bucket made, the run is launched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import kubernetes
import pytest

from agentrun import objectstore
from agentrun.api import names
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster import store
from tests.support.plays.scenarios import Scenario, condition_of, holds_throughout
from tests.support.s3server import ACCESS_KEY, SECRET_KEY, free_ports, running_s3
from tests.support.waiting import wait_for

from .test_effect_unresolved import publish

RUN = "study"


@pytest.fixture
def operator_with(scenario: Scenario, installed: None,
                  tmp_path: Path) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []

    def start(*args: str) -> OperatorProcess:
        process = OperatorProcess(cluster=scenario.cluster, namespace=scenario.namespace,
                                  log=tmp_path / "operator.log", args=list(args))
        started.append(process.start())
        return process

    yield start
    for process in started:
        process.stop()
        print(f"--- operator log (tail) ---\n{process.tail(30)}")


def refused(scenario: Scenario, reason: str) -> str:
    """The run's Pinned False ``reason`` message, once shown; nothing created for it."""
    def shown() -> str | None:
        found = condition_of(scenario.agentrun(RUN).get("status", {}), "Pinned")
        return found["message"] if found and found["reason"] == reason else None

    message: str = wait_for(shown, timeout=60, message=f"Pinned False {reason}")
    assert scenario.wait_event(reason, message[:40])
    holds_throughout(lambda: created(scenario) == [], seconds=2,
                     message="nothing created for a run whose journal cannot work")
    return message


def created(scenario: Scenario) -> list[str]:
    """What exists for the run: its snapshots, slots, attempt Leases and Pods (by name)."""
    listed = scenario.cluster.kubectl(
        "get", "-n", scenario.namespace, "-o", "name", "-l", names.RUN_LABEL,
        "configmaps,slots.agentrun.dev,leases.coordination.k8s.io,pods")
    assert listed.returncode == 0, listed.stderr
    return listed.stdout.split()


def test_an_endpoint_where_nothing_answers_is_refused_before_any_claim(
        scenario: Scenario, operator_with: Callable[..., OperatorProcess]) -> None:
    (port,) = free_ports(1)
    endpoint = f"http://127.0.0.1:{port}"
    publish(scenario)
    operator_with("--journal-endpoint", endpoint, "--journal-bucket", "journal")
    scenario.run(RUN)
    message = refused(scenario, "JournalUnreachable")
    assert endpoint in message and "--journal-endpoint" in message
    assert scenario.agentrun(RUN)["status"].get("pinned") is None


def test_a_missing_secret_is_refused_until_it_is_created_whole(
        scenario: Scenario, operator_with: Callable[..., OperatorProcess]) -> None:
    publish(scenario)
    operator_with("--journal-endpoint", store.STORE_ENDPOINT, "--journal-bucket", store.BUCKET,
                  "--journal-secret", names.JOURNAL_SECRET)
    scenario.run(RUN)
    message = refused(scenario, "JournalSecretMissing")
    assert f"{names.JOURNAL_SECRET} (the operator's --journal-secret) is not in" in message
    assert f"kubectl -n {scenario.namespace} create secret generic" in message
    scenario.core.create_namespaced_secret(scenario.namespace, kubernetes.client.V1Secret(
        metadata=kubernetes.client.V1ObjectMeta(name=names.JOURNAL_SECRET),
        string_data={names.JOURNAL_ACCESS_KEY: "key"}))
    message = wait_for(lambda: (m if f"has no {names.JOURNAL_SECRET_KEY}" in (
        m := (condition_of(scenario.agentrun(RUN)["status"], "Pinned") or {}).get(
            "message", "")) else None), timeout=60, message="the half-made Secret refused")
    assert f"has no {names.JOURNAL_SECRET_KEY}" in message and created(scenario) == []
    scenario.core.patch_namespaced_secret(names.JOURNAL_SECRET, scenario.namespace, {
        "stringData": {names.JOURNAL_SECRET_KEY: "secret"}})
    slot = scenario.slot_name_eventually(RUN, "research", timeout=60)
    scenario.wait_state(slot, "Active")
    pod = scenario.pod(f"{slot}-1")
    assert pod is not None
    mounted = [v for v in pod["spec"]["volumes"]
               if (v.get("secret") or {}).get("secretName") == names.JOURNAL_SECRET]
    assert len(mounted) == 1, pod["spec"]["volumes"]


def test_wrong_keys_and_a_missing_bucket_are_refused_before_any_claim(
        scenario: Scenario, operator_with: Callable[..., OperatorProcess],
        tmp_path: Path) -> None:
    with running_s3(tmp_path / "s3", auth=True) as endpoint:
        publish(scenario)
        scenario.core.create_namespaced_secret(scenario.namespace, kubernetes.client.V1Secret(
            metadata=kubernetes.client.V1ObjectMeta(name=names.JOURNAL_SECRET),
            string_data={names.JOURNAL_ACCESS_KEY: "nobody",
                         names.JOURNAL_SECRET_KEY: "not-a-key"}))
        operator_with("--journal-endpoint", endpoint, "--journal-bucket", "journals",
                      "--journal-secret", names.JOURNAL_SECRET)
        scenario.run(RUN)
        message = refused(scenario, "JournalCredentialsRefused")
        assert f"signed with the Secret {scenario.namespace}/{names.JOURNAL_SECRET}" in message
        scenario.core.patch_namespaced_secret(names.JOURNAL_SECRET, scenario.namespace, {
            "stringData": {names.JOURNAL_ACCESS_KEY: ACCESS_KEY,
                           names.JOURNAL_SECRET_KEY: SECRET_KEY}})
        assert "has no such bucket" in refused(scenario, "JournalBucketMissing")
        keys = objectstore.Credentials(ACCESS_KEY, SECRET_KEY)
        objectstore.ObjectStore(endpoint=endpoint, bucket="journals",
                                credentials=lambda: keys).ensure_bucket()
        slot = scenario.slot_name_eventually(RUN, "research", timeout=60)
        assert scenario.agentrun(RUN)["status"]["pinned"]["journal"]["endpoint"] == endpoint
        assert slot
