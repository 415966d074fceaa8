"""A real OTLP receiver for the tracing tests: the OpenTelemetry Collector, built here.

Why built: nothing can be downloaded at run time but modules, so the Collector comes from
its Go modules (``tests/otelcol``: the OTLP receiver and the file exporter of the
contrib project, nothing else), built once into ``~/.cache/agentrun/otelcol/<key>/otelcol``
where *key* is a digest of that folder's sources and the Go toolchain's version; a file
lock makes a second builder wait and then find the binary (as ``cluster.helm``). About a
minute on 2 cores with the modules downloaded.

- ``python -m tests.support.otelcol build``: build if needed, print the path (``make otelcol``);
- :class:`Collector`: one receiving OTLP/HTTP on an address of the caller's, writing every
  span it receives as OTLP JSON lines into a file; :meth:`Collector.spans` reads them
  back as :class:`Span`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import gobuilds
from tests.support.cluster import processes
from tests.support.servers import LocalServer

SOURCE = Path(__file__).resolve().parents[1] / "otelcol"
READY_TIMEOUT = 30.0


def cache_dir() -> Path:
    digest = hashlib.sha256(gobuilds.go_version().encode())
    for path in sorted(SOURCE.iterdir()):
        if path.suffix == ".go" or path.name in {"go.mod", "go.sum"}:
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return gobuilds.cache_root() / "otelcol" / digest.hexdigest()[:16]


def binary(*, log: bool = True) -> Path:
    """The cached Collector (``gobuilds.built``)."""
    def go_build(partial: Path) -> None:
        subprocess.run(["go", "build", "-trimpath", "-ldflags=-s -w", "-o",
                        str(partial / "otelcol"), "."],
                       cwd=SOURCE, env={**os.environ, "CGO_ENABLED": "0"}, check=True)

    return gobuilds.built(cache_dir(), ["otelcol"], build=go_build,
                          note="otelcol: building the OpenTelemetry Collector (about a "
                          "minute)", log=log) / "otelcol"


@dataclass(frozen=True, kw_only=True)
class Span:
    """One received span: ids in hex as OTLP JSON has them ("" for no parent)."""

    trace: str
    span: str
    parent: str
    name: str
    service: str
    start: int  # nanoseconds since the epoch
    end: int
    attributes: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None


def _value(found: dict[str, Any]) -> Any:
    (kind, value), = found.items()
    return int(value) if kind == "intValue" else value


def parse(line: str) -> list[Span]:
    """The spans of one OTLP JSON line (an export request)."""
    spans = []
    for resource in json.loads(line).get("resourceSpans", []):
        where = {a["key"]: _value(a["value"])
                 for a in resource.get("resource", {}).get("attributes", [])}
        for scope in resource.get("scopeSpans", []):
            for s in scope.get("spans", []):
                status = s.get("status") or {}
                spans.append(Span(
                    trace=s["traceId"], span=s["spanId"], parent=s.get("parentSpanId", ""),
                    name=s["name"], service=str(where.get("service.name", "")),
                    start=int(s["startTimeUnixNano"]), end=int(s["endTimeUnixNano"]),
                    attributes={a["key"]: _value(a["value"]) for a in s.get("attributes", [])},
                    events=[{"name": e["name"], **{a["key"]: _value(a["value"])
                                                   for a in e.get("attributes", [])}}
                            for e in s.get("events", [])],
                    error=status.get("message", "") if status.get("code") == 2 else None))
    return spans


class Collector(LocalServer):
    """A Collector receiving OTLP/HTTP on ``host`` (a free port), for a ``with`` block."""

    name = "otelcol"
    ready_timeout = READY_TIMEOUT

    def __init__(self, *, host: str = "127.0.0.1") -> None:
        super().__init__()
        self.host = host
        self.port = processes.free_port(host=host)
        self.output = self.folder / "spans.jsonl"

    @property
    def endpoint(self) -> str:
        """The OTLP/HTTP base URL (spans go to ``<endpoint>/v1/traces``)."""
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        config = self.folder / "config.yaml"
        config.write_text(json.dumps({  # JSON is YAML
            "receivers": {"otlp": {"protocols": {"http": {
                "endpoint": f"{self.host}:{self.port}"}}}},
            "exporters": {"file": {"path": str(self.output), "flush_interval": "200ms"}},
            "service": {"telemetry": {"metrics": {"level": "none"}, "logs": {"level": "warn"}},
                        "pipelines": {"traces": {"receivers": ["otlp"],
                                                 "exporters": ["file"]}}}}))
        return [str(binary()), "--config", str(config)]

    def ready(self) -> bool:
        with socket.socket() as probe:
            probe.settimeout(1)
            return probe.connect_ex((self.host, self.port)) == 0

    def spans(self) -> list[Span]:
        """Every span received so far (written within the file exporter's 200 ms)."""
        if not self.output.exists():
            return []
        text = self.output.read_text()
        lines = text.splitlines()
        complete = lines if text.endswith("\n") else lines[:-1]  # the last one written
        return [span for line in complete if line.strip() for span in parse(line)]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.support.otelcol")
    parser.add_argument("command", choices=["build"])
    parser.parse_args()
    print(binary())


if __name__ == "__main__":
    main()
