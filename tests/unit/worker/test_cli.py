"""``agentrun-worker run``: what it accepts, and how it supervises the worker command.

Covers: the lease, namespace and identity come from the worker environment the operator
sets (or options), are required and must be Kubernetes names; a command is required; the
start timeout is bounded. Supervision (with a keeper stand-in, a real child process):
the child's exit code is the renewer's, a signal N becomes 128 + N, and a lost or lapsed
lease terminates the child. The renewal itself is tested against the API server in
``tests/integration/test_worker_renewer.py``. ``agentrun-worker ready``, the sidecar's
startup probe: its exit code from what the sidecar answers, and that it loads none of the
SDK; and the package's public names, each loaded from its module when first used.
"""

from __future__ import annotations

import http.server
import importlib
import json
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from agentrun.worker import cli

ENV = {"AGENTRUN_NAMESPACE": "team-a", "AGENTRUN_LEASE": "slot-a-1", "HOSTNAME": "slot-a-1"}


@pytest.fixture
def worker_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, value)


@pytest.mark.usefixtures("worker_env")
def test_the_worker_environment_names_the_lease() -> None:
    args = cli.parse(["run", "--", "python", "-m", "worker", "--flag"])
    assert (args.namespace, args.lease, args.identity) == ("team-a", "slot-a-1", "slot-a-1")
    assert args.argv == ["python", "-m", "worker", "--flag"]


@pytest.mark.usefixtures("worker_env")
def test_options_override_the_environment() -> None:
    args = cli.parse(["run", "--lease", "other-2", "--identity", "other-2", "--", "true"])
    assert (args.lease, args.identity) == ("other-2", "other-2")


@pytest.mark.parametrize(("unset", "option"), [
    ("AGENTRUN_LEASE", "--lease"), ("AGENTRUN_NAMESPACE", "--namespace"),
    ("HOSTNAME", "--identity"),
])
def test_a_missing_name_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        unset: str, option: str) -> None:
    for key, value in ENV.items():
        monkeypatch.setenv(key, "" if key == unset else value)
    with pytest.raises(SystemExit) as exited:
        cli.parse(["run", "--", "true"])
    assert exited.value.code == 2
    assert f"{option} is required (or set ${unset}" in capsys.readouterr().err


@pytest.mark.usefixtures("worker_env")
@pytest.mark.parametrize("argv", [
    ["run", "--namespace", "Team_A", "--", "true"],
    ["run", "--namespace", "a" * 64, "--", "true"],
    ["run", "--lease", "x" * 254, "--", "true"],
    ["run", "--identity=-leading-dash", "--", "true"],
])
def test_a_bad_name_is_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert "is not a valid Kubernetes name" in capsys.readouterr().err


@pytest.mark.usefixtures("worker_env")
def test_a_bad_name_from_the_environment_is_refused(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("AGENTRUN_LEASE", "Not/A/Name")
    with pytest.raises(SystemExit):
        cli.parse(["run", "--", "true"])
    assert "lease 'Not/A/Name' is not a valid Kubernetes name" in capsys.readouterr().err


@pytest.mark.usefixtures("worker_env")
@pytest.mark.parametrize("argv", [["run"], ["run", "--"]])
def test_a_command_is_required(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        cli.parse(argv)
    assert "no command" in capsys.readouterr().err


@pytest.mark.usefixtures("worker_env")
@pytest.mark.parametrize("value", ["0", "-1", "86401", "nan"])
def test_the_start_timeout_is_bounded(value: str) -> None:
    with pytest.raises(SystemExit):
        cli.parse(["run", "--start-timeout", value, "--", "true"])


@dataclass
class KeeperStandIn:
    """Stands in for the lease keeper: renews nothing; may report a lapse or a loss."""

    report: str | None = None  # "lapse" or "lost", at start
    released: bool = False

    def start(self, *, on_lapse: Callable[[str], None] | None = None,
              on_resume: Callable[[str], None] | None = None,
              on_lost: Callable[[str], None] | None = None) -> None:
        told = {"lapse": on_lapse, "lost": on_lost}.get(self.report or "")
        if told is not None:
            threading.Thread(target=told, args=(self.report,)).start()

    def release(self) -> None:
        self.released = True


def python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_the_exit_code_is_the_commands() -> None:
    stand_in = KeeperStandIn()
    code = cli.supervise(stand_in, python("import sys; sys.exit(7)"))
    assert code == 7
    assert stand_in.released  # renewal ends with the command, the lease let go


def test_a_signal_becomes_128_plus_its_number() -> None:
    code = cli.supervise(KeeperStandIn(),
                         python("import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    assert code == 128 + 9


@pytest.mark.parametrize("report", ["lost", "lapse"])
def test_a_lost_or_lapsed_lease_terminates_the_command(report: str) -> None:
    """A plain command cannot be paused: a lapse ends it as a loss does."""
    stand_in = KeeperStandIn(report=report)
    # The child would run for ten minutes; only the SIGTERM of the report ends it.
    code = cli.supervise(stand_in, python("import time; time.sleep(600)"))
    assert code == 128 + 15
    assert stand_in.released


# -- the startup probe: light, since it runs in the sidecar's CPU while the sidecar starts ----

# What `agentrun-worker ready` must not load: the SDK and what only it needs.
HEAVY = ("pydantic", "urllib3", "yaml", "jsonschema", "agentrun.worker._sdk",
         "agentrun.worker._sidecarserver", "agentrun.rest", "agentrun.objectstore")


class Ready(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        self.send_response(self.status if self.path == "/v1/ready" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.mark.parametrize(("status", "code"), [(200, 0), (503, 1), (None, 1)])
def test_ready_answers_from_the_sidecar_and_loads_nothing_heavy(
        status: int | None, code: int) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ready)
    Ready.status = status or 200
    port = server.server_address[1]
    if status is None:
        server.server_close()  # nothing listens: the sidecar has not started
    else:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        probe = subprocess.run(
            [sys.executable, "-c", "import json, sys; from agentrun.worker import cli; "
             f"code = cli.main(['ready', '--port', '{port}']); "
             "print(json.dumps(sorted(sys.modules))); sys.exit(code)"],
            capture_output=True, text=True, timeout=60, check=False)
    finally:
        if status is not None:
            server.shutdown()
            server.server_close()
    assert probe.returncode == code, probe.stderr
    loaded = json.loads(probe.stdout)
    assert [name for name in loaded if name.startswith(HEAVY)] == []
    assert "agentrun.worker._sidecarprobe" in loaded


def test_the_package_loads_a_public_name_when_first_used() -> None:
    import agentrun.worker as sdk

    assert sorted(sdk.__all__) == sorted(sdk._HOLDERS)
    for name, holder in sdk._HOLDERS.items():
        assert getattr(sdk, name) is getattr(importlib.import_module(
            f"agentrun.worker.{holder}"), name)
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        sdk.Nothing  # noqa: B018
