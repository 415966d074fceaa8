"""Reruns on real pods: a three-node workflow redone from the middle node's second step.

The workflow ``gather -> draft -> review`` runs on the cluster's journal, each node the
SDK in the project's image (``worker.step`` per step, and the middle node publishes
through the effect owner). After the run Succeeded, alice reruns ``draft`` from its step
``draft`` through the plugin, with the run suspended so that the claim waits. Covers:

- acceptance makes nothing: no Pod or Lease of attempt 2 for ``draft`` (nor for ``review``,
  superseded back to Pending), and the run's Succeeded goes False, reason ``Rerun``;
- resumed, ``draft``'s attempt 2 skips ``outline``, runs ``draft`` and ``polish`` again and
  does not send ``publish`` again (the owner saw one POST: its recorded result is reused);
  ``review`` reruns from its start; ``gather`` is untouched (one attempt); the run
  succeeds again; the journal keeps both versions of ``draft``;
- a second rerun, from ``polish``, sends ``publish`` again on purpose (``--resend`` with its
  own reason): a second POST, under a new idempotency key;
- refused: a rerun of a slot whose attempt is Active (``NotRerunnable``: its pod still
  runs; admission refuses it too where its policies are in force, ``test_validating.py``),
  of a slot given up while its worker, which ignores SIGTERM, still runs in its pod
  (``PriorNotTerminal``), and while an effect is unresolved
  (``EffectUnresolved``); nothing changes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentrun.controller import journalhistory
from agentrun.worker import _effects as effects
from tests.integration.node import stale, test_journal
from tests.integration.operator import conftest as operator_fixtures
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import plugin
from tests.support.actors.workers import OWNER_ENV, grant_worker_role, printed, real_launch_spec
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, condition_of
from tests.support.waiting import wait_for

pytestmark = pytest.mark.kubelet
installed = operator_fixtures.installed
journaled = test_journal.journaled
owner = stale.owner
__all__ = ["installed", "journaled", "owner"]  # fixtures this module takes from others
NODES = (("gather", "cpu", []), ("draft", "cpu", ["gather"]), ("review", "cpu", ["draft"]))
SCRIPT = """
STEPS = {"gather": ["sources"], "draft": ["outline", "draft", "polish"],
         "review": ["check", "verdict"]}
with Worker.from_env(commit_delay=0) as worker:
    node, attempt = worker.context.node, worker.context.attempt
    for key in STEPS[node]:
        worker.step(key, do=lambda key=key: say(ran=key) or f"{key} by attempt {attempt}")
    if node == "draft":
        say(published=worker.effect("publish", key="publish", call=sender(worker),
                                    reconcile=ask))
        if attempt > 1:
            wait_released(worker, "draft-done")
"""


def ran(scenario: Scenario, pod: str) -> list[str]:
    return [p["ran"] for p in printed(scenario, pod) if "ran" in p]


def rerun(cluster: Cluster, scenario: Scenario, slot: str, *args: str,
          user: str = "alice") -> Any:
    return plugin(cluster, scenario, "rerun", slot, *args, "-o", "json", user=user)


def suspend(scenario: Scenario, value: bool) -> None:
    scenario.custom.patch_namespaced_custom_object(
        "agentrun.dev", "v1alpha1", scenario.namespace, "agentruns", "study",
        {"spec": {"suspend": value}})


def run_condition(scenario: Scenario, type_: str) -> dict[str, Any]:
    return condition_of(scenario.agentrun("study").get("status") or {}, type_) or {}


def study(scenario: Scenario, *, worker_image: str, owner: stale.TimedOwner) -> None:
    """The three-node workflow on the SDK's workers, run ``study`` launched by alice."""
    grant_worker_role(scenario)
    scenario.grant_editor("alice")
    scenario.configs(nodes=NODES)
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=worker_image,
                     script=stale.PRELUDE + SCRIPT, renewer=False, env={OWNER_ENV: owner.url})
    scenario.run("study", user="alice", max_attempts=1)


def test_a_rerun_from_the_middle_nodes_second_step_redoes_what_follows(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    study(scenario, worker_image=worker_image, owner=owner)
    gather, draft, review = (scenario.slot_name_eventually("study", n) for n, _, _ in NODES)
    wait_for(lambda: run_condition(scenario, "Succeeded").get("status") == "True",
             timeout=240, message="the run succeeded")
    assert ran(scenario, f"{draft}-1") == ["outline", "draft", "polish"]
    assert len(owner.worker_posts()) == 1

    suspend(scenario, True)
    done = rerun(cluster, scenario, draft, "--from-step", "draft", "--reason",
                 "the draft missed the second source")
    assert done.returncode == 0, (done.stdout, done.stderr)
    entry = json.loads(done.stdout)["entry"]
    assert (entry["outcome"], entry["kind"]) == ("Accepted", "Rerun"), entry
    reopened = scenario.slot(draft)["status"]
    # it has a dependency: Pending, its dependencies looked at again (then Ready, suspended)
    assert reopened["state"] in ("Pending", "Ready") and reopened["reruns"] == 1
    assert reopened["cuts"] and reopened["cuts"][0].startswith("1.")
    scenario.wait_slot(review, lambda s: s["status"]["state"] == "Pending"
                       and (condition_of(s["status"], "Superseded") or {}).get("status")
                       == "True", message="review superseded", timeout=30)
    wait_for(lambda: run_condition(scenario, "Succeeded").get("reason") == "Rerun",
             timeout=30, message="the run back in progress, saying why")
    assert f"nodes {'draft'}" in run_condition(scenario, "Succeeded")["message"]
    for pod in (f"{draft}-2", f"{review}-2"):  # acceptance made no attempt
        assert scenario.pod(pod) is None and scenario.lease(pod) is None, pod

    suspend(scenario, False)
    lease = wait_for(lambda: scenario.lease(f"{draft}-2"), timeout=60,
                     message="the claim of draft's attempt 2")
    assert lease["metadata"]["annotations"]["journal.agentrun.dev/cuts"] == (
        reopened["cuts"][0])
    scenario.wait_state(draft, "Active", timeout=60)
    refused = rerun(cluster, scenario, draft, "--reason", "again")  # its attempt is Active
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    entry = json.loads(refused.stdout)["entry"]
    assert entry["predicate"] == "NotRerunnable" and "is Active" in entry["message"], entry
    wait_for(lambda: any("published" in p for p in printed(scenario, f"{draft}-2")),
             timeout=120, message="draft's attempt 2 reached the effect")
    stale.release(owner, "draft-done")
    scenario.wait_state(draft, "Succeeded", timeout=120)
    assert ran(scenario, f"{draft}-2") == ["draft", "polish"]  # outline skipped
    published = [p["published"] for p in printed(scenario, f"{draft}-2") if "published" in p]
    assert published == [p["published"] for p in printed(scenario, f"{draft}-1")
                         if "published" in p]  # the recorded result, reused
    assert len(owner.worker_posts()) == 1  # never sent again
    scenario.wait_state(review, "Succeeded", timeout=180)
    assert ran(scenario, f"{review}-2") == ["check", "verdict"]  # from its start
    wait_for(lambda: run_condition(scenario, "Succeeded").get("status") == "True",
             timeout=60, message="the run succeeded again")
    assert scenario.pod(f"{gather}-2") is None and scenario.lease(f"{gather}-2") is None
    assert scenario.slot(gather)["status"]["attemptCount"] == 1

    # Sending the effect again is a choice of its own: a new idempotency key, recorded.
    first_key = owner.worker_posts()[0].key
    done = rerun(cluster, scenario, draft, "--from-step", "polish", "--reason", "polish again",
                 "--resend", "publish", "--resend-reason", "the blog lost the post")
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "sending effect publish again as a new effect" in json.loads(done.stdout)[
        "entry"]["message"]
    wait_for(lambda: any("published" in p for p in printed(scenario, f"{draft}-3")),
             timeout=120, message="draft's attempt 3 sent the effect again")
    # ("draft-done" was released for attempt 2: attempt 3 passes its wait at once)
    scenario.wait_state(draft, "Succeeded", timeout=120)
    assert ran(scenario, f"{draft}-3") == ["polish"]
    posts = owner.worker_posts()
    assert len(posts) == 2 and posts[1].key != first_key and posts[1].token == 3, posts
    scenario.wait_state(review, "Succeeded", timeout=180)
    assert ran(scenario, f"{review}-3") == ["check", "verdict"]

    # The journal keeps both versions of the step "draft".
    pinned = scenario.agentrun("study")["status"]["pinned"]["journal"]
    store = test_journal.objects()
    leases = [found for n in (1, 2) if (found := scenario.lease(f"{draft}-{n}")) is not None]
    positions = journalhistory.positions(
        chain=journalhistory.attempts(leases), keys=("draft",), deadline=1e18,
        read=lambda attempt, digest: store.get(
            f"{pinned['prefix']}/{draft}/{attempt}/sha256/{digest}", limit=4 << 20))
    assert not isinstance(positions, str)
    assert sorted({p[0] for p in positions["draft"]}) == [1, 2]


UNRESOLVED = """
with Worker.from_env(commit_delay=0) as worker:
    def call(key, token):
        if worker.context.attempt == 1:
            raise SystemExit("cut off mid-call")  # the intent is durable, the call unknown
        return sender(worker)(key, token)
    worker.effect("publish", key="publish", call=call, reconcile=ask)
"""


def test_a_rerun_waits_for_an_unresolved_effect(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess, worker_image: str,
        owner: stale.TimedOwner) -> None:
    scenario.grant_editor("alice")
    grant_worker_role(scenario)
    scenario.configs()
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=worker_image,
                     script=stale.PRELUDE + UNRESOLVED, renewer=False,
                     env={OWNER_ENV: owner.url})
    scenario.run("study", user="alice", max_attempts=2)
    slot = scenario.slot_name_eventually("study", "research")
    run_uid = scenario.agentrun("study")["metadata"]["uid"]
    owner.unknown.add(effects.idempotency_key(run_uid=run_uid, slot=slot, key="publish"))
    scenario.wait_slot(slot, lambda s: (condition_of(s["status"], "EffectUnresolved") or {})
                       .get("status") == "True", message="the effect unresolved", timeout=240)
    scenario.wait_slot(slot, lambda s: s["status"]["state"] == "RetryWait"
                       and len(s["status"].get("attempts") or []) == 2,
                       message="attempt 2 ended", timeout=60)
    done = rerun(cluster, scenario, slot, "--reason", "start over")
    entry = json.loads(done.stdout)["entry"]
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "EffectUnresolved"), entry
    assert "effect publish waits for its owner's answer" in entry["message"]
    status = scenario.slot(slot)["status"]
    assert status.get("reruns", 0) == 0 and not status.get("cuts")
    assert scenario.pod(f"{slot}-3") is None and scenario.lease(f"{slot}-3") is None


STUCK = """
import signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a worker that will not stop (and, with no
say(started=True)  # SDK keeper, nothing in it ends the process when its lease is taken)
until = time.monotonic() + 120
while time.monotonic() < until:
    time.sleep(0.5)  # in the pod: a worker busy in its work
"""


def test_a_rerun_waits_until_the_prior_pod_is_gone(
        cluster: Cluster, scenario: Scenario, journaled: OperatorProcess,
        worker_image: str) -> None:
    scenario.grant_editor("alice")
    grant_worker_role(scenario)
    scenario.configs()
    real_launch_spec(scenario, "sdk-workers", classes=["cpu"], image=worker_image,
                     script=stale.PRELUDE + STUCK, renewer=False,
                     env={OWNER_ENV: "http://127.0.0.1:9"})
    scenario.custom.patch_namespaced_custom_object(  # its pod outlives its fencing a while
        "agentrun.dev", "v1alpha1", scenario.namespace, "launchspecs", "sdk-workers",
        {"spec": {"template": {"spec": {"terminationGracePeriodSeconds": 30}}}})
    scenario.run("study", user="alice", max_attempts=1)
    slot = scenario.slot_name_eventually("study", "research")
    wait_for(lambda: any("started" in p for p in printed(scenario, f"{slot}-1")),
             timeout=120, message="attempt 1 at work")
    gave_up = plugin(cluster, scenario, "give-up", slot, "--reason", "wrong inputs", "-o",
                     "json", user="alice")
    assert gave_up.returncode == 0, (gave_up.stdout, gave_up.stderr)
    wait_for(lambda: (scenario.pod(f"{slot}-1") or {}).get("metadata", {}).get(
        "deletionTimestamp"), timeout=30, message="the given-up pod being deleted")
    assert scenario.slot(slot)["status"]["state"] == "Failed"
    done = rerun(cluster, scenario, slot, "--reason", "start over with the right inputs")
    entry = json.loads(done.stdout)["entry"]
    assert (entry["outcome"], entry["predicate"]) == ("Rejected", "PriorNotTerminal"), entry
    assert scenario.pod(f"{slot}-1") is not None  # still there: its pod was not terminal
    status = scenario.slot(slot)["status"]
    assert (status["state"], status.get("reruns", 0)) == ("Failed", 0)
    assert scenario.lease(f"{slot}-2") is None
