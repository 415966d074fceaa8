"""A small effect owner for tests: the external service a worker's effect changes.

It decides through the owner's kit (:class:`agentrun.owner.Owner` over a
:class:`agentrun.owner.MemoryStore`), so it answers what a service behind the kit answers
(docs/effect-owners.md), and a test of the example's client is a test against the kit:
it applies an effect once per idempotency key (a re-send gets the first reply again,
marked ``Agentrun-Replayed: true``); per *fence* (the ``Agentrun-Fencing-Scope``: the
run's uid and the slot) it refuses a token lower than the highest it has seen, whether
or not its key was used (409 ``StaleFencingToken``); a re-send while its key is applied
gets 409 ``EffectInProgress``. A status query answers ``applied`` (with the result),
``not-applied``, ``in-progress`` (while an apply is held) or ``unknown`` (for keys the
test marks so: the owner lost track).

HTTP on ``host`` (the node bridge's address, so pods reach it, or 127.0.0.1), at
``/effects`` only, with the kit's headers (:class:`agentrun.owner.Effect`):

- an effect (``Idempotency-Key``, ``Agentrun-Fencing-Token``, ``Agentrun-Fencing-Scope``;
  the JSON body is the payload) → 200 with the result, ``{"published": <the key's first
  12 digits>, "payload": ...}``, once applied; or the kit's refusal;
- a status query (``Idempotency-Key``, ``Agentrun-Query: status``; a GET) → 200
  ``{"answer": ..., "result": ...}``;
- malformed effect headers → 400 ``BadEffectHeaders`` (the kit's message), none → 400.

An apply runs in its own thread (:meth:`Owner.begin` in the request, then a thread that
waits for ``hold`` and calls :meth:`Owner.finish`), so a worker killed mid-request does
not stop it; with ``hold`` set, an apply waits for it (a long-running effect).
:attr:`requests` logs every request in order, with its status as decided when it came
(200 for an apply it began, even if the request was answered 504 while the apply was
held): what the assertions read (a status query as method ``GET``, however it came).

A test's *word* to its workers (go on, finish) is a key the test applies itself
(:meth:`EffectOwner.effect`) and the workers ask about: :func:`word_key` makes it from a
name, because the kit takes only the SDK's form of key (64 lower-case hex digits), and
:data:`CLIENT` is a worker script's side (``status(key)``, ``said(name)``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from agentrun.owner import Effect, MemoryStore, Owner, ProtocolError, Reply

APPLY_TIMEOUT_SECONDS: Final = 120.0
MAX_BODY_BYTES: Final = 1 << 20
PATH: Final = "/effects"
WORD_PREFIX: Final = "agentrun-test-word/"


def word_key(name: str) -> str:
    """The key of the test's word ``name``: the sha256 of :data:`WORD_PREFIX` + ``name``
    (:data:`CLIENT`'s ``said`` makes the same)."""
    return hashlib.sha256((WORD_PREFIX + name).encode()).hexdigest()


# The start of a worker script (``python3 -c``, in a pod of the project's image, the
# owner's URL in $EFFECT_OWNER) that asks this owner: ``status(key)``, a status query's
# answer; ``said(name)``, whether the test said its word ``name`` (False while the owner
# cannot be reached: a word not yet said).
CLIENT: Final = f"""
import hashlib, json, os, urllib.request
from agentrun.owner import Effect
OWNER = os.environ["EFFECT_OWNER"] + {PATH!r}
def status(key, timeout=10):
    request = urllib.request.Request(OWNER, headers=Effect(key=key, query=True).headers())
    with urllib.request.urlopen(request, timeout=timeout) as answer:
        return json.load(answer)
def said(name):
    key = hashlib.sha256(({WORD_PREFIX!r} + name).encode()).hexdigest()
    try:
        return status(key, timeout=5)["answer"] == "applied"
    except OSError:
        return False
"""


@dataclass(frozen=True, kw_only=True)
class Request:
    method: str  # POST (an effect) or GET (a status query)
    key: str
    token: int | None = None
    fence: str | None = None  # the effect's Agentrun-Fencing-Scope
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
    store: MemoryStore = field(default_factory=MemoryStore)
    # One lock over the kit's steps and this log: what a test reads is one moment's.
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: ThreadingHTTPServer | None = None

    @property
    def kit(self) -> Owner:
        """The kit's decisions over this owner's store."""
        return Owner(store=self.store)

    @property
    def highest(self) -> dict[str, int]:
        """fence -> the highest token seen (the kit's store's)."""
        with self.store.lock:
            return dict(self.store.highest)

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://{self.host}:{self._server.server_address[1]}"

    def posts(self, *, key: str | None = None) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.method == "POST"
                    and (key is None or r.key == key)]

    def _apply(self, effect: Effect, payload: Any, finished: list[Reply],
               done: threading.Event) -> None:
        """Apply ``effect`` once ``hold`` lets it, keep the reply through the kit, and hand
        it to the request that began it (if that still waits)."""
        try:
            if self.hold is not None:
                self.hold.wait(APPLY_TIMEOUT_SECONDS)
            result = {"published": effect.key[:12], "payload": payload}
            with self._lock:
                self.applied[effect.key] = self.applied.get(effect.key, 0) + 1
                self.results[effect.key] = result
                finished.append(self.kit.finish(effect, Reply.json(200, result)))
        except BaseException:
            self.kit.abandon(effect)  # nothing applied: a re-send may apply it
            raise
        finally:
            done.set()

    def decide(self, effect: Effect, *, body: bytes) -> Reply:
        """The reply to one request (an effect or a status query); an effect's waits
        while its own apply runs."""
        if effect.query:
            return Reply.json(200, self.answer(effect.key))
        try:
            payload = json.loads(body) if body else None
        except (ValueError, RecursionError):
            return Reply.json(400, {"error": "BadBody", "message": "the payload is JSON"})
        finished: list[Reply] = []
        done = threading.Event()
        with self._lock:
            early = self.kit.begin(effect, body=body)
            if early is None:
                threading.Thread(target=self._apply, args=(effect, payload, finished, done),
                                 daemon=True).start()
            self.requests.append(Request(method="POST", key=effect.key, token=effect.token,
                                         fence=effect.scope,
                                         status=200 if early is None else early.status))
        if early is not None:
            return early
        if not done.wait(APPLY_TIMEOUT_SECONDS):
            return Reply.json(504, {"error": "StillApplying", "message": (
                f"not applied within {APPLY_TIMEOUT_SECONDS} s; a status query says when")})
        return finished[0]

    def effect(self, *, key: str, token: int, fence: str,
               payload: Any) -> tuple[int, Any]:
        """Send one effect here as a worker would (a test's word, a late write): the
        status and the reply's JSON. ``key`` must be one the kit takes (64 lower-case
        hex digits: :func:`word_key` for a word), else :class:`ProtocolError`."""
        sent = Effect.from_headers(Effect(key=key, token=token, scope=fence).headers().items())
        assert sent is not None
        reply = self.decide(sent, body=json.dumps(payload).encode())
        return reply.status, json.loads(reply.body)

    def answer(self, key: str) -> dict[str, Any]:
        """A status query's answer about ``key`` (the kit's, or "unknown" if the test
        marked the key so)."""
        with self._lock:
            self.requests.append(Request(method="GET", key=key, status=200))
            if key in self.unknown:
                return {"answer": "unknown"}
            found: dict[str, Any] = json.loads(self.kit.status(
                Effect(key=key, query=True)).body)
            return found

    def start(self) -> EffectOwner:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                self.send_header("Content-Length", str(len(reply.body)))
                for name, value in reply.headers:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(reply.body)

            def _decided(self) -> Reply:
                if self.path.split("?", 1)[0] != PATH:
                    return Reply.json(404, {"error": "NotFound",
                                            "message": f"effects go to {PATH}"})
                try:
                    effect = Effect.from_headers(self.headers.items())
                except ProtocolError as bad:
                    return Reply.json(400, {"error": "BadEffectHeaders", "message": str(bad)})
                if effect is None:
                    return Reply.json(400, {"error": "NotAnEffect", "message": (
                        "this owner takes only effect requests (Agentrun-* headers)")})
                if effect.query:
                    return owner.decide(effect, body=b"")
                length = self.headers.get("Content-Length") or "0"
                if not length.isascii() or not length.isdigit():
                    return Reply.json(400, {"error": "BadLength", "message": length[:40]})
                size = int(length)
                if size > MAX_BODY_BYTES:
                    return Reply.json(413, {"error": "BodyTooLarge",
                                            "message": f"at most {MAX_BODY_BYTES} bytes"})
                return owner.decide(effect, body=self.rfile.read(size))

            def _serve(self) -> None:
                reply = self._decided()
                with contextlib.suppress(OSError):  # the worker is gone (killed mid-
                    self._send(reply)                 # request); the apply stands

            do_GET = do_POST = _serve

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
