"""The effect protocol: what a worker's request tells the service that owns the effect.

An *effect* request carries, as HTTP headers (or as MCP ``tools/call`` metadata, under
``params._meta``):

- ``Idempotency-Key`` (``dev.agentrun/idempotency-key``): the SDK's idempotency key, 64
  lower-case hex digits, the same in every attempt of the slot. The owner applies an effect
  once per key and answers a re-send with the first result, whatever its body says (a
  successor's model may have phrased it differently);
- ``Agentrun-Fencing-Token`` (``dev.agentrun/fencing-token``): the attempt's number, a
  whole number from 0. Per *scope*, the owner refuses a token lower than the highest it has
  seen: a stale attempt cannot slip a request in after its successor spoke;
- ``Agentrun-Fencing-Scope`` (``dev.agentrun/fencing-scope``): where tokens grow, the
  run's uid and the slot (``<run uid>/<slot>``), at most 256 characters;
- ``Agentrun-Approval-Digest`` (``dev.agentrun/approval-digest``), optional:
  ``sha256:<hex>`` of the canonical JSON of the body people approved; the owner checks the
  body it got against it.

A request is an effect request only if it carries an ``Agentrun-*`` header (an
``Idempotency-Key`` alone is a client's own). A *status query* is a request with
``Idempotency-Key`` and ``Agentrun-Query: status``
(no token, no body): the owner answers ``{"answer": "applied" | "not-applied" |
"in-progress", "result": ...}``, what the SDK's ``reconcile`` takes. Stdlib only: a
service can vendor this package.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

KEY: Final = "Idempotency-Key"
TOKEN: Final = "Agentrun-Fencing-Token"
SCOPE: Final = "Agentrun-Fencing-Scope"
DIGEST: Final = "Agentrun-Approval-Digest"
QUERY: Final = "Agentrun-Query"
REPLAYED: Final = "Agentrun-Replayed"  # on a re-send's answer: "true"
MCP: Final = {KEY: "dev.agentrun/idempotency-key", TOKEN: "dev.agentrun/fencing-token",
              SCOPE: "dev.agentrun/fencing-scope", DIGEST: "dev.agentrun/approval-digest",
              QUERY: "dev.agentrun/query"}
_NAMES: Final = frozenset(n.lower() for n in (KEY, TOKEN, SCOPE, DIGEST, QUERY))
SCOPE_CHARS: Final = 256
MAX_TOKEN: Final = 2**53 - 1
_HEX64: Final = re.compile(r"^[0-9a-f]{64}$")
_DIGITS: Final = re.compile(r"^[0-9]{1,16}$")  # ASCII digits only (str.isdigit takes '²')
_DIGEST: Final = re.compile(r"^sha256:([0-9a-f]{64})$")


class ProtocolError(ValueError):
    """A request whose effect fields are malformed: the message names the field."""


@dataclass(frozen=True, kw_only=True)
class Effect:
    """One effect request's fields (see the module docstring)."""

    key: str
    token: int | None = None  # None: a status query
    scope: str | None = None
    digest: str | None = None  # the approved body's sha256 (hex), if any
    query: bool = False

    @classmethod
    def from_headers(cls, headers: Iterable[tuple[str, str]]) -> Effect | None:
        """:meth:`from_fields` of a request's header list, where one of the protocol's
        headers given twice (with other values) is a :class:`ProtocolError`."""
        found: dict[str, str] = {}
        for name, value in headers:
            lower = name.lower()
            if lower in _NAMES and found.get(lower, value) != value:
                raise ProtocolError(f"{name} is given twice, with other values")
            found[lower] = value
        return cls.from_fields(found)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Effect | None:
        """The effect named by ``fields`` (header names, any case), None when it names
        none, else :class:`ProtocolError`. A request is an effect request only if it
        carries an ``Agentrun-*`` field: an ``Idempotency-Key`` alone is a client's own
        (the IETF draft's, Stripe's), left to the service."""
        found = {k.lower(): v for k, v in fields.items()}
        if not any(name.startswith("agentrun-") for name in found):
            return None

        def text(name: str) -> str | None:
            value = found.get(name.lower())
            return None if value is None else str(value).strip()

        key = text(KEY)
        if key is None:
            raise ProtocolError(f"an effect request (it has Agentrun-* headers) needs {KEY}")
        if not _HEX64.match(key):
            raise ProtocolError(f"{KEY} must be 64 lower-case hex digits (the SDK's "
                                "idempotency key)")
        if text(QUERY) is not None:
            if text(QUERY) != "status":
                raise ProtocolError(f"{QUERY} must be 'status'")
            return cls(key=key, query=True)
        token, scope, digest = text(TOKEN), text(SCOPE), text(DIGEST)
        if token is None or not _DIGITS.match(token) or int(token) > MAX_TOKEN:
            raise ProtocolError(f"{TOKEN} must be a whole number from 0 to {MAX_TOKEN}")
        if not scope or len(scope) > SCOPE_CHARS:
            raise ProtocolError(f"{SCOPE} must be 1 to {SCOPE_CHARS} characters "
                                "(<run uid>/<slot>)")
        matched = None if digest is None else _DIGEST.match(digest)
        if digest is not None and matched is None:
            raise ProtocolError(f"{DIGEST} must be sha256:<64 lower-case hex digits>")
        return cls(key=key, token=int(token), scope=scope,
                   digest=matched.group(1) if matched else None)

    @classmethod
    def from_mcp(cls, meta: Mapping[str, Any] | None) -> Effect | None:
        """The effect named by an MCP ``tools/call``'s ``params._meta``."""
        meta = meta or {}
        return cls.from_fields({header: meta[name] for header, name in MCP.items()
                                if name in meta})

    def headers(self) -> dict[str, str]:
        """This effect as request headers (what a worker's client sends)."""
        if self.query:
            return {KEY: self.key, QUERY: "status"}
        found = {KEY: self.key, TOKEN: str(self.token), SCOPE: str(self.scope)}
        if self.digest is not None:
            found[DIGEST] = f"sha256:{self.digest}"
        return found


def canonical(value: Any) -> bytes:
    """The one byte form of a JSON value an approval's digest is taken of: sorted keys, no
    spaces, UTF-8 (the SDK's ``agentrun.worker.payload_digest``)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def body_digest(body: bytes) -> str | None:
    """The sha256 (hex) of ``body``'s canonical JSON, or None if it is not JSON (or nests
    deeper than the parser goes)."""
    try:
        return hashlib.sha256(canonical(json.loads(body))).hexdigest()
    except (ValueError, RecursionError):
        return None
