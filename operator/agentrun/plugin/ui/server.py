"""``kubectl agentrun ui``: the web UI's server, on 127.0.0.1 only, as the person.

It holds no credentials of its own: every read and every command goes to the kubeconfig's
API server on the person's connection (:mod:`agentrun.plugin.client`), so RBAC and
admission see them exactly as they see ``kubectl``. Pages are read from the watches'
:class:`~.store.Store` (never a LIST per page) and rendered by Jinja2 with HTML escaping
on; the slot's journal is the history API's (one GET, as ``history`` reads it).

Who may use it (a page on 127.0.0.1 is reachable by every local program and by any web
page the person's browser opens):
- the *token*: a random secret in the URL it prints; opening that URL sets it as a
  cookie (HttpOnly, SameSite=Strict) and every other request needs the cookie;
- the *Host* header must be the address it listens on (a DNS-rebinding page names its
  own host);
- a POST must come with an ``Origin`` of the UI itself (a form on another site is
  refused even before the cookie, which SameSite keeps from it anyway);
- every page forbids other origins to the browser (Content-Security-Policy: scripts,
  styles, connections and form targets only from itself; no framing).

Live: each page opens one Server-Sent Events stream (``/live``) for what it shows; a
change from a watch sends ``changed`` and htmx fetches the page's live part again (from
the store). A stream that drops is opened again by the browser (htmx's SSE extension);
its ``Last-Event-ID`` (the store's generation it last saw) says whether anything changed
meanwhile, and if so it is told at once.
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import sys
from collections.abc import Awaitable, Callable

from aiohttp import web

from agentrun.plugin import client, output, requests
from agentrun.plugin.ui import actions, handlers
from agentrun.plugin.ui.app import APP, COOKIE, SAFE, App, may_list
from agentrun.plugin.ui.store import Store, scope, sources

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The Host, the token or its cookie, the Origin of a POST (each answer's headers are
    :func:`_safe`'s, on every response as it is prepared)."""
    app = request.app[APP]
    if request.host not in {origin.removeprefix("http://") for origin in app.origins}:
        return web.Response(status=421, text="this UI answers only at its own address")
    if request.method not in ("GET", "HEAD") and request.headers.get("Origin") not in app.origins:
        return web.Response(status=403, text="refused: a request from another origin")
    name = COOKIE.format(port=app.port)
    given = request.query.get("token") if request.path == "/" else None
    if given is not None and _same(given, app.token):
        response: web.StreamResponse = web.Response(status=303, headers={"Location": "/runs"})
        response.set_cookie(name, app.token, httponly=True, samesite="Strict", path="/")
    elif not _same(request.cookies.get(name, ""), app.token):
        response = web.Response(status=401, text="open the URL `kubectl agentrun ui` printed "
                                                 "(it carries this UI's token)")
    else:
        response = await handler(request)
    return response


def _same(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time (any text: compared as bytes)."""
    return hmac.compare_digest(given.encode(errors="replace"), token.encode())


async def _safe(request: web.Request, response: web.StreamResponse) -> None:
    """The headers every answer carries, as it is prepared: refusals, 404s, a stream, and
    aiohttp's own answers (a 413, a 500) too; a header the handler set is kept."""
    response.headers.update({k: v for k, v in SAFE.items() if k not in response.headers})


def application(ui: App) -> web.Application:
    made = web.Application(middlewares=[guard], client_max_size=actions.MAX_FORM_BYTES)
    made[APP] = ui
    made.on_response_prepare.append(_safe)
    made.add_routes([
        web.get("/", handlers.root), web.get("/runs", handlers.runs_page),
        web.get("/waiting", handlers.waiting_page),
        web.get("/runs/{namespace}/{name}", handlers.run_page),
        web.get("/slots/{namespace}/{name}", handlers.slot_page),
        web.post("/slots/{namespace}/{name}/{word}", actions.send),
        web.post("/runs/{namespace}/{name}/{word}", actions.send_run),
        web.get("/live", handlers.live), web.get("/static/{file}", handlers.static)])
    return made


async def serve(ui: App, *, port: int, ready: Callable[[str], None]) -> None:
    """Listen on 127.0.0.1 (``port`` 0: any free one), say the URL, serve until cancelled."""
    ui.loop = asyncio.get_running_loop()
    # handler_cancellation: a stream whose browser went away ends at once (not at its
    # next heartbeat); a form's command, once sent, is still waited for in its thread.
    runner = web.AppRunner(application(ui), access_log=None, shutdown_timeout=1.0,
                           handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    server = site._server
    assert server is not None and server.sockets  # type: ignore[attr-defined]
    ui.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    ready(ui.url())
    try:
        await asyncio.Event().wait()
    finally:
        ui.store.stop()
        await runner.cleanup()


def main(args: argparse.Namespace, conn: client.Connection) -> int:
    """``kubectl agentrun ui``: see where the person may look, fill the store, serve."""
    named = [*([args.namespace] if args.namespace else []), *args.namespaces]
    namespaces, refused = scope(conn, named=named, may_list=may_list(conn))
    if namespaces == []:
        raise requests.Failure("nothing to show: " + "; ".join(refused.values()),
                               code=requests.REJECTED)
    store = Store(conn, sources(namespaces), on_change=lambda changes: None)
    ui = App(store=store, refused=refused, port=args.port)
    store.on_change = ui.changed  # before it follows anything: no change goes untold
    store.start()

    def ready(url: str) -> None:
        where = "every namespace" if namespaces is None else ", ".join(namespaces)
        output.write([*(f"not shown: {why}" for why in refused.values()),
                      f"agentrun UI for {where} at {url}", "(Ctrl-C ends it)"])
        sys.stdout.flush()
    try:
        asyncio.run(serve(ui, port=args.port, ready=ready))
    except KeyboardInterrupt:  # Ctrl-C: the end it waits for
        pass
    except OSError as error:  # the port taken, or not ours to take
        raise requests.Failure(f"cannot listen on 127.0.0.1:{args.port}: {error.strerror} "
                               "(choose another --port, or 0 for any free one)",
                               code=requests.FAILED) from None
    return requests.ACCEPTED
