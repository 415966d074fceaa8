"""The local harness's defaults and bounds, in one place (the CLI's options read them).

Constants only, standard library only: ``agentrun-worker``'s parser imports this module to
describe ``local``'s options, and nothing else of the harness is loaded until it runs.
"""

from __future__ import annotations

from typing import Final

HOST: Final = "127.0.0.1"  # both fakes listen here only, on ports the kernel picks
DEFAULT_DIR: Final = ".agentrun-local"  # where the state persists between runs
MARKER_FILE: Final = ".agentrun-local"  # in a directory the harness made (--fresh wants it)
DEFAULT_ATTEMPTS: Final = 3  # attempts one invocation may start (a LaunchSpec's retry)
MIN_ATTEMPTS: Final = 1
MAX_ATTEMPTS: Final = 20

# The names the attempts are given, as the operator would make them from a run.
NAMESPACE: Final = "local"
DEFAULT_RUN: Final = "local-run"
DEFAULT_NODE: Final = "main"
LEASE_DURATION_SECONDS: Final = 30  # the LaunchSpec's default lease
BUCKET: Final = "agentrun-journal"
JOURNAL_BASE: Final = "journal"  # the run's journal: <base>/<namespace>/<run uid>
REGION: Final = "us-east-1"

# What a run pins when no file is given: the smallest documents the operator accepts
# (the bindings: one entry per node of the workflow).
DEFAULT_PACKAGE: Final = "outcome: A local try-out of this worker.\n"
DEFAULT_WORKFLOW: Final = "nodes:\n  - name: {node}\n    workerClass: local\n"
DEFAULT_BINDING: Final = "  - node: {node}\n    agent:\n      name: local\n      revision: \"0\"\n"
MAX_DOCUMENT_BYTES: Final = 1024 * 1024  # a ConfigMap's limit (the worker checks it too)

# What the fakes accept, as their real counterparts do (or stricter, said in the error).
MAX_REQUEST_BYTES: Final = 64 * 1024 * 1024  # an S3 object or part, read whole
MAX_LEASE_REQUEST_BYTES: Final = 3 * 1024 * 1024  # the API server's request body (413)
MAX_LEASE_OBJECT_BYTES: Final = 1536 * 1024  # an object as stored, etcd's bound (422)
MAX_ANNOTATION_BYTES: Final = 256 * 1024  # the API server's total for one object
LIST_PAGE_MAX: Final = 1000  # S3's most keys (and uploads) per listing
MAX_SEGMENT_CHARS: Final = 240  # one "/"-separated piece of a key, as a file name
STOP_SECONDS: Final = 10.0  # after a signal passed on, how long a child has before SIGKILL
SUMMARY_FILE: Final = "attempts.json"  # per attempt: its exit code and its steps
EXIT_USAGE: Final = 2  # bad input (argparse's own code)
