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
import contextlib
import hashlib
import hmac
import re
import secrets
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from agentrun.api import names
from agentrun.plugin import budgets, cli, client, flags, forks, output, requests
from agentrun.plugin.ui import pages
from agentrun.plugin.ui.store import Change, Store, scope, sources

COOKIE = "agentrun-ui-{port}"  # per port: a browser keeps cookies by host, not by port
HEARTBEAT_SECONDS = 15.0  # an SSE comment this often: a dead connection is found and closed
STATIC = {"htmx.min.js": "text/javascript", "sse.min.js": "text/javascript",
          "ui.js": "text/javascript", "ui.css": "text/css"}
MAX_FORM_BYTES = 1 << 20  # a command's form: its longest value sent by reference fits
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SAFE = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
JOURNAL_LIMIT = 200  # journal entries a slot page shows (the history API's newest)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
T = TypeVar("T")
GENERATION = re.compile(r"[0-9]{1,20}")  # a stream's since / Last-Event-ID


class Hub:
    """The open live streams, each with what it shows; told of changes in the loop."""

    def __init__(self) -> None:
        self.streams: dict[asyncio.Queue[int], Callable[[Change], bool]] = {}

    def publish(self, changes: Sequence[Change], generation: int) -> None:
        for queue, shows in self.streams.items():
            if (not changes or any(shows(change) for change in changes)) and queue.empty():
                queue.put_nowait(generation)


def may_list(conn: client.Connection) -> Callable[[str | None], str | None]:
    """Whether the person may list and watch runs (in a namespace, or cluster-wide:
    ``None``), by a SelfSubjectAccessReview each: None if so, else why not."""
    def review(namespace: str | None) -> str | None:
        for verb in ("list", "watch"):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {
                        "group": names.GROUP, "resource": "agentruns", "verb": verb,
                        **({"namespace": namespace} if namespace else {})}}}
            try:
                answer = conn.rest.request(
                    "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                    body=body)
            except client.ERRORS as error:
                raise client.failure("asking the API server what you may list", error) from None
            if not (answer.get("status") or {}).get("allowed"):
                where = f"namespace {namespace}" if namespace else "every namespace"
                return f"you may not {verb} runs in {where}"
        return None
    return review


class App:
    """The UI's state: the store, the live streams, the templates, the secret."""

    def __init__(self, *, store: Store, refused: dict[str, str], port: int) -> None:
        self.store = store
        self.refused = refused
        self.port = port
        self.token = secrets.token_urlsafe(32)
        self.hub = Hub()
        self.templates = jinja2.Environment(
            loader=jinja2.PackageLoader("agentrun.plugin.ui", "templates"),
            autoescape=True, trim_blocks=True,  # an absent optional field: blank
            lstrip_blocks=True)
        self.commands = pages.commands()
        # Each static file's URL carries its digest (?v=), so the browser may keep it.
        self.versions = {name: hashlib.sha256(resources.files("agentrun.plugin.ui").joinpath(
            "static", name).read_bytes()).hexdigest()[:16] for name in STATIC}
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs

    @property
    def origins(self) -> set[str]:
        return {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def changed(self, changes: Sequence[Change]) -> None:
        """From a watch's thread: hand the changes to the loop's live streams."""
        generation = self.store.generation
        if self.loop is None:  # not serving yet: no page to tell
            return
        with contextlib.suppress(RuntimeError):  # the loop closed: the UI is ending
            self.loop.call_soon_threadsafe(self.hub.publish, list(changes), generation)

    def page(self, request: web.Request, file: str, /, *, generation: int,
             **values: Any) -> web.Response:
        """A page, or (htmx asking for the live part) only its ``content`` block and the
        banner of what is not current. ``generation``: the store's count of changes read
        *before* the page's objects were, so a change made while it was built is told to
        its stream at once."""
        template = self.templates.get_template(file)
        values = {"generation": generation, "problems": self.store.problem_list(),
                  "versions": self.versions, "refused": self.refused,
                  "path": request.path_qs, **values}
        if request.headers.get("HX-Request") and request.headers.get("HX-Target") == "content":
            context = template.new_context(values)
            body = self.templates.get_template("banner.html").render(values) + "".join(
                template.blocks["content"](context))
        else:
            body = template.render(values)
        return web.Response(text=body, content_type="text/html")


APP = web.AppKey("ui", App)


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The Host, the token or its cookie, the Origin of a POST; then safe headers."""
    app = request.app[APP]
    if request.host not in {origin.removeprefix("http://") for origin in app.origins}:
        return _safe(web.Response(status=421, text="this UI answers only at its own address"))
    if request.method not in ("GET", "HEAD") and request.headers.get("Origin") not in app.origins:
        return _safe(web.Response(status=403, text="refused: a request from another origin"))
    name = COOKIE.format(port=app.port)
    given = request.query.get("token") if request.path == "/" else None
    if given is not None and _same(given, app.token):
        response: web.StreamResponse = web.Response(status=303, headers={"Location": "/runs"})
        response.set_cookie(name, app.token, httponly=True, samesite="Strict", path="/")
    elif not _same(request.cookies.get(name, ""), app.token):
        response = web.Response(status=401, text="open the URL `kubectl agentrun ui` printed "
                                                 "(it carries this UI's token)")
    else:
        try:
            response = await handler(request)
        except web.HTTPException as answer:  # a 404 or 400: raised, with the same headers
            _safe(answer)
            raise
    return response if response.prepared else _safe(response)  # a stream sent its own


def _same(given: str, token: str) -> bool:
    """Whether ``given`` is the token, in constant time (any text: compared as bytes)."""
    return hmac.compare_digest(given.encode(errors="replace"), token.encode())


def _safe(response: web.StreamResponse) -> web.StreamResponse:
    """The headers every answer carries (a header the handler set is kept)."""
    response.headers.update({k: v for k, v in SAFE.items() if k not in response.headers})
    return response


def _ui(request: web.Request) -> App:
    return request.app[APP]


def _name(request: web.Request, key: str) -> str:
    value = request.match_info[key]
    if len(value) > 253 or not pages.NAME_PATTERN.fullmatch(value):
        raise web.HTTPBadRequest(text=f"{key} must be a Kubernetes name")
    return value


async def root(request: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/runs")


async def runs_page(request: web.Request) -> web.StreamResponse:
    ui = _ui(request)
    generation = ui.store.generation
    chosen, problems = pages.filters(request.query)
    view = pages.runs(ui.store.objects("agentruns"), chosen=chosen, now=datetime.now(UTC))
    return ui.page(request, "runs.html", generation=generation, view=view, chosen=chosen,
                   bad=problems,
                   states=pages.STATES, live="view=runs")


async def run_page(request: web.Request, *, answer: dict[str, Any] | None = None
                   ) -> web.StreamResponse:
    ui = _ui(request)
    namespace, name = _name(request, "namespace"), _name(request, "name")
    generation = ui.store.generation
    found = ui.store.find("agentruns", namespace, name)
    if found is None:
        raise web.HTTPNotFound(text=f"no run {namespace}/{name} (or you may not see it)")
    view = pages.run(found, ui.store.slots_of(namespace, name),
                     ui.store.events_of(namespace, "AgentRun", name), now=datetime.now(UTC))
    return ui.page(request, "run.html", generation=generation, view=view,
                   namespace=namespace, name=name, commands=RUN_FORMS, answer=answer,
                   path=f"/runs/{namespace}/{name}",
                   live=f"view=run&namespace={namespace}&name={name}")


async def slot_page(request: web.Request, *, answer: dict[str, Any] | None = None
                    ) -> web.StreamResponse:
    ui = _ui(request)
    namespace, name = _name(request, "namespace"), _name(request, "name")
    generation = ui.store.generation
    found = ui.store.find("slots", namespace, name)
    if found is None:
        raise web.HTTPNotFound(text=f"no slot {namespace}/{name} (or you may not see it)")
    journal = await in_thread(lambda: client.journal(ui.store.connection(namespace), name,
                                                     limit=JOURNAL_LIMIT))
    view = pages.slot(found, journal=journal, now=datetime.now(UTC))
    run = str((found.get("spec") or {}).get("run") or "")
    return ui.page(request, "slot.html", generation=generation, view=view,
                   namespace=namespace, name=name, run=run, commands=ui.commands,
                   answer=answer, path=f"/slots/{namespace}/{name}",
                   live=f"view=slot&namespace={namespace}&name={name}&run={run}")


async def waiting_page(request: web.Request) -> web.StreamResponse:
    ui = _ui(request)
    generation = ui.store.generation
    view = pages.waiting(ui.store.objects("agentruns"), ui.store.objects("slots"))
    return ui.page(request, "waiting.html", generation=generation, rows=view,
                   live="view=waiting")


def form_argv(word: str, slot: str, form: dict[str, str],
              commands: Sequence[dict[str, Any]], *, spill: Path) -> list[str]:
    """The command line a form stands for: the command, the slot, each field given as
    ``--flag=value`` (a value may start with ``-``). A value longer than its flag takes,
    for a field the plugin also reads from a file, goes through that file (written in
    ``spill``), so it is sent by reference exactly as the plugin sends it."""
    [command] = [c for c in commands if c["word"] == word]
    argv = [word, slot]
    for field in command["fields"]:
        value = form.get(field["name"], "")
        if value == "":
            continue
        if field["file_flag"] and len(value) > field["short"]:
            path = spill / field["name"]
            path.write_text(value)
            argv.append(f"{field['file_flag']}={path}")
        else:
            argv.append(f"{field['flag']}={value}")
    return argv


async def in_thread(work: Callable[[], T]) -> T:
    """``work`` in a daemon thread: a blocking call the loop awaits, which never keeps the
    process from ending at Ctrl-C (``asyncio.to_thread``'s executor is waited for)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        if done.cancelled():
            return
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)  # type: ignore[arg-type]

    def run() -> None:
        try:
            result, error = work(), None
        except BaseException as raised:  # handed to the awaiting handler, raised there
            result, error = None, raised
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, result, error)
    threading.Thread(target=run, daemon=True, name="agentrun-ui-call").start()
    return await done


async def send(request: web.Request) -> web.StreamResponse:
    """A form's command: checked as the plugin's flags are, sent as the plugin sends it
    (on the person's connection), its ledger entry or refusal shown verbatim."""
    ui = _ui(request)
    namespace, name = _name(request, "namespace"), _name(request, "name")
    word = request.match_info["word"]
    if word not in {c["word"] for c in ui.commands}:
        raise web.HTTPNotFound(text=f"no command {word!r}")
    if (request.content_length or 0) > MAX_FORM_BYTES:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_FORM_BYTES,
                                            actual_size=request.content_length or 0)
    form = {key: str(value) for key, value in (await request.post()).items()}
    notes: list[str] = []
    answer: dict[str, Any]
    try:
        with tempfile.TemporaryDirectory(prefix="agentrun-ui-") as spill:  # 0700, ours
            args = cli.parser(cls=flags.FormParser).parse_args(
                form_argv(word, name, form, ui.commands, spill=Path(spill)))
        conn = ui.store.connection(namespace)
        document = await in_thread(lambda: cli.deliver(args, conn, say=notes.extend))
        entry = document["entry"]
        answer = {"word": word, "accepted": entry.get("outcome") == "Accepted",
                  "said": requests.describe(entry), "entry": entry, "notes": notes}
    except flags.Refused as refused:
        answer = {"word": word, "accepted": False, "said": f"not sent: {refused}",
                  "entry": None, "notes": notes}
    except requests.Failure as failure:
        answer = {"word": word, "accepted": False, "said": str(failure), "entry": None,
                  "notes": notes}
    answer["id"] = secrets.token_hex(6)  # which answer a page shows (a test waits on it)
    if request.headers.get("HX-Request"):
        return ui.page(request, "answer.html", generation=ui.store.generation, answer=answer)
    return await slot_page(request, answer=answer)


RUN_FORMS = pages.parser_forms(cli.parser(), words=("budget", "fork"))  # the run's commands

async def send_run(request: web.Request) -> web.StreamResponse:
    """A run's command (budget, fork) from its form, as :func:`send` does a slot's."""
    ui = _ui(request)
    namespace, name = _name(request, "namespace"), _name(request, "name")
    word = request.match_info["word"]
    if word not in {c["word"] for c in RUN_FORMS}:
        raise web.HTTPNotFound(text=f"no command {word!r}")
    form = {key: str(value) for key, value in (await request.post()).items()}
    conn = ui.store.connection(namespace)
    answer: dict[str, Any]
    try:
        with tempfile.TemporaryDirectory(prefix="agentrun-ui-") as spill:
            args = cli.parser(cls=flags.FormParser).parse_args(
                form_argv(word, name, form, RUN_FORMS, spill=Path(spill)))
        if word == "budget":
            entry = await in_thread(lambda: budgets.send(
                conn, name, add=args.add, add_cost=args.add_cost, reason=args.reason,
                timeout=args.timeout))
            answer = {"word": word, "accepted": entry.get("outcome") == "Accepted",
                      "said": requests.describe(entry), "notes": []}
        else:
            code, said = await in_thread(lambda: forks.fork(
                conn, source_name=name, name=args.new_name, at=args.at, reason=args.reason,
                timeout=args.timeout))
            answer = {"word": word, "accepted": code == requests.ACCEPTED,
                      "said": f"run {args.new_name}: {said}", "notes": []}
    except (flags.Refused, requests.BadInput) as refused:
        answer = {"word": word, "accepted": False, "said": f"not sent: {refused}", "notes": []}
    except requests.Failure as failure:
        answer = {"word": word, "accepted": False, "said": str(failure), "notes": []}
    answer["id"] = secrets.token_hex(6)
    if request.headers.get("HX-Request"):
        return ui.page(request, "answer.html", generation=ui.store.generation, answer=answer)
    return await run_page(request, answer=answer)


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
    ui = _ui(request)
    stream = web.StreamResponse(headers={**SAFE, "Content-Type": "text/event-stream"})
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
    except (ConnectionResetError, asyncio.CancelledError):
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
    answer.headers.update(SAFE)
    if request.query.get("v") == _ui(request).versions.get(name):  # its digest: never stale
        answer.headers["Cache-Control"] = "private, max-age=86400, immutable"
    return answer


def application(ui: App) -> web.Application:
    made = web.Application(middlewares=[guard], client_max_size=MAX_FORM_BYTES)
    made[APP] = ui
    made.add_routes([
        web.get("/", root), web.get("/runs", runs_page), web.get("/waiting", waiting_page),
        web.get("/runs/{namespace}/{name}", run_page),
        web.get("/slots/{namespace}/{name}", slot_page),
        web.post("/slots/{namespace}/{name}/{word}", send),
        web.post("/runs/{namespace}/{name}/{word}", send_run),
        web.get("/live", live), web.get("/static/{file}", static)])
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
    made: list[App] = []  # the App, once made: a change before it has no page to tell
    store = Store(conn, sources(namespaces),
                  on_change=lambda changes: made[0].changed(changes) if made else None)
    made.append(App(store=store, refused=refused, port=args.port))
    ui = made[0]
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
