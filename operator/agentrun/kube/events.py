"""Posting the core's Events through our own client, repeats folded into ``series``.

Why not ``kopf.event``: Kopf posts from a background queue of its own, which needs Kopf's
per-handler context (our workers run outside it), and it never folds: every repeat is a
new Event object. Here a *repeat* is an Event with the
same object (uid), type, reason and message as one posted within :data:`WINDOW`; it costs
one PATCH of the first Event's ``count``, ``lastTimestamp`` and ``series`` (``count`` and
``lastObservedTime``, as client-go's EventSeries), never a new object. The memory of what
was posted is bounded (:data:`REMEMBERED` entries, oldest dropped first); forgetting one
only means its next repeat is a new Event.

Events are core/v1 (``involvedObject``), the API ``kubectl describe`` reads; the same
objects are visible through events.k8s.io/v1. An Event that cannot be posted is logged
and dropped: it is a notice to a person, never state the operator decides from.
"""

from __future__ import annotations

import collections
import logging
import secrets
import threading
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agentrun import rest
from agentrun.api import bounds
from agentrun.api.meta import micro_time
from agentrun.core.base.events import Event
from agentrun.rest import clocks

Object = dict[str, Any]
WINDOW = timedelta(minutes=10)  # client-go's EventCorrelator aggregates over 10 minutes
REMEMBERED = 4096
COMPONENT = "agentrun-operator"


@dataclass
class Posted:
    namespace: str
    name: str
    count: int
    last: datetime


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def reference(subject: Object) -> dict[str, Any]:
    """The object a log line is about, as fields (Kopf's JSON formatter writes them under
    ``object``): apiVersion, kind, namespace, name, uid, and a slot's latest attempt."""
    meta = subject.get("metadata") or {}
    found: dict[str, Any] = {"apiVersion": subject.get("apiVersion"),
                             "kind": subject.get("kind"), "namespace": meta.get("namespace"),
                             "name": meta.get("name"), "uid": meta.get("uid")}
    attempt = (subject.get("status") or {}).get("attemptCount") if subject.get(
        "kind") == "Slot" else None
    if isinstance(attempt, int) and attempt > 0:
        found["attempt"] = attempt
    return found


class Poster:
    def __init__(self, client: rest.Rest, *, logger: logging.Logger,
                 clock: clocks.Clock = clocks.system, instance: str = COMPONENT) -> None:
        self.rest = client
        self.logger = logger
        self.clock = clock
        self.instance = instance
        self._posted: collections.OrderedDict[tuple[str, ...], Posted] = (
            collections.OrderedDict())
        self._lock = threading.Lock()  # workers post from several threads

    def post(self, subject: Object, event: Event) -> None:
        """Post ``event`` about ``subject`` (an object's wire form); a repeat is folded."""
        # what people wrote (a command's reason, a worker's message) shown as written,
        # never as control characters in `kubectl describe` or the log
        message = bounds.clip(bounds.printable(event.message), limit=bounds.MESSAGE_CHARS)
        self.logger.log(logging.WARNING if event.type == "Warning" else logging.INFO,
                        "%s %s: %s", event.type, event.reason, message,
                        extra={"k8s_ref": reference(subject)})
        meta = subject.get("metadata") or {}
        namespace = meta.get("namespace") or "default"
        key = (namespace, meta.get("uid") or meta.get("name") or "", event.type,
               event.reason, message)
        now = self.clock()
        with self._lock:
            earlier = self._posted.get(key)
            if earlier is not None and now - earlier.last <= WINDOW:
                earlier.count += 1
                earlier.last = now
                self._posted.move_to_end(key)
                folded: Posted | None = Posted(**vars(earlier))
            else:
                folded = None
        try:
            if folded is not None and self._fold(folded, now=now):
                return
            name = self._create(subject, event, message=message, namespace=namespace, now=now)
        except rest.ApiError as error:
            self.logger.warning("could not post the %s Event: %s", event.reason, error)
            return
        with self._lock:
            self._posted[key] = Posted(namespace=namespace, name=name, count=1, last=now)
            self._posted.move_to_end(key)
            while len(self._posted) > REMEMBERED:
                self._posted.popitem(last=False)

    def _path(self, namespace: str, name: str | None = None) -> str:
        return rest.namespaced(group="", version="v1", plural="events", namespace=namespace,
                               name=name)

    def _fold(self, posted: Posted, *, now: datetime) -> bool:
        """PATCH the repeat into the first Event; False when that Event is gone (expired)."""
        patch = {"count": posted.count, "lastTimestamp": _stamp(now),
                 "series": {"count": posted.count, "lastObservedTime": micro_time(now)}}
        try:
            self.rest.request("PATCH", self._path(posted.namespace, posted.name), body=patch,
                              content_type=rest.MERGE_PATCH)
        except rest.ApiError as error:
            if error.status == 404:
                return False
            raise
        return True

    def _create(self, subject: Object, event: Event, *, message: str, namespace: str,
                now: datetime) -> str:
        meta = subject.get("metadata") or {}
        name = f"{meta.get('name', 'object')}.{secrets.token_hex(8)}"
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": subject.get("apiVersion"), "kind": subject.get("kind"),
                "name": meta.get("name"), "namespace": meta.get("namespace"),
                "uid": meta.get("uid"), "resourceVersion": meta.get("resourceVersion")},
            "type": event.type, "reason": event.reason, "message": message,
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT, "reportingInstance": self.instance,
            "firstTimestamp": _stamp(now), "lastTimestamp": _stamp(now), "count": 1,
        }
        self.rest.request("POST", self._path(namespace), body=body)
        return name
