"""``--version`` on every command the distribution installs: the installed distribution's
version (importlib.metadata, so pyproject.toml's is the only copy), one line, exit 0; and
a tree imported without the distribution says so rather than failing."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import pytest

from agentrun import cli as operator_cli
from agentrun.api import distributions
from agentrun.owner import check
from agentrun.plugin import cli as plugin_cli
from agentrun.worker import cli as worker_cli

INSTALLED = metadata.version("agentrun-operator")
MAINS: dict[str, Callable[[list[str]], object]] = {
    "kubectl agentrun": plugin_cli.main, "agentrun-operator": operator_cli.main,
    "agentrun-worker": worker_cli.main, "agentrun-owner-check": check.main}


def test_the_two_distributions_are_one_version() -> None:
    """The operator pins the SDK at its own version; the SDK's commands say the SDK's."""
    assert metadata.version("agentrun-worker") == INSTALLED
    assert f"agentrun-worker=={INSTALLED}" in (metadata.requires("agentrun-operator") or [])


@pytest.mark.parametrize("prog", sorted(MAINS))
def test_version_is_one_line_and_exits_0(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        MAINS[prog](["--version"])
    assert stopped.value.code == 0
    out = capsys.readouterr()
    assert out.out == f"{prog} {INSTALLED}\n" and out.err == ""


def test_the_version_is_the_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    def ours() -> str:
        return distributions.version(distributions.WORKER)
    assert ours() == check.version() == INSTALLED
    monkeypatch.setattr(metadata, "version", lambda _: "9.8.7")
    assert ours() == check.version() == "9.8.7"

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    assert ours() == check.version() == "unknown (not installed as a distribution)"
