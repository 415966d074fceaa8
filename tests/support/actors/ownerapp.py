"""An effect owner built with the kit, for tests: a plain ASGI app behind
``agentrun.owner.EffectMiddleware`` on a real server (uvicorn).

:class:`Publisher` is the owner's own code (every request that reaches it publishes,
counted); :class:`Counted` sits in front of the middleware and logs every request the
owner received with its protocol fields, so a test counts what the kit answered without
the app (re-sends, status queries); :func:`serving` runs an app for a block. The server
binds port 0 and the URL names the port it got: no port is picked first and bound later
(another process could take it between).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn

from agentrun.owner import KEY, QUERY, TOKEN
from tests.support.waiting import wait_for


class Publisher:
    """A plain ASGI app: every request it gets publishes (counted), answered with JSON."""

    def __init__(self) -> None:
        self.calls: list[bytes] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        assert scope["type"] == "http"
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.calls.append(body)
        data = json.dumps({"published": len(self.calls)}).encode()
        await send({"type": "http.response.start", "status": 201,
                    "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": data})


@dataclass(frozen=True, kw_only=True)
class Received:
    """One request the owner received: its method, key, token (None: none given) and
    whether it was a status query; ``status``: what the owner answered."""

    method: str
    key: str | None
    token: str | None
    query: bool
    status: int


class Counted:
    """Logs every request to ``app`` (:attr:`received`, in order, once answered)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.received: list[Received] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers") or ()}
        answered: list[int] = []

        async def sending(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                answered.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.received.append(Received(
                method=str(scope.get("method")), key=headers.get(KEY.lower()),
                token=headers.get(TOKEN.lower()), query=QUERY.lower() in headers,
                status=answered[0] if answered else 0))


@contextlib.contextmanager
def serving(app: Any, *, host: str = "127.0.0.1") -> Iterator[str]:
    """``app`` on uvicorn at ``host`` (pods reach the node bridge's address) for the
    block's length; its effects URL (``http://<host>:<port>/effects``)."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=0, log_level="error",
                                           lifespan="off"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), timeout=30,
                 message="uvicorn started")
        assert server.started, "uvicorn exited before it served"
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://{host}:{port}/effects"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
