"""The chart's generator: no drift, sentinels all replaced, literal braces kept literal."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from agentrun import chart, chartvalues, manifests
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
    assert f"{values['image']['repository']}:{values['image']['tag']}" == manifests.IMAGE
    assert values["resources"] == manifests.RESOURCES
    store = values["store"]
    assert f"{store['image']['repository']}:{store['image']['tag']}" == manifests.STORE_IMAGE
    assert store["enabled"] is True and store["size"] == manifests.STORE_SIZE
    schema = chartvalues.schema()
    assert schema["additionalProperties"] is False
    assert set(schema["required"]) == set(values)
    assert set(schema["properties"]) == set(values)
