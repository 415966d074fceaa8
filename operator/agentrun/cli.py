"""``agentrun-operator``: run the operator in the foreground.

``agentrun-operator run [--context NAME] [--namespace GLOB ...] [--workers N] [--qps Q]
[--burst B] [--reconcile-timeout SECONDS] [--journal-* ...]`` starts Kopf with the handlers of
:mod:`agentrun.controller.handlers`, Kopf's peering off, JSON logs on stderr.
Without ``--namespace`` it watches every namespace. ``--workers``: reconciles at once
(the work queue's workers); ``--qps``/``--burst``: the client-side rate limit on every
request the process makes, Kopf's watches and our Events included (``--qps 0``: none);
``--reconcile-timeout``: after this long a reconcile frees its worker and is retried.
(``--tick`` is gone: no timer scans the slots; each waits for its own time.)
``--metrics-port``/``--metrics-address``: where Prometheus scrapes ``/metrics``
(:mod:`agentrun.controller.metrics`; port 0: not served; the address is an IP address,
127.0.0.1 by default so a local run is not reachable from the network; the chart sets
0.0.0.0). A port that cannot be bound stops the operator at once, with the reason.
``--history-port``/``--history-address``: where the history API is served over TLS
(:mod:`agentrun.controller.historyserver`; port 0, the default: not served; the chart
serves it on 8443 behind the APIService ``v1alpha1.history.agentrun.dev``).
``--journal-endpoint``/``--journal-bucket`` (both or neither), ``--journal-prefix``,
``--journal-region``, ``--journal-secret``: the S3-compatible store where slots keep their
journals; each run launched pins them, its prefix made its own
(``<prefix>/<namespace>/<run uid>``); without them runs get no journal.
``--journal-retention-seconds``: how long a finished run's journal is kept (pinned too).
``--operator-namespace``: where it keeps its Lease and Secrets (found, or refused, by
:mod:`agentrun.kube.ownnamespace`). ``--leader-elect``: several replicas elect a leader on
the Lease ``agentrun-operator`` there (:mod:`agentrun.controller.leadership`), as
``--identity`` (their pod's name, default ``$POD_NAME``); only the leader reconciles and
mints, the others keep their caches primed; ``--leader-election-lease``,
``-renew-deadline``, ``-retry-period``: its timing (client-go's defaults 15, 10, 2 s).

``agentrun-operator stamping [--context NAME] [--timeout SECONDS]`` mints the stamping
epoch when due and waits until actor stamping is in force (exit 0), else prints why not
(exit 1): for install scripts and tests that need commands trusted before the operator runs.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import logging
import math
import os
import re
import socket
import sys
import threading
import uuid
from collections.abc import Callable
from types import SimpleNamespace

import kopf

from agentrun import rest, telemetry
from agentrun.api import bounds, distributions, names
from agentrun.api import runs as run_api
from agentrun.controller import handlers, historyserver, metrics
from agentrun.controller import stamping as stamping_keeper
from agentrun.core.policies import leadership
from agentrun.kube import clients, ownnamespace, reads, writes
from agentrun.rest import throttle

# Bounds of the operator's own flags (see docs/design/caches-and-queue.md, "The work queue").
WORKERS = (1, 64, 5)  # least, most, default: kube-controller-manager's --concurrent-*-syncs
# 0: no limit. Default 100/150: the Job controller's 20 pods/s at its 20 QPS, for our ~4.4
# writes a pod (docs/design/caches-and-queue.md, "The client-side rate limit").
QPS = (0.0, 10_000.0, 100.0)
BURST = (1, 20_000, 150)
RECONCILE_TIMEOUT = (1.0, 3600.0, 60.0)
METRICS_PORT = (0, 65535, 8080)  # 0: not served; 8080: the usual metrics port of operators
METRICS_ADDRESS = "127.0.0.1"
HISTORY_PORT = (0, 65535, 0)  # 0: not served (the chart serves it on 8443)
HISTORY_ADDRESS = "0.0.0.0"  # the API server reaches it through its Service, from outside
MAX_ADDRESS_CHARS = 64  # an IPv6 address with a zone fits
# Leader election's timing, in seconds (client-go's defaults: 15, 10, 2).
LEASE_SECONDS = (2.0, 300.0, 15.0)
RENEW_DEADLINE = (1.0, 299.0, 10.0)
RETRY_PERIOD = (0.2, 60.0, 2.0)

LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
              "error": logging.ERROR}

def identity(text: str) -> str:
    """An argparse type: a pod's name (a DNS subdomain), the replica's leader identity."""
    if not bounds.DNS_SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"--identity must be this replica's pod name (lower-case letters, digits, '-' "
            f"and '.', at most 253), not {text[:40]!r}")
    return text


def default_identity() -> str:
    """The pod's name (``POD_NAME``, from the downward API; what the fence checks), else
    this host's name made a DNS subdomain, with a random suffix (client-go's habit: two
    processes on one host must not both believe they hold the Lease)."""
    pod = os.environ.get("POD_NAME")
    if pod:
        return identity(pod)
    host = re.sub(r"[^a-z0-9.-]+", "-", socket.gethostname().lower()).strip("-.")[:200]
    return f"{host or 'operator'}-{uuid.uuid4().hex[:8]}"


def ip_address(what: str) -> Callable[[str], str]:
    """An argparse type for the flag ``what``: an IPv4 or IPv6 address to bind, else a
    clear error naming that flag."""
    def parse(text: str) -> str:
        try:
            if len(text) > MAX_ADDRESS_CHARS:
                raise ValueError(text)
            return str(ipaddress.ip_address(text))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{what} must be an IP address such as 127.0.0.1 or 0.0.0.0, "
                f"not {text[:40]!r}") from None
    return parse


def _number(value: float) -> str:
    """A bound as people write it: whole numbers in full (never 3.1536e+08)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def bounded(kind: Callable[[str], float], least: float, most: float,
            what: str) -> Callable[[str], float]:
    """An argparse type: a number within [least, most], else a clear error."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            kind_name = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(
                f"{what} must be {kind_name}, not {text[:40]!r}") from None
        if not math.isfinite(value) or not least <= value <= most:
            raise argparse.ArgumentTypeError(
                f"{what} must be between {_number(least)} and {_number(most)}, "
                f"not {text[:40]}")
        return value
    return parse


def checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """An argparse type: ``check`` (one of ``agentrun.api.runs``'s, the same the pinned
    model applies) turned into a clear error naming what is wanted."""
    def parse(text: str) -> str:
        try:
            return check(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
    return parse


JOURNAL_FLAGS = ("endpoint", "bucket", "prefix", "region", "secret", "retention_seconds")


def journal_secret(text: str) -> str:
    """The journal Secret's name: only :data:`~agentrun.api.names.JOURNAL_SECRET`, the one
    name the operator's ClusterRole may read (to check it before a launch, and to sign the
    deletion of a run's journal); any other would leave runs unlaunchable and undeletable."""
    name = run_api.journal_secret(text)
    if name != names.JOURNAL_SECRET:
        raise ValueError(f"the journal Secret is named {names.JOURNAL_SECRET} in each run's "
                         f"namespace (the only Secret name the operator may read), not {name!r}")
    return name


def journal_settings(args: argparse.Namespace) -> run_api.JournalSettings | None:
    """The ``--journal-*`` flags as settings, or None when none was given; a partial set
    (a bucket without an endpoint, a secret without both) is an error, not a guess."""
    given = {name: getattr(args, f"journal_{name}") for name in JOURNAL_FLAGS}
    given = {name: value for name, value in given.items() if value is not None}
    if not given:
        return None
    if "endpoint" not in given or "bucket" not in given:
        flags = ", ".join(f"--journal-{n.replace('_', '-')}" for n in given)
        raise ValueError("--journal-endpoint and --journal-bucket go together: give both "
                         "(the journal store) or no --journal-* flag at all (runs get no "
                         f"journal); given: {flags}")
    return run_api.JournalSettings.model_validate(given)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="agentrun-operator", description=__doc__)
    distributions.add_version_option(parser, distribution=distributions.OPERATOR)
    sub = parser.add_subparsers(dest="command", required=True)
    # No abbreviations: a flag is named whole, so the chart can tell its own from a user's.
    run = sub.add_parser("run", help="run the operator in the foreground", allow_abbrev=False)
    run.add_argument("--context", help="kubeconfig context (default: current, else in-cluster)")
    run.add_argument("--namespace", "-n", action="append", default=[],
                     help="namespace name or glob to serve (repeatable; default: all)")
    ownnamespace.add_flag(run)
    run.add_argument("--workers", type=bounded(int, *WORKERS[:2], "--workers"),
                     default=WORKERS[2],
                     help=f"reconciles run at once (default {WORKERS[2]}, at most {WORKERS[1]})")
    run.add_argument("--qps", type=bounded(float, *QPS[:2], "--qps"), default=QPS[2],
                     help=f"API requests per second, every request of the process counted "
                          f"(default {QPS[2]:g}; 0: no limit)")
    run.add_argument("--burst", type=bounded(int, *BURST[:2], "--burst"), default=BURST[2],
                     help=f"requests allowed at once above --qps (default {BURST[2]})")
    run.add_argument("--reconcile-timeout", type=bounded(float, *RECONCILE_TIMEOUT[:2],
                                                         "--reconcile-timeout"),
                     default=RECONCILE_TIMEOUT[2],
                     help="seconds after which a reconcile frees its worker and is retried "
                          f"(default {RECONCILE_TIMEOUT[2]:g})")
    run.add_argument("--metrics-port", type=bounded(int, *METRICS_PORT[:2], "--metrics-port"),
                     default=METRICS_PORT[2],
                     help=f"port serving /metrics (default {METRICS_PORT[2]}; 0: not served)")
    run.add_argument("--metrics-address", type=ip_address("--metrics-address"),
                     default=METRICS_ADDRESS,
                     help=f"address serving /metrics (default {METRICS_ADDRESS}; "
                          "0.0.0.0 to be scraped from other pods)")
    run.add_argument("--history-port", type=bounded(int, *HISTORY_PORT[:2], "--history-port"),
                     default=HISTORY_PORT[2],
                     help="port serving the history API (people read journals through the "
                          "API server: the APIService v1alpha1.history.agentrun.dev) over "
                          "TLS (default 0: not served)")
    run.add_argument("--history-address", type=ip_address("--history-address"),
                     default=HISTORY_ADDRESS,
                     help=f"address serving the history API (default {HISTORY_ADDRESS})")
    run.add_argument("--journal-endpoint", type=checked(run_api.journal_endpoint),
                     help="the journal store's S3 API, such as http://minio.storage:9000 (with "
                          "--journal-bucket; neither: runs get no journal)")
    run.add_argument("--journal-bucket", type=checked(run_api.journal_bucket),
                     help="the bucket holding every run's journal")
    run.add_argument("--journal-prefix", type=checked(run_api.journal_base_prefix),
                     help="where in the bucket; each run's journal goes under "
                          f"<prefix>/<namespace>/<run uid> (default {run_api.JOURNAL_BASE_PREFIX}; "
                          f"at most {run_api.JOURNAL_BASE_PREFIX_CHARS} characters)")
    run.add_argument("--journal-region", type=checked(run_api.journal_region),
                     help=f"the store's region (default {run_api.JOURNAL_REGION})")
    run.add_argument("--journal-retention-seconds",
                     type=bounded(int, 0, run_api.JOURNAL_RETENTION_SECONDS,
                                   "--journal-retention-seconds"),
                     help="seconds a finished run's journal is kept, then deleted (the run "
                          "stays; 0: at once; default: kept until the run is deleted)")
    run.add_argument("--journal-secret", type=checked(journal_secret),
                     help=f"the Secret {names.JOURNAL_SECRET}, in each run's namespace, with the "
                          "keys accessKeyId and secretAccessKey, mounted into its workers "
                          "(default: none, unsigned requests)")
    run.add_argument("--otlp-endpoint", type=checked(telemetry.check_endpoint),
                     help="send the runs' traces over OTLP/HTTP to this base URL (spans to "
                          "<url>/v1/traces), such as http://otel-collector.observability:4318 "
                          f"(default: ${telemetry.ENDPOINT_ENV}; neither: no tracing)")
    run.add_argument("--leader-elect", action="store_true",
                     help=f"elect a leader among the replicas on the Lease "
                          f"{names.LEADER_LEASE} in the operator's namespace: only the "
                          "leader reconciles, the others stand by with primed caches")
    run.add_argument("--identity", type=identity,
                     help="this replica's identity in the election: its pod's name (default: "
                          "$POD_NAME, else the host name)")
    run.add_argument("--leader-election-lease", type=bounded(float, *LEASE_SECONDS[:2],
                                                             "--leader-election-lease"),
                     default=LEASE_SECONDS[2],
                     help="seconds a leader's claim lasts unrenewed (default "
                          f"{LEASE_SECONDS[2]:g})")
    run.add_argument("--leader-election-renew-deadline",
                     type=bounded(float, *RENEW_DEADLINE[:2], "--leader-election-renew-deadline"),
                     default=RENEW_DEADLINE[2],
                     help="seconds after which a leader that could not renew stops "
                          f"(default {RENEW_DEADLINE[2]:g}; less than the lease)")
    run.add_argument("--leader-election-retry-period",
                     type=bounded(float, *RETRY_PERIOD[:2], "--leader-election-retry-period"),
                     default=RETRY_PERIOD[2],
                     help="seconds between a replica's election passes (default "
                          f"{RETRY_PERIOD[2]:g}; less than the renew deadline)")
    run.add_argument("--verbose", "-v", action="store_true",
                     help="log at debug, Kopf's per-event lines too (over --log-level)")
    run.add_argument("--log-level", choices=LOG_LEVELS, default="info",
                     help="the operator's log level (default info: every transition's Event; "
                          "warning: only Warning Events and problems)")
    stamp = sub.add_parser("stamping", help="mint the stamping epoch when due; wait until "
                                            "actor stamping is in force")
    stamp.add_argument("--context", help="kubeconfig context (default: current, else in-cluster)")
    stamp.add_argument("--timeout", type=float, default=60.0)
    ownnamespace.add_flag(stamp)
    stamp.set_defaults(verbose=False, log_level="info")
    args = parser.parse_args(argv)
    args.own_namespace = ownnamespace.parsed(parser=parser, flag=args.operator_namespace)
    if args.command == "run":
        try:
            args.journal = journal_settings(args)
            args.election = leadership.Timing(
                lease=args.leader_election_lease,
                renew_deadline=args.leader_election_renew_deadline,
                retry=args.leader_election_retry_period) if args.leader_elect else None
        except ValueError as error:
            parser.error(str(error))
        try:
            args.identity = args.identity or default_identity()
        except argparse.ArgumentTypeError as error:
            parser.error(f"$POD_NAME: {error}")
    return args


def stamping(*, context: str | None, timeout: float, operator_namespace: str) -> int:
    client = rest.Rest(clients.configure(context=context))
    keeper = stamping_keeper.Keeper(reader=reads.Reader(
        client, operator_namespace=operator_namespace), writer=writes.Writer(client),
                                    logger=logging.getLogger("agentrun"))
    found = keeper.until_in_force(timeout=timeout)
    if found.epoch is None:
        print(f"actor stamping is not in force: {found.problem}", file=sys.stderr)
        return 1
    print("actor stamping is in force")
    return 0


def configure_logging(*, verbose: bool, level: str = "info") -> None:
    """JSON logs through Kopf's own formatter: a line about an object carries it as fields
    (``object``: apiVersion, kind, namespace, name, uid, a slot's latest attempt; see
    ``kube.events.reference``), and every line its ``severity``.

    Kopf's per-event "handler succeeded" lines are noise at this operator's event rate: its
    loggers stay at WARNING unless ``--verbose``; ours report every transition at INFO
    (a Warning Event at WARNING), or what ``level`` lets through.
    """
    kopf.configure(verbose=verbose, log_format=kopf.LogFormat.JSON)
    logging.getLogger().setLevel(logging.DEBUG if verbose else LOG_LEVELS[level])
    quiet = max(logging.WARNING, LOG_LEVELS[level])  # the libraries' lines: problems only
    logging.getLogger("kopf").setLevel(logging.DEBUG if verbose else quiet)
    logging.getLogger("kubernetes").setLevel(quiet)
    logging.getLogger("urllib3").setLevel(quiet)


def start_tracing(*, flag: str | None, identity: str) -> telemetry.Telemetry | None:
    """The operator's tracing: to ``--otlp-endpoint`` (checked by argparse), else to
    ``$OTEL_EXPORTER_OTLP_ENDPOINT``, which a platform may set for every pod: one that is
    not an OTLP/HTTP URL is logged and tracing is off. None (said on stderr): the SDK's
    own settings (``OTEL_BSP_*``) are malformed."""
    try:
        return telemetry.Telemetry.start(
            endpoint=flag or telemetry.ambient_endpoint(os.environ),
            service="agentrun-operator", resource={"service.instance.id": identity})
    except Exception as error:
        print(f"tracing could not start: {error}; fix the OpenTelemetry settings "
              "(OTEL_BSP_*) or leave --otlp-endpoint out", file=sys.stderr)
        return None


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    configure_logging(verbose=args.verbose, level=args.log_level)
    ownnamespace.announce(args.own_namespace, logger=logging.getLogger("agentrun"))
    if args.command == "stamping":
        return stamping(context=args.context, timeout=args.timeout,
                        operator_namespace=args.own_namespace.name)
    tracing = start_tracing(flag=args.otlp_endpoint, identity=args.identity)
    if tracing is None:
        return 1
    bucket = (throttle.Bucket(qps=args.qps, burst=int(args.burst)) if args.qps > 0 else None)
    meters = metrics.Metrics()
    server = None
    if args.metrics_port:
        try:
            server = meters.serve(address=args.metrics_address, port=int(args.metrics_port))
        except OSError as error:
            print(f"cannot serve metrics on {args.metrics_address}:{int(args.metrics_port)}: "
                  f"{error.strerror or error}; choose another --metrics-port (0: none)",
                  file=sys.stderr)
            return 1
        logging.getLogger("agentrun").info("metrics served on http://%s:%d/metrics",
                                           args.metrics_address, server.port)
    # Set while this replica leads (always None without election: it runs alone, and
    # writes): the elector sets it; the history API makes its certificate only then.
    leading = threading.Event() if args.election is not None else None
    if leading is not None:
        meters.watch_leading(leading.is_set)
    history = None
    if args.history_port:
        try:
            history = historyserver.start(
                context=args.context, address=args.history_address,
                port=int(args.history_port), bucket=bucket, meters=meters,
                may_write=(lambda: True) if leading is None else leading.is_set,
                operator_namespace=args.own_namespace.name, logger=logging.getLogger("agentrun"))
        except OSError as error:
            print(f"cannot serve the history API on {args.history_address}:"
                  f"{int(args.history_port)}: {error.strerror or error}; choose another "
                  "--history-port (0: none)", file=sys.stderr)
            return 1
        logging.getLogger("agentrun").info("history API served on https://%s:%d",
                                           args.history_address, history.server.port)
    memo = SimpleNamespace(context=args.context, namespaces=list(args.namespace),
                           workers=int(args.workers), bucket=bucket,
                           reconcile_timeout=args.reconcile_timeout, meters=meters,
                           journal=args.journal, election=args.election,
                           identity=args.identity, leading=leading, telemetry=tracing,
                           operator_namespace=args.own_namespace.name)
    try:
        asyncio.run(kopf.operator(
            registry=handlers.registry(),
            standalone=True,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
            memo=kopf.Memo(vars(memo)),
        ))
    finally:
        if server is not None:
            server.close()
        if history is not None:
            history.close()
        tracing.shutdown()  # what is batched is sent
    return 0


if __name__ == "__main__":
    sys.exit(main())
