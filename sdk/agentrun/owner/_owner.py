"""The owner's side of an effect: deduplicate by key, fence by token, answer status.

:meth:`Owner.apply` is the plain function form: give it the request's :class:`Effect`,
its body and ``do`` (what applying the effect is: returns the :class:`Reply` to send), and
it returns what to send (or, where the apply is the caller's own code, :meth:`Owner.begin`,
then :meth:`Owner.finish` or :meth:`Owner.abandon`). Terms: an effect is *in progress*
from ``begin`` until ``do`` returned; *applied* once ``do`` returned a 2xx reply, which
is kept and sent again for every re-send of its key (with ``Agentrun-Replayed: true``); a
reply that is not 2xx applied nothing (a re-send tries again), and neither did a ``do``
that raised: ``do`` must then have changed nothing (apply in one transaction). A key
begun by a process that is gone (a restart mid-apply) is *unknown*: never applied again,
answered ``"unknown"`` (the SDK stops and a person resolves it).

The state lives in a :class:`Store`: :class:`MemoryStore` (one process, lost at exit:
tests and examples) or :class:`SqliteStore` (a file, stdlib ``sqlite3``, kept across
restarts). Why not only memory: an owner that forgets a key after a restart applies a
re-send twice, which is exactly what the key is for.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from agentrun.owner._protocol import (
    REPLAYED,
    SCOPE_CHARS,
    Effect,
    ProtocolError,
    body_digest,
)

KEPT_BODY_BYTES: Final = 1 << 20  # a reply kept for re-sends: at most this much of its body
JSON_TYPE: Final = "application/json"


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What to send back: a status, a content type and a body (and extra headers)."""

    status: int
    body: bytes = b""
    content_type: str = JSON_TYPE
    headers: tuple[tuple[str, str], ...] = ()

    @classmethod
    def json(cls, status: int, value: Any) -> Reply:
        """A reply whose body is ``value`` as JSON."""
        return cls(status=status, body=json.dumps(value).encode())


@dataclass(frozen=True, kw_only=True)
class Kept:
    """A key's state: ``reply`` is None while it is in progress; ``lost``: it was begun by
    a process of the service that is gone (a restart while applying), so whether it
    happened is unknown."""

    reply: Reply | None
    lost: bool = False


class Store(Protocol):
    """Where an owner keeps keys and fences; each method one atomic step."""

    def begin(self, *, key: str, scope: str, token: int) -> Kept | int | None:
        """Fence and start ``key``: the highest token of ``scope`` (an int) if ``token`` is
        lower; the key's :class:`Kept` if it was seen; None if it is now in progress."""
        ...

    def finish(self, *, key: str, reply: Reply | None) -> None:
        """Keep ``reply`` for ``key`` (applied), or forget the key (None: not applied)."""
        ...

    def get(self, *, key: str) -> Kept | None:
        """The key's state, None if never begun (or forgotten: not applied)."""
        ...


@dataclass
class MemoryStore:
    """Keys and fences in this process's memory."""

    keys: dict[str, Kept] = field(default_factory=dict)
    highest: dict[str, int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def begin(self, *, key: str, scope: str, token: int) -> Kept | int | None:
        with self.lock:
            if token < self.highest.get(scope, 0):
                return self.highest[scope]
            self.highest[scope] = token
            if key in self.keys:
                return self.keys[key]
            self.keys[key] = Kept(reply=None)
            return None

    def finish(self, *, key: str, reply: Reply | None) -> None:
        with self.lock:
            if reply is None:
                self.keys.pop(key, None)
            else:
                self.keys[key] = Kept(reply=reply)

    def get(self, *, key: str) -> Kept | None:
        with self.lock:
            return self.keys.get(key)


class SqliteStore:
    """Keys and fences in an SQLite file (``path``), each step one transaction. Each
    store object is an *incarnation* (a random id): a key left in progress by another
    one (the service restarted while applying it) is :attr:`Kept.lost`. So one process
    of the service has the file: a second process (``--workers N``, another replica) is
    another incarnation, whose keys in progress this one would call lost."""

    def __init__(self, path: str) -> None:
        self.lock = threading.Lock()
        self.incarnation = uuid.uuid4().hex
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, "
                        "status INTEGER, type TEXT, body BLOB, headers TEXT, "
                        "incarnation TEXT)")  # status NULL: in progress
        self.db.execute("CREATE TABLE IF NOT EXISTS fences (scope TEXT PRIMARY KEY, "
                        "highest INTEGER NOT NULL)")

    def begin(self, *, key: str, scope: str, token: int) -> Kept | int | None:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                row = self.db.execute("SELECT highest FROM fences WHERE scope = ?",
                                      (scope,)).fetchone()
                if row is not None and token < row[0]:
                    found: Kept | int | None = int(row[0])
                else:
                    self.db.execute("INSERT INTO fences VALUES (?, ?) ON CONFLICT(scope) DO "
                                    "UPDATE SET highest = excluded.highest", (scope, token))
                    found = self._get(key)
                    if found is None:
                        self.db.execute("INSERT INTO effects (key, incarnation) VALUES (?, ?)",
                                        (key, self.incarnation))
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
            return found

    def finish(self, *, key: str, reply: Reply | None) -> None:
        with self.lock:
            if reply is None:
                self.db.execute("DELETE FROM effects WHERE key = ? AND incarnation = ?",
                                (key, self.incarnation))
            else:
                self.db.execute("UPDATE effects SET status = ?, type = ?, body = ?, headers = ? "
                                "WHERE key = ? AND incarnation = ? AND status IS NULL",
                                (reply.status, reply.content_type, reply.body,
                                 json.dumps(reply.headers), key, self.incarnation))

    def get(self, *, key: str) -> Kept | None:
        with self.lock:
            return self._get(key)

    def _get(self, key: str) -> Kept | None:
        row = self.db.execute("SELECT status, type, body, headers, incarnation FROM effects "
                              "WHERE key = ?", (key,)).fetchone()
        if row is None:
            return None
        if row[0] is None:
            return Kept(reply=None, lost=row[4] != self.incarnation)
        return Kept(reply=Reply(status=int(row[0]), content_type=str(row[1]),
                                body=bytes(row[2] or b""),
                                headers=tuple(tuple(h) for h in json.loads(row[3] or "[]"))))


@dataclass(kw_only=True)
class Owner:
    """Applies effects once per key, fenced per scope, over ``store``."""

    store: Store = field(default_factory=MemoryStore)

    def status(self, effect: Effect) -> Reply:
        """The answer to a status query: applied (with the kept result), in progress, not
        applied, or unknown (begun by a process of the service that is gone)."""
        kept = self.store.get(key=effect.key)
        if kept is None:
            return Reply.json(200, {"answer": "not-applied"})
        if kept.reply is None:
            return Reply.json(200, {"answer": "unknown" if kept.lost else "in-progress"})
        try:
            result = json.loads(kept.reply.body) if kept.reply.body else None
        except (ValueError, RecursionError):
            result = kept.reply.body.decode(errors="replace")
        return Reply.json(200, {"answer": "applied", "result": result})

    def begin(self, effect: Effect, *, body: bytes) -> Reply | None:
        """None if the effect is now this caller's to apply (then :meth:`finish` or
        :meth:`abandon` it); else what to send instead (a replay, a refusal)."""
        if effect.token is None or not effect.scope or len(effect.scope) > SCOPE_CHARS:
            raise ProtocolError(f"an effect request needs a token and a scope of 1 to "
                                f"{SCOPE_CHARS} characters")
        if effect.digest is not None and body_digest(body) != effect.digest:
            return Reply.json(422, {"error": "ApprovalMismatch", "message": (
                "the body is not the payload people approved (its canonical JSON's sha256 "
                "is not the Agentrun-Approval-Digest)")})
        begun = self.store.begin(key=effect.key, scope=effect.scope, token=effect.token)
        if isinstance(begun, int):
            return Reply.json(409, {"error": "StaleFencingToken", "highest": begun,
                                    "message": f"token {effect.token} is lower than {begun}, "
                                               "the highest seen for this scope"})
        if isinstance(begun, Kept):
            if begun.reply is not None:
                return _replayed(begun.reply)
            if begun.lost:
                return Reply.json(409, {"error": "EffectOutcomeUnknown", "message": (
                    "an earlier apply of this key never finished (the service restarted "
                    "during it): whether it happened is unknown, so it is not applied again; "
                    "a person must resolve it")})
            return Reply(status=409, body=json.dumps({
                "error": "EffectInProgress", "message": "this key is being applied"}
            ).encode(), headers=(("Retry-After", "1"),))
        return None

    def finish(self, effect: Effect, reply: Reply) -> Reply:
        """Keep ``reply`` for re-sends if it is 2xx (applied), else forget the key (not
        applied: it may be sent again); ``reply`` is what to send."""
        applied = 200 <= reply.status < 300
        self.store.finish(key=effect.key, reply=_kept(reply) if applied else None)
        return reply

    def abandon(self, effect: Effect) -> None:
        """The apply failed (raised): nothing applied, the key may be sent again."""
        self.store.finish(key=effect.key, reply=None)

    def apply(self, effect: Effect, *, body: bytes, do: Callable[[], Reply]) -> Reply:
        """What to send for ``effect`` (see the module docstring); ``do`` runs at most once
        per key at a time, and never again once it applied the effect."""
        if effect.query:
            return self.status(effect)
        early = self.begin(effect, body=body)
        if early is not None:
            return early
        try:
            reply = do()
        except BaseException:
            self.abandon(effect)
            raise
        return self.finish(effect, reply)


def _kept(reply: Reply) -> Reply:
    """The reply as kept for re-sends (a body over :data:`KEPT_BODY_BYTES` is not kept)."""
    if len(reply.body) <= KEPT_BODY_BYTES:
        return reply
    return Reply(status=reply.status, content_type=reply.content_type, headers=reply.headers,
                 body=json.dumps({"omitted": f"the first reply's {len(reply.body)} bytes "
                                  f"(more than {KEPT_BODY_BYTES} are not kept)"}).encode())


def _replayed(reply: Reply) -> Reply:
    """A kept reply sent again, marked so."""
    return Reply(status=reply.status, body=reply.body, content_type=reply.content_type,
                 headers=(*reply.headers, (REPLAYED, "true")))
