"""A small effect owner for tests: the external service a worker's effect changes.

It is what a real owner must be: it deduplicates by the
idempotency key (a re-send of an applied key is answered with the first result, applied
once) and fences by token: per *fence* (a scope the caller names, the run's uid and the
slot), a request whose fencing token is lower than the highest it has seen is rejected
(409), whether or not its key was used. ``GET`` answers a reconcile: ``applied`` (with
the result), ``not-applied``, ``in-progress`` (while an apply is held) or ``unknown``
(for keys the test marks so: the owner lost track).

HTTP on ``host`` (the node bridge's address, so pods reach it, or 127.0.0.1):

- ``POST /effects`` with JSON ``{"key": K, "token": N, "fence": F, "payload": ...}`` →
  200 ``{"result": ...}`` once applied; 409 ``{"error": "fenced", "highest": M}``; 202
  ``{"answer": "in-progress"}`` when the key is being applied already (nothing re-applied).
- ``GET /effects/<key>`` → ``{"answer": ..., "result": ...}``.

An apply runs in its own thread, so a worker killed mid-request does not stop it; with
``hold`` set, an apply waits for it (a long-running effect). :attr:`requests` logs every
request in order: what the assertions read.
"""

from __future__ import annotations

import contextlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

APPLY_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, kw_only=True)
class Request:
    method: str  # POST (an effect) or GET (a reconcile)
    key: str
    token: int | None = None
    fence: str | None = None
    status: int = 0  # what the owner answered


@dataclass(kw_only=True)
class EffectOwner:
    """The owner's state; :meth:`start` serves it until :meth:`stop`."""

    host: str = "127.0.0.1"
    hold: threading.Event | None = None  # set: applies wait for it
    unknown: set[str] = field(default_factory=set)  # keys answered "unknown"
    requests: list[Request] = field(default_factory=list)
    applied: dict[str, int] = field(default_factory=dict)  # key -> times applied
    results: dict[str, Any] = field(default_factory=dict)
    highest: dict[str, int] = field(default_factory=dict)  # fence -> highest token seen
    _applying: dict[str, threading.Event] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{self.host}:{self._server.server_address[1]}"

    def posts(self, *, key: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST"
                    and (key is None or r.key == key)]

    def _apply(self, key: str, payload: Any, done: threading.Event) -> None:
        if self.hold is not None:
            self.hold.wait(APPLY_TIMEOUT_SECONDS)
        with self._lock:
            self.applied[key] = self.applied.get(key, 0) + 1
            self.results[key] = {"published": key[:12], "payload": payload}
            del self._applying[key]
        done.set()

    def effect(self, *, key: str, token: int, fence: str,
               payload: Any) -> tuple[int, dict[str, Any]]:
        """Decide one POST (see the module docstring); waits while its own apply runs."""
        with self._lock:
            if token < self.highest.get(fence, 0):
                self.requests.append(Request(method="POST", key=key, token=token,
                                             fence=fence, status=409))
                return 409, {"error": "fenced", "highest": self.highest[fence]}
            self.highest[fence] = max(token, self.highest.get(fence, 0))
            if key in self.results:
                status, answer = 200, {"result": self.results[key], "duplicate": True}
            elif key in self._applying:
                status, answer = 202, {"answer": "in-progress"}
            else:
                done = self._applying[key] = threading.Event()
                threading.Thread(target=self._apply, args=(key, payload, done),
                                 daemon=True).start()
                status, answer = 0, {}
            self.requests.append(Request(method="POST", key=key, token=token, fence=fence,
                                         status=status or 200))
        if status:
            return status, answer
        done.wait(APPLY_TIMEOUT_SECONDS)
        with self._lock:
            return 200, {"result": self.results.get(key)}

    def answer(self, key: str) -> dict[str, Any]:
        """A reconcile's answer about ``key``."""
        with self._lock:
            self.requests.append(Request(method="GET", key=key, status=200))
            if key in self.unknown:
                return {"answer": "unknown"}
            if key in self.results:
                return {"answer": "applied", "result": self.results[key]}
            if key in self._applying:
                return {"answer": "in-progress"}
            return {"answer": "not-applied"}

    def start(self) -> EffectOwner:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                prefix = "/effects/"
                if not self.path.startswith(prefix):
                    return self._send(404, {"error": "not found"})
                self._send(200, owner.answer(self.path[len(prefix):]))

            def do_POST(self) -> None:
                try:
                    size = min(int(self.headers.get("Content-Length") or 0), 1 << 20)
                    body = json.loads(self.rfile.read(size))
                    key, token, fence = str(body["key"]), int(body["token"]), str(body["fence"])
                except (ValueError, KeyError, TypeError) as error:
                    return self._send(400, {"error": f"bad request: {error}"})
                status, answer = owner.effect(key=key, token=token, fence=fence,
                                              payload=body.get("payload"))
                with contextlib.suppress(OSError):  # the worker is gone (killed mid-
                    self._send(status, answer)        # request); the apply stands

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
