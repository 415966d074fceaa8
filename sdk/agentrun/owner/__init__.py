"""The effect owner's kit: what a service that owns effects needs to keep the protocol.

The SDK cannot make a remote call happen once; the service it calls (the effect's
*owner*) can. This package gives that service the three things it must do, over the
protocol in docs/effect-owners.md (:mod:`._protocol`): deduplicate by idempotency key,
refuse stale fencing tokens, answer status queries; and, optionally, check a body against
an approval's digest.

Public (``__all__``): :class:`Owner` (the plain function form: ``owner.apply(effect,
body=..., do=...)``), its stores :class:`MemoryStore` and :class:`SqliteStore`,
:class:`Reply`; :class:`Effect` (the request's fields, from HTTP headers or MCP metadata)
and :class:`ProtocolError`; :class:`EffectMiddleware` (ASGI); the header names. The
command ``agentrun-owner-check URL`` (:mod:`agentrun.owner.check`) checks a service
against the protocol.

Standard library only, and nothing else of ``agentrun`` (import-linter): a service can
install the distribution or vendor this package. It ships in ``agentrun-operator``.
"""

from agentrun.owner._asgi import EffectMiddleware
from agentrun.owner._owner import MemoryStore, Owner, Reply, SqliteStore
from agentrun.owner._protocol import (
    DIGEST,
    KEY,
    MCP,
    QUERY,
    REPLAYED,
    SCOPE,
    TOKEN,
    Effect,
    ProtocolError,
)

__all__ = ["DIGEST", "KEY", "MCP", "QUERY", "REPLAYED", "SCOPE", "TOKEN", "Effect",
           "EffectMiddleware", "MemoryStore", "Owner", "ProtocolError", "Reply",
           "SqliteStore"]
