"""The attempt's spans in its run's trace: its steps, its effects, its model calls.

The operator names the attempt's span in the pod's ``TRACEPARENT`` (``api.traces``) and
reports that span itself when the attempt ends; a worker reports, under it, a span per
step (``agentrun.step.outcome``: ``ran``, or ``skipped`` when the recoverable prefix held
it and this attempt read it back instead), a span per effect (its key and how it ended) and
a moment per model call under the span it was made in. Their own ids are random: a step
key may be used again, an effect retried, in one attempt, and each is a span of its own.

Tracing is off, each call a no-op, unless the pod names an OTLP endpoint
(``OTEL_EXPORTER_OTLP_ENDPOINT``, set in its LaunchSpec's template) and OpenTelemetry is
installed (the ``tracing`` extra); a ``TRACEPARENT`` that is not W3C's, or a malformed
endpoint, is logged and turns tracing off, never stops the attempt.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentrun import telemetry
from agentrun.api import traces
from agentrun.api.traces import Attribute

log = logging.getLogger(__name__)
MAX_KEY_CHARS = 256  # of a key in a span's name and attributes (the step checks its own)


@dataclass
class StepMark:
    """Set by the step's body when it runs: a step whose body did not run was skipped."""

    ran: bool = False


@dataclass(kw_only=True)
class AttemptSpans:
    """See the module docstring; :meth:`from_env` in a pod, off when built bare."""

    parent: traces.Parent | None = None
    where: Mapping[str, Attribute] = field(default_factory=dict)
    sink: telemetry.Telemetry = field(default_factory=telemetry.Telemetry)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 where: Mapping[str, Attribute] | None = None) -> AttemptSpans:
        env = os.environ if environ is None else environ
        endpoint = env.get(telemetry.ENDPOINT_ENV, "")
        given = env.get(traces.TRACEPARENT_ENV, "")
        if not endpoint or not given:
            return cls()
        parent = traces.parse_traceparent(given)
        if parent is None:
            log.warning("tracing is off: %s=%r is not a W3C traceparent",
                        traces.TRACEPARENT_ENV, given[:80])
            return cls()
        try:
            sink = telemetry.Telemetry.start(endpoint=endpoint, service="agentrun-worker")
        except Exception as error:  # a bad endpoint, OTEL_BSP_* settings: never fatal here
            log.warning("tracing is off: %s", error)
            return cls()
        return cls(parent=parent, where=dict(where or {}), sink=sink)

    @property
    def on(self) -> bool:
        return self.parent is not None and self.sink.on

    @contextlib.contextmanager
    def step(self, key: str) -> Iterator[StepMark]:
        """The span of step ``key`` for the ``with`` block; the block marks the
        :class:`StepMark` it is given when the step's body runs (``ran``), else the step
        was read back from the recoverable prefix (``skipped``)."""
        mark = StepMark()
        with self._span("step", key, {"agentrun.step.key": key[:MAX_KEY_CHARS]}) as opened:
            try:
                yield mark
            finally:
                if opened is not None:
                    opened.set_attribute("agentrun.step.outcome",
                                         "ran" if mark.ran else "skipped")

    @contextlib.contextmanager
    def effect(self, name: str, *, key: str) -> Iterator[None]:
        """The span of effect ``name`` under idempotency key ``key`` for the ``with``
        block (an error leaving it, a stop or an unknown outcome included, is on it)."""
        with self._span("effect", key, {"agentrun.effect.name": name[:MAX_KEY_CHARS],
                                        "agentrun.effect.key": key[:MAX_KEY_CHARS]}):
            yield

    def model_call(self, *, model: str, attributes: Mapping[str, Attribute]) -> None:
        """A model call's usage, reported after it returned: a moment under the span it
        was made in (a step's, an effect's; else the attempt's)."""
        if not self.on:
            return
        assert self.parent is not None
        now = datetime.now(UTC)
        self.sink.report(traces.SpanRecord(
            trace=self.parent.trace, span=random.getrandbits(64) or 1,
            parent=self.sink.current_span(trace=self.parent.trace) or self.parent.span,
            name=f"model {model[:MAX_KEY_CHARS]}", start=now, end=now,
            attributes={**self.where, "agentrun.model": model[:MAX_KEY_CHARS],
                        **attributes}))

    def close(self) -> None:
        """Send what is batched (the attempt is ending), waiting
        ``telemetry.SHUTDOWN_SECONDS`` at most."""
        self.sink.shutdown()

    @contextlib.contextmanager
    def _span(self, what: str, key: str,
              attributes: Mapping[str, Attribute]) -> Iterator[Any]:
        if not self.on:
            yield None
            return
        assert self.parent is not None
        with self.sink.span(trace=self.parent.trace, parent=self.parent.span,
                            name=f"{what} {key[:MAX_KEY_CHARS]}",
                            attributes={**self.where, **attributes}) as opened:
            yield opened
