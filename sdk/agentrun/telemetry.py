"""Sending spans over OTLP: the one module that loads OpenTelemetry.

The operator reports spans already finished (``api.traces.SpanRecord``, from its pure
core) with *derived* ids (``api.traces``), and a worker reports its steps and effects as
they run, under its attempt's derived span. OpenTelemetry's SDK makes its own ids, so its
``IdGenerator`` here hands out the id the caller gave (a context variable, set around each
span's start): a derived one, or a random one for a worker's live spans (a step or an
effect may run twice in an attempt: a retried effect, a key used again).

*Off* (no endpoint, or OpenTelemetry not installed in a worker's image) every call is a
no-op costing one attribute check: tracing is off unless asked for. Spans go in batches
(``BatchSpanProcessor``), so a step is never held up by the collector; what a process
killed had not sent yet is lost, and a collector that is down loses spans, never work
(OpenTelemetry's exporter drops a batch it could not send); the end of a process waits
for its last spans :data:`SHUTDOWN_SECONDS` at most.

The endpoint is OTLP over HTTP (protobuf), the base URL of
``OTEL_EXPORTER_OTLP_ENDPOINT``: spans go to ``<endpoint>/v1/traces``.
"""

from __future__ import annotations

import contextlib
import logging
import random
import re
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

from agentrun.api.traces import Attribute, SpanRecord

log = logging.getLogger(__name__)
ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
MAX_ENDPOINT_CHARS = 2048
# What check_endpoint accepts, for a schema (the chart's values): http(s), a host (a name,
# an IPv4 or a bracketed IPv6 address), an optional port, an optional path.
ENDPOINT_PATTERN = (r"^https?://([^\s/?#:@\[\]]+|\[[0-9A-Fa-f:.]+\])(:[0-9]{1,5})?"
                    r"(/[^\s?#]*)?$")
BATCH_DELAY_SECONDS = 1.0
EXPORT_TIMEOUT_SECONDS = 5.0  # one batch's request
SHUTDOWN_SECONDS = 2.0  # what the end of a process waits for its last spans, at most
_DERIVED: ContextVar[tuple[int, int] | None] = ContextVar("agentrun_span_ids", default=None)


class EndpointError(ValueError):
    """An OTLP endpoint that is not an http(s) URL of a host."""


def check_endpoint(value: str) -> str:
    """``value`` as an OTLP/HTTP base URL (its trailing ``/`` removed), or EndpointError
    saying what is wrong."""
    if len(value) > MAX_ENDPOINT_CHARS:
        raise EndpointError(f"the OTLP endpoint is {len(value)} characters long; at most "
                            f"{MAX_ENDPOINT_CHARS}")
    parts = urlsplit(value.strip())
    if not re.match(ENDPOINT_PATTERN, value.strip()) or not parts.hostname:
        raise EndpointError(f"the OTLP endpoint {value[:200]!r} is not an http(s) URL of a "
                            "host with no query (e.g. http://otel-collector.observability:4318)")
    return value.strip().rstrip("/")


def ambient_endpoint(environ: Mapping[str, str]) -> str | None:
    """``$OTEL_EXPORTER_OTLP_ENDPOINT`` when it is an OTLP/HTTP URL; None when unset or not
    one (logged: a platform may set it for every pod, a gRPC ``host:port`` say, and it is
    not the operator's to refuse)."""
    ambient = environ.get(ENDPOINT_ENV)
    if not ambient:
        return None
    try:
        return check_endpoint(ambient)
    except EndpointError as error:
        log.warning("tracing is off: $%s: %s (pass --otlp-endpoint to trace)",
                    ENDPOINT_ENV, error)
        return None


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _nanos(moment: datetime) -> int:
    """Nanoseconds since the epoch, exactly (a naive time is taken as UTC)."""
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    return (aware - EPOCH) // timedelta(microseconds=1) * 1000


class Telemetry:
    """Spans to one OTLP endpoint, or nowhere (:attr:`on` False): see the module."""

    def __init__(self, *, provider: Any = None) -> None:
        self._provider = provider
        self._tracer = None if provider is None else provider.get_tracer("agentrun")

    @property
    def on(self) -> bool:
        return self._tracer is not None

    @classmethod
    def start(cls, *, endpoint: str | None, service: str,
              resource: Mapping[str, str] | None = None) -> Telemetry:
        """Send to ``endpoint`` (checked: :func:`check_endpoint`) as ``service``; off when
        ``endpoint`` is None or empty, or OpenTelemetry is not installed (logged). The
        SDK's own settings (``OTEL_BSP_*``) apply, and raise when malformed."""
        if not endpoint:
            return cls()
        url = check_endpoint(endpoint)
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
        except ImportError as missing:
            log.warning("tracing is off: %s names an endpoint but OpenTelemetry is not "
                        "installed (%s: install the distribution's tracing extra, "
                        "OpenTelemetry's SDK and its OTLP/HTTP exporter)",
                        ENDPOINT_ENV, missing)
            return cls()
        return cls.over(BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{url}/v1/traces", timeout=EXPORT_TIMEOUT_SECONDS),
            schedule_delay_millis=BATCH_DELAY_SECONDS * 1000), service=service,
            resource=resource)

    @classmethod
    def over(cls, processor: Any, *, service: str,
             resource: Mapping[str, str] | None = None) -> Telemetry:
        """Spans to ``processor`` (an OpenTelemetry ``SpanProcessor``), as ``service``."""
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.id_generator import IdGenerator

        class Derived(IdGenerator):
            """The id the caller derived, else a random one (see the module)."""

            def generate_span_id(self) -> int:
                ids = _DERIVED.get()
                return ids[1] if ids is not None else random.getrandbits(64) or 1

            def generate_trace_id(self) -> int:
                ids = _DERIVED.get()
                return ids[0] if ids is not None else random.getrandbits(128) or 1

        provider = TracerProvider(
            resource=Resource.create({"service.name": service, **(resource or {})}),
            id_generator=Derived())
        provider.add_span_processor(processor)
        return cls(provider=provider)

    def report(self, record: SpanRecord) -> None:
        """Send a finished span with its derived ids, times, events and status."""
        tracer = self._tracer  # read once: a shutdown meanwhile sets it to None
        if tracer is None:
            return
        start, end = _nanos(record.start), _nanos(record.end)
        span = _begin(tracer, trace=record.trace, span=record.span, parent=record.parent,
                      name=record.name, attributes=record.attributes, start=start)
        for event in record.events:
            span.add_event(event.name, attributes=dict(event.attributes),
                           timestamp=_nanos(event.time))
        if record.error is not None:
            from opentelemetry.trace import Status, StatusCode
            span.set_status(Status(StatusCode.ERROR, record.error))
        span.end(end_time=max(start, end))

    def report_all(self, records: Iterable[SpanRecord]) -> None:
        """:meth:`report` each of ``records`` (the spans a reconcile's writes completed, sent
        after its Events): a fault here is logged, never raised, since the writes are made
        and a retried reconcile would report nothing."""
        try:
            for record in records:
                self.report(record)
        except Exception:
            log.exception("tracing: spans not reported")

    @contextlib.contextmanager
    def span(self, *, trace: int, parent: int, name: str,
             attributes: Mapping[str, Attribute], span: int | None = None) -> Iterator[Any]:
        """A span under ``parent`` open for the ``with`` block and current inside it (what
        :meth:`current_span` finds); an exception leaving the block is recorded on it and
        marks it ERROR. Its id is ``span``, else random. Yields the OpenTelemetry span
        (None when off)."""
        tracer = self._tracer
        if tracer is None:
            yield None
            return
        from opentelemetry import trace as api
        opened = _begin(tracer, trace=trace, parent=parent, name=name, attributes=attributes,
                        start=None, span=span if span is not None else _random_span())
        with api.use_span(opened, end_on_exit=True, record_exception=True,
                          set_status_on_exception=True):
            yield opened

    def current_span(self, *, trace: int) -> int | None:
        """The id of the span open in this context (:meth:`span`) in ``trace``, if any."""
        if self._tracer is None:
            return None
        from opentelemetry import trace as api
        found = api.get_current_span().get_span_context()
        return found.span_id if found.is_valid and found.trace_id == trace else None

    def flush(self) -> None:
        """Send what is batched now (each request bounded by the exporter's timeout)."""
        provider = self._provider
        if provider is not None:
            provider.force_flush()

    def shutdown(self, *, timeout_seconds: float = SHUTDOWN_SECONDS) -> None:
        """Send what is batched and stop, waiting at most ``timeout_seconds`` (the process
        is ending: a collector that does not answer must not hold it, a worker's lease
        least of all); what is not sent by then is lost."""
        provider, self._provider, self._tracer = self._provider, None, None
        if provider is None:
            return
        stopping = threading.Thread(target=provider.shutdown, name="otel-shutdown",
                                    daemon=True)
        stopping.start()
        stopping.join(timeout_seconds)
        if stopping.is_alive():
            log.warning("spans not sent within %.0f s of the end are lost (is the collector "
                        "at %s answering?)", timeout_seconds, ENDPOINT_ENV)


def _random_span() -> int:
    return random.getrandbits(64) or 1


def _begin(tracer: Any, *, trace: int, span: int, parent: int | None, name: str,
           attributes: Mapping[str, Attribute], start: int | None) -> Any:
    """Start a span with the ids given (see the module), under ``parent`` (None: a root)."""
    from opentelemetry import context
    from opentelemetry import trace as api
    if parent is None:
        where = context.Context()  # a root: no current span is its parent
    else:
        where = api.set_span_in_context(api.NonRecordingSpan(api.SpanContext(
            trace_id=trace, span_id=parent, is_remote=True,
            trace_flags=api.TraceFlags(api.TraceFlags.SAMPLED))))
    token = _DERIVED.set((trace, span))
    try:
        return tracer.start_span(name, context=where, attributes=dict(attributes),
                                 start_time=start)
    finally:
        _DERIVED.reset(token)
