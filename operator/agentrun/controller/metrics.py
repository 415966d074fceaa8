"""The operator's Prometheus metrics: one registry of our own, served on ``/metrics``.

Names follow Prometheus' conventions (``agentrun_`` prefix, ``_total`` counters,
``_seconds`` histograms), and no label names an object (no run, slot or pod): every
label takes one of a fixed set of values (a state, an outcome, a command kind, a
predicate, a key's kind, an Event reason of the core's), so the series stay few.

Where counting happens: where the operator *applies* a result, after its write
succeeded. A slot's status write is tallied (``core.slots.tallies``) right after
``writes.Writer.slot_status`` returned, against the status it replaced; a run's Event is
counted once its status write returned. A reconcile that is retried reads the written
status back and finds nothing new, so nothing is counted twice; a crash between the
write and the count loses that count (an undercount, never a double one).

The registry is not the ``prometheus_client`` global one: tests build their own
``Metrics`` and read it, and nothing another library registers is served.

The same endpoint answers the kubelet's probes (the chart's Deployment): ``/healthz`` is
200 while the process serves HTTP (liveness: a dead or wedged process is restarted);
``/readyz`` is 200 only while the operator serves, that is from the moment its stores are
primed, the stamping epoch is in force and its work queue started
(``runtime.Operator.begin``) until it stops, and 503 before and after, and whenever the
epoch is not in force, or while a required check (:meth:`Metrics.require`: the history
API's certificate) says something is missing (readiness: "this pod reconciles, or as a
standby could take over at once, its writes are not refused by its own stamping policy,
and it has read the certificate its history Service needs"); the 503's text says which.
"""

from __future__ import annotations

import platform
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import prometheus_client
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from agentrun.api.slots import Outcome, SlotState
from agentrun.core.base import census
from agentrun.core.slots import tallies

KEY_KINDS = ("AgentRun", "Slot", "LaunchSpec")  # what the work queue's keys name
# Claim latency: a claim is a few API writes (tens of ms) unless a quota or a person delays it.
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0)
# Attempts run from seconds (a crash at start) to hours (an agent's long task).
# A key's wait in the queue, a reconcile, an API request: milliseconds, seconds when loaded.
WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# A reconcile: the same, and up to its timeout (--reconcile-timeout, 60 s by default).
RECONCILE_BUCKETS = (*WAIT_BUCKETS, 60.0, 120.0, 300.0, 600.0)
DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


def _version() -> str:
    """The installed distribution's version ("unknown" when run from a source tree)."""
    try:
        return metadata.version("agentrun-operator")
    except metadata.PackageNotFoundError:
        return "unknown"


VERSION = _version()


@dataclass
class Metrics:
    """The operator's metrics in their own registry (see the module docstring)."""

    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    # Set while the operator serves (``/readyz``): see the module docstring.
    ready: threading.Event = field(default_factory=threading.Event)
    # What ``/readyz`` says while it is not set.
    waiting_for: str = "the stores are not primed yet"
    # More of what readiness needs, each saying what is missing (None: nothing): the
    # history API's certificate (:meth:`require`).
    checks: list[Callable[[], str | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        into = self.registry
        self.transitions = Counter(
            "agentrun_transitions_total",
            "Transitions applied: kind Slot (outcome: the state entered), Attempt (outcome: "
            "the attempt's outcome), Run (outcome: the run Event's reason)",
            ["kind", "outcome"], registry=into)
        # Shown at 0 from the start, so that an alert's increase() counts the first one.
        for state in SlotState:
            self.transitions.labels(kind="Slot", outcome=str(state))
        for outcome in Outcome:
            self.transitions.labels(kind="Attempt", outcome=str(outcome))
        self.commands = Counter(
            "agentrun_commands_total",
            "Commands recorded in a slot's ledger, by kind, outcome (Accepted/Rejected) and "
            "the predicate that rejected it (empty when accepted)",
            ["kind", "outcome", "predicate"], registry=into)
        self.claim_latency = Histogram(
            "agentrun_claim_latency_seconds",
            "From a slot becoming claimable to its attempt's Pod and Lease existing",
            buckets=LATENCY_BUCKETS, registry=into)
        self.attempt_duration = Histogram(
            "agentrun_attempt_duration_seconds",
            "From an attempt's start to its end, by outcome", ["outcome"],
            buckets=DURATION_BUCKETS, registry=into)
        self.lease_expiries = Counter(
            "agentrun_lease_expiries_total",
            "Attempts ended because their lease was not held (outcome Lost or StartTimeout)",
            registry=into)
        self.reconcile_errors = Counter(
            "agentrun_reconcile_errors_total",
            "Reconciles that ended on an error (to be retried after a backoff), by key kind",
            ["kind"], registry=into)
        for kind in KEY_KINDS:  # shown at 0 from the start: a rate needs the series to exist
            self.reconcile_errors.labels(kind=kind)
        self.queue_depth = Gauge(
            "agentrun_queue_depth", "Keys waiting in the work queue for a worker",
            registry=into)
        self.effects_unresolved = Counter(
            "agentrun_effects_unresolved_total",
            "Effects a worker could not settle, recorded as EffectUnresolved on a slot",
            registry=into)
        self.questions_asked = Counter(
            "agentrun_questions_asked_total",
            "Questions workers asked a person, recorded as QuestionPending on a slot",
            registry=into)
        self.approvals_requested = Counter(
            "agentrun_approvals_requested_total",
            "Effects waiting for people's approval of their payload, recorded on a slot",
            registry=into)
        self.model_tokens = Counter(
            "agentrun_model_tokens_total",
            "Model tokens workers reported (read off attempts' Leases into slots' status)",
            ["direction"], registry=into)
        self.model_cost = Counter(
            "agentrun_model_cost_total",
            "What workers' model calls cost, in units of the currency (runs' price tables)",
            ["currency"], registry=into)
        for direction in ("input", "output"):
            self.model_tokens.labels(direction=direction)
        self.queue_wait = Histogram(
            "agentrun_queue_wait_seconds",
            "How long a key waited in the work queue before a worker took it",
            buckets=WAIT_BUCKETS, registry=into)
        self.queue_retries = Counter(
            "agentrun_queue_retries_total",
            "Keys backed off and queued again after an error or a timeout, by key kind",
            ["kind"], registry=into)
        self.reconcile_duration = Histogram(
            "agentrun_reconcile_duration_seconds", "How long one reconcile took, by key kind",
            ["kind"], buckets=RECONCILE_BUCKETS, registry=into)
        self.api_requests = Counter(
            "agentrun_api_requests_total",
            "The operator's requests to the API server, by HTTP method and answer (code "
            "'none': no answer)", ["method", "code"], registry=into)
        self.api_latency = Histogram(
            "agentrun_api_request_duration_seconds",
            "How long the operator's requests to the API server took, by HTTP method",
            ["method"], buckets=WAIT_BUCKETS, registry=into)
        self.blind = Gauge(
            "agentrun_blind_seconds",
            "Blind time in the last 5 minutes: when the API server did not answer in time "
            "(never counted towards a lease's expiry)", registry=into)
        for kind in KEY_KINDS:
            self.queue_retries.labels(kind=kind)
        self.census = _CensusCollector()
        into.register(self.census)
        self.leader = Gauge(
            "agentrun_leader",
            "1 while this replica leads (reconciles and writes), 0 while it stands by",
            registry=into)
        self.leader.set(1)  # alone (no election) it leads; watch_leading says otherwise
        build = Gauge("agentrun_build_info", "The operator's version and Python (always 1)",
                      ["version", "python"], registry=into)
        build.labels(version=VERSION, python=platform.python_version()).set(1)
        # CPU seconds, resident memory, open files, start time (Linux /proc).
        prometheus_client.ProcessCollector(registry=into)

    def count(self, tally: tallies.Tally) -> None:
        """Count one applied slot write."""
        for kind, outcome in tally.transitions:
            self.transitions.labels(kind=kind, outcome=outcome).inc()
        for kind, outcome, predicate in tally.commands:
            self.commands.labels(kind=kind, outcome=outcome, predicate=predicate).inc()
        for seconds in tally.claim_latencies:
            self.claim_latency.observe(seconds)
        for outcome, seconds in tally.attempt_durations:
            self.attempt_duration.labels(outcome=outcome).observe(seconds)
        if tally.lease_expiries:
            self.lease_expiries.inc(tally.lease_expiries)
        if tally.effects_unresolved:
            self.effects_unresolved.inc(tally.effects_unresolved)
        if tally.questions_asked:
            self.questions_asked.inc(tally.questions_asked)
        if tally.approvals_requested:
            self.approvals_requested.inc(tally.approvals_requested)
        if tally.usage is not None:
            self.model_tokens.labels(direction="input").inc(tally.usage.input_tokens)
            self.model_tokens.labels(direction="output").inc(tally.usage.output_tokens)
            self.model_cost.labels(currency=tally.usage.currency).inc(
                tally.usage.cost_micros / 1_000_000)

    def run_event(self, reason: str) -> None:
        """Count one applied run status write that carried an Event (its reason)."""
        self.transitions.labels(kind="Run", outcome=reason).inc()

    def reconcile_error(self, kind: str) -> None:
        self.reconcile_errors.labels(kind=kind).inc()

    def unready(self, why: str) -> None:
        """``/readyz`` 503 from now on, saying ``why``."""
        self.waiting_for = why
        self.ready.clear()

    def require(self, check: Callable[[], str | None]) -> None:
        """``/readyz`` 503 also while ``check`` says what is missing."""
        self.checks.append(check)

    def readiness(self) -> str | None:
        """What keeps ``/readyz`` at 503 (None: ready)."""
        if not self.ready.is_set():
            return self.waiting_for
        return next((why for check in self.checks if (why := check()) is not None), None)

    def watch_leading(self, leading: Callable[[], bool]) -> None:
        """Read whether this replica leads at each scrape (under leader election)."""
        self.leader.set_function(lambda: 1.0 if leading() else 0.0)

    def watch_depth(self, depth: Callable[[], float]) -> None:
        """Read the queue's depth at each scrape (never stale, nothing to update)."""
        self.queue_depth.set_function(depth)

    def watch_census(self, take: Callable[[], census.Census | None]) -> None:
        """Take the census of slots and runs at each scrape (None: counted by another
        replica, the leader: shown as zeros, so a sum over replicas counts once)."""
        self.census.take = take

    def watch_blind(self, blind: Callable[[], float]) -> None:
        """Read the blind seconds of the last 5 minutes at each scrape."""
        self.blind.set_function(blind)

    def api_request(self, method: str, status: int | None, seconds: float) -> None:
        """Count one request to the API server (``rest.Rest.observe``)."""
        self.api_requests.labels(method=method,
                                 code="none" if status is None else str(status)).inc()
        self.api_latency.labels(method=method).observe(seconds)

    def queued(self, kind: str, seconds: float) -> None:
        """A key of ``kind`` waited ``seconds`` in the queue (``queues.Queue.waited``)."""
        self.queue_wait.observe(seconds)

    def retried(self, kind: str) -> None:
        self.queue_retries.labels(kind=kind).inc()

    def reconciled(self, kind: str, seconds: float) -> None:
        self.reconcile_duration.labels(kind=kind).observe(seconds)

    def serve(self, *, address: str, port: int) -> Server:
        """Serve ``/metrics``, ``/healthz`` and ``/readyz`` from a daemon thread; the caller
        stops it with ``close``."""
        exposition = prometheus_client.make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            path = environ.get("PATH_INFO", "")
            if path == "/healthz":
                return _answer(start_response, ok=True, text="alive")
            if path == "/readyz":
                why = self.readiness()
                return _answer(start_response, ok=why is None, text="serving" if why is None
                               else f"not serving: {why}")
            return exposition(environ, start_response)  # type: ignore[no-any-return]

        class Bound(ThreadingWSGIServer):
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

        server = make_server(address, port, app, Bound, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True,
                                  name="metrics-server")
        thread.start()
        return Server(server=server, thread=thread)


class _Quiet(WSGIRequestHandler):
    """No access log line per scrape or probe."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _CensusCollector(Collector):
    """The gauges of :mod:`agentrun.core.base.census`, taken at each scrape."""

    def __init__(self) -> None:
        self.take: Callable[[], census.Census | None] = lambda: None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        found = self.take() or census.count(slots=(), runs=(), now=datetime.now(UTC))
        for name, what, label, counted in (
                ("agentrun_slots", "Slots by state", "state", found.slots),
                ("agentrun_runs", "Runs by state", "state", found.runs),
                ("agentrun_waiting_for_person",
                 "Slots waiting for a person: an unresolved effect, a question, an approval, "
                 "a budget to raise", "what", found.waiting),
                ("agentrun_oldest_wait_seconds",
                 "How long the slot waiting longest has waited, by what for: a person (effect, "
                 "question, approval, budget) or its claim (a quota, a refused Pod); 0: none",
                 "what", found.oldest)):
            family = GaugeMetricFamily(name, what, labels=[label])
            for value, number in sorted(counted.items()):
                family.add_metric([value], number)
            yield family


def _answer(start_response: Callable[..., Any], *, ok: bool, text: str) -> list[bytes]:
    status = "200 OK" if ok else "503 Service Unavailable"
    start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
    return [text.encode() + b"\n"]


@dataclass(frozen=True)
class Server:
    """The running endpoint: its server and the thread serving it."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        """The port bound (the one asked for, or the one the OS chose for port 0)."""
        return int(self.server.server_port)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)
