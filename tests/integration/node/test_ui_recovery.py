"""The demo's recovery trace with real pods, walked in the web UI as alice (and bob).

The example agent runs on the node, its steps committed to the journal in the cluster's
bundled store; the operator serves the history API (registered as the chart does, so the
UI reads the journal through the API server under alice's RBAC). alice's Manual run waits
for a claim. In a real headless Chromium, from her own ``kubectl agentrun ui``:

- she claims the slot from its form; attempt 1 appears running on her open page;
- its container is killed on the node where it paused after saving ``source-1`` and
  ``source-2``; attempt 1 turns Failed by itself, and the timeline ends it where the
  operator found its lease expired (its words: "the lease is expired");
- bob's reassignment from his UI is refused and his page shows the ledger's words
  exactly; it appears on alice's page by itself;
- alice reassigns to gpu from the form (the answer is the ledger entry, verbatim) and
  claims again; attempt 2 appears live, and once it succeeds its journal shows it skipped
  ``source-1`` and ``source-2`` (from the prefix) and ran the rest; the report was
  published once, at the owner;
- she forks the run at ``research:source-2`` from the run's form; the answer is the
  operator's ``Forked`` words, and the new run names its source;
- her browser requested nothing outside her UI's origin, and her UI's process (under
  strace, every ``connect()`` of every thread recorded) connected to nothing but the
  kubeconfig's API server.

Serial: the history API's APIService is cluster-wide (see ``test_journal_history``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun.plugin import requests as plugin_requests
from agentrun.worker import _effects as effects
from tests.integration.node import test_journal_history as journal_history
from tests.support import browser
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import UI, api_server
from tests.support.actors.workers import (
    agent_configs,
    agent_launch_spec,
    grant_worker_role,
    kill_when_paused,
)
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.scenarios import Scenario, condition_of

pytestmark = [pytest.mark.kubelet, pytest.mark.serial,
              pytest.mark.skipif(browser.available() is not None,
                                 reason=str(browser.available()))]
installed, history = journal_history.installed, journal_history.history
PAUSE = "after-step:source-2"  # the demo's: attempt 1 has saved source-1 and source-2
STEP_MS = 150_000  # one step on a busy 2-core machine (a cold pod start included)


def test_the_recovery_trace_walked_in_the_ui(
        cluster: Cluster, scenario: Scenario, history: tuple[OperatorProcess, int],
        worker_image: str, node: LocalNode, owner: EffectOwner, tmp_path: Path) -> None:
    if cluster.local is None:
        pytest.skip("needs the local control plane's per-user contexts (alice, bob)")
    scenario.grant_editor("alice", "bob")
    journal_history.bind(scenario, "alice", role="view")  # reads the journal too
    grant_worker_role(scenario)
    agent_configs(scenario, owner_url=owner.url)
    agent_launch_spec(scenario, "cpu-workers", classes=["cpu"], image=worker_image,
                      pause=f"{PAUSE}@1")
    agent_launch_spec(scenario, "gpu-workers", classes=["gpu"], image=worker_image)
    scenario.run("study", user="alice", claim_policy="Manual", max_attempts=3)
    slot = scenario.slot_name_eventually("study", "research")
    scenario.wait_state(slot, "Ready")
    at = f"/slots/{scenario.namespace}/{slot}"
    alice = UI(cluster, scenario, "-n", scenario.namespace, user="alice",
               connects=tmp_path / "alice-connects.strace")
    bob = UI(cluster, scenario, "-n", scenario.namespace, user="bob")
    try:
        with browser.browser() as launched, browser.browsing(launched) as seen:
            page = seen.page
            page.goto(alice.url)
            page.goto(alice.origin + at)
            said = browser.send(page, "claim", {})
            entry = scenario.slot(slot)["status"]["commands"][-1]
            assert (entry["kind"], entry["outcome"], entry["actor"]) == (
                "Claim", "Accepted", "alice")
            assert said == plugin_requests.describe(entry)
            page.locator("#attempts tr.attempt[data-number='1']", has_text="Running"
                         ).wait_for(timeout=STEP_MS)

            kill_when_paused(scenario, node, f"{slot}-1", point=PAUSE, timeout=STEP_MS / 1000)
            ended = page.locator("ul.ends li[data-number='1']")
            ended.wait_for(timeout=STEP_MS)  # once the operator finds its lease expired
            assert "ended Failed" in ended.inner_text()
            assert "exit code 137; the lease is expired" in ended.inner_text()
            assert page.locator("svg.timeline rect.end.Failed[data-number='1']").count() == 1
            first = page.locator("table.steps[data-attempt='1'] caption")
            assert "source-1" in page.locator("table.steps[data-attempt='1']").inner_text()
            assert "skipped" not in first.inner_text()
            seen.shot("recovery-attempt-1-failed")

            with browser.browsing(launched) as bobs:
                bobs.page.goto(bob.url)
                bobs.page.goto(bob.origin + at)
                said = browser.send(bobs.page, "reassign", {"worker_class": "gpu",
                                                            "reason": "I can take this one"})
                refused = scenario.slot(slot)["status"]["commands"][-1]
                assert (refused["actor"], refused["predicate"]) == ("bob", "NotOwner")
                assert said == plugin_requests.describe(refused)
            page.locator("#ledger tr.entry", has_text="NotOwner").wait_for()

            said = browser.send(page, "reassign", {
                "worker_class": "gpu", "reason": "the cpu worker died mid-research"})
            entry = scenario.slot(slot)["status"]["commands"][-1]
            assert (entry["kind"], entry["outcome"], entry["actor"], entry["workerClass"]) \
                == ("Reassign", "Accepted", "alice", "gpu")
            assert said == plugin_requests.describe(entry)
            scenario.wait_slot(slot, lambda s: (condition_of(s["status"], "Reopened") or {})
                               .get("status") == "True", message="slot Reopened")
            assert f"{slot}-2" not in scenario.pods()  # no worker before a claim
            said = browser.send(page, "claim", {})
            assert said == plugin_requests.describe(scenario.slot(slot)["status"]["commands"][-1])
            page.locator("#attempts tr.attempt[data-number='2']").wait_for(timeout=STEP_MS)
            assert "gpu" in page.locator("#attempts tr.attempt[data-number='2']").inner_text()

            page.locator("#slot-state.Succeeded").wait_for(timeout=STEP_MS)
            second = page.locator("table.steps[data-attempt='2'] caption")
            second.wait_for(timeout=30_000)
            assert "skipped (from the prefix): source-1, source-2" in second.inner_text()
            assert "source-3" in page.locator("table.steps[data-attempt='2']").inner_text()
            seen.shot("recovery-attempt-2")
            run_uid = scenario.agentrun("study")["metadata"]["uid"]
            key = effects.idempotency_key(run_uid=run_uid, slot=slot, key="publish")
            assert owner.applied == {key: 1}

            page.goto(f"{alice.origin}/runs/{scenario.namespace}/study")
            said = browser.send(page, "fork", {"new_name": "study-again",
                                               "at": "research:source-2",
                                               "reason": "try another outline"})
            forked = scenario.agentrun("study-again")
            condition = condition_of(forked["status"], "Forked") or {}
            assert condition.get("status") == "True", forked["status"]
            assert said == f"run study-again: {condition['message']}"
            assert forked["spec"]["fork"]["run"] == "study"
            foreign = [url for url in seen.requested if not url.startswith(alice.origin)]
            assert foreign == [], foreign
    finally:
        for ui in (alice, bob):
            print(f"--- {ui.url.split('?')[0]} stderr ---\n{ui.stop()}")
    peers, allowed = alice.peers(), api_server(cluster, user="alice")
    print(f"alice's UI connected to: {sorted(peers)} (the API server: {sorted(allowed)})")
    assert peers and peers <= allowed, (peers, allowed)

