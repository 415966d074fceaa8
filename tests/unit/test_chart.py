"""The chart's generator: no drift, sentinels all replaced, literal braces kept literal."""

from __future__ import annotations

import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from agentrun import bundledstore, chart, chartvalues, cli, telemetry, workload
from agentrun.api import crds

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "agentrun-operator"
CRDS = REPO / "crds"


def test_chart_files_match_the_generator() -> None:
    assert chart.main(["--out", str(CHART), "--crds", str(CRDS), "--check"]) == 0


def test_the_chart_crds_are_the_projects_byte_for_byte() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(crds.file_names())
    for name in crds.file_names():
        assert (CHART / "crds" / name).read_bytes() == (CRDS / name).read_bytes(), name


def test_a_stray_template_is_drift(tmp_path: Path) -> None:
    generate = ["--out", str(tmp_path), "--crds", str(CRDS)]
    assert chart.main(generate) == 0
    assert chart.main([*generate, "--check"]) == 0
    (tmp_path / "templates" / "old.yaml").write_text("kind: Old\n")
    assert chart.main([*generate, "--check"]) == 1
    assert chart.main(generate) == 0
    assert not (tmp_path / "templates" / "old.yaml").exists()


def test_sentinels_become_template_expressions() -> None:
    text = chart.template(chart.deployment())
    assert "__HELM_" not in text
    assert "image: {{ printf" in text
    assert "{{- toYaml .Values.resources | nindent 10 }}" in text
    assert "{{- range .Values.watchNamespaces }}" in text


def test_literal_braces_are_escaped_and_unknown_sentinels_refused() -> None:
    text = chart.template([{"kind": "ConfigMap", "data": {"x": "{{ not helm }}"}}])
    assert '{{ "{{" }} not helm }}' in text
    with pytest.raises(KeyError):
        chart.sentinel("NOPE")


def test_values_defaults_are_the_manifests_and_fit_the_schema() -> None:
    values = yaml.safe_load(chartvalues.values_yaml())
    assert values == chartvalues.defaults()
    assert f"{values['image']['repository']}:{values['image']['tag']}" == workload.IMAGE
    assert values["resources"] == workload.RESOURCES
    store = values["store"]
    assert f"{store['image']['repository']}:{store['image']['tag']}" == bundledstore.STORE_IMAGE
    assert store["enabled"] is True and store["size"] == bundledstore.STORE_SIZE
    schema = chartvalues.schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(values)
    assert set(schema["properties"]) == set(values)


def test_the_journal_values_become_the_operators_journal_flags() -> None:
    """Every flag the template can pass is the CLI's, and the defaults parse there."""
    text = chart.template(chart.deployment())
    flags = set(re.findall(r"- (--journal-[a-z-]+)$", text, flags=re.MULTILINE))
    assert flags == {f"--journal-{name.replace('_', '-')}" for name in cli.JOURNAL_FLAGS}
    assert 'fail "journal.endpoint and journal.bucket go together' in text
    journal = chartvalues.defaults()["journal"]
    assert (journal["endpoint"], journal["bucket"], journal["secretName"]) == ("", "", "")
    args = cli.parse(["run", "--journal-endpoint", "http://minio:9000", "--journal-bucket",
                      "journals", "--journal-prefix", journal["prefix"],
                      "--journal-region", journal["region"]])
    assert args.journal is not None and args.journal.prefix == journal["prefix"]


def test_the_journal_secret_is_the_one_name_the_operator_may_read() -> None:
    node = chartvalues.schema()["properties"]["journal"]["properties"]["secretName"]
    assert node["enum"] == ["", "agentrun-journal"]


@pytest.mark.parametrize(("key", "good", "bad"), [
    ("endpoint", ["", "http://minio.storage:9000"], ["http://minio/", "minio:9000"]),
    ("bucket", ["", "journals"], ["Journals", "ab"]),
    ("prefix", ["", "a/b"], ["/a", "a/../b", "p" * 412]),
    ("region", ["us-east-1"], ["", "r" * 65]),
])
def test_the_journal_schema_bounds_what_the_flags_check(key: str, good: list[str],
                                                        bad: list[str]) -> None:
    node = chartvalues.schema()["properties"]["journal"]["properties"][key]

    def fits(value: str) -> bool:
        return (len(value) <= node["maxLength"] and len(value) >= node.get("minLength", 0)
                and re.search(node["pattern"], value) is not None)

    assert all(fits(value) for value in good), key
    assert not any(fits(value) for value in bad), key


@pytest.mark.parametrize("value", [
    "", "http://c:4318", "https://collector.obs/base", "http://[::1]:4318", "collector:4318",
    "http://:4318", "http://u@h:1", "http://c/?q", "http://c:123456", "ftp://c",
    "http://c/" + "a" * 2048])
def test_the_tracing_schema_takes_what_the_flag_takes(value: str) -> None:
    node = chartvalues.schema()["properties"]["tracing"]["properties"]["endpoint"]
    fits = len(value) <= node["maxLength"] and re.search(node["pattern"], value) is not None
    try:
        telemetry.check_endpoint(value)
        taken = True
    except telemetry.EndpointError:
        taken = False
    assert fits == (taken or value == ""), value  # "": no tracing


@pytest.mark.parametrize(("monitoring", "said"), [
    ({"serviceMonitor": {"enabled": True, "interval": "soon"}}, "does not match"),
    ({"serviceMonitor": {"enabled": True, "interval": "30s1m"}}, "does not match"),
    ({"labels": {"release": 7}}, "is not of type 'string'"),
    ({"labels": {"-bad-": "x"}}, "does not match"),
    ({"labels": {f"k{i}": "v" for i in range(17)}}, "has too many properties"),
    ({"dashboard": {"enabled": "yes"}}, "is not of type 'boolean'"),
    ({"grafana": True}, "Additional properties are not allowed"),
])
def test_monitoring_values_out_of_their_bounds_are_refused(monitoring: dict[str, object],
                                                          said: str) -> None:
    values = chartvalues.defaults()
    for key, value in monitoring.items():
        base = values["monitoring"].get(key)
        values["monitoring"][key] = ({**base, **value} if isinstance(base, dict)
                                     and isinstance(value, dict) and key != "labels" else value)
    errors = [e.message for e in jsonschema.Draft7Validator(chartvalues.schema())
              .iter_errors(values)]
    assert errors and any(said in e for e in errors), errors
    assert not list(jsonschema.Draft7Validator(chartvalues.schema()).iter_errors(
        chartvalues.defaults()))
