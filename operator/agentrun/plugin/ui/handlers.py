"""The web UI's pages (from the store: never a LIST), its live streams and its static
files; the module docstring of :mod:`.server` says how a stream stays current.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import resources
from typing import Any

from aiohttp import web

from agentrun.plugin import client
from agentrun.plugin.ui import pages
from agentrun.plugin.ui.app import STATIC, App, name_in, of
from agentrun.plugin.ui.store import Change

HEARTBEAT_SECONDS = 15.0  # an SSE comment this often: a dead connection is found and closed
LIVE_GAP_SECONDS = 0.5  # at most two fetches a second per page, however busy the cluster
JOURNAL_LIMIT = 200  # journal entries a slot page shows (the history API's newest)
GENERATION = re.compile(r"[0-9]{1,20}")  # a stream's since / Last-Event-ID


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/runs")


async def runs_page(request: web.Request) -> web.StreamResponse:
    ui = of(request)
    generation = ui.store.generation
    chosen, problems = pages.filters(request.query)
    view = pages.runs(ui.store.objects("agentruns"), chosen=chosen, now=datetime.now(UTC))
    return ui.page(request, "runs.html", generation=generation, view=view, chosen=chosen,
                   bad=problems,
                   states=pages.STATES, live="view=runs")


def _one(request: web.Request, plural: str, *, what: str
         ) -> tuple[App, str, str, int, dict[str, Any]]:
    """The object a page is of, from the store (404 when it has none), with the store's
    generation read first (see :meth:`App.page`)."""
    ui = of(request)
    namespace, name = name_in(request, "namespace"), name_in(request, "name")
    generation = ui.store.generation
    found = ui.store.find(plural, namespace, name)
    if found is None:
        raise web.HTTPNotFound(text=f"no {what} {namespace}/{name} (or you may not see it)")
    return ui, namespace, name, generation, found


async def run_page(request: web.Request, *, answer: dict[str, Any] | None = None
                   ) -> web.StreamResponse:
    ui, namespace, name, generation, found = _one(request, "agentruns", what="run")
    view = pages.run(found, ui.store.slots_of(namespace, name),
                     ui.store.events_of(namespace, "AgentRun", name), now=datetime.now(UTC))
    return ui.page(request, "run.html", generation=generation, view=view,
                   namespace=namespace, name=name, commands=ui.run_commands, answer=answer,
                   path=f"/runs/{namespace}/{name}",
                   live=f"view=run&namespace={namespace}&name={name}")


async def slot_page(request: web.Request, *, answer: dict[str, Any] | None = None
                    ) -> web.StreamResponse:
    ui, namespace, name, generation, found = _one(request, "slots", what="slot")
    journal = await ui.call(lambda: client.journal(ui.store.connection(namespace), name,
                                                     limit=JOURNAL_LIMIT))
    view = pages.slot(found, journal=journal, now=datetime.now(UTC))
    run = str((found.get("spec") or {}).get("run") or "")
    return ui.page(request, "slot.html", generation=generation, view=view,
                   namespace=namespace, name=name, run=run, commands=ui.commands,
                   answer=answer, path=f"/slots/{namespace}/{name}",
                   live=f"view=slot&namespace={namespace}&name={name}&run={run}")


async def waiting_page(request: web.Request) -> web.StreamResponse:
    ui = of(request)
    generation = ui.store.generation
    view = pages.waiting(ui.store.objects("agentruns"), ui.store.objects("slots"))
    return ui.page(request, "waiting.html", generation=generation, rows=view,
                   live="view=waiting")


def _shows(query: dict[str, str]) -> Callable[[Change], bool]:
    """Which changes a page's stream is told of (by what the page shows)."""
    view = query.get("view")
    namespace, name, run = query.get("namespace"), query.get("name"), query.get("run")
    if view == "run":
        return lambda c: c.namespace == namespace and c.run == name
    if view == "slot":
        return lambda c: c.namespace == namespace and (
            (c.plural == "slots" and c.name == name)
            or (c.plural == "agentruns" and c.name == run))
    if view == "waiting":
        return lambda c: c.plural in ("slots", "agentruns")
    return lambda c: c.plural == "agentruns"


async def live(request: web.Request) -> web.StreamResponse:
    """One page's stream of ``changed`` events (see the module docstring)."""
    ui = of(request)
    stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await stream.prepare(request)
    queue: asyncio.Queue[int] = asyncio.Queue(maxsize=1)
    seen = request.headers.get("Last-Event-ID") or request.query.get("since") or "0"
    if not GENERATION.fullmatch(seen) or int(seen) < ui.store.generation:
        queue.put_nowait(ui.store.generation)  # something changed while it was away
    ui.hub.streams[queue] = _shows(dict(request.query))
    try:
        await stream.write(b"retry: 2000\n\n")
        while True:
            try:
                generation = await asyncio.wait_for(queue.get(), timeout=HEARTBEAT_SECONDS)
            except TimeoutError:
                await stream.write(b": still here\n\n")
                continue
            await stream.write(f"id: {generation}\nevent: changed\ndata: {generation}\n\n"
                               .encode())
            # Changes meanwhile wait in the queue (it keeps one): one fetch for them all.
            await asyncio.sleep(LIVE_GAP_SECONDS)
    except ConnectionResetError:  # the browser left (a cancelled handler is re-raised)
        pass
    finally:
        ui.hub.streams.pop(queue, None)
    return stream


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    if name not in STATIC:
        raise web.HTTPNotFound()
    body = resources.files("agentrun.plugin.ui").joinpath("static", name).read_bytes()
    answer = web.Response(body=body, content_type=STATIC[name])
    if request.query.get("v") == of(request).versions.get(name):  # its digest: never stale
        answer.headers["Cache-Control"] = "private, max-age=86400, immutable"
    return answer
