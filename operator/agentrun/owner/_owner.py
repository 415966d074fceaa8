"""The owner's side of an effect: deduplicate by key, fence by token, answer status.

:meth:`Owner.apply` is the plain function form: give it the request's :class:`Effect`,
its body and ``do`` (what applying the effect is: returns the :class:`Reply` to send), and
it returns what to send. Terms: an effect is *in progress* from ``begin`` until ``do``
returned; *applied* once ``do`` returned a 2xx reply, which is kept and sent again for
every re-send of its key (with ``Agentrun-Replayed: true``); a reply that is not 2xx
applied nothing (a re-send tries again). A key whose ``do`` raised is not applied either.

The state lives in a :class:`Store`: :class:`MemoryStore` (one process, lost at exit:
tests and examples) or :class:`SqliteStore` (a file, stdlib ``sqlite3``, kept across
restarts). Why not only memory: an owner that forgets a key after a restart applies a
re-send twice, which is exactly what the key is for.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from agentrun.owner._protocol import REPLAYED, Effect, body_digest

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
        return cls(status=status, body=json.dumps(value).encode())


@dataclass(frozen=True, kw_only=True)
class Kept:
    """A key's state: ``reply`` is None while it is in progress."""

    reply: Reply | None


class Store(Protocol):
    """Where an owner keeps keys and fences; each method one atomic step."""

    def begin(self, *, key: str, scope: str, token: int) -> Kept | int | None:
        """Fence and start ``key``: the highest token of ``scope`` (an int) if ``token`` is
        lower; the key's :class:`Kept` if it was seen; None if it is now in progress."""
        ...

    def finish(self, *, key: str, reply: Reply | None) -> None:
        """Keep ``reply`` for ``key`` (applied), or forget the key (None: not applied)."""
        ...

    def get(self, *, key: str) -> Kept | None: ...


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
    """Keys and fences in an SQLite file (``path``), each step one transaction."""

    def __init__(self, path: str) -> None:
        self.lock = threading.Lock()
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, "
                        "status INTEGER, type TEXT, body BLOB)")  # status NULL: in progress
        self.db.execute("CREATE TABLE IF NOT EXISTS fences (scope TEXT PRIMARY KEY, "
                        "highest INTEGER NOT NULL)")

    def begin(self, *, key: str, scope: str, token: int) -> Kept | int | None:
        with self.lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                row = self.db.execute("SELECT highest FROM fences WHERE scope = ?",
                                      (scope,)).fetchone()
                if row is not None and token < row[0]:
                    return int(row[0])
                self.db.execute("INSERT INTO fences VALUES (?, ?) ON CONFLICT(scope) DO "
                                "UPDATE SET highest = excluded.highest", (scope, token))
                found = self._get(key)
                if found is None:
                    self.db.execute("INSERT INTO effects (key) VALUES (?)", (key,))
                return found
            finally:
                self.db.execute("COMMIT")

    def finish(self, *, key: str, reply: Reply | None) -> None:
        with self.lock:
            if reply is None:
                self.db.execute("DELETE FROM effects WHERE key = ?", (key,))
            else:
                self.db.execute("UPDATE effects SET status = ?, type = ?, body = ? WHERE "
                                "key = ?", (reply.status, reply.content_type, reply.body, key))

    def get(self, *, key: str) -> Kept | None:
        with self.lock:
            return self._get(key)

    def _get(self, key: str) -> Kept | None:
        row = self.db.execute("SELECT status, type, body FROM effects WHERE key = ?",
                              (key,)).fetchone()
        if row is None:
            return None
        if row[0] is None:
            return Kept(reply=None)
        return Kept(reply=Reply(status=int(row[0]), content_type=str(row[1]),
                                body=bytes(row[2] or b"")))


@dataclass(kw_only=True)
class Owner:
    """Applies effects once per key, fenced per scope, over ``store``."""

    store: Store = field(default_factory=MemoryStore)

    def status(self, effect: Effect) -> Reply:
        """The answer to a status query: applied (with the kept result), in progress or not
        applied."""
        kept = self.store.get(key=effect.key)
        if kept is None:
            return Reply.json(200, {"answer": "not-applied"})
        if kept.reply is None:
            return Reply.json(200, {"answer": "in-progress"})
        try:
            result = json.loads(kept.reply.body) if kept.reply.body else None
        except ValueError:
            result = kept.reply.body.decode(errors="replace")
        return Reply.json(200, {"answer": "applied", "result": result})

    def apply(self, effect: Effect, *, body: bytes, do: Callable[[], Reply]) -> Reply:
        """What to send for ``effect`` (see the module docstring); ``do`` runs at most once
        per key at a time, and never again once it applied the effect."""
        if effect.query:
            return self.status(effect)
        assert effect.token is not None and effect.scope is not None
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
            if begun.reply is None:
                return Reply(status=409, body=json.dumps({
                    "error": "EffectInProgress", "message": "this key is being applied"}
                ).encode(), headers=(("Retry-After", "1"),))
            return _replayed(begun.reply)
        try:
            reply = do()
        except BaseException:
            self.store.finish(key=effect.key, reply=None)
            raise
        applied = 200 <= reply.status < 300
        self.store.finish(key=effect.key, reply=_kept(reply) if applied else None)
        return reply


def _kept(reply: Reply) -> Reply:
    """The reply as kept for re-sends (a body over :data:`KEPT_BODY_BYTES` is not kept)."""
    if len(reply.body) <= KEPT_BODY_BYTES:
        return reply
    return Reply(status=reply.status, content_type=reply.content_type,
                 body=json.dumps({"omitted": f"the first reply's {len(reply.body)} bytes "
                                  f"(more than {KEPT_BODY_BYTES} are not kept)"}).encode())


def _replayed(reply: Reply) -> Reply:
    return Reply(status=reply.status, body=reply.body, content_type=reply.content_type,
                 headers=((REPLAYED, "true"),))
