"""``agentrun-worker local``: a worker's attempts with no cluster (``agentrun.worker._local``).

The harness is a development tool whose fakes are the product, so they are tested as the
SDK meets them: the README's worker example runs in it as written and commits its steps;
a worker that fails after its first step is followed by an attempt that skips that step;
a second invocation resumes from the state kept in its directory; bad input is a usage
error (exit 2). The fakes are also tested through the SDK's own clients: the Lease API's
conflicts, and the S3 calls ``agentrun.objectstore`` makes. No cluster, no sleeps: a
child process is waited for with a timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentrun import objectstore, rest
from agentrun.worker import cli
from agentrun.worker._local import kubeapi, s3api, servers, settings
from agentrun.worker._local.leases import Leases
from agentrun.worker._local.s3store import Store

# The markdown whose worker example must run in the harness as written.
EXAMPLE_MARKDOWN = Path(__file__).resolve().parents[3] / "README.md"
EXAMPLE_SECTION = "## Writing a worker"
RUN_TIMEOUT_SECONDS = 120.0


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


# -- the fakes, through the SDK's own clients ------------------------------------------------

@pytest.fixture
def api(tmp_path: Path) -> Iterator[rest.Rest]:
    serving = servers.serve(kubeapi.handler(leases=Leases(path=tmp_path / "leases.json"),
                                            token="t"), name="test-api")
    try:
        yield rest.Rest(rest.Connection(server=serving.url, authorization=lambda: "Bearer t"))
    finally:
        serving.stop()


LEASES = "/apis/coordination.k8s.io/v1/namespaces/local/leases"


def test_the_lease_api_refuses_stale_writes_as_the_api_server_does(api: rest.Rest) -> None:
    made = api.request("POST", LEASES, body={"metadata": {
        "name": "s-1", "labels": {"agentrun.dev/slot": "s", "agentrun.dev/attempt": "1"}},
        "spec": {"holderIdentity": "s-1"}})
    with pytest.raises(rest.ApiError) as exists:
        api.request("POST", LEASES, body=made)
    assert exists.value.status == 409
    renewed = api.request("PUT", f"{LEASES}/s-1", body={**made, "spec": {
        "holderIdentity": "s-1", "renewTime": "2024-01-01T00:00:00.000000Z"}})
    assert renewed["metadata"]["resourceVersion"] != made["metadata"]["resourceVersion"]
    with pytest.raises(rest.ApiError) as stale:  # under the version read before the renewal
        api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH, body={
            "metadata": {"resourceVersion": made["metadata"]["resourceVersion"],
                         "annotations": {"a": "1"}}})
    assert stale.value.status == 409
    patched = api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH,
                          body={"metadata": {"annotations": {"a": "1", "b": "2"}}})
    cleared = api.request("PATCH", f"{LEASES}/s-1", content_type=rest.MERGE_PATCH,
                          body={"metadata": {"annotations": {"a": None}}})
    assert patched["metadata"]["annotations"] == {"a": "1", "b": "2"}
    assert cleared["metadata"]["annotations"] == {"b": "2"}
    listed = api.request("GET", LEASES, query={"labelSelector": "agentrun.dev/slot=s,"
                                               "agentrun.dev/attempt"})
    assert [item["metadata"]["name"] for item in listed["items"]] == ["s-1"]
    assert api.request("GET", LEASES, query={"labelSelector": "agentrun.dev/slot=t"}
                       )["items"] == []
    assert api.get(f"{LEASES}/s-2") is None


def test_the_lease_api_wants_the_token(api: rest.Rest) -> None:
    stranger = rest.Rest(rest.Connection(server=api.connection.server))
    with pytest.raises(rest.ApiError) as refused:
        stranger.request("GET", LEASES)
    assert refused.value.status == 401


@pytest.fixture
def store(tmp_path: Path) -> Iterator[objectstore.ObjectStore]:
    serving = servers.serve(s3api.handler(store=Store(root=tmp_path / "s3")), name="test-s3")
    try:
        client = objectstore.ObjectStore(endpoint=serving.url, bucket="bucket",
                                         credentials=lambda: objectstore.Credentials("k", "s"))
        client.ensure_bucket()
        yield client
    finally:
        serving.stop()


def test_the_store_writes_once_and_reads_ranges(store: objectstore.ObjectStore) -> None:
    assert store.put("a/b", b"first", if_none_match=True)
    assert not store.put("a/b", b"other", if_none_match=True)
    assert store.get("a/b", limit=100) == b"first"
    assert store.head("a/b").size == 5
    assert b"".join(store.get_stream("a/b", offset=2, window_bytes=2)) == b"rst"
    with pytest.raises(objectstore.S3Error) as missing:
        store.get("a/c", limit=10)
    assert missing.value.code == "NoSuchKey"


def test_the_store_lists_by_prefix_across_pages_and_deletes(
        store: objectstore.ObjectStore) -> None:
    for key in ("p/1", "p/2/x", "p/3", "q/1", "a"):
        store.put(key, key.encode())
    assert store.list("p/", page=2) == ["p/1", "p/2/x", "p/3"]
    assert store.list("", page=1) == ["a", "p/1", "p/2/x", "p/3", "q/1"]
    assert store.delete_prefix("p/") == 3
    assert store.list("") == ["a", "q/1"]


def test_the_store_joins_a_multipart_upload_once(store: objectstore.ObjectStore) -> None:
    data = bytes(range(256)) * (objectstore.MIN_PART_BYTES // 256 * 2 + 3)
    put = store.put_stream("big", data, part_bytes=objectstore.MIN_PART_BYTES,
                           if_none_match=True)
    assert (put.parts, put.size, put.written) == (3, len(data), True)
    assert store.head("big").etag == put.etag
    assert b"".join(store.get_stream("big")) == data
    again = store.put_stream("big", data, part_bytes=objectstore.MIN_PART_BYTES,
                             if_none_match=True)
    assert not again.written
    assert store.uploads("big") == []  # the refused upload was aborted
