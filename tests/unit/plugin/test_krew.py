"""The krew manifest template (operator/agentrun/plugin/krew/agentrun.yaml): it parses as
it is, and once a release substitutes its placeholders it is what krew requires: the
plugin named as its binary, ``kubectl-agentrun`` (the distribution's console script) on
every platform, a semantic version with its ``v``, an https archive and its sha256."""

from __future__ import annotations

import re
import string
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
TEMPLATE = ROOT / "operator" / "agentrun" / "plugin" / "krew" / "agentrun.yaml"
PLATFORMS = {("linux", "amd64"), ("linux", "arm64"), ("darwin", "amd64"),
             ("darwin", "arm64")}


def project() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_template_parses_and_names_the_binary() -> None:
    manifest = yaml.safe_load(TEMPLATE.read_text())
    assert manifest["apiVersion"] == "krew.googlecontainertools.github.com/v1alpha2"
    assert manifest["kind"] == "Plugin" and manifest["metadata"]["name"] == "agentrun"
    bins = {platform["bin"] for platform in manifest["spec"]["platforms"]}
    assert bins == {"kubectl-agentrun"}
    scripts = project()["scripts"]  # what pip installs under those names
    assert scripts["kubectl-agentrun"] == "agentrun.plugin.cli:main"
    assert scripts["kubectl_complete-agentrun"] == "agentrun.plugin.completion:main"


def test_a_release_substituted_is_what_krew_requires() -> None:
    template = string.Template(TEMPLATE.read_text())
    names = set(template.get_identifiers())
    sums = {f"SHA256_{os_.upper()}_{arch.upper()}" for os_, arch in PLATFORMS}
    assert names == {"VERSION", "HOMEPAGE", "RELEASES", *sums}
    version = project()["version"]
    given = {"VERSION": version, "HOMEPAGE": "https://example.org/agentrun",
             "RELEASES": "https://example.org/agentrun/releases/download",
             **{name: f"{n:064x}" for n, name in enumerate(sorted(sums))}}
    spec = yaml.safe_load(template.substitute(given))["spec"]
    assert spec["version"] == f"v{version}"
    assert re.fullmatch(r"v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", spec["version"])
    assert spec["shortDescription"] and spec["description"] and spec["homepage"]
    seen = set()
    for platform in spec["platforms"]:
        labels = platform["selector"]["matchLabels"]
        seen.add((labels["os"], labels["arch"]))
        assert platform["uri"].startswith("https://") and f"v{version}/" in platform["uri"]
        assert f"_{labels['os']}_{labels['arch']}." in platform["uri"]
        assert re.fullmatch(r"[0-9a-f]{64}", platform["sha256"])
        assert {f["from"] for f in platform["files"]} >= {"kubectl-agentrun",
                                                          "kubectl_complete-agentrun"}
    assert seen == PLATFORMS and len(spec["platforms"]) == len(PLATFORMS)
