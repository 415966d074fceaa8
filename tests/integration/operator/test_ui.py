"""``kubectl agentrun ui`` in a real headless Chromium, against the real API server and
operator, as alice and as bob, each their own UI process with their own kubeconfig context.

alice owns a Manual run's slot whose attempt 1 failed (RetryWait). In her UI: the runs
page lists the run; its page draws the workflow; the slot's page shows attempt 1 Failed on
the timeline. bob's reassignment from his UI's form is refused by the operator and the page
shows the ledger entry's words exactly; a class the plugin would refuse is refused before
anything is written; alice's reassignment is accepted, and a hold she then sends with
``kubectl annotate`` appears on her open page live (a watch, an SSE push, no reload). The
browser requested nothing outside the UI's origin; the UI refuses another Host, another
Origin and a request without its token; a namespace alice may not list is not shown (and
said so), while the cluster admin's UI shows it.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import kubernetes
import pytest

from agentrun.plugin import requests as plugin_requests
from tests.support import browser
from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import PLUGIN, UI, api_server
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import (
    GROUP,
    VERSION,
    Scenario,
    request_id,
    user_binding,
)
from tests.support.waiting import wait_for

from . import test_effect_unresolved as unresolved

pytestmark = pytest.mark.skipif(browser.available() is not None,
                                reason=str(browser.available()))


@pytest.fixture
def other(cluster: Cluster, api_client: kubernetes.client.ApiClient) -> Iterator[str]:
    """A namespace holding one run (the admin's), where alice may list and watch runs but
    not slots (so the UI, which needs both, must leave it out), and bob nothing."""
    core = kubernetes.client.CoreV1Api(api_client)
    name = f"t-{request_id()[:10]}-other"
    core.create_namespace({"metadata": {"name": name}})
    rbac = kubernetes.client.RbacAuthorizationV1Api(api_client)
    rbac.create_namespaced_role(name, {"metadata": {"name": "runs-only"}, "rules": [
        {"apiGroups": [GROUP], "resources": ["agentruns"], "verbs": ["get", "list", "watch"]}]})
    rbac.create_namespaced_role_binding(name, user_binding(
        "runs-only", kind="Role", role="runs-only", users=["alice"]))
    kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
        GROUP, VERSION, name, "agentruns", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun",
            "metadata": {"name": "secret-study"},
            "spec": {"package": {"name": "p"}, "workflow": {"name": "w"},
                     "bindings": {"name": "b"}}})
    yield name
    core.delete_namespace(name)


def _page(ui: UI, path: str) -> str:
    """A page of ``ui`` as its store has it now (the token's cookie; not the browser's)."""
    token = ui.url.split("token=", 1)[1]
    port = ui.origin.rsplit(":", 1)[1]
    with urllib.request.urlopen(urllib.request.Request(
            ui.origin + path, headers={"Cookie": f"agentrun-ui-{port}={token}"}),
            timeout=10) as answer:
        return str(answer.read().decode())


def _status(url: str, *, headers: dict[str, str], method: str = "GET",
            body: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(
                url, headers=headers, method=method, data=body), timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_the_ui_shows_refuses_and_sends_live(cluster: Cluster, scenario: Scenario,
                                             operator: OperatorProcess, other: str,
                                             tmp_path: Path) -> None:
    if cluster.local is None:
        pytest.skip("needs the local control plane's per-user contexts (alice, bob)")
    slot = scenario.owned_retry_wait(owner="alice")
    nothing = subprocess.run(
        [str(PLUGIN), "--kubeconfig", str(cluster.kubeconfig), "--context", "bob", "ui",
         "--port", "0", "-n", other], capture_output=True, text=True, timeout=60, check=False)
    assert nothing.returncode == 1, (nothing.stdout, nothing.stderr)
    assert "nothing to show: you may not list runs in namespace default" in nothing.stderr
    assert f"you may not list runs in namespace {other}" in nothing.stderr
    alice = UI(cluster, scenario, "-n", scenario.namespace, "-n", other, user="alice",
               connects=tmp_path / "alice-connects.strace")
    bob = UI(cluster, scenario, "-n", scenario.namespace, user="bob")
    admin = UI(cluster, scenario, user="admin")
    try:
        assert any(f"you may not list slots in namespace {other}" in line
                   for line in alice.lines.seen), alice.lines.seen
        with browser.browser() as launched:
            with browser.browsing(launched) as seen:
                page = seen.page
                page.goto(alice.url)
                assert page.url == f"{alice.origin}/runs"  # the token became a cookie
                rows = page.locator("#runs .row")
                assert rows.count() == 1 and "study" in rows.first.inner_text()
                assert "secret-study" not in page.content()
                assert f"you may not list slots in namespace {other}" in page.content()
                seen.shot("runs")

                page.get_by_role("link", name="study").click()
                page.wait_for_url(f"{alice.origin}/runs/{scenario.namespace}/study")
                # a link a screen reader reaches (not hidden inside an image)
                node = page.get_by_role("link", name=re.compile("^node research: "))
                assert node.count() == 1
                assert "RetryWait" in (node.get_attribute("aria-label") or "")
                seen.shot("run")
                said = browser.send(page, "budget", {"add": "1000", "reason": "more room"})
                [entry] = scenario.agentrun("study")["status"]["commands"]  # the run's ledger
                assert (entry["kind"], entry["actor"]) == ("Budget", "alice")
                assert said == plugin_requests.describe(entry)
                assert browser.send(page, "budget", {"add": "-5", "reason": "r"}).startswith(
                    "not sent: ")

                node.click()
                page.wait_for_url(f"{alice.origin}/slots/{scenario.namespace}/{slot}")
                attempt = page.locator("#attempts tr.attempt[data-number='1']")
                assert "Failed" in attempt.inner_text()
                assert page.locator("svg.timeline rect.bar.Failed").count() == 1

                bad = browser.send(page, "reassign", {"worker_class": "GPU", "reason": "r"})
                assert bad.startswith("not sent: argument --class: --class must match"), bad
                ledger = len(scenario.slot(slot)["status"].get("commands") or [])

                with browser.browsing(launched) as bobs:
                    bobs.page.goto(bob.url)
                    bobs.page.goto(f"{bob.origin}/slots/{scenario.namespace}/{slot}")
                    said = browser.send(bobs.page, "reassign", {"reason": "mine now"})
                    entries = scenario.slot(slot)["status"]["commands"]
                    refused = entries[-1]
                    assert (refused["actor"], refused["predicate"]) == ("bob", "NotOwner")
                    assert said == plugin_requests.describe(refused)  # verbatim
                    assert len(entries) == ledger + 1  # the bad class wrote nothing
                    assert all(url.startswith(bob.origin) for url in bobs.requested)

                # bob's refusal reached alice's open page by itself
                page.locator("#ledger tr.entry", has_text="NotOwner").wait_for()
                accepted = browser.send(page, "reassign", {"worker_class": "cpu",
                                                    "reason": "the worker died mid-step"})
                entry = scenario.slot(slot)["status"]["commands"][-1]
                assert (entry["actor"], entry["outcome"]) == ("alice", "Accepted")
                assert accepted == plugin_requests.describe(entry)
                seen.shot("slot-reassigned")

                hold = request_id()
                assert scenario.annotate(slot, user="alice", hold_id=hold,
                                         hold_reason="looking at it").returncode == 0
                page.locator("#ledger tr.entry", has_text="looking at it").wait_for()
                assert page.url == f"{alice.origin}/slots/{scenario.namespace}/{slot}"
                seen.shot("slot-live")

                page.goto(f"{alice.origin}/waiting")
                assert slot in page.locator("#waiting").inner_text()
                foreign = [url for url in seen.requested if not url.startswith(alice.origin)]
                assert foreign == [], foreign

            with browser.browsing(launched) as admins:
                admins.page.goto(admin.url)
                assert "secret-study" in admins.page.locator("#runs").inner_text()

        port = alice.origin.rsplit(":", 1)[1]
        cookie = {"Cookie": f"agentrun-ui-{port}=not-the-token"}
        assert _status(f"{alice.origin}/runs", headers={}) == 401
        assert _status(f"{alice.origin}/runs", headers=cookie) == 401
        host = alice.origin.removeprefix("http://")
        assert _status(f"{alice.origin}/runs", headers={"Host": f"evil.test:{host.split(':')[1]}"}
                       ) == 421
        post = _status(f"{alice.origin}/slots/{scenario.namespace}/{slot}/hold",
                       headers={"Origin": "http://evil.test", "Content-Type":
                                "application/x-www-form-urlencoded"},
                       method="POST", body=b"reason=x")
        assert post == 403
        assert json.dumps(scenario.slot(slot)["status"]["commands"]).count("evil") == 0
    finally:
        for ui in (alice, bob, admin):
            print(f"--- {ui.url.split('?')[0]} stderr ---\n{ui.stop()}")
    peers, allowed = alice.peers(), api_server(cluster, user="alice")
    assert peers and peers <= allowed, (peers, allowed)  # the API server alone


def test_the_ui_resolves_an_unknown_effect_and_catches_up_after_a_drop(
        cluster: Cluster, scenario: Scenario, operator: OperatorProcess) -> None:
    """An effect whose outcome is unknown (attempt 1's worker asked its owner, who could
    not say) is listed as waiting for a person and resolved from alice's form; a change
    made while her page's stream is cut is on her page once the stream is back (resumed,
    told it missed one), and one made while her browser is offline once it is online."""
    if cluster.local is None:
        pytest.skip("needs the local control plane's per-user contexts (alice, bob)")
    slot = unresolved.manual_slot(scenario)
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun(unresolved.RUN)["metadata"]["uid"]
    unresolved.stop_on_unknown(scenario, slot=slot, run_uid=run_uid, key="publish",
                               owner=unresolved.Owner())
    scenario.finish(f"{slot}-1", "Failed", exit_code=1)
    scenario.wait_slot(slot, lambda s: len(s["status"].get("effects") or []) == 1,
                       message="the effect in status.effects")
    alice = UI(cluster, scenario, "-n", scenario.namespace, user="alice")
    try:
        with browser.browser() as launched, browser.browsing(launched) as seen:
            page = seen.page
            page.goto(alice.url)
            page.goto(f"{alice.origin}/waiting")
            row = page.locator("#waiting tr", has_text=slot)
            assert "effect publish: its outcome is unknown" in row.inner_text()
            row.get_by_role("link", name=slot).click()
            effect = page.locator("#effects tr.effect", has_text="publish")
            assert "Unresolved" in effect.inner_text()
            seen.shot("slot-effect-unresolved")

            said = browser.send(page, "resolve-effect", {"effect_key": "publish",
                                                         "outcome": "not-applied",
                                                         "reason": "the owner has no such post"})
            entry = scenario.slot(slot)["status"]["commands"][-1]
            assert (entry["kind"], entry["outcome"]) == ("ResolveEffect", "Accepted")
            assert said == plugin_requests.describe(entry)
            page.locator("#effects tr.effect.Resolved", has_text="publish").wait_for()
            seen.shot("slot-effect-resolved")

            # The stream dropped: its connection cut (ss -K) and kept from coming back until
            # the change is in the UI's store; once back, its resume (Last-Event-ID, else
            # the page's generation) says it missed a change, and the page shows it.
            page.route("**/live?*", lambda route: route.abort())
            port = alice.origin.rsplit(":", 1)[1]
            cut = subprocess.run(["ss", "-K", "dst", "127.0.0.1", "dport", "=", f":{port}"],
                                 capture_output=True, text=True, check=False)
            assert cut.returncode == 0 and f"127.0.0.1:{port}" in cut.stdout, cut
            hold = request_id()
            assert scenario.annotate(slot, user="alice", hold_id=hold,
                                     hold_reason="while the stream was cut").returncode == 0
            scenario.wait_ledger(slot, hold)
            at = f"/slots/{scenario.namespace}/{slot}"
            wait_for(lambda: "while the stream was cut" in _page(alice, at), timeout=30,
                     message="the hold in the UI's store")
            shown = page.locator("#ledger tr.entry", has_text="while the stream was cut")
            assert shown.count() == 0  # not pushed: the stream is down
            page.unroute("**/live?*")
            shown.wait_for(timeout=30_000)

            # Offline: a change made meanwhile is fetched once the browser is online again.
            page.context.set_offline(True)
            release = request_id()
            assert scenario.annotate(slot, user="alice", release_id=release).returncode == 0
            scenario.wait_ledger(slot, release)
            page.context.set_offline(False)
            page.locator("#ledger tr.entry", has_text="released by alice").wait_for(
                timeout=30_000)
            foreign = [url for url in seen.requested if not url.startswith(alice.origin)]
            assert foreign == [], foreign
    finally:
        print(f"--- the UI's stderr ---\n{alice.stop()}")
