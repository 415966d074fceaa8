"""``make release``'s version check, without building anything.

Covers: both distributions, the operator's pin of the SDK, the chart and the manifests' image
name one version (pyproject.toml's),
the store's image tag is the SeaweedFS version it is built from, and a disagreement names
every file and field that says otherwise.
"""

from __future__ import annotations

from pathlib import Path

from tests.support import release


def test_the_chart_and_the_image_say_the_packages_version() -> None:
    assert release.disagreements(release.project_version()) == []


def test_a_disagreement_names_each_place() -> None:
    found = release.disagreements("0.0.0-other")
    assert len(found) == 7  # 2 of the chart's, the image's, the SDK's and 3 pins of it
    assert any(line.startswith("sdk/pyproject.toml: version") for line in found)
    assert sum("the dependency 'agentrun-worker" in line for line in found) == 3
    assert any("Chart.yaml: version:" in line for line in found)
    assert any("Chart.yaml: appVersion:" in line for line in found)
    assert any("workload.py: IMAGE" in line for line in found)


def test_only_a_release_folder_is_emptied(tmp_path: Path) -> None:
    """``--out`` is removed before a release is written: never the repository, nor a folder
    holding anything a release does not make."""
    assert release.foreign(release.REPO) != []
    assert release.foreign(release.REPO.parent) != []
    assert release.foreign(tmp_path / "new") == []
    (tmp_path / "agentrun_operator-0.1.0-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "SHA256SUMS").write_text("")
    assert release.foreign(tmp_path) == []
    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "sub").mkdir()
    assert release.foreign(tmp_path) == ["notes.txt", "sub"]
    assert release.main(["--out", str(tmp_path)]) == 2
    assert (tmp_path / "notes.txt").read_text() == "mine"  # nothing removed
