"""The sidecar's protocol: the worker SDK over HTTP for a main container in any language.

``agentrun-worker sidecar`` (:mod:`agentrun.worker._sidecarserver`) runs as a native
sidecar (an init container with ``restartPolicy: Always``) beside the main container, and
serves it on 127.0.0.1 only; docs/worker-sidecar.md is the protocol's reference. Terms:

- *check-in*: ``POST /v1/check-in`` from the main container. The sidecar renews the lease
  only while the last one is at most the *window* old (``--check-in-seconds``; the first
  window opens when the sidecar starts): :class:`CheckIns` is the keeper's renew gate, so
  a hung main container is not kept alive (its lease expires, the operator ends the
  attempt). Only a check-in counts, never another request: a loop that is stuck asking
  for a step still hangs.
- *step*: ``GET /v1/steps/<key>`` (200 with the result if committed in the recoverable
  prefix, else 404) and ``PUT /v1/steps/<key>`` (commit, write-once: the same content
  again is a no-op, other content a 409): "skip if committed, else do and commit" split
  over two requests. With a journal the PUT's 201 means *staged* (group commit: durable
  within the worker's commit delay); ``PUT ...?durable=true`` answers once it is durable,
  and ``POST /v1/flush`` (204) once everything staged so far is.
- *effect session*: ``POST /v1/effects/<key>`` runs ``Worker.effect`` (the ledger,
  unchanged) in a thread whose ``call`` and ``reconcile`` hand an *instruction* to the
  main container and wait for its *reply* (``POST /v1/effects/<key>/reply``); each
  answer is the next instruction: ``call``, ``reconcile``, ``done`` or ``stop``. A
  session ends with ``done`` or ``stop`` and keeps that answer for any later request
  about its key (so a repeated request never repeats the effect in this attempt); one
  that ends with the lease lapsed (503) is forgotten, to be asked again once it is live.
  A ``stop`` means the attempt must end (exit non-zero); a successor reconciles.
- *question*: ``POST /v1/questions/<key>`` runs ``Worker.ask``: 200 with the answer once a
  person answered (``{"answer": ...}``), else 202 ``{"asked": true, "digest": ...}``: the
  question is committed, and the main container ends the attempt (exits); the next
  attempt's same request gets the answer.

Errors are JSON ``{"error": <code>, "message": ...}`` with 400 (bad input, nothing
changed), 404, 409 (conflict), 422 (``RecordLimit``: this attempt may commit no more
records; the lease is fine), 503 (the lease may have lapsed, or the journal's store did
not answer (``JournalUnavailable``): nothing committed; wait, ask again), 410 (the
lease is lost: exit now), 502 (the API server failed). :class:`Sidecar` is the protocol
without sockets (unit-tested over a fake worker); the server only moves bytes.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from agentrun import rest
from agentrun.api import bounds
from agentrun.worker import _artifacts as artifacts
from agentrun.worker import _effects as effects
from agentrun.worker import _journal as journals
from agentrun.worker import _questions as questions
from agentrun.worker import _records as records
from agentrun.worker._renewals import Standing
from agentrun.worker._sidecarsessions import (
    BadRequest,
    Conflict,
    Reply,
    Session,
    ended,
    error,
    fits,
    parse_json,
    parse_reply,
    string_field,
)

logger = logging.getLogger("agentrun.worker")
JSON = records.JSON
REPLY_TIMEOUT_SECONDS = 300.0  # a call or reconcile the main container never answers: stop
INSTRUCTION_WAIT_SECONDS = 30.0  # one request waits this long for the next instruction
# Effect sessions kept per attempt (each keeps its final answer for a repeated request).
# A run without a journal can commit only bounds.MAX_RECORDS records (an effect takes two,
# intent and outcome: RecordLimit, 422, says so); one with a journal is bounded here.
MAX_SESSIONS = 256  # each keeps its final answer, a result included
EFFECT_NAME_CHARS = bounds.RECORD_KEY_CHARS
STATUS: dict[type[Exception], int] = {
    BadRequest: 400, Conflict: 409, records.RecordConflict: 409,
    records.RecordLimit: 422,  # this attempt's Lease is full: the lease itself is fine
    records.RecordRefused: 410}  # refused by admission: the lease is no longer ours


def shown(artifact: artifacts.Artifact) -> JSON:
    return {"key": artifact.key, "size": artifact.size, "sha256": artifact.sha256}


def durable_query(query: str) -> bool:
    """``durable=true`` (or ``false``, or nothing) from a step PUT's query; else 400."""
    if query in ("", "durable=false"):
        return False
    if query == "durable=true":
        return True
    raise BadRequest(f"a step's query is durable=true or durable=false, not {query[:80]!r}")


class CheckIns:
    """When the main container last checked in, and whether that is too long ago.

    :meth:`overdue` is the keeper's renew gate: None while the last check-in (or the
    sidecar's start, before the first) is at most ``window_seconds`` old, else why not.
    """

    def __init__(self, *, window_seconds: float,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.window_seconds, self.monotonic = window_seconds, monotonic
        self._lock = threading.Lock()
        self._last = monotonic()
        self._ever = False

    def check_in(self) -> None:
        with self._lock:
            self._last, self._ever = self.monotonic(), True

    def overdue(self) -> str | None:
        with self._lock:
            late = self.monotonic() - self._last
            if late <= self.window_seconds:
                return None
            since = "its last check-in" if self._ever else "the sidecar started"
        return (f"the main container has not checked in for {late:.0f}s since {since} "
                f"(the window is {self.window_seconds:.0f}s)")


class Guard(Protocol):
    def standing(self) -> Standing: ...


class Committed(Protocol):
    @property
    def store(self) -> records.PayloadStore | None: ...

    def committed(self, key: str) -> tuple[bool, JSON]: ...


class Backend(Protocol):
    """What the protocol needs of a :class:`agentrun.worker._sdk.Worker`."""

    @property
    def keeper(self) -> Guard: ...

    @property
    def steps(self) -> Committed: ...

    def step(self, key: str, *, do: Callable[[], JSON],
             kind: records.Kind = records.Kind.STEP_RESULT, durable: bool = False) -> JSON: ...

    def flush(self) -> None: ...

    def artifact(self, key: str, source: artifacts.Source) -> artifacts.Artifact: ...

    def committed_artifact(self, key: str) -> artifacts.Artifact | None: ...

    def effect(self, name: str, *, key: str, call: effects.Call[JSON],
               reconcile: effects.Reconcile | None = None,
               owner: str | None = None) -> JSON: ...

    def ask(self, key: str, question: str, *, schema: Mapping[str, Any] | None = None,
            deadline_seconds: int | None = None,
            on_expiry: Literal["fail", "default"] = "fail", default: JSON = None) -> JSON: ...


@dataclass(kw_only=True)
class Sidecar:
    """The protocol over ``worker``: :meth:`handle` answers one request."""

    worker: Backend
    check_ins: CheckIns
    reply_timeout: float = REPLY_TIMEOUT_SECONDS
    instruction_wait: float = INSTRUCTION_WAIT_SECONDS
    sessions: dict[str, Session] = field(default_factory=dict)
    # The startup probe was answered 200: the kubelet counts the sidecar started and will
    # not kill it for its probe again (so a SIGTERM now is the pod's end).
    told_ready: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def handle(self, method: str, path: str, body: bytes = b"") -> Reply:
        """The answer to ``method`` ``path`` with ``body``; never raises for bad input."""
        return self.guarded(lambda: self._route(method, path, body))

    def _route(self, method: str, path: str, body: bytes) -> Reply:
        parts = path.split("?", 1)[0].strip("/").split("/")
        query = path.split("?", 1)[1] if "?" in path else ""
        if parts[:1] != ["v1"]:
            return error(404, "NotFound", f"no such path {path[:100]!r}; see "
                         "docs/worker-sidecar.md")
        route = parts[1:]
        if route == ["check-in"]:
            return self._only(method, "POST") or self.check_in()
        if route == ["ready"]:
            return self._only(method, "GET") or self.ready()
        if route == ["flush"]:
            return self._only(method, "POST") or self.flush()
        if len(route) == 2 and route[0] == "steps":
            if method == "GET":
                return self.get_step(records.check_step_key(route[1]))
            return self._only(method, "PUT") or self.put_step(
                records.check_step_key(route[1]), parse_json(body),
                durable=durable_query(query))
        if len(route) == 2 and route[0] == "questions":
            return self._only(method, "POST") or self.ask(
                records.check_step_key(route[1]), parse_json(body))
        if len(route) in (2, 3) and route[0] == "effects" and route[2:] in ([], ["reply"]):
            key = records.check_step_key(route[1])
            return self._only(method, "POST") or (
                self.reply(key, parse_json(body)) if route[2:] else
                self.start_effect(key, parse_json(body)))
        return error(404, "NotFound", f"no such path {path[:100]!r}; see "
                     "docs/worker-sidecar.md")

    @staticmethod
    def guarded(call: Callable[[], Reply]) -> Reply:
        """``call()``'s answer, or the error answer of what it raised (bad input, a refusal,
        the store or the API server failing): nothing here raises for those."""
        try:
            return call()
        except (BadRequest, Conflict, records.RecordConflict, records.RecordLimit,
                records.RecordRefused) as bad:
            return error(STATUS[type(bad)], type(bad).__name__, str(bad))
        except journals.JournalUnavailable as silent:
            return error(503, "JournalUnavailable", f"{silent}; nothing was committed: ask "
                         "again (the slot shows JournalUnavailable meanwhile)")
        except records.RecordError as bad:
            return error(400, "RecordError", str(bad))
        except questions.QuestionError as bad:
            return error(400, "QuestionError", str(bad))
        except (rest.ApiError, OSError) as failed:
            return error(502, "ApiError", f"the API server failed: {failed}")

    @staticmethod
    def _only(method: str, allowed: str) -> Reply | None:
        if method == allowed:
            return None
        return error(405, "MethodNotAllowed", f"use {allowed} here, not {method}")

    def _lost(self) -> Reply | None:
        if self.worker.keeper.standing() is Standing.LOST:
            return error(410, "LeaseLost", "the lease is no longer this attempt's: exit "
                         "now (a successor may be running)")
        return None

    def check_in(self) -> Reply:
        self.check_ins.check_in()
        return self._lost() or Reply(status=204)

    def ready(self) -> Reply:
        """200 once the first renewal succeeded (the startup probe's question)."""
        standing = self.worker.keeper.standing()
        if standing is Standing.STARTING:
            return error(503, "Starting", "the lease has not been renewed yet")
        lost = self._lost()
        if lost is not None:
            return lost
        self.told_ready = True
        return Reply(status=200, body={"standing": str(standing)})

    def get_step(self, key: str) -> Reply:
        with self._lock:
            done, result = self.worker.steps.committed(key)
        if not done:
            return error(404, "NotCommitted", f"step {key} is not committed in the "
                         "recoverable prefix: do it, then PUT its result")
        return Reply(status=200, body={"result": result})

    def flush(self) -> Reply:
        """204 once every step staged so far is durable."""
        if (lost := self._lost()) is not None:
            return lost
        self.worker.flush()
        return Reply(status=204)

    def put_artifact(self, key: str, source: artifacts.Source) -> Reply:
        """Skip if committed (200, ``source`` unread), else stream it in (201): the
        artifact's key, size and sha256. Not under the steps' lock: an upload of
        gigabytes must not hold the other requests back."""
        records.check_step_key(key)
        if (lost := self._lost()) is not None:
            return lost
        found = self.worker.committed_artifact(key)
        if found is not None:
            return Reply(status=200, body=shown(found))
        return Reply(status=201, body=shown(self.worker.artifact(key, source)))

    def find_artifact(self, key: str) -> artifacts.Artifact | Reply:
        """The committed artifact ``key`` to stream out, or the answer why not (404)."""
        if (lost := self._lost()) is not None:
            return lost
        found = self.worker.committed_artifact(records.check_step_key(key))
        if found is None:
            return error(404, "NotCommitted", f"artifact {key} is not committed in the "
                         "recoverable prefix: PUT it")
        return found

    def put_step(self, key: str, result: JSON, *, durable: bool = False) -> Reply:
        fits(result, via="step", stored=self.worker.steps.store is not None)
        if (lost := self._lost()) is not None:
            return lost
        with self._lock:
            done, existing = self.worker.steps.committed(key)
            if done:
                if records.canonical(existing) != records.canonical(result):
                    raise records.RecordConflict(
                        f"step {key} is already committed with other content; records are "
                        "write-once (GET it, or use a new key)")
                if durable:  # staged by an earlier PUT, maybe: durable before answering
                    self.worker.flush()
                return Reply(status=200, body={"result": existing})
            committed = self.worker.step(key, do=lambda: result, durable=durable)
        return Reply(status=201, body={"result": committed})

    def ask(self, key: str, request: JSON) -> Reply:
        """200 with the answer, or 202 once the question is committed (end the attempt)."""
        fields = {"question", "schema", "deadlineSeconds", "onExpiry", "default"}
        if not isinstance(request, dict) or set(request) - fields or not isinstance(
                request.get("question"), str):
            raise BadRequest('a question is {"question": ..., "schema": ..., '
                             '"deadlineSeconds": ..., "onExpiry": ..., "default": ...}')
        schema, seconds = request.get("schema"), request.get("deadlineSeconds")
        on_expiry = request.get("onExpiry", "fail")
        if schema is not None and not isinstance(schema, dict):
            raise BadRequest("schema must be a JSON Schema (an object) or null")
        if (seconds is not None and not isinstance(seconds, int)) or on_expiry not in (
                "fail", "default"):
            raise BadRequest("deadlineSeconds must be whole seconds or null, and onExpiry "
                             "fail or default")
        if (lost := self._lost()) is not None:
            return lost
        try:
            with self._lock:
                answer = self.worker.ask(key, request["question"], schema=schema,
                                         deadline_seconds=seconds, on_expiry=on_expiry,
                                         default=request.get("default"))
        except questions.QuestionAsked as asked:
            return Reply(status=202, body={"asked": True, "digest": asked.digest,
                                           "message": f"{asked}: end the attempt (exit)"})
        return Reply(status=200, body={"answer": answer})

    def start_effect(self, key: str, request: JSON) -> Reply:
        if not isinstance(request, dict) or set(request) - {"name", "owner"}:
            raise BadRequest('an effect request is {"name": ..., "owner": ...}')
        name = string_field(request, "name", limit=EFFECT_NAME_CHARS, required=True)
        owner = string_field(request, "owner", limit=bounds.ACTOR_CHARS, required=False)
        assert name is not None
        if (lost := self._lost()) is not None:
            return lost
        with self._lock:
            session = self.sessions.get(key)
            if session is not None and session.name != name:
                raise Conflict(f"effect {key} is already under way as {session.name!r}, "
                               f"not {name!r}")
            if session is None:
                if len(self.sessions) >= MAX_SESSIONS:
                    raise BadRequest(f"at most {MAX_SESSIONS} effects per attempt")
                session = Session(key=key, name=name, owner=owner,
                                  reply_timeout=self.reply_timeout)
                self.sessions[key] = session
                threading.Thread(target=self._run, args=(session,), daemon=True,
                                 name=f"effect-{key}").start()
        return session.next(after=0, timeout=self.instruction_wait)

    def _run(self, session: Session) -> None:
        logger.info("effect %s (%s, owner %s) starts", session.key, session.name,
                    session.owner)
        answer, kept = ended(lambda: self.worker.effect(
            session.name, key=session.key, call=session.call, reconcile=session.reconcile,
            owner=session.owner))
        if not kept:
            with self._lock:
                self.sessions.pop(session.key, None)
        session.finish(answer)

    def reply(self, key: str, body: JSON) -> Reply:
        session = self.sessions.get(key)
        if session is None:
            raise Conflict(f"no effect {key} is under way: POST /v1/effects/{key} first")
        with session.cond:
            if session.final is not None:
                return session.final
            if session.awaiting is None or session.reply is not None:
                raise Conflict(f"effect {key} is waiting for no reply now (ask for its "
                               f"instruction: POST /v1/effects/{key})")
            session.reply = parse_reply(session.awaiting, body,
                                        stored=self.worker.steps.store is not None)
            seq = session.seq
            session.cond.notify_all()
        return session.next(after=seq, timeout=self.instruction_wait)
