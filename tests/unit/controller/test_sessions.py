"""Kopf's session's hook really takes a token of the process's bucket for every request
(a local aiohttp server counts them)."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from agentrun.controller import sessions
from agentrun.rest import throttle


async def test_the_aiohttp_hook_takes_a_token_per_request() -> None:
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.Response(text="{}")

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    bucket = throttle.Bucket(qps=1000, burst=1000)
    try:
        async with aiohttp.ClientSession(trace_configs=[sessions.trace_config(bucket)]) as s:
            for index in range(7):
                async with s.get(f"http://127.0.0.1:{port}/x{index}") as response:
                    assert response.status == 200
    finally:
        await runner.cleanup()
    assert len(seen) == 7
    assert bucket.taken == 7
