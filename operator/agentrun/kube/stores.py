"""Placeholder: the caches branch replaces it (interface 1 of issue 9's shared interfaces).

Watch-fed in-memory objects. Here ``observe`` stores nothing and ``prime`` lists nothing, so
every read still goes to the API; the work queue and its handlers are written against these
exact signatures.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentrun.kube import rest


class Stores:
    def observe(self, *, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        """Record one watch event's object (placeholder: nothing is kept)."""

    def prime(self, *, client: rest.Rest, namespaces: Sequence[str]) -> None:
        """One LIST per cached kind before the workers start (placeholder: none)."""
