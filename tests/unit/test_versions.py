"""``--version`` on every command the distribution installs: the installed distribution's
version (importlib.metadata, so pyproject.toml's is the only copy), one line, exit 0; and
a tree imported without the distribution says so rather than failing."""

from __future__ import annotations

from collections.abc import Callable
from importlib import metadata

import pytest

import agentrun
from agentrun import cli as operator_cli
from agentrun.owner import check
from agentrun.plugin import cli as plugin_cli
from agentrun.worker import cli as worker_cli

INSTALLED = metadata.version("agentrun-operator")
MAINS: dict[str, Callable[[list[str]], object]] = {
    "kubectl agentrun": plugin_cli.main, "agentrun-operator": operator_cli.main,
    "agentrun-worker": worker_cli.main, "agentrun-owner-check": check.main}


@pytest.mark.parametrize("prog", sorted(MAINS))
def test_version_is_one_line_and_exits_0(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        MAINS[prog](["--version"])
    assert stopped.value.code == 0
    out = capsys.readouterr()
    assert out.out == f"{prog} {INSTALLED}\n" and out.err == ""


def test_the_version_is_the_distributions(monkeypatch: pytest.MonkeyPatch) -> None:
    assert agentrun.version() == check.version() == INSTALLED
    monkeypatch.setattr(metadata, "version", lambda _: "9.8.7")
    assert agentrun.version() == check.version() == "9.8.7"

    def missing(name: str) -> str:
        raise metadata.PackageNotFoundError(name)
    monkeypatch.setattr(metadata, "version", missing)
    assert agentrun.version() == check.version() == "unknown (not installed as a distribution)"
