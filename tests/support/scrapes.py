"""Reading a Prometheus endpoint: every sample as a (name, labels) -> value map."""

from __future__ import annotations

import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(url: str) -> Series:
    """Every sample ``url`` (a ``/metrics`` address) serves now."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        return parse(answer.read().decode())


def parse(text: str) -> Series:
    """The samples of a ``/metrics`` page's text."""
    return {(found.name, frozenset(found.labels.items())): found.value
            for family in text_string_to_metric_families(text) for found in family.samples}


def value(series: Series, name: str, **labels: str) -> float:
    """The sample ``name`` with exactly ``labels``; 0 when absent (never counted yet)."""
    return series.get((name, frozenset(labels.items())), 0.0)
