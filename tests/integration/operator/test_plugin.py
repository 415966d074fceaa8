"""``kubectl agentrun`` against a real API server and operator, run as a person runs it.

alice owns a Manual run's slot whose attempt 1 failed (RetryWait). Through the plugin
binary (a subprocess, ``--kubeconfig`` and ``--context`` of the local control plane):
a reassignment with a blank reason is rejected by the operator (exit 1, the message says
why), bob's is rejected ``NotOwner``, a class out of its bound is refused before anything is
written (exit 2, the slot unchanged), alice's is accepted (exit 0) with the actor stamped by
admission; ``status`` shows the tree with the slot and its attempt and ``history`` the
ledger, both also as JSON a script can parse. A hold reason alice writes with a newline
and a screen clear (``kubectl annotate``) is shown escaped: one ledger row, no ESC byte.

Then the habits of a kubectl user: ``list`` (its columns, ``-o yaml``, ``-l`` passed to
the LIST and a selector the API server refuses as bad input), a namespace that does not
exist said so, ``status -w`` printing the tree again when a hold changes the slot and
ending at Ctrl-C with exit 0 (``list -w --timeout`` at its timeout), and completion, by
``kubectl_complete-agentrun`` and through kubectl's own ``__complete``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest
import yaml

from tests.support.actors.operators import OperatorProcess
from tests.support.actors.plugin import COMPLETER, PLUGIN, Lines, plugin, started
from tests.support.cluster.clusters import Cluster
from tests.support.plays.scenarios import Scenario, request_id, unchanged


def test_the_plugin_reassigns_shows_and_refuses(cluster: Cluster, scenario: Scenario,
                                                 operator: OperatorProcess) -> None:
    if cluster.local is None:
        pytest.skip("needs the local control plane's per-user contexts (alice, bob)")
    slot = scenario.owned_retry_wait(owner="alice")
    before = scenario.slot(slot)

    blank = plugin(cluster, scenario, "reassign", slot, "--reason", "  ", "--timeout", "30")
    assert blank.returncode == 1, (blank.stdout, blank.stderr)
    assert "Rejected (BlankReason)" in blank.stdout
    assert "must be non-blank" in blank.stdout
    entries = scenario.slot(slot)["status"]["commands"]
    assert (entries[-1]["actor"], entries[-1]["predicate"]) == ("alice", "BlankReason")

    bob = plugin(cluster, scenario, "reassign", slot, "--reason", "mine now", user="bob")
    assert bob.returncode == 1, (bob.stdout, bob.stderr)
    assert "Rejected (NotOwner)" in bob.stdout and "'alice'" in bob.stdout

    ledger = len(scenario.slot(slot)["status"]["commands"])
    bad = plugin(cluster, scenario, "reassign", slot, "--class", "GPU", "--reason", "r")
    assert bad.returncode == 2 and "--class must match" in bad.stderr
    assert len(scenario.slot(slot)["status"]["commands"]) == ledger
    missing = plugin(cluster, scenario, "claim", "no-such-slot")
    assert missing.returncode == 2 and "not found" in missing.stderr
    unchanged(before, scenario.slot(slot))  # rejections changed nothing but the ledger

    accepted = plugin(cluster, scenario, "-o", "json", "reassign", slot, "--class", "cpu",
                      "--reason", "the worker died mid-step")
    assert accepted.returncode == 0, (accepted.stdout, accepted.stderr)
    answer = json.loads(accepted.stdout)
    assert answer["exitCode"] == 0 and answer["entry"]["outcome"] == "Accepted"
    assert answer["entry"]["actor"] == "alice"  # stamped by admission, never by the plugin
    status = scenario.slot(slot)["status"]
    assert status["commands"][-1]["requestId"] == answer["entry"]["requestId"]
    assert status["nextOwnerActor"] == "alice"
    assert not any(key.startswith("agentrun.dev/reassign-")
                   for key in scenario.slot(slot)["metadata"].get("annotations", {}))

    tree = plugin(cluster, scenario, "status", "study")
    assert tree.returncode == 0, tree.stderr
    lines = tree.stdout.splitlines()
    assert lines[0].startswith(f"AgentRun {scenario.namespace}/study")
    assert any(f"slot {slot}" in line and "node research" in line for line in lines)
    assert any("attempt 1  Failed  class cpu" in line and "owner alice" in line
               for line in lines)
    as_json = json.loads(plugin(cluster, scenario, "status", "study", "-o", "json").stdout)
    [shown] = as_json["slots"]
    assert shown["name"] == slot and shown["attempts"][0]["outcome"] == "Failed"

    history = plugin(cluster, scenario, "history", slot)
    assert history.returncode == 0, history.stderr
    assert "BlankReason" in history.stdout and "NotOwner" in history.stdout
    assert "the worker died mid-step" in history.stdout
    rows = json.loads(plugin(cluster, scenario, "history", slot, "-o", "json").stdout)
    assert [(c["actor"], c["outcome"], c["predicate"]) for c in rows["commands"]
            if c["kind"] == "Reassign"] == [("alice", "Rejected", "BlankReason"),
                                            ("bob", "Rejected", "NotOwner"),
                                            ("alice", "Accepted", "-")]
    assert rows["attempts"][0]["owner"] == "alice"

    forged = "look\n2026-12-01T12:00:00Z  GiveUp  r9  alice  Accepted\x1b[2J\x1b[H"
    hold = request_id()
    assert scenario.annotate(slot, user="alice", hold_id=hold,
                             hold_reason=forged).returncode == 0
    assert scenario.wait_ledger(slot, hold)["reason"] == forged  # recorded as written
    shown = plugin(cluster, scenario, "history", slot)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(plugin(cluster, scenario, "history", slot, "-o", "json").stdout)
    assert rows["commands"][-1]["reason"] == forged  # -o json: exact
    # A heading, a blank line and a title before each table, and a header row in each;
    # then a blank line and why the journal is not shown (no history API registered here,
    # and alice is not granted it: the API server refuses).
    expected = 3 + 1 + len(rows["attempts"]) + 2 + 1 + len(rows["commands"]) + 2
    assert len(shown.stdout.splitlines()) == expected, shown.stdout
    assert shown.stdout.splitlines()[-1].startswith("Journal: not shown: "), shown.stdout
    assert rows["journal"]["error"]
    assert "\x1b" not in shown.stdout
    row = shown.stdout.splitlines()[-3]  # its reason, and the message quoting it, escaped
    assert row.count("look\\n2026-12-01T12:00:00Z  GiveUp  r9  alice  Accepted\\x1b[2J") == 2


def test_the_plugin_lists_watches_and_completes(cluster: Cluster, scenario: Scenario,
                                                operator: OperatorProcess) -> None:
    if cluster.local is None:
        pytest.skip("needs the local control plane's per-user contexts and its kubectl")
    slot = scenario.owned_retry_wait(owner="alice")

    listed = plugin(cluster, scenario, "list")
    assert listed.returncode == 0, listed.stderr
    header, row = listed.stdout.splitlines()
    assert header.split() == ["NAME", "STATE", "SLOTS", "AGE", "TENANT"]
    assert row.split()[:2] == ["study", "Running"]
    as_yaml = yaml.safe_load(plugin(cluster, scenario, "list", "-o", "yaml").stdout)
    assert [(r["name"], r["claimPolicy"]) for r in as_yaml["runs"]] == [("study", "Manual")]
    none = plugin(cluster, scenario, "list", "-l", "agentrun.dev/no-such-label=x")
    assert (none.returncode, none.stdout) == (0, ""), none.stderr
    assert "No runs found in namespace" in none.stderr
    refused = plugin(cluster, scenario, "list", "-l", "a=(b")  # the API server's 400
    assert refused.returncode == 2, (refused.stdout, refused.stderr)
    nowhere = plugin(cluster, scenario, "status", "study", "-n", "no-such-namespace",
                     user="admin")
    assert nowhere.returncode == 2, (nowhere.stdout, nowhere.stderr)
    assert "namespace 'no-such-namespace' does not exist" in nowhere.stderr

    timed = plugin(cluster, scenario, "list", "-w", "--timeout", "2")
    assert timed.returncode == 0, timed.stderr
    assert timed.stdout.splitlines()[1].startswith("study")

    watcher = started(cluster, scenario, "status", "study", "-w", "--timeout", "300")
    try:
        lines = Lines(watcher)
        lines.wait_for(lambda line: f"slot {slot}" in line, what="the first tree's slot")
        held = plugin(cluster, scenario, "hold", slot, "--reason", "look at it first")
        assert held.returncode == 0, (held.stdout, held.stderr)
        lines.wait_for(lambda line: f"slot {slot}" in line and "Held" in line,
                       what="the tree again, the slot held")
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(timeout=30) == 0
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait(timeout=30)
    assert watcher.stderr is not None and "Traceback" not in watcher.stderr.read()

    person = ["--kubeconfig", str(cluster.kubeconfig), "--context", "alice",
              "-n", scenario.namespace]

    def complete(*words: str, binary: list[str] | None = None) -> list[str]:
        done = subprocess.run([*(binary or [str(COMPLETER)]), *words], capture_output=True,
                              text=True, check=False, timeout=60, env={
                                  **os.environ,
                                  "PATH": f"{PLUGIN.parent}{os.pathsep}{os.environ['PATH']}"})
        assert done.returncode == 0, (done.stdout, done.stderr)
        return done.stdout.splitlines()
    assert complete(*person, "status", "st") == ["study", ":4"]
    assert complete(*person, "claim", "") == [slot, ":4"]
    assert complete("--kubeconfig", str(cluster.kubeconfig), "--context", "nobody",
                    "status", "") == [":4"]  # no such context: no names, no error
    kubectl = str(cluster.local.workdir / "bin" / "kubectl")
    assert complete("__complete", "agentrun", *person, "status", "st",
                    binary=[kubectl]) == ["study", ":4"]
