"""A real Prometheus (Debian's package: ``prometheus`` and ``promtool``) for the tests of the
alert rules and the dashboard.

:class:`Prometheus` scrapes the given targets every second, evaluates the given rule file
every second, keeps its data in a temporary folder and answers on a free loopback port, for
a ``with`` block; :meth:`Prometheus.query` runs an instant query through its HTTP API.
:func:`promtool` runs ``promtool`` (``check rules``). ``make test`` installs the package
when missing (``make promdeps``).
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.support.cluster.processes import free_port
from tests.support.servers import LocalServer

PROMETHEUS = Path("/usr/bin/prometheus")
PROMTOOL = Path("/usr/bin/promtool")


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PROMTOOL), *args], capture_output=True, text=True,
                          check=False, timeout=60)


class Prometheus(LocalServer):
    """Prometheus scraping ``targets`` (``host:port`` of a /metrics each) with ``rules``."""

    name = "prometheus"

    def __init__(self, *, targets: list[str], rules: Path | None = None) -> None:
        super().__init__()
        self.port = free_port()
        self.targets = targets
        self.rules = rules

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        config = self.folder / "prometheus.yml"
        config.write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(self.rules)] if self.rules else [],
            "scrape_configs": [{"job_name": "agentrun-operator",
                                "static_configs": [{"targets": self.targets}]}]}))
        return [str(PROMETHEUS), f"--config.file={config}",
                f"--storage.tsdb.path={self.folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
                f"--web.console.templates={self.folder}",
                f"--web.console.libraries={self.folder}"]

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}?{query}", timeout=10) as answer:
            found = json.load(answer)
        if found.get("status") != "success":
            raise RuntimeError(f"{path} {params}: {found}")
        return found["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """The instant vector ``expr`` evaluates to now (its series, each with its value)."""
        data = self.api("query", query=expr)
        assert data["resultType"] == "vector", data
        result: list[dict[str, Any]] = data["result"]
        return result

    def names(self) -> set[str]:
        """Every metric name Prometheus has scraped."""
        return set(self.api("label/__name__/values"))
