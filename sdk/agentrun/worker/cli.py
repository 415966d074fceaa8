"""``agentrun-worker run -- <command...>``: run a worker command while keeping its lease.

(``agentrun-worker sidecar`` serves the SDK to a main container in any language, and
``agentrun-worker ready`` is its startup probe: :mod:`agentrun.worker._sidecarserver`.
``agentrun-worker local -- <command...>`` runs a worker's attempts with no cluster, against
a fake API server and S3 store in a directory: :mod:`agentrun.worker._local`, loaded only
then.)

In a worker pod the operator sets ``AGENTRUN_NAMESPACE`` and ``AGENTRUN_LEASE``; the
pod's name (``HOSTNAME``) is the lease's holder. The :class:`keeper.Keeper` first renews
once (which tells the operator the worker started) and the command does not run if the
lease is not this pod's. Then it runs the command, renews in the background, forwards
SIGTERM and SIGINT to it, releases the lease when it ends (so the operator ends the
attempt once the pod has finished, not a lease duration later) and exits with its exit
code (128 + N if a signal N ended it).

If the lease is *lost* (tombstoned, another holder, deleted, renewal forbidden), the
attempt is over for the operator: the keeper stops writing and the command gets SIGTERM,
since a successor attempt may already be running. If it *lapses* (no successful renewal
by the lapse point: the API server unreachable, the pod's token refused), an SDK worker
would pause its effects and wait; a plain command cannot be paused, and nothing tells
what it is doing, so it gets SIGTERM too: the operator may end the attempt soon after,
and two workers of one slot must not run at once.

Credentials: ``$KUBECONFIG`` if set, else the pod's service account (in-cluster
configuration through the ``kubernetes`` Service's environment variables).
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from agentrun.api import bounds, distributions, names
from agentrun.worker import _sidecarprobe as sidecarprobe
from agentrun.worker._local import settings as local

EXIT_NOT_OURS = 3  # the lease is not this pod's: the command never ran
EXIT_NO_FIRST_RENEWAL = 4  # the lease could not be renewed before --start-timeout
MAX_START_TIMEOUT = 86400.0

logger = logging.getLogger("agentrun.worker")


def _name(pattern: re.Pattern[str], what: str) -> Callable[[str], str]:
    """An argparse type; argparse applies it to a string default (from the environment) too."""
    def parse(text: str) -> str:
        if not pattern.fullmatch(text):
            raise argparse.ArgumentTypeError(
                f"{what} {text[:80]!r} is not a valid Kubernetes name (lowercase letters, "
                "digits and '-', at most 63 characters for a namespace, 253 otherwise)")
        return text
    return parse


def _timeout(text: str) -> float:
    value = float(text)
    if not 0 < value <= MAX_START_TIMEOUT:
        raise argparse.ArgumentTypeError(f"must be in (0, {MAX_START_TIMEOUT:.0f}] seconds")
    return value


def _bounded(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        if not text.isdigit() or not low <= int(text) <= high:
            raise argparse.ArgumentTypeError(f"{text[:20]!r} must be a whole number from "
                                             f"{low} to {high}")
        return int(text)
    return parse


def _sidecar_options(sub: Any) -> None:
    b = bounds
    port = _bounded(b.SIDECAR_MIN_PORT, b.SIDECAR_MAX_PORT)
    sidecar = sub.add_parser("sidecar", help="serve the SDK on 127.0.0.1 to a main container")
    sidecar.add_argument("--port", type=port, default=b.SIDECAR_DEFAULT_PORT,
                         help=f"the port on 127.0.0.1 (default {b.SIDECAR_DEFAULT_PORT})")
    sidecar.add_argument("--check-in-seconds", type=_bounded(
        b.SIDECAR_MIN_CHECK_IN, b.SIDECAR_MAX_CHECK_IN), default=b.SIDECAR_DEFAULT_CHECK_IN,
        help="renew only while the main container checked in within this many seconds "
             f"(default {b.SIDECAR_DEFAULT_CHECK_IN})")
    sidecar.add_argument("--start-timeout", type=_timeout, default=60.0,
                         help="seconds to keep trying the first renewal (default 60)")
    probe = sub.add_parser("ready", help="the sidecar's startup probe: exit 0 once it renewed")
    probe.add_argument("--port", type=port, default=b.SIDECAR_DEFAULT_PORT)


def _document(kind: str) -> Callable[[str], bytes]:
    """An argparse type: a pinned document's bytes, read now (so a file that cannot be
    read is a usage error, exit 2, before anything starts)."""
    def read(text: str) -> bytes:
        try:
            with open(text, "rb") as file:
                data = file.read(local.MAX_DOCUMENT_BYTES + 1)
        except OSError as error:
            raise argparse.ArgumentTypeError(
                f"cannot read the {kind} file {text!r}: {error.strerror or error}") from None
        if len(data) > local.MAX_DOCUMENT_BYTES:
            raise argparse.ArgumentTypeError(f"the {kind} file {text!r} is over "
                                             f"{local.MAX_DOCUMENT_BYTES} bytes")
        return data
    return read


def _local_options(sub: Any) -> None:
    harness = sub.add_parser(
        "local", help="run a worker's attempts with no cluster (a fake API and S3 store)",
        description="Run COMMAND as attempt after attempt of one slot, as the operator "
                    "would, against a Kubernetes API (Leases) and an S3 store (the journal, "
                    "kept in --dir) served on 127.0.0.1 by this process.")
    harness.add_argument("--dir", type=Path, default=Path(local.DEFAULT_DIR),
                         help=f"the state, kept between runs (default {local.DEFAULT_DIR})")
    harness.add_argument("--attempts", type=_bounded(local.MIN_ATTEMPTS, local.MAX_ATTEMPTS),
                         default=local.DEFAULT_ATTEMPTS,
                         help="attempts to start at most while the command fails "
                              f"({local.MIN_ATTEMPTS}..{local.MAX_ATTEMPTS}, default "
                              f"{local.DEFAULT_ATTEMPTS})")
    for kind in names.CONFIG_KINDS:
        harness.add_argument(f"--{kind}", type=_document(kind), metavar="FILE",
                             help=f"the pinned {kind} (default: a minimal one)")
    harness.add_argument("--run", type=_name(bounds.DNS_LABEL, "run"), default=local.DEFAULT_RUN,
                         help=f"the run's name (default {local.DEFAULT_RUN})")
    harness.add_argument("--node", type=_name(bounds.DNS_LABEL, "node"), default=None,
                         help="the workflow's node to run (default: its first, or "
                              f"{local.DEFAULT_NODE})")
    harness.add_argument("--fresh", action="store_true",
                         help="remove what the harness made in --dir first: attempt 1, an "
                              "empty journal, a new run uid")
    harness.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- command ...")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentrun-worker", description=__doc__.split("\n")[0])
    distributions.add_version_option(parser, distribution=distributions.WORKER)
    sub = parser.add_subparsers(dest="command", required=True)
    _sidecar_options(sub)
    _local_options(sub)
    run = sub.add_parser("run", help="renew the lease while a command runs")
    env = os.environ
    run.add_argument("--namespace", type=_name(bounds.DNS_LABEL, "namespace"),
                     default=env.get(names.ENV_NAMESPACE) or None,
                     help=f"the lease's namespace (default: ${names.ENV_NAMESPACE})")
    run.add_argument("--lease", type=_name(bounds.DNS_SUBDOMAIN, "lease"),
                     default=env.get(names.ENV_LEASE) or None,
                     help=f"the attempt's Lease (default: ${names.ENV_LEASE})")
    run.add_argument("--identity", type=_name(bounds.DNS_SUBDOMAIN, "identity"),
                     default=env.get("HOSTNAME") or None,
                     help="the holder this worker is (default: $HOSTNAME, the pod's name)")
    run.add_argument("--start-timeout", type=_timeout, default=60.0,
                     help="seconds to keep trying the first renewal (default 60)")
    run.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- command ...")
    args = parser.parse_args(argv)
    if args.command not in ("run", "local"):
        return args
    if args.argv[:1] == ["--"]:
        args.argv = args.argv[1:]
    if args.command == "local":
        if not args.argv:
            parser.error("no command: agentrun-worker local [options] -- <command> [args...]")
        if len(args.run) > names.MAX_RUN_NAME:
            parser.error(f"--run {args.run}: at most {names.MAX_RUN_NAME} characters")
        return args
    for option, source in (("namespace", names.ENV_NAMESPACE), ("lease", names.ENV_LEASE),
                           ("identity", "HOSTNAME")):
        if not getattr(args, option):
            parser.error(f"--{option} is required (or set ${source}; the operator sets it "
                         "in worker pods)")
    if not args.argv:
        parser.error("no command: agentrun-worker run [options] -- <command> [args...]")
    return args


class Keeping(Protocol):
    """What :func:`supervise` needs of a :class:`keeper.Keeper`."""

    def start(self, *, on_lapse: Callable[[str], None] | None = None,
              on_resume: Callable[[str], None] | None = None,
              on_lost: Callable[[str], None] | None = None) -> None: ...

    def release(self) -> None: ...


def supervise(worker: Keeping, command: list[str]) -> int:
    """Run ``command`` while ``worker`` keeps the lease; its exit code (128 + N for signal N)."""
    child = subprocess.Popen(command)

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    def end(what: str) -> Callable[[str], None]:
        def terminate(reason: str) -> None:
            logger.warning("the lease %s (%s): terminating %s", what, reason, command[0])
            child.terminate()
        return terminate

    previous = {signum: signal.signal(signum, forward)
                for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        worker.start(on_lapse=end("may have lapsed"), on_lost=end("is lost"))
        code = child.wait()
    finally:  # the command ended: stop renewing and let the lease go (Keeper.release)
        worker.release()
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return code if code >= 0 else 128 - code


def _local(args: argparse.Namespace) -> int:
    """The harness, imported only here: ``agentrun-worker run`` in a pod never loads it."""
    from agentrun.worker._local import harness, workspace

    documents = {kind: data for kind in names.CONFIG_KINDS
                 if (data := getattr(args, kind)) is not None}
    try:
        return harness.run(command=args.argv, directory=args.dir,
                           attempts_at_most=args.attempts, fresh=args.fresh,
                           run_name=args.run, node=args.node, documents=documents)
    except workspace.SetupError as error:
        print(f"agentrun-worker local: error: {error}", file=sys.stderr)
        return local.EXIT_USAGE


def main(argv: list[str] | None = None) -> int:
    """The command; each subcommand imports what it needs (``ready`` only the probe)."""
    args = parse(argv)
    if args.command == "ready":
        return sidecarprobe.ready(port=args.port)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s agentrun-worker %(levelname)s %(message)s")
    if args.command == "local":
        return _local(args)
    if args.command == "sidecar":
        from agentrun.worker import _sidecarserver as sidecarserver
        return sidecarserver.serve(port=args.port, check_in_seconds=args.check_in_seconds,
                                   start_timeout=args.start_timeout)
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """``agentrun-worker run``: the keeper and its renewals, imported only here."""
    from agentrun.worker import _keeper as keeper
    from agentrun.worker import _renewals as renewals
    from agentrun.worker import _renewer as renewer
    from agentrun.worker import _sdk as sdk

    worker = keeper.Keeper(renewer=renewer.Renewer(
        api=sdk.pod_api(), namespace=args.namespace, lease=args.lease, identity=args.identity))
    decision = worker.first_renewal(timeout=args.start_timeout)
    if decision.verdict is renewals.Verdict.STOP:
        logger.error("refusing to run: %s", decision.reason)
        return EXIT_NOT_OURS
    if decision.verdict is renewals.Verdict.RETRY:
        logger.error("no renewal within %.0fs: %s", args.start_timeout, decision.reason)
        return EXIT_NO_FIRST_RENEWAL
    logger.info("renewing %s/%s as %s every %.1fs", args.namespace, args.lease,
                args.identity, decision.delay_seconds)
    return supervise(worker, args.argv)


if __name__ == "__main__":
    sys.exit(main())
