"""Plain REST over the kubernetes client's connection: paths in, JSON dicts out.

Why not the client's generated API classes: the decisions work on the wire form
(camelCase dicts), every resource here (custom, core, coordination, admission) is read
and written the same way, and the generated classes would convert each object into
typed models only for us to convert it back. The client still provides what matters:
configuration, authentication, TLS and connection pooling.

Every request has a timeout (:data:`DEFAULT_TIMEOUT`: 5 s to connect, 20 s to read,
``timeout=`` to change it), so one hung request can hold up only the worker that made it.
Every request's outcome is recorded in a :class:`Health` (``health=``): the time
during which requests failed or timed out is the operator's *blind time*, which lease
expiry must never count (``Reader.blind_time``).
"""

from __future__ import annotations

import json
import threading
from collections import deque
from datetime import datetime, timedelta
from typing import Any, NamedTuple

import kubernetes
import urllib3

from agentrun.core import clocks
from agentrun.kube import throttle as throttles

Object = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class Timeout(NamedTuple):
    """Seconds to connect and seconds to wait for each read of the answer."""

    connect: float
    read: float


# A healthy API server answers a GET or a write in milliseconds, a loaded one (priority and
# fairness queueing) in about a second; the server gives up on a request itself after 60 s.
# 20 s is far above the first and well under the second: a request that has not answered
# by then is hung, and its worker should go on to other keys.
DEFAULT_TIMEOUT = Timeout(connect=5.0, read=20.0)


class ApiError(Exception):
    """A non-2xx answer: ``status`` and the server's ``message`` (and ``reason``)."""

    def __init__(self, status: int, body: str) -> None:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = {}
        self.status = status
        self.reason = str(parsed.get("reason") or "")
        self.message = str(parsed.get("message") or body[:500])
        super().__init__(f"{status} {self.reason}: {self.message}")


def unhealthy(status: int) -> bool:
    """An answer that says the server cannot serve now (overloaded, its store down), as
    opposed to one about the request (404, 409, 422): the former is blindness too."""
    return status == 429 or status >= 500


class Health:
    """When this process could not hear from the API server, on the monotonic clock.

    *Blind* is a stretch of time with no answer: it opens at the start of a request that
    got none (timed out, refused, reset) or got a 5xx/429, and closes at the start of the
    next request that was answered. Both ends are the conservative choice: the answer of a
    request reflects the world at some moment after it was sent, never before, so the
    operator saw nothing between a failed request's start and a later success's start.
    Counting too much blind time only makes a lease live longer (safe); too little could
    end an attempt whose worker renewed while we could not see.

    Kept small: closed stretches older than ``horizon`` are dropped, and beyond ``limit``
    the two oldest merge into one (which only counts more blind time). Thread-safe: the
    reconcile workers share one.
    """

    def __init__(self, *, clock: clocks.Clock = clocks.ticks,
                 horizon: timedelta = timedelta(hours=2), limit: int = 256) -> None:
        self.clock = clock
        self.horizon = horizon
        self.limit = limit
        self._lock = threading.Lock()
        self._open: datetime | None = None  # blind since then, still
        self._closed: deque[tuple[datetime, datetime]] = deque()

    def failed(self, *, started: datetime) -> None:
        """A request sent at ``started`` got no usable answer."""
        with self._lock:
            if self._open is None or started < self._open:
                self._open = started

    def answered(self, *, started: datetime) -> None:
        """A request sent at ``started`` was answered: blind no more from then on."""
        with self._lock:
            if self._open is None or started < self._open:
                return  # sent before the blindness began: it proves nothing after
            self._closed.append((self._open, started))
            self._open = None
            self._prune()

    def _prune(self) -> None:
        oldest = self.clock() - self.horizon
        while self._closed and self._closed[0][1] < oldest:
            self._closed.popleft()
        while len(self._closed) > self.limit:
            first, second = self._closed.popleft(), self._closed.popleft()
            self._closed.appendleft((first[0], second[1]))

    def blind(self) -> bool:
        """Is the operator blind right now (the last request got no answer)?"""
        with self._lock:
            return self._open is not None

    def blind_time(self, *, since: datetime) -> timedelta:
        """How long, from the monotonic moment ``since`` until now, the operator was blind."""
        now = self.clock()
        with self._lock:
            stretches = [*self._closed, *([(self._open, now)] if self._open else [])]
        total = timedelta(0)
        for start, end in stretches:
            overlap = min(end, now) - max(start, since)
            if overlap > timedelta(0):
                total += overlap
        return total


class Rest:
    def __init__(self, api: kubernetes.client.ApiClient, *,
                 health: Health | None = None,
                 timeout: Timeout = DEFAULT_TIMEOUT,
                 throttle: throttles.Bucket | None = None) -> None:
        self.api = api
        self.throttle = throttle  # shared with Kopf's session: see kube.throttle
        self.health = health if health is not None else Health()
        self.timeout = timeout
        # urllib3 retries an idempotent request on a read timeout (three times by default),
        # which would make the timeout four times what it says: one try, then the caller's
        # own backoff decides.
        pools = self.api.rest_client.pool_manager
        pools.connection_pool_kw["retries"] = False
        pools.clear()  # pools made before this would keep the default

    def request(self, method: str, path: str, *, body: Object | None = None,
                query: dict[str, str] | None = None, content_type: str = JSON) -> Object:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api.param_serialize(
            method=method, resource_path=path, query_params=list((query or {}).items()),
            header_params=headers, body=body, auth_settings=["BearerToken"])
        throttles.take(self.throttle)  # a token first (blocks while the bucket is empty)
        started = self.health.clock()
        try:
            response = self.api.call_api(*params, _request_timeout=tuple(self.timeout))
            response.read()  # type: ignore[no-untyped-call]
        except (urllib3.exceptions.HTTPError, OSError, kubernetes.client.ApiException):
            self.health.failed(started=started)  # no answer: timed out, refused, reset
            raise
        data = response.data.decode() if isinstance(response.data, bytes) else response.data
        if unhealthy(response.status):
            self.health.failed(started=started)
        else:
            self.health.answered(started=started)
        if not 200 <= response.status < 300:
            raise ApiError(response.status, data or "")
        result: Object = json.loads(data) if data else {}
        return result

    def get(self, path: str, *, query: dict[str, str] | None = None) -> Object | None:
        """GET, with 404 as None."""
        try:
            return self.request("GET", path, query=query)
        except ApiError as error:
            if error.status == 404:
                return None
            raise


def namespaced(*, group: str, version: str, plural: str, namespace: str,
               name: str | None = None, subresource: str | None = None) -> str:
    base = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
    path = f"{base}/namespaces/{namespace}/{plural}"
    if name is not None:
        path += f"/{name}"
    if subresource is not None:
        path += f"/{subresource}"
    return path
