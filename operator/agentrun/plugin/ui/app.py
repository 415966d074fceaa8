"""The web UI's state (:class:`App`: the store, the live streams, the templates, the
token) and what every part of it shares: the security headers, the static files, how a
request names its App and its objects.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import secrets
import threading
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, TypeVar

import jinja2
from aiohttp import web

from agentrun.api import names
from agentrun.plugin import cli, client
from agentrun.plugin.ui import pages
from agentrun.plugin.ui.store import Change, Store

COOKIE = "agentrun-ui-{port}"  # per port: a browser keeps cookies by host, not by port
STATIC = {"htmx.min.js": "text/javascript", "sse.min.js": "text/javascript",
          "ui.js": "text/javascript", "ui.css": "text/css"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
SAFE = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer", "Cache-Control": "no-store"}
T = TypeVar("T")
CALLS = 8  # blocking calls (the journal's GET, a form's command) running at once


class Hub:
    """The open live streams, each with what it shows; told of changes in the loop."""

    def __init__(self) -> None:
        self.streams: dict[asyncio.Queue[int], Callable[[Change], bool]] = {}

    def publish(self, changes: Sequence[Change], generation: int) -> None:
        for queue, shows in self.streams.items():
            if (not changes or any(shows(change) for change in changes)) and queue.empty():
                queue.put_nowait(generation)


def may_list(conn: client.Connection) -> Callable[[str | None], str | None]:
    """Whether the person may list and watch runs and slots (what every page is built
    from) in a namespace, or cluster-wide (``None``), by a SelfSubjectAccessReview each:
    None if so, else why not."""
    def review(namespace: str | None) -> str | None:
        for plural, verb in itertools.product(("agentruns", "slots"), ("list", "watch")):
            body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                    "spec": {"resourceAttributes": {
                        "group": names.GROUP, "resource": plural, "verb": verb,
                        **({"namespace": namespace} if namespace else {})}}}
            try:
                answer = conn.rest.request(
                    "POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
                    body=body)
            except client.ERRORS as error:
                raise client.failure("asking the API server what you may list", error) from None
            if not (answer.get("status") or {}).get("allowed"):
                where = f"namespace {namespace}" if namespace else "every namespace"
                what = "runs" if plural == "agentruns" else plural
                return f"you may not {verb} {what} in {where}"
        return None
    return review


def templates() -> jinja2.Environment:
    """The pages' templates, everything in them escaped (all shown was written by someone:
    reasons, messages, names)."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader("agentrun.plugin.ui", "templates"),
        autoescape=True, trim_blocks=True,  # an absent optional field: blank
        lstrip_blocks=True)


class App:
    """The UI's state: the store, the live streams, the templates, the secret."""

    def __init__(self, *, store: Store, refused: dict[str, str], port: int) -> None:
        self.store = store
        self.refused = refused
        self.port = port
        self.token = secrets.token_urlsafe(32)
        self.hub = Hub()
        self.templates = templates()
        self.calls = asyncio.Semaphore(CALLS)  # blocking calls at once (call)
        self.commands = pages.commands()
        self.run_commands = pages.parser_forms(cli.parser(), words=("budget", "fork"))
        # Each static file's URL carries its digest (?v=), so the browser may keep it.
        self.versions = {name: hashlib.sha256(resources.files("agentrun.plugin.ui").joinpath(
            "static", name).read_bytes()).hexdigest()[:16] for name in STATIC}
        self.loop: asyncio.AbstractEventLoop | None = None  # the server's, once it runs

    @property
    def origins(self) -> set[str]:
        return {f"http://127.0.0.1:{self.port}", f"http://localhost:{self.port}"}

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    async def call(self, work: Callable[[], T]) -> T:
        """A blocking call (the journal's GET, a form's command): :func:`in_thread`, at
        most :data:`CALLS` of the UI's at once."""
        return await in_thread(work, calls=self.calls)

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


def of(request: web.Request) -> App:
    return request.app[APP]


def name_in(request: web.Request, key: str) -> str:
    value = request.match_info[key]
    if len(value) > 253 or not pages.NAME_PATTERN.fullmatch(value):
        raise web.HTTPBadRequest(text=f"{key} must be a Kubernetes name")
    return value


async def in_thread(work: Callable[[], T], *, calls: asyncio.Semaphore) -> T:
    """``work`` in a daemon thread: a blocking call the loop awaits, which never keeps the
    process from ending at Ctrl-C (``asyncio.to_thread``'s executor is waited for). At most
    as many run at once as ``calls`` allows (:data:`CALLS`: the others wait their turn); a
    thread holds its place until it ends, even when its handler was cancelled (the browser
    left), so reloads cannot start more."""
    loop = asyncio.get_running_loop()
    await calls.acquire()
    done: asyncio.Future[T] = loop.create_future()

    def settle(result: T | None, error: BaseException | None) -> None:
        calls.release()
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
    try:
        threading.Thread(target=run, daemon=True, name="agentrun-ui-call").start()
    except BaseException:
        calls.release()
        raise
    return await done
