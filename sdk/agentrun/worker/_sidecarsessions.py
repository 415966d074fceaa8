"""The sidecar's wire and its effect sessions (the protocol: :mod:`agentrun.worker._sidecar`).

*Reply*: one HTTP answer (status, JSON body). *Bad request*: answered 400 with a message
that says what to change; nothing was changed. *Conflict*: 409. Every body is at most
:data:`MAX_BODY_BYTES` (the largest payload, with room for its JSON around it); a result
is at most :data:`RESULT_BYTES` once encoded when the run has a
journal (stored by reference in it), else it must fit inline in its record (:func:`fits`).

An *effect session* (:class:`Session`) is where the ledger's thread and the main
container meet: the ledger's ``call``/``reconcile`` callables post an *instruction*
(``{"do": "call" | "reconcile", ...}``) and wait, at most ``reply_timeout`` seconds, for
the main container's *reply*; :func:`ended` turns how the ledger finished into the final
instruction (``done`` or ``stop``) or an error (410 lost, 503 lapsed).
"""

from __future__ import annotations

import enum
import json
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentrun import rest
from agentrun.api import bounds
from agentrun.worker import _approvals as approvals
from agentrun.worker import _effects as effects
from agentrun.worker import _keeper as keeper
from agentrun.worker import _records as records

logger = logging.getLogger("agentrun.worker")
JSON = records.JSON
# A result through the sidecar is at most this once encoded (by reference in the journal):
# a quarter of the SDK's bound, because the sidecar holds a body, its parse, its encoding
# and the reply echoing it at once (about 3x, measured), under its default 256Mi limit.
RESULT_BYTES = bounds.PAYLOAD_BYTES // 4
# A request's body: the largest result and room for the JSON around it (a reply's
# "answer", a step's own braces, escapes the encoder undoes).
MAX_BODY_BYTES = RESULT_BYTES + 64 * 1024


@dataclass(frozen=True, kw_only=True)
class Reply:
    """One HTTP answer: its status and JSON body (None: no body)."""

    status: int
    body: JSON = None


def error(status: int, code: str, message: str) -> Reply:
    return Reply(status=status, body={"error": code, "message": bounds.clip(message)})


class BadRequest(Exception):
    """Bad input: answered 400 with this message; nothing was changed."""


class Conflict(Exception):
    """The request contradicts what is under way or committed: answered 409."""


class Awaiting(enum.StrEnum):
    CALL = "call"
    RECONCILE = "reconcile"


class NoReply(Exception):
    """The main container did not reply to an instruction within the reply timeout."""


class CallFailed(Exception):
    """The main container replied that the call failed: whether it reached the owner is
    unknown, so the ledger's intent stays without an outcome for a successor to reconcile."""


@dataclass(kw_only=True)
class Session:
    """One effect under way: the ledger's thread and the main container meet here."""

    key: str
    name: str
    owner: str | None
    reply_timeout: float
    cond: threading.Condition = field(default_factory=threading.Condition)
    instruction: dict[str, Any] | None = None  # waiting for the main container to act
    awaiting: Awaiting | None = None
    reply: dict[str, Any] | None = None
    final: Reply | None = None
    seq: int = 0  # counts instructions and the final answer, so a waiter misses none

    def _ask(self, instruction: dict[str, Any], awaiting: Awaiting) -> dict[str, Any]:
        """(The ledger's thread.) Hand ``instruction`` over; wait for its reply."""
        with self.cond:
            self.instruction, self.awaiting, self.reply = instruction, awaiting, None
            self.seq += 1
            self.cond.notify_all()
            if not self.cond.wait_for(lambda: self.reply is not None,
                                      timeout=self.reply_timeout):
                self.instruction = self.awaiting = None
                raise NoReply(f"no reply to the {awaiting} instruction within "
                              f"{self.reply_timeout:.0f}s")
            reply, self.reply = self.reply, None
            self.instruction = self.awaiting = None
        assert reply is not None
        return reply

    def call(self, idempotency_key: str, fencing_token: int) -> JSON:
        reply = self._ask({"do": "call", "idempotencyKey": idempotency_key,
                           "fencingToken": fencing_token}, Awaiting.CALL)
        if "error" in reply:
            raise CallFailed(f"the main container says the call failed: {reply['error']}")
        return reply.get("result")

    def reconcile(self, idempotency_key: str) -> effects.Reconciled:
        reply = self._ask({"do": "reconcile", "idempotencyKey": idempotency_key},
                          Awaiting.RECONCILE)
        return effects.Reconciled(answer=effects.Answer(reply["answer"]),
                                  result=reply.get("result"))

    def finish(self, answer: Reply) -> None:
        with self.cond:
            self.final, self.instruction, self.awaiting = answer, None, None
            self.seq += 1
            self.cond.notify_all()

    def next(self, *, after: int, timeout: float) -> Reply:
        """The first instruction (or the final answer) after ``seq`` ``after``."""
        with self.cond:
            self.cond.wait_for(lambda: self.final is not None or (
                self.seq > after and self.instruction is not None), timeout=timeout)
            if self.final is not None:
                return self.final
            if self.instruction is not None and self.seq > after:
                return Reply(status=200, body=self.instruction)
        return error(503, "NotYet", f"effect {self.key} has no new instruction yet; ask "
                     f"again with POST /v1/effects/{self.key}")


def _stop(code: str, message: str) -> Reply:
    return Reply(status=200, body={"do": "stop", "error": code,
                                   "message": bounds.clip(message)})


def ended(run: Callable[[], JSON]) -> tuple[Reply, bool]:
    """The session's final answer from running the ledger; True if it is kept (False:
    the lease lapsed before anything was sent, so it may be asked again)."""
    try:
        return Reply(status=200, body={"do": "done", "result": run()}), True
    except keeper.LeaseLost as lost:
        return error(410, "LeaseLost", str(lost)), True
    except keeper.LeaseLapsed as lapsed:
        return error(503, "LeaseLapsed", str(lapsed)), False
    except records.StoreUnavailable as silent:  # not kept: the ledger picks up from its records
        return error(503, "JournalUnavailable", f"{silent}; ask again (an effect whose "
                     "outcome could not be recorded is reconciled, never sent twice blindly)"
                     ), False
    except (effects.EffectStopped, NoReply, CallFailed, records.RecordError) as stopped:
        return _stop(type(stopped).__name__, str(stopped)), True
    except approvals.ApprovalError as refused:  # the sidecar sends no payload: see the docs
        return _stop("ApprovalRequired", str(refused)), True
    except (rest.ApiError, OSError) as failed:
        return _stop("ApiError", f"the API server failed: {failed}"), True
    except Exception as bug:  # a bug must not leave the main container waiting
        logger.exception("effect session failed")
        return _stop("InternalError", f"{type(bug).__name__}: {bug}"), True


def parse_json(body: bytes) -> JSON:
    if len(body) > MAX_BODY_BYTES:
        raise BadRequest(f"the body is {len(body)} bytes; at most {MAX_BODY_BYTES} are read")
    if records.text_nesting(body) > bounds.PAYLOAD_DEPTH:  # measured before any parser recurses
        raise BadRequest(f"the body nests more than {bounds.PAYLOAD_DEPTH} levels: {records.DEEP}")
    try:
        return json.loads(body or b"null")
    except ValueError as bad:
        raise BadRequest(f"the body is not JSON: {bad}") from None


def fits(result: JSON, *, via: str, stored: bool) -> JSON:
    """``result`` if its record's payload (a step's, or an effect's outcome) may be kept:
    ``stored`` (the run has a journal) by reference, at most ``bounds.PAYLOAD_BYTES``;
    else inline in its record."""
    wrapped = result if via == "step" else {"answer": "applied", "result": result, "via": via}
    size = len(records.canonical(wrapped))
    if stored and size > RESULT_BYTES:
        raise BadRequest(f"the result is {size} bytes once encoded; at most {RESULT_BYTES} "
                         "are kept through the sidecar (store a larger one elsewhere and "
                         "return its URI and sha256)")
    if not stored and size > bounds.INLINE_PAYLOAD_BYTES:
        raise BadRequest(f"the result's record would be {size} bytes; at most "
                         f"{bounds.INLINE_PAYLOAD_BYTES} are kept inline, and this run has "
                         "no journal to store a larger one in (store it elsewhere and "
                         "return its URI and sha256)")
    return result


def string_field(found: Mapping[str, Any], name: str, *, limit: int, required: bool) -> str | None:
    value = found.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value or len(value) > limit:
        raise BadRequest(f'"{name}" must be a string of 1 to {limit} characters')
    return value


def parse_reply(awaiting: Awaiting, body: JSON, *, stored: bool) -> dict[str, Any]:
    """A valid reply to a ``call`` (``result`` or ``error``) or ``reconcile``
    (``answer`` and, when applied, ``result``)."""
    if not isinstance(body, dict):
        raise BadRequest("a reply is a JSON object")
    allowed = {"result", "error"} if awaiting is Awaiting.CALL else {"answer", "result"}
    if extra := sorted(set(body) - allowed):
        raise BadRequest(f"a reply to {awaiting} has only {sorted(allowed)}; not {extra}")
    if awaiting is Awaiting.CALL:
        if ("result" in body) == ("error" in body):
            raise BadRequest('a reply to call has "result" (it was applied) or "error"')
        if "error" in body:
            string_field(body, "error", limit=bounds.RECORD_MESSAGE_CHARS, required=True)
        else:
            fits(body["result"], via="call", stored=stored)
        return dict(body)
    answers = [str(a) for a in effects.Answer]
    if body.get("answer") not in answers:
        raise BadRequest(f'"answer" must be one of {answers}')
    fits(body.get("result"), via="reconcile", stored=stored)
    return dict(body)


