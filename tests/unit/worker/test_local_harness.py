"""``agentrun-worker local``: a worker's attempts with no cluster (``agentrun.worker._local``).

The harness is a development tool whose fakes are the product, so they are tested as the
SDK meets them: the README's worker example runs in it as written and commits its steps;
a worker that fails after its first step is followed by an attempt that skips that step;
a second invocation resumes from the state kept in its directory; bad input is a usage
error (exit 2); a directory the harness did not make is neither written nor emptied;
its secrets are its user's alone; a child runs in its own session and is killed when it
outlives the stop bound. The fakes are tested in ``test_local_fakes.py``. No cluster, no
sleeps: a child process is waited for with a timeout.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agentrun.worker import cli
from agentrun.worker._local import attempts, settings
from agentrun.worker._local.workspace import Workspace

# The markdown whose worker example must run in the harness as written.
EXAMPLE_MARKDOWN = Path(__file__).resolve().parents[3] / "README.md"
EXAMPLE_SECTION = "## Writing a worker"
RUN_TIMEOUT_SECONDS = 120.0
GIVE_UP_SECONDS = 20.0  # a child the harness never kills is killed by the test (a failure)


def python_block(markdown: Path, *, section: str = EXAMPLE_SECTION) -> str:
    """The first ```python block under the heading ``section`` (before the next ``## ``)."""
    lines = markdown.read_text().splitlines()
    start = lines.index(section) + 1
    block: list[str] | None = None
    for line in lines[start:]:
        if block is None and line.startswith("## "):
            break
        if block is None and line.strip() == "```python":
            block = []
        elif block is not None and line.strip() == "```":
            return "\n".join(block) + "\n"
        elif block is not None:
            block.append(line)
    raise AssertionError(f"no ```python block under {section!r} in {markdown}")


def harness(tmp_path: Path, *command: str, options: tuple[str, ...] = ()
            ) -> subprocess.CompletedProcess[str]:
    """``agentrun-worker local`` in ``tmp_path`` (its state in ``tmp_path/state``)."""
    return subprocess.run(
        [sys.executable, "-m", "agentrun.worker.cli", "local", "--dir", "state", *options,
         "--", *command], cwd=tmp_path, capture_output=True, text=True,
        timeout=RUN_TIMEOUT_SECONDS, check=False)


def reports(tmp_path: Path) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        (tmp_path / "state" / settings.SUMMARY_FILE).read_text())
    return found


def test_the_python_block_is_the_first_under_its_heading(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# T\n```python\nno = 1\n```\n## Writing a worker\ntext\n```python\n"
                    "yes = 1\n```\n```python\nlater = 1\n```\n## Next\n")
    assert python_block(page) == "yes = 1\n"


def test_the_readme_example_runs_as_written_and_a_second_run_skips_its_steps(
        tmp_path: Path) -> None:
    (tmp_path / "agent.py").write_text(python_block(EXAMPLE_MARKDOWN))
    first = harness(tmp_path, sys.executable, "agent.py")
    assert first.returncode == 0, first.stdout + first.stderr
    [one] = reports(tmp_path)
    assert one["outcome"] == "Succeeded" and one["renewed"]
    assert {"gather", "write", "weights", "publish.intent", "publish.outcome"} <= set(
        one["committed"]), one
    assert "committed: gather" in first.stdout

    again = harness(tmp_path, sys.executable, "agent.py")
    assert again.returncode == 0, again.stdout + again.stderr
    two = reports(tmp_path)[1]
    assert (two["attempt"], two["committed"]) == (2, [])
    assert set(two["skipped"]) == set(one["committed"])


FLAKY = textwrap.dedent("""\
    import json, os
    from agentrun.worker import Worker

    with Worker.from_env() as worker:
        first = worker.step("first", do=lambda: {"n": 1})
        if os.environ["AGENTRUN_ATTEMPT"] == "1":
            raise SystemExit("attempt 1 fails after its first step")
        worker.step("second", do=lambda: first["n"] + 1)
        with open(f"seen-{worker.context.attempt}.json", "w") as out:
            json.dump(worker.steps.done, out)
""")


def test_a_failed_attempt_is_followed_by_one_that_skips_its_committed_step(
        tmp_path: Path) -> None:
    (tmp_path / "flaky.py").write_text(FLAKY)
    done = harness(tmp_path, sys.executable, "flaky.py")
    assert done.returncode == 0, done.stdout + done.stderr
    one, two = reports(tmp_path)
    assert (one["exit_code"], one["outcome"], one["committed"]) == (1, "Failed", ["first"])
    assert (two["exit_code"], two["skipped"], two["committed"]) == (0, ["first"], ["second"])
    assert json.loads((tmp_path / "seen-2.json").read_text()) == ["first"]
    assert "skipped (committed earlier): first" in done.stdout


def test_attempts_stop_at_the_bound_with_the_last_exit_code(tmp_path: Path) -> None:
    done = harness(tmp_path, sys.executable, "-c", "raise SystemExit(7)",
                   options=("--attempts", "2"))
    assert done.returncode == 7
    assert [(r["attempt"], r["renewed"]) for r in reports(tmp_path)] == [(1, False), (2, False)]
    assert "never renewed" in done.stdout


@pytest.mark.parametrize(("argv", "said"), [
    (["local"], "no command"),
    (["local", "--"], "no command"),
    (["local", "--attempts", "0", "--", "true"], "from 1 to 20"),
    (["local", "--attempts", "21", "--", "true"], "from 1 to 20"),
    (["local", "--package", "/nonexistent/package.yaml", "--", "true"], "cannot read"),
])
def test_bad_input_is_a_usage_error(argv: list[str], said: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.parse(argv)
    assert exited.value.code == settings.EXIT_USAGE
    assert said in capsys.readouterr().err


def test_a_document_the_operator_would_refuse_is_a_usage_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "workflow.yaml").write_text("nodes: []\n")
    code = cli.main(["local", "--dir", str(tmp_path / "state"), "--workflow",
                     str(tmp_path / "workflow.yaml"), "--", "true"])
    assert code == settings.EXIT_USAGE
    assert "the workflow is not one the operator would pin" in capsys.readouterr().err


def test_the_sdk_does_not_load_the_harness() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, agentrun.worker, agentrun.worker.cli; print("
         "sorted(m for m in sys.modules if m.startswith('agentrun.worker._local')))"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_SECONDS, check=True)
    # The CLI reads the harness's bounds to describe its options; nothing else is loaded.
    assert loaded.stdout.strip() == "['agentrun.worker._local', " \
                                    "'agentrun.worker._local.settings']"


# -- the directory: only the harness's own ---------------------------------------------------

def local(directory: Path, *options: str) -> int:
    return cli.main(["local", "--dir", str(directory), *options, "--", sys.executable, "-c",
                     "pass"])


@pytest.mark.parametrize("options", [("--fresh",), ()])
def test_a_directory_the_harness_did_not_make_is_refused(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], options: tuple[str, ...]) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "state.json").write_text("{}")  # the user's own, beside their code
    (project / "agent.py").write_text("print('mine')\n")
    before = sorted(project.rglob("*"))
    assert local(project, *options) == settings.EXIT_USAGE
    assert "not a directory the harness made" in capsys.readouterr().err
    assert sorted(project.rglob("*")) == before
    assert (project / "agent.py").read_text() == "print('mine')\n"


def test_fresh_removes_only_what_the_harness_made(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert local(state) == 0
    assert (state / settings.MARKER_FILE).is_file()
    first = json.loads((state / "state.json").read_text())
    (state / "notes.txt").write_text("the user's")
    assert local(state) == 0  # its marker: the harness's, other files or not
    assert len(json.loads((state / settings.SUMMARY_FILE).read_text())) == 2
    assert local(state, "--fresh") == 0
    assert (state / "notes.txt").read_text() == "the user's"
    assert json.loads((state / "state.json").read_text())["runs"] != first["runs"]
    assert len(json.loads((state / settings.SUMMARY_FILE).read_text())) == 1


def test_an_earlier_harness_directory_without_its_marker_is_taken(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for folder in ("kube", "s3", "credentials", "config"):
        (state / folder).mkdir(parents=True)
    (state / "state.json").write_text(json.dumps({"runs": {"local-run": "uid"}}))
    assert local(state, "--fresh") == 0
    assert json.loads((state / "state.json").read_text())["runs"]["local-run"] != "uid"


def test_the_token_and_the_kubeconfig_are_the_users_alone_from_their_creation(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Path, "chmod", lambda *_args, **_kwargs: None)  # no mending later
    previous = os.umask(0o022)
    try:
        workspace = Workspace.prepare(root=tmp_path / "state", run="r", node=None,
                                      fresh=False, given={})
        workspace.write(api="http://127.0.0.1:1")
    finally:
        os.umask(previous)
    for path in (tmp_path / "state" / "state.json", workspace.kubeconfig,
                 *(tmp_path / "state" / "credentials").iterdir()):
        assert path.stat().st_mode & 0o777 == 0o600, path


# -- the child: its own session, killed after the stop bound ---------------------------------

STUBBORN = textwrap.dedent("""\
    import os, signal, socket, sys
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    with socket.create_connection(("127.0.0.1", int(sys.argv[1]))) as told:
        told.sendall(f"{os.getpid()} {os.getpgrp()} {os.getsid(0)}\\n".encode())
    while True:
        signal.pause()
""")


def test_a_child_that_ignores_sigterm_is_killed_after_the_stop_bound(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settings, "STOP_SECONDS", 0.5)
    seen: list[int] = []
    finished = threading.Event()

    def terminate_once_ready(listener: socket.socket) -> None:
        connection, _ = listener.accept()
        with connection, connection.makefile() as lines:
            seen.extend(int(each) for each in lines.readline().split())
        os.kill(os.getpid(), signal.SIGTERM)  # to the harness (this process), as `kill` would
        if not finished.wait(GIVE_UP_SECONDS):  # never killed: end it, and fail below
            os.kill(seen[0], signal.SIGKILL)

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(RUN_TIMEOUT_SECONDS)
        helper = threading.Thread(target=terminate_once_ready, args=(listener,), daemon=True)
        helper.start()
        started = time.monotonic()
        try:
            code, stopped = attempts.run_child(
                [sys.executable, "-c", STUBBORN, str(listener.getsockname()[1])],
                env=os.environ)
        finally:
            finished.set()
        elapsed = time.monotonic() - started
        helper.join(RUN_TIMEOUT_SECONDS)
    assert (code, stopped) == (128 + signal.SIGKILL, True)
    assert elapsed < settings.STOP_SECONDS + 5.0 < 10.0  # the bound's kill, not the test's
    pid, group, session = seen
    assert group == session == pid != os.getpgrp()  # a terminal's Ctrl-C does not reach it
