"""``agentrun-worker local``: start the fakes, then run attempts as the operator would.

One invocation: the fakes start on 127.0.0.1 (ephemeral ports), the workspace is written,
a Lease an earlier invocation left held is sealed; then attempt after attempt (up to
``attempts``) of the command runs with its attempt's environment, each ended as the
operator ends it, until one exits 0 or the harness is interrupted. Each attempt's report
is printed and appended to ``DIR/attempts.json``. The exit code is the last attempt's.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TextIO

from agentrun.api.slots import Outcome
from agentrun.worker._local import attempts, kubeapi, s3api, servers, settings
from agentrun.worker._local.leases import Leases
from agentrun.worker._local.s3store import Store
from agentrun.worker._local.workspace import SetupError, Workspace


def run(*, command: Sequence[str], directory: Path, attempts_at_most: int, fresh: bool,
        run_name: str, node: str | None, documents: Mapping[str, bytes],
        out: TextIO | None = None) -> int:
    """Run up to ``attempts_at_most`` attempts of ``command``; raises
    :class:`workspace.SetupError` for input it cannot run with."""
    workspace = Workspace.prepare(root=directory, run=run_name, node=node, fresh=fresh,
                                  given=documents)
    try:
        leases = Leases(path=workspace.leases_file)
    except (ValueError, KeyError, TypeError) as error:
        raise SetupError(f"{workspace.leases_file} cannot be read ({error}): --fresh "
                         "starts over") from None
    store = Store(root=workspace.store_root)
    if not store.has_bucket(settings.BUCKET):
        store.create_bucket(settings.BUCKET)
    api = servers.serve(kubeapi.handler(leases=leases, token=workspace.token),
                        name="local-kube-api")
    s3 = servers.serve(s3api.handler(store=store), name="local-s3")
    try:
        workspace.write(api=api.url)

        def say(text: str) -> None:  # sys.stdout as it is now (a test may have replaced it)
            print(f"agentrun-worker local: {text}", file=out or sys.stdout, flush=True)

        say(f"Kubernetes API at {api.url}, S3 at {s3.url} (bucket {settings.BUCKET}), "
            f"state in {directory}")
        for name in attempts.seal_leftovers(leases, workspace):
            say(f"{name} was left held by an interrupted run: ended as Lost")
        reports, code = [], 0
        first = attempts.next_attempt(leases, workspace)
        for number in range(first, first + attempts_at_most):
            before = attempts.recoverable(leases, workspace, s3=s3.url, attempt=number)
            held = len(before.committed) if not isinstance(before, str) else 0
            lease = attempts.claim(leases, workspace, attempt=number)
            say(f"attempt {number} ({lease}) starts; its recoverable prefix holds {held} "
                "record(s)")
            code, stopped = 127, False  # a command that cannot start: the shell's 127
            try:
                code, stopped = attempts.run_child(
                    command, env=workspace.environment(attempt=number, s3=s3.url))
            finally:  # a child that could not start ends its attempt too
                renewed = attempts.end(leases, name=lease, outcome=Outcome.SUCCEEDED
                                       if code == 0 else Outcome.FAILED)
            after = attempts.recoverable(leases, workspace, s3=s3.url, attempt=number + 1)
            report = attempts.ended(attempt=number, lease=lease, exit_code=code,
                                    renewed=renewed, before=before, after=after)
            reports.append(report.as_json())
            for line in report.lines():
                say(line)
            if stopped:
                say("stopped by a signal: no further attempt")
            if code == 0 or stopped:
                break
            if number + 1 < first + attempts_at_most:
                say(f"attempt {number + 1} follows (the operator would first wait the "
                    "LaunchSpec's retry backoff)")
        else:
            say(f"no attempt succeeded in {attempts_at_most}; run again to go on from "
                "the same prefix, or --fresh to start over")
        _keep(directory / settings.SUMMARY_FILE, reports)
        return code
    finally:
        api.stop()
        s3.stop()


def _keep(path: Path, reports: list[dict[str, object]]) -> None:
    """Append this invocation's reports to the file's list of every attempt's."""
    kept = json.loads(path.read_text()) if path.is_file() else []
    path.write_text(json.dumps([*kept, *reports], indent=1))
