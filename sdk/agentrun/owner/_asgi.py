"""The owner's kit as ASGI middleware: any ASGI app (Starlette, FastAPI, ...) made an
effect owner without a line of its own.

    app = EffectMiddleware(app, owner=Owner(store=SqliteStore("effects.db")))

A request without the protocol's ``Agentrun-*`` headers passes through untouched. One with
malformed effect headers is answered 400; a status query is answered by the owner; an
effect request is begun by the owner (fenced, deduplicated), and only then handed to the
app, whose reply (status, headers, body) is sent and, if 2xx, kept for re-sends. The
request's body is read whole first (an approval's digest is of the whole body), at most
``max_body`` bytes (413 beyond); a client gone before its body arrived whole applies
nothing. The store's steps run in threads; the app runs on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final

from agentrun.owner._owner import Owner, Reply
from agentrun.owner._protocol import Effect, ProtocolError

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]
MAX_BODY_BYTES: Final = 1 << 20


class Disconnected(Exception):
    """The client went away before its request's body arrived whole."""


class EffectMiddleware:
    """``app`` behind the effect protocol, kept by ``owner``."""

    def __init__(self, app: App, *, owner: Owner, max_body: int = MAX_BODY_BYTES) -> None:
        self.app, self.owner, self.max_body = app, owner, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            effect = Effect.from_headers((k.decode("latin-1"), v.decode("latin-1"))
                                         for k, v in scope.get("headers") or [])
        except ProtocolError as bad:
            return await _send(send, Reply.json(400, {"error": "BadEffectHeaders",
                                                      "message": str(bad)}))
        if effect is None:
            return await self.app(scope, receive, send)
        if effect.query:
            return await _send(send, await asyncio.to_thread(self.owner.status, effect))
        try:
            body = await _body(receive, limit=self.max_body)
        except Disconnected:
            return  # nothing was begun: nothing to answer, nothing applied
        if body is None:
            return await _send(send, Reply.json(413, {
                "error": "BodyTooLarge", "message": f"at most {self.max_body} bytes"}))
        # The store's steps shielded: a request cancelled (a server that cancels on a
        # disconnect) never leaves a key begun and neither finished nor abandoned.
        early = await asyncio.shield(asyncio.to_thread(self.owner.begin, effect, body=body))
        if early is not None:
            return await _send(send, early)
        try:
            reply = await self._app(scope, body, receive)
        except BaseException:
            await asyncio.shield(asyncio.to_thread(self.owner.abandon, effect))
            raise
        await _send(send, await asyncio.shield(asyncio.to_thread(self.owner.finish, effect,
                                                                  reply)))

    async def _app(self, scope: Scope, body: bytes, receive: Receive) -> Reply:
        """The app's reply to the request (its body given whole first, then the server's
        own messages: a disconnect is the client's, when it happens), collected."""
        given = False
        status, content_type = 500, "application/octet-stream"
        headers: list[tuple[str, str]] = []
        parts: list[bytes] = []

        async def replay() -> Message:
            nonlocal given
            if given:
                return await receive()
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def collect(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for key, value in message.get("headers") or []:
                    name, text = key.decode("latin-1").lower(), value.decode("latin-1")
                    if name == "content-type":
                        content_type = text
                    elif name != "content-length":
                        headers.append((name, text))
            elif message["type"] == "http.response.body":
                parts.append(bytes(message.get("body") or b""))

        await self.app(scope, replay, collect)
        return Reply(status=status, content_type=content_type, body=b"".join(parts),
                     headers=tuple(headers))


async def _body(receive: Receive, *, limit: int) -> bytes | None:
    """The request's whole body, or None past ``limit`` bytes; :class:`Disconnected` if
    the client left before it ended."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        chunk = bytes(message.get("body") or b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            return b"".join(parts)


async def _send(send: Send, reply: Reply) -> None:
    """Send ``reply`` (its headers as given, content type and length set here)."""
    headers = [(b"content-type", reply.content_type.encode("latin-1")),
               (b"content-length", str(len(reply.body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
