"""Plain REST to the API server over urllib3: paths in, JSON dicts out.

Why not the ``kubernetes`` package's generated API classes: the decisions work on the
wire form (camelCase dicts), every resource here (custom, core, coordination, admission)
is read and written the same way, and the generated classes would convert each object
into typed models only for us to convert it back. Why urllib3 directly: it is what that
package sends with, and it is all a worker needs (see :mod:`agentrun.rest._connections`
for where the address and credentials come from); connections are pooled and kept alive.

Every request has a timeout (:data:`DEFAULT_TIMEOUT`: 5 s to connect, 20 s to read,
``timeout=`` to change it), so one hung request can hold up only the worker that made it.
Every request's outcome is recorded in a :class:`Health` (``health=``): the time
during which requests failed, timed out, hung or were answered late is the operator's
*blind time*, which lease expiry must never count (``Reader.blind_time``).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import ssl
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import unquote, urlencode, urlsplit

import urllib3
from urllib3.connection import HTTPConnection

from agentrun.rest import clocks
from agentrun.rest import throttle as throttles
from agentrun.rest._connections import Connection, of

Object = dict[str, Any]
log = logging.getLogger(__name__)
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
# Connections kept open for reuse by default: as many as the kubernetes package keeps.
DEFAULT_CONNECTIONS = (os.cpu_count() or 1) * 5
# An answer later than this after its request was sent is not evidence of when the server
# served it (a paused server answers what waited all at once): it counts as blind time
# (:class:`Health`). A loaded server answers in about a second; later than 2 s is counted.
SLOW_ANSWER = timedelta(seconds=2)


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

    *Blind* is a stretch of time in which the operator has no prompt answer to show that
    the API server served it. A request is *prompt* when a non-5xx/429 answer came within
    ``slow`` of sending it. A stretch opens with a request that was not prompt: one that
    got no answer (timed out, refused, reset) or a 5xx/429, one answered late, and one
    still waiting longer than ``slow``; it reaches back to the *onset*, the send time of
    the last prompt answer before that request (the operator saw nothing after it), and a
    failure's stretch stays open until the send time of the next prompt answer. So a
    paused API server (SIGSTOP: requests hang, then are all answered at once on SIGCONT)
    is blind from the last prompt answer before the pause to the first prompt one after,
    whether its requests timed out or waited the pause out: a late answer says the server
    served at *some* moment between the send and the answer, never when. Every choice is
    the conservative one: counting too much blind time only makes a lease live longer
    (safe); too little could end an attempt whose worker renewed, or could not renew,
    while we could not see. Stretches that overlap are counted once.

    Kept small: closed stretches older than ``horizon`` are dropped, and beyond ``limit``
    the two oldest merge into one (which only counts more blind time). Thread-safe: the
    reconcile workers share one.
    """

    def __init__(self, *, clock: clocks.Clock = clocks.ticks,
                 horizon: timedelta = timedelta(hours=2), limit: int = 256,
                 slow: timedelta = SLOW_ANSWER) -> None:
        self.clock = clock
        self.horizon = horizon
        self.limit = limit
        self.slow = slow
        self._lock = threading.Lock()
        self._open: datetime | None = None  # blind since then, still
        self._closed: deque[tuple[datetime, datetime]] = deque()
        self._last_prompt: datetime | None = None  # send time of the latest prompt answer
        self._waiting: Counter[datetime] = Counter()  # send times of requests in flight

    def sending(self) -> datetime:
        """A request is being sent now: its send time, to give to :meth:`answered` or
        :meth:`failed`. Until then it counts as blind once it has waited ``slow``."""
        with self._lock:
            started = self.clock()
            self._waiting[started] += 1
            return started

    def _done(self, started: datetime) -> None:
        if self._waiting[started] > 1:
            self._waiting[started] -= 1
        else:
            self._waiting.pop(started, None)

    def _onset(self, started: datetime) -> datetime:
        """Where a stretch opened by a request sent at ``started`` begins."""
        last = self._last_prompt
        return last if last is not None and last <= started else started

    def failed(self, *, started: datetime) -> None:
        """A request sent at ``started`` got no usable answer."""
        with self._lock:
            self._done(started)
            onset = self._onset(started)
            if self._open is None or onset < self._open:
                self._open = onset

    def answered(self, *, started: datetime) -> None:
        """A request sent at ``started`` was answered: if promptly, blind no more from
        then on; if late, blind from its onset to now (the answer may be that old)."""
        with self._lock:
            self._done(started)
            now = self.clock()
            if now - started > self.slow:
                self._closed.append((self._onset(started), now))
                self._prune()
                return
            if self._last_prompt is None or started > self._last_prompt:
                self._last_prompt = started
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
            self._closed.appendleft((min(first[0], second[0]), max(first[1], second[1])))

    def _stretches(self, now: datetime) -> list[tuple[datetime, datetime]]:
        """Every blind stretch up to ``now``, closed or not (under the lock)."""
        hung = [(self._onset(started), now) for started in self._waiting
                if now - started > self.slow]
        return [*self._closed, *([(self._open, now)] if self._open else []), *hung]

    def blind(self) -> bool:
        """Is the operator blind right now (the last request got no answer, or one has
        waited longer than ``slow``)?"""
        with self._lock:
            now = self.clock()
            return self._open is not None or any(now - started > self.slow
                                                 for started in self._waiting)

    def blind_time(self, *, since: datetime) -> timedelta:
        """How long, from the monotonic moment ``since`` until now, the operator was blind."""
        with self._lock:
            now = self.clock()
            stretches = sorted(self._stretches(now))
        total, reached = timedelta(0), since  # the union, clipped to [since, now]
        for start, end in stretches:
            start, end = max(start, reached), min(end, now)
            if end > start:
                total += end - start
                reached = end
        return total


Observe = Callable[[str, int | None, float], None]  # verb, status (None: no answer), seconds


USER_AGENT = "agentrun (urllib3)"
# Idle connections are probed, so one the network dropped fails fast instead of hanging.
KEEPALIVE = [*HTTPConnection.default_socket_options, (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)]


def _proxied(proxy: str, *, headers: Mapping[str, str] | None,
             pools: dict[str, Any]) -> urllib3.ProxyManager:
    """Requests through ``proxy``: its URL's credentials sent as ``Proxy-Authorization``,
    an ``https://`` proxy's certificate checked against the system's CAs (the cluster's
    CA is for the API server)."""
    parts = urlsplit(proxy)
    sent = dict(headers or {})
    if parts.username is not None:
        login = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        sent.update(urllib3.util.make_headers(proxy_basic_auth=login))
    address = parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()
    context = ssl.create_default_context() if parts.scheme == "https" else None
    return urllib3.ProxyManager(address, proxy_headers=sent, proxy_ssl_context=context,
                                **pools)


class Rest:
    """Requests to one API server: ``source`` is a :class:`Connection`, or the
    ``kubernetes`` package's ``ApiClient``/``Configuration`` (read by :func:`of`)."""

    def __init__(self, source: Connection | Any, *,
                 health: Health | None = None,
                 timeout: Timeout = DEFAULT_TIMEOUT,
                 throttle: throttles.Bucket | None = None,
                 observe: Observe | None = None,
                 connections: int = DEFAULT_CONNECTIONS) -> None:
        self.connection = of(source)
        # Told of every request, for metrics: its verb, its answer's status (None: no
        # answer) and the seconds it took.
        self.observe = observe
        self.throttle = throttle  # shared with Kopf's session: see rest.throttle
        self.health = health if health is not None else Health()
        self.timeout = timeout
        # No retries: urllib3 would retry an idempotent request on a read timeout, making
        # the timeout several times what it says; one try, then the caller's own backoff
        # decides. ``connections``: how many are kept open for reuse, at least as many as
        # threads that share this client (the operator's reconcile threads), else each
        # request over that count opens a connection (a TLS handshake) and urllib3 drops it
        # after with a warning.
        connection = self.connection
        tls: dict[str, Any] = {
            "cert_reqs": "CERT_REQUIRED" if connection.verify else "CERT_NONE",
            "ca_certs": connection.ca_file, "cert_file": connection.cert_file,
            "key_file": connection.key_file,
            **({"server_hostname": connection.tls_server_name}
               if connection.tls_server_name else {})}
        pools: dict[str, Any] = {"num_pools": 4, "maxsize": connections,
                                 "retries": False, "socket_options": KEEPALIVE, **tls}
        self.pools: urllib3.PoolManager = (
            _proxied(connection.proxy, headers=connection.proxy_headers, pools=pools)
            if connection.proxy else urllib3.PoolManager(**pools))

    def headers(self, *, body: bool, content_type: str = JSON) -> dict[str, str]:
        """A request's headers, its credential asked for now (an exec plugin's refresh
        may take a while: callers ask before a request counts as sent)."""
        headers = {"Accept": JSON, "User-Agent": USER_AGENT}
        if body:
            headers["Content-Type"] = content_type
        authorization = self.connection.authorization()
        if authorization:
            headers["Authorization"] = authorization
        return headers

    def open(self, method: str, path: str, *, query: dict[str, str] | None = None,
             body: bytes | None = None, content_type: str = JSON,
             timeout: Timeout | None = None, stream: bool = False,
             headers: dict[str, str] | None = None) -> Any:
        """Send one request; urllib3's response (its body unread when ``stream``, for a
        watch: the caller reads and closes it). Health, rate and observers are
        :meth:`request`'s, not this one's."""
        url = self.connection.server + path + (f"?{urlencode(query)}" if query else "")
        limit = timeout or self.timeout
        return self.pools.request(
            method, url, body=body, preload_content=not stream,
            headers=headers or self.headers(body=body is not None, content_type=content_type),
            timeout=urllib3.Timeout(connect=limit.connect, read=limit.read))

    def request(self, method: str, path: str, *, body: Object | None = None,
                query: dict[str, str] | None = None, content_type: str = JSON) -> Object:
        # What can fail here without the server (a body that is no JSON, a login that
        # cannot refresh) fails before the request counts as sent: it is no blindness.
        data = None if body is None else json.dumps(body).encode()
        headers = self.headers(body=data is not None, content_type=content_type)
        throttles.take(self.throttle)  # a token first (blocks while the bucket is empty)
        started = self.health.sending()
        began = time.monotonic()
        try:
            response = self.open(method, path, query=query, body=data, headers=headers)
        except BaseException:
            self.health.failed(started=started)  # no answer: timed out, refused, reset
            self._observed(method, None, began)
            raise
        data = response.data.decode()
        if unhealthy(response.status):
            self.health.failed(started=started)
        else:
            self.health.answered(started=started)
        self._observed(method, response.status, began)
        if not 200 <= response.status < 300:
            raise ApiError(response.status, data)
        result: Object = json.loads(data) if data else {}
        return result

    def _observed(self, method: str, status: int | None, began: float) -> None:
        """Tell :attr:`observe`; whatever it raises is logged, never the request's."""
        if self.observe is None:
            return
        try:
            self.observe(method, status, time.monotonic() - began)
        except Exception:
            log.exception("a request's observer failed (the request stands)")

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
