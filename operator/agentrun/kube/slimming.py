"""The form the stores keep an object in: slimmed of what no reconcile reads, with its keys
and short strings interned (``kube.stores`` keeps thousands of near-identical objects)."""

from __future__ import annotations

import sys
from typing import Any

Object = dict[str, Any]
DROPPED_ANNOTATION = "kubectl.kubernetes.io/last-applied-configuration"
INTERNED_CHARS = 64


def compact(value: Any) -> Any:
    """A copy with keys and short strings interned: each parsed event holds its own copy of
    the same keys and most values; unshared they took 1.8 times the memory (25.8 against
    14.2 MiB per 1,000 live slots, tests/unit/kube/test_stores_memory.py)."""
    if isinstance(value, dict):
        return {sys.intern(k): compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    if isinstance(value, str) and len(value) <= INTERNED_CHARS:
        return sys.intern(value)
    return value


def slim(body: Object) -> Object:
    """What the store keeps of ``body``: no ``managedFields`` (written by the API server on
    every change, read by nothing here), no kubectl last-applied copy, interned."""
    meta = dict(body.get("metadata") or {})
    meta.pop("managedFields", None)
    annotations = meta.get("annotations")
    if annotations and DROPPED_ANNOTATION in annotations:
        meta["annotations"] = {k: v for k, v in annotations.items() if k != DROPPED_ANNOTATION}
    kept: Object = compact({**body, "metadata": meta})
    return kept
