"""Stale attempts on the real node: what a predecessor can no longer do, and what it left.

Each run here has one node, Automatic claims and two attempts; attempt 1 ends (exits 3, or
is SIGKILLed on the node) and its pod stays, Failed; the operator sees its lease released
(the exit: the worker's last write) or expire (the kill), tombstones it, and claims
attempt 2. Workers are SDK scripts (``stale.PRELUDE``) beside the test's
effect owner (``tests/support/actors/effectowner.py``) on the node bridge's address.

- the stale attempt: attempt 1's pod-bound token still authenticates (SelfSubjectReview,
  as its pod), yet it cannot renew its lease, commit a record on its own sealed Lease or
  on the successor's (the refusal names the policy ``agentrun-attempt-leases``), and its
  effect for a key the successor never used, after the successor's first, is fenced
  (409 ``StaleFencingToken``), not deduplicated; the successor's prefix holds nothing of
  that late write;
- a long-running effect: attempt 1 is killed while the owner applies its effect; attempt 2
  reconciles "in progress", waits without re-sending, sees "applied" and records it;
- pinned configuration: attempt 2 reads the very bytes attempt 1 read, after a newer
  revision was accepted and the source ConfigMaps were deleted.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest

from agentrun import rest
from agentrun.core.policies.leasepolicy import ATTEMPT_LEASES
from agentrun.worker import _effects as effects
from agentrun.worker import _records as records
from agentrun.worker import _renewals as renewals
from tests.integration.node import stale
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.effectowner import word_key
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.workers import (
    container_pid,
    kill_on_node,
    printed,
    terminated,
    token_client,
    token_pods,
    wait_pod_phase,
    wait_printed,
    worker_user,
)
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
validating = operator_fixtures.validating  # the shipped policies (cluster-wide: serial)
owner = stale.owner
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"

# Attempt 1 commits a step, prints its token (test-only) and gives up (exit 3). Attempt 2
# skips that step, publishes, waits for the test's checks, then prints its fresh prefix.
STALE = f"""
with Worker.from_env() as worker:
    c = worker.context
    notes = worker.step("gather", do=lambda: {{"notes": "by attempt " + str(c.attempt)}})
    if c.attempt == 1:
        say(attempt=1, token=open("{TOKEN_FILE}").read(), notes=notes)
        sys.exit(3)
    published = worker.effect("publish", key="publish", call=sender(worker), reconcile=ask)
    say(attempt=2, published=published, done=worker.steps.done, notes=notes)
    wait_released(worker, "checked")
    fresh = prefix.prefix(attempt=c.attempt, leases=prefix.list_leases(
        api=worker.api, namespace=c.namespace, slot=c.slot, run=c.run))
    say(prefix=sorted(fresh.committed), unsealed=list(fresh.unsealed),
        problems=list(fresh.problems))
"""
# Every attempt publishes; attempt 1 is killed while the owner holds the apply.
LONG = """
with Worker.from_env() as worker:
    say(attempt=worker.context.attempt, started=True)
    published = worker.effect("publish", key="publish", call=sender(worker), reconcile=ask)
    say(attempt=worker.context.attempt, published=published)
"""
# Each attempt prints its pinned configuration (verified by from_env); attempt 1 then
# waits for the test to change the configuration, and exits 3.
PINNED = """
with Worker.from_env() as worker:
    c = worker.context
    say(attempt=c.attempt, config={k: p.text for k, p in c.pinned.items()},
        sha256={k: p.sha256 for k, p in c.pinned.items()})
    if c.attempt == 1:
        wait_released(worker, "configs-changed")
        sys.exit(3)
"""


def two_attempts(scenario: Scenario, *, image: str, script: str,
                 owner: stale.TimedOwner) -> tuple[str, str, str]:
    """A run of one node whose two attempts run ``script``: its slot and both pods."""
    slot = stale.sdk_run(scenario, image=image, script=script, owner=owner, max_attempts=2)
    return slot, f"{slot}-1", f"{slot}-2"


def publish_key(scenario: Scenario, slot: str) -> str:
    uid = scenario.agentrun("study")["metadata"]["uid"]
    return effects.idempotency_key(run_uid=uid, slot=slot, key="publish")


def refusal(call: Any) -> str:
    """The message of the refusal ``call()`` must meet (RecordRefused or an ApiError)."""
    with pytest.raises((records.RecordRefused, rest.ApiError)) as refused:
        call()
    error = refused.value
    if isinstance(error, rest.ApiError):
        assert error.status in (403, 422), error
        return error.message
    return str(error)


def record_annotations(scenario: Scenario, lease: str) -> set[str]:
    found = scenario.lease(lease)
    assert found is not None, lease
    return {k.removeprefix(records.PREFIX) for k in found["metadata"].get("annotations") or {}
            if k.startswith(records.PREFIX)}


@pytest.mark.serial
def test_a_stale_attempt_with_its_pod_present_cannot_write_or_slip_an_effect_in(
        scenario: Scenario, validating: None, operator: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    slot, first, second = two_attempts(scenario, image=worker_image, script=STALE,
                                       owner=owner)
    token = wait_printed(scenario, first, "token")["token"]
    assert terminated(wait_pod_phase(scenario, first, {"Failed"}))["exitCode"] == 3
    published = wait_printed(scenario, second, "published", timeout=120)
    assert published["done"] == ["gather"]  # attempt 1's committed step, skipped
    assert published["notes"] == {"notes": "by attempt 1"}
    idem = publish_key(scenario, slot)
    assert [(r.key, r.token, r.status) for r in owner.worker_posts()] == [(idem, 2, 200)]

    # Attempt 1's pod is still there (Failed), so its bound token still authenticates.
    assert (scenario.pod(first) or {})["status"]["phase"] == "Failed"
    stale_api = token_client(scenario, token)
    review = stale_api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               body={"apiVersion": "authentication.k8s.io/v1",
                                     "kind": "SelfSubjectReview"})
    user = review["status"]["userInfo"]
    assert user["username"] == worker_user(scenario.namespace)
    assert user["extra"]["authentication.kubernetes.io/pod-name"] == [first]

    lease_path = rest.namespaced(group="coordination.k8s.io", version="v1", plural="leases",
                                 namespace=scenario.namespace, name=first)
    before = stale_api.request("GET", lease_path)
    renewal = renewals.renewed(before, now=datetime.now(UTC))
    renewed = refusal(lambda: stale_api.request("PUT", lease_path, body=renewal))
    assert ATTEMPT_LEASES in renewed and "tombstoned" in renewed, renewed
    patched = refusal(lambda: stale_api.request(  # the keeper's other way: renewTime alone
        "PATCH", lease_path, content_type=rest.MERGE_PATCH,
        body={"metadata": {"resourceVersion": before["metadata"]["resourceVersion"]},
              "spec": {"renewTime": renewal["spec"]["renewTime"]}}))
    assert ATTEMPT_LEASES in patched and "tombstoned" in patched, patched
    own = records.LeaseRecords(api=stale_api, namespace=scenario.namespace, lease=first,
                               attempt=1)
    late = records.make(key="late-notes", kind=records.Kind.SOURCE_NOTES, attempt=1,
                        payload={"notes": "written after the successor was claimed"})
    on_own = refusal(lambda: own.commit(late))
    assert ATTEMPT_LEASES in on_own, on_own
    theirs = records.LeaseRecords(api=stale_api, namespace=scenario.namespace, lease=second,
                                  attempt=2)
    forged = records.make(key="late-notes", kind=records.Kind.SOURCE_NOTES, attempt=2,
                          payload={"notes": "claiming to be attempt 2"})
    on_theirs = refusal(lambda: theirs.commit(forged))
    assert ATTEMPT_LEASES in on_theirs and f"held by pod {second}" in on_theirs, on_theirs
    after = stale_api.request("GET", lease_path)
    assert after["spec"] == before["spec"]  # not renewed
    assert after["metadata"].get("annotations") == before["metadata"].get("annotations")

    # Its effect for a key the successor never used, after the successor's first: fenced.
    uid = scenario.agentrun("study")["metadata"]["uid"]
    unused = effects.idempotency_key(run_uid=uid, slot=slot, key="late-effect")
    status, answer = owner.effect(key=unused, token=1, fence=f"{uid}/{slot}", payload=None)
    assert (status, answer["error"], answer["highest"]) == (409, "StaleFencingToken", 2)
    assert unused not in owner.applied and unused not in owner.results

    stale.release(owner, "checked")
    fresh = wait_printed(scenario, second, "prefix")
    assert fresh["prefix"] == ["gather", "publish.intent", "publish.outcome"], fresh
    assert (fresh["unsealed"], fresh["problems"]) == ([], [])
    assert "late-notes" not in record_annotations(scenario, first) | record_annotations(
        scenario, second)
    assert wait_pod_phase(scenario, second, {"Succeeded", "Failed"})["status"][
        "phase"] == "Succeeded"
    final = scenario.wait_state(slot, "Succeeded", timeout=60)["status"]
    assert [a["outcome"] for a in final["attempts"]] == ["Failed", "Succeeded"]
    assert owner.applied == {idem: 1, word_key("checked"): 1}
    assert token_pods(scenario, user=worker_user(scenario.namespace), name=first) == {first}
    print(f"owner: {[(r.token, r.status) for r in owner.worker_posts()]} (token, status); "
          f"refusals: renewal PUT and PATCH, record on lease 1 and on lease 2")


def test_a_long_running_effect_is_waited_for_never_re_sent(
        scenario: Scenario, operator: OperatorProcess, worker_image: str, node: LocalNode,
        owner: stale.TimedOwner) -> None:
    owner.hold = threading.Event()  # the owner applies only once the test lets it
    slot, first, second = two_attempts(scenario, image=worker_image, script=LONG,
                                       owner=owner)
    pod = wait_pod_phase(scenario, first, {"Running"})
    idem = publish_key(scenario, slot)
    wait_for(lambda: owner.posts(key=idem), timeout=90, message="attempt 1's POST")
    kill_on_node(container_pid(node, pod), pod_uid=pod["metadata"]["uid"])
    assert terminated(wait_pod_phase(scenario, first, {"Failed"}))["exitCode"] == 137
    assert record_annotations(scenario, first) == {"publish.intent"}  # no outcome

    def gets() -> list[Any]:
        return [r for r in owner.requests if r.method == "GET" and r.key == idem]
    wait_for(lambda: len(gets()) >= 2, timeout=120,
             message="attempt 2 asked the owner twice (in progress)")
    asked_while_held = len(gets())
    held_at = time.monotonic()
    owner.hold.set()
    done = wait_printed(scenario, second, "published", timeout=60)
    answers = [p["reconciled"] for p in printed(scenario, second) if "reconciled" in p]
    # In progress while held (a GET may race the release: also in progress), then applied.
    assert answers == ["in-progress"] * (len(answers) - 1) + ["applied"], answers
    assert len(answers) - 1 >= asked_while_held >= 2, answers

    assert [(r.key, r.token) for r in owner.posts()] == [(idem, 1)]  # never re-sent
    assert owner.applied == {idem: 1}
    assert done["published"] == owner.results[idem]
    assert wait_pod_phase(scenario, second, {"Succeeded", "Failed"})["status"][
        "phase"] == "Succeeded"
    lease = scenario.lease(second)
    assert lease is not None
    outcome = records.decode(
        annotation=records.PREFIX + "publish.outcome", attempt=2,
        value=lease["metadata"]["annotations"][records.PREFIX + "publish.outcome"])
    assert outcome.inline == {"answer": "applied", "result": owner.results[idem],
                              "via": "reconcile"}
    assert record_annotations(scenario, second) == {"publish.outcome"}
    scenario.wait_state(slot, "Succeeded", timeout=60)
    print(f"owner: {len(owner.posts())} POST (attempt 1's), applied {owner.applied[idem]}x; "
          f"attempt 2 asked {len(answers)}x ({len(answers) - 1} in progress), recorded "
          f"{time.monotonic() - held_at:.1f}s after the release")


def test_the_successor_reads_the_pinned_bytes_after_a_new_revision_and_deletion(
        scenario: Scenario, operator: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    slot, first, second = two_attempts(scenario, image=worker_image, script=PINNED,
                                       owner=owner)
    before = wait_printed(scenario, first, "config")
    pins = scenario.agentrun("study")["status"]["pinned"]
    assert before["sha256"] == {kind: pin["sha256"] for kind, pin in pins.items()}

    scenario.configs(revision=2, outcome="a newer report, accepted while attempt 1 ran")
    sources = [f"study-{kind}-r1" for kind in ("package", "workflow", "bindings")]
    for name in sources:
        scenario.core.delete_namespaced_config_map(name, scenario.namespace)
    wait_for(lambda: not {c.metadata.name for c in scenario.core.list_namespaced_config_map(
        scenario.namespace).items} & set(sources), timeout=30, message="sources deleted")
    stale.release(owner, "configs-changed")

    assert terminated(wait_pod_phase(scenario, first, {"Failed"}))["exitCode"] == 3
    after = wait_printed(scenario, second, "config", timeout=120)
    assert after["attempt"] == 2
    assert (after["config"], after["sha256"]) == (before["config"], before["sha256"])
    assert "a newer report" not in after["config"]["package"]
    assert scenario.agentrun("study")["status"]["pinned"] == pins
    scenario.wait_state(slot, "Succeeded", timeout=60)
