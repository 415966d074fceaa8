"""The owner's kit as ASGI middleware: any ASGI app (Starlette, FastAPI, ...) made an
effect owner without a line of its own.

    app = EffectMiddleware(app, owner=Owner(store=SqliteStore("effects.db")))

A request without ``Idempotency-Key`` passes through untouched. One with malformed
effect headers is answered 400; a status query is answered by the owner; an effect
request is :meth:`Owner.apply`'d, the app being ``do``: the app's reply is collected,
sent, and kept (a 2xx one) for re-sends. A body is read whole before the app sees it (an
approval's digest is of the whole body), at most ``max_body`` bytes (413 beyond).
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


class EffectMiddleware:
    """``app`` behind the effect protocol, kept by ``owner``."""

    def __init__(self, app: App, *, owner: Owner, max_body: int = MAX_BODY_BYTES) -> None:
        self.app, self.owner, self.max_body = app, owner, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1")
                   for k, v in scope.get("headers") or []}
        try:
            effect = Effect.from_fields(headers)
        except ProtocolError as bad:
            return await _send(send, Reply.json(400, {"error": "BadEffectHeaders",
                                                      "message": str(bad)}))
        if effect is None:
            return await self.app(scope, receive, send)
        body = await _body(receive, limit=self.max_body)
        if body is None:
            return await _send(send, Reply.json(413, {
                "error": "BodyTooLarge", "message": f"at most {self.max_body} bytes"}))
        loop = asyncio.get_running_loop()

        def do() -> Reply:  # runs in a thread: the store's steps are blocking calls
            return asyncio.run_coroutine_threadsafe(self._app(scope, body), loop).result()

        reply = await asyncio.to_thread(self.owner.apply, effect, body=body, do=do)
        await _send(send, reply)

    async def _app(self, scope: Scope, body: bytes) -> Reply:
        """The app's reply to the request (its body given whole), collected."""
        given = False
        status, content_type, parts = 500, "application/octet-stream", []

        async def receive() -> Message:
            nonlocal given
            if given:
                return {"type": "http.disconnect"}
            given = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: Message) -> None:
            nonlocal status, content_type
            if message["type"] == "http.response.start":
                status = int(message["status"])
                for key, value in message.get("headers") or []:
                    if key.lower() == b"content-type":
                        content_type = value.decode("latin-1")
            elif message["type"] == "http.response.body":
                parts.append(bytes(message.get("body") or b""))

        await self.app(scope, receive, send)
        return Reply(status=status, content_type=content_type, body=b"".join(parts))


async def _body(receive: Receive, *, limit: int) -> bytes | None:
    """The request's whole body, or None past ``limit`` bytes."""
    parts, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = bytes(message.get("body") or b"")
        size += len(chunk)
        if size > limit:
            return None
        parts.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(parts)


async def _send(send: Send, reply: Reply) -> None:
    headers = [(b"content-type", reply.content_type.encode("latin-1")),
               (b"content-length", str(len(reply.body)).encode())]
    headers += [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": reply.body})
