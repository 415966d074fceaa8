"""The alert rules and the dashboard read only series the operator's registry defines."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from agentrun import monitoring
from agentrun.controller import metrics

PROMTOOL = Path("/usr/bin/promtool")

# The names a family of each type exports (prometheus_client names a counter's family
# without its _total).
NAMES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "gauge": ("",),
         "info": ("_info",)}


def defined() -> set[str]:
    """Every series name the operator's registry exports, the census's (read at a
    scrape: a standby's zeros here) included."""
    meters = metrics.Metrics()
    meters.watch_census(lambda: None)
    return {family.name + suffix for family in meters.registry.collect()
            for suffix in NAMES[family.type]}


def test_every_expression_reads_series_the_operator_exports() -> None:
    exported = defined()
    read = {name for expr in monitoring.expressions().values()
            for name in re.findall(r"\b((?:agentrun|process)_[a-z_]+)", expr)}
    assert read and read - exported == set()


def test_each_alert_says_what_to_do_and_how_bad_it_is() -> None:
    for rule in monitoring.rule_groups()[0]["rules"]:
        assert re.fullmatch(r"Agentrun[A-Za-z]+", rule["alert"])
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
        assert re.fullmatch(r"[0-9]+[smh]", rule["for"])


def test_the_dashboard_has_a_panel_per_expression_on_a_chosen_data_source() -> None:
    board = json.loads(monitoring.dashboard_json())
    assert [p["targets"][0]["expr"] for p in board["panels"]] == [
        p.expr for p in monitoring.PANELS]
    assert len({p["id"] for p in board["panels"]}) == len(board["panels"])
    assert {p["datasource"]["uid"] for p in board["panels"]} == {"${datasource}"}
    assert board["templating"]["list"][0]["type"] == "datasource"


# promtool's unit tests of the rules (Debian's prometheus package: make promdeps): series
# given minute by minute, the alerts expected firing at a time (the rules' annotations left
# out: promtool compares them verbatim, and they are prose).
def at(labels: str, values: str) -> dict[str, str]:
    return {"series": labels, "values": values}


def firing(alert: str, minute: int, *expected: dict[str, str]) -> dict[str, Any]:
    return {"eval_time": f"{minute}m", "alertname": alert,
            "exp_alerts": [{"exp_labels": labels} for labels in expected]}


T = 'instance="a", job="agentrun"'
CASES: list[tuple[str, list[dict[str, str]], list[dict[str, Any]]]] = [
    ("a standby alone, then none scraped: no leader", [
        at(f"agentrun_leader{{{T}}}", "0x3 _x5")],
     [firing("AgentrunNoLeader", 1), firing("AgentrunNoLeader", 3, {"severity": "critical"}),
      firing("AgentrunNoLeader", 7, {"severity": "critical"})]),
    ("a leader and a standby: a leader", [
        at('agentrun_leader{instance="a", job="agentrun"}', "1x10"),
        at('agentrun_leader{instance="b", job="agentrun"}', "0x10")],
     [firing("AgentrunNoLeader", 5)]),
    ("the leader's queue over 100 for 10 minutes; a standby's never counts", [
        at(f"agentrun_leader{{{T}}}", "1x20"), at(f"agentrun_queue_depth{{{T}}}", "150x20"),
        at('agentrun_leader{instance="b", job="agentrun"}', "0x20"),
        at('agentrun_queue_depth{instance="b", job="agentrun"}', "900x20")],
     [firing("AgentrunWorkQueueSaturated", 9),
      firing("AgentrunWorkQueueSaturated", 11, {"severity": "warning"})]),
    ("a claim waiting 16 minutes; waits of 5 minutes, one after another, never", [
        at(f'agentrun_oldest_wait_seconds{{{T}, what="claim"}}', "0+60x20"),
        at(f'agentrun_oldest_wait_seconds{{{T}, what="effect"}}',
           "0 60 120 180 240 0 60 120 180 240 0 60 120 180 240 0 60 120 180 240")],
     [firing("AgentrunSlotsStuckClaiming", 15),
      firing("AgentrunSlotsStuckClaiming", 16, {"severity": "warning"}),
      firing("AgentrunUnresolvedEffects", 19)]),
    ("an effect waiting 16 minutes", [
        at(f'agentrun_oldest_wait_seconds{{{T}, what="effect"}}', "0+60x20")],
     [firing("AgentrunUnresolvedEffects", 16, {"severity": "warning"})]),
    ("one claim failed: the first one counts (the series is there at 0)", [
        at(f'agentrun_transitions_total{{{T}, kind="Attempt", outcome="ClaimFailed"}}',
           "0 0 1 1 1")],
     [firing("AgentrunClaimFailures", 1),
      firing("AgentrunClaimFailures", 3, {"severity": "warning"})]),
    ("six lease expiries in 15 minutes, and only three", [
        at(f"agentrun_lease_expiries_total{{{T}}}", "0 2 4 6 6 6")],
     [firing("AgentrunLeaseExpiries", 1),
      firing("AgentrunLeaseExpiries", 4, {"severity": "warning"})]),
    ("three lease expiries", [at(f"agentrun_lease_expiries_total{{{T}}}", "0 1 2 3 3 3")],
     [firing("AgentrunLeaseExpiries", 5)]),
    ("a slot at its budget", [
        at(f'agentrun_waiting_for_person{{{T}, what="budget"}}', "0 1 1")],
     [firing("AgentrunBudgetExceeded", 0),
      firing("AgentrunBudgetExceeded", 2, {"severity": "warning"})]),
    ("a question an hour old; approvals answered within minutes, for ever", [
        at(f'agentrun_oldest_wait_seconds{{{T}, what="question"}}', "0+60x70"),
        at(f'agentrun_oldest_wait_seconds{{{T}, what="approval"}}',
           " ".join(["0 120 240 360"] * 18))],
     [firing("AgentrunSlotsParked", 59),
      firing("AgentrunSlotsParked", 61, {"severity": "info", "what": "question"})]),
]


def test_promtool_finds_each_alert_firing_when_and_only_when_it_should(
        tmp_path: Path) -> None:
    assert PROMTOOL.exists(), "promtool is missing: run `make promdeps`"
    groups = monitoring.rule_groups()
    for rule in groups[0]["rules"]:
        rule.pop("annotations")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump({
        "rule_files": ["rules.yaml"], "evaluation_interval": "1m",
        "tests": [{"name": name, "interval": "1m", "input_series": series,
                   "alert_rule_test": checks} for name, series, checks in CASES]}))
    tested = subprocess.run([str(PROMTOOL), "test", "rules", "tests.yaml"], cwd=tmp_path,
                            capture_output=True, text=True, timeout=60, check=False)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    tested_alerts = {check["alertname"] for _, _, checks in CASES for check in checks
                     if check["exp_alerts"]}
    assert tested_alerts == {a.name for a in monitoring.ALERTS}  # each seen firing
