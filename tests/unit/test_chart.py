"""The chart's generator: no drift, sentinels all replaced, literal braces kept literal."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agentrun import bundledstore, chart, charttemplates, chartvalues, cli, telemetry, workload
from agentrun.api import crds
from tests.support.cluster.helm import EVERY_VALUE

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
    text = charttemplates.template(chart.deployment())
    assert "__HELM_" not in text
    assert "image: {{ printf" in text
    assert "{{- toYaml .Values.resources | nindent 10 }}" in text
    assert "{{- range .Values.watchNamespaces }}" in text


def test_literal_braces_are_escaped_and_unknown_sentinels_refused() -> None:
    text = charttemplates.template([{"kind": "ConfigMap", "data": {"x": "{{ not helm }}"}}])
    assert '{{ "{{" }} not helm }}' in text
    with pytest.raises(KeyError):
        charttemplates.sentinel("NOPE")


def test_every_object_gets_the_standard_labels_and_keeps_its_own_and_its_selector() -> None:
    (_, deployment) = workload.deployment()
    found = charttemplates.labelled(deployment)
    assert found["metadata"]["labels"] == {**charttemplates.STANDARD_LABELS, **workload.SELECTOR}
    # Never a label that changes with the chart's version on a pod: an upgrade that changes
    # nothing else of a pod does not restart it.
    assert found["spec"]["template"]["metadata"]["labels"] == {
        **{k: v for k, v in charttemplates.STANDARD_LABELS.items()
           if k not in ("app.kubernetes.io/version", "helm.sh/chart")}, **workload.SELECTOR}
    assert found["spec"]["selector"] == deployment["spec"]["selector"]  # immutable: untouched
    store = charttemplates.labelled({"metadata": {"labels": dict(bundledstore.STORE_SELECTOR)}})
    assert store["metadata"]["labels"]["app.kubernetes.io/name"] == bundledstore.STORE
    assert charttemplates.labelled({"metadata": {}})["metadata"]["labels"] == (
        charttemplates.STANDARD_LABELS)
    assert "labels" not in deployment["metadata"]["labels"]  # a copy: the manifests' unchanged


def test_every_value_has_a_description_in_the_schema() -> None:
    """The chart's own keys (not the Kubernetes shapes inside a leaf such as resources)."""
    def undescribed(values: dict[str, Any], node: dict[str, Any], path: str) -> list[str]:
        found = []
        for key, value in values.items():
            child = node["properties"][key]
            if "description" not in child:
                found.append(f"{path}{key}")
            if isinstance(value, dict) and f"{path}{key}" not in chartvalues.LEAVES:
                found += undescribed(value, child, f"{path}{key}.")
        return found
    assert undescribed(chartvalues.defaults(), chartvalues.schema(), "") == []


def test_the_extra_values_say_every_flag_and_variable_the_chart_refuses() -> None:
    """What extraArgs and extraEnv may not hold is refused by the templates
    (``charttemplates.CHART_FLAGS``, ``CHART_ENV``); their descriptions list the same, so a
    reader of values.yaml is not surprised by a refusal."""
    properties = chartvalues.schema()["properties"]
    args = properties["extraArgs"]["description"]
    for flag in charttemplates.CHART_FLAGS:
        if flag.startswith("--"):  # (-n, -v: --namespace's and --verbose's short forms)
            assert (f"{flag}*" if flag.endswith("-") else flag) in args, flag
    env = properties["extraEnv"]["description"]
    assert all(name in env for name in charttemplates.CHART_ENV), env


def fits(values: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(chartvalues.schema()).iter_errors(
        values)]


def test_the_pods_values_in_their_bounds_fit_and_out_of_them_do_not() -> None:
    every = {**chartvalues.defaults(), **EVERY_VALUE}
    assert fits(every) == []
    for key, bad, said in [
            ("imagePullSecrets", [{"name": "Bad Name"}], "does not match"),
            ("imagePullSecrets", [{"name": "s"}] * 17, "is too long"),
            ("extraArgs", ["x" * 1025], "is too long"),
            ("extraEnv", [{"value": "no name"}], "'name' is a required property"),
            ("extraEnv", [{"name": "A", "valueFrom": "x"}], "is not of type 'object'"),
            ("podAnnotations", {"a": "x" * 4097}, "is too long"),
            ("podLabels", {"team": "-bad-"}, "does not match"),
            ("nodeSelector", {"bad key!": "x"}, "does not match"),
            ("tolerations", [{"operator": "Maybe"}], "is not one of"),
            ("tolerations", [{"seconds": 1}], "Additional properties are not allowed"),
            ("affinity", {"antiAffinity": {}}, "Additional properties are not allowed"),
            ("priorityClassName", "High", "does not match"),
            ("networkPolicy", {"enabled": True, "metricsFrom": [{"pods": {}}]},
             "Additional properties are not allowed"),
            ("networkPolicy", {"enabled": "yes", "metricsFrom": []}, "is not of type")]:
        errors = fits({**every, key: bad})
        assert any(said in e for e in errors), (key, errors)
    assert any("does not match" in e for e in fits(
        {**every, "image": {**every["image"], "tag": "v 1"}}))


def test_values_defaults_are_the_manifests_and_fit_the_schema() -> None:
    values = yaml.safe_load(chartvalues.values_yaml())
    assert values == chartvalues.defaults()
    assert values["image"]["tag"] == ""  # the chart's appVersion, which is the manifests' tag
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert f"{values['image']['repository']}:{app_version}" == workload.IMAGE
    assert values["affinity"] == workload.SPREAD
    assert values["resources"] == workload.RESOURCES
    store = values["store"]
    assert f"{store['image']['repository']}:{store['image']['tag']}" == bundledstore.STORE_IMAGE
    assert store["enabled"] is True and store["size"] == bundledstore.STORE_SIZE
    schema = chartvalues.schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(values) - {"affinity"}  # null: none
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
