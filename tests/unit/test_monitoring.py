"""The alert rules and the dashboard read only series the operator's registry defines."""

from __future__ import annotations

import json
import re

from agentrun import monitoring
from agentrun.controller import metrics

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
