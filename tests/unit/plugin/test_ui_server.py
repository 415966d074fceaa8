"""The web UI's server on a real loopback socket (aiohttp), with an empty store: who may
use it (the token and its cookie, the Host, the Origin of a POST), the headers that keep
the browser to its own origin, a form the plugin would refuse refused without a write,
the live stream's first word, and the static files served only from the list."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from agentrun.plugin import cli, client, flags
from agentrun.plugin.ui import actions, assets, pages, server
from agentrun.plugin.ui import app as uiapp
from agentrun.plugin.ui.store import Change, Store

SLOT = "/slots/a/study-1"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest_asyncio.fixture(loop_scope="function")  # the tests' own loop serves it
async def ui() -> AsyncIterator[uiapp.App]:
    conn = client.Connection(rest=None, namespace="a")  # type: ignore[arg-type]
    store = Store(conn, [], on_change=lambda changes: None)  # follows nothing: no API
    store.start()
    made = uiapp.App(store=store, refused={}, port=free_port())
    listening = asyncio.Event()  # serve() says its URL once it listens
    task = asyncio.create_task(server.serve(made, port=made.port,
                                            ready=lambda url: listening.set()))
    await asyncio.wait_for(listening.wait(), timeout=10)
    yield made
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


def session(**kwargs: object) -> aiohttp.ClientSession:
    """A browser's: it keeps the cookies of an address like 127.0.0.1 too."""
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True), **kwargs)  # type: ignore[arg-type]


def cookie(ui: uiapp.App) -> str:
    return uiapp.COOKIE.format(port=ui.port)


def base(ui: uiapp.App) -> str:
    return f"http://127.0.0.1:{ui.port}"


async def test_only_the_token_lets_a_browser_in(ui: uiapp.App) -> None:
    async with session() as anonymous:
        async with anonymous.get(f"{base(ui)}/runs") as answer:
            assert answer.status == 401 and "kubectl agentrun ui" in await answer.text()
        for wrong in ("wrong", "%C3%A9", ui.token + "x"):  # any text: 401, never a 500
            async with anonymous.get(f"{base(ui)}/?token={wrong}",
                                     allow_redirects=False) as answer:
                assert answer.status == 401, wrong
    async with session(cookies={cookie(ui): "é"}) as forged, forged.get(
            f"{base(ui)}/runs") as answer:
        assert answer.status == 401
    async with session() as person:
        async with person.get(ui.url(), allow_redirects=False) as answer:
            assert answer.status == 303 and answer.headers["Location"] == "/runs"
            set_cookie = answer.headers["Set-Cookie"]
            assert set_cookie.startswith(f"agentrun-ui-{ui.port}=")  # two UIs: two cookies
            assert "HttpOnly" in set_cookie and "SameSite=Strict" in set_cookie
        async with person.get(f"{base(ui)}/runs") as answer:
            assert answer.status == 200 and "No runs." in await answer.text()
            headers = answer.headers
            assert "default-src 'none'" in headers["Content-Security-Policy"]
            assert "frame-ancestors 'none'" in headers["Content-Security-Policy"]
            assert headers["X-Content-Type-Options"] == "nosniff"
            assert headers["Cache-Control"] == "no-store"


async def test_another_host_or_origin_is_refused(ui: uiapp.App) -> None:
    cookies = {cookie(ui): ui.token}
    async with session(cookies=cookies) as person:
        async with person.get(f"{base(ui)}/runs",
                              headers={"Host": f"rebound.example:{ui.port}"}) as answer:
            assert answer.status == 421
            assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
        for origin in ("http://evil.example", "null", None):
            headers = {"Origin": origin} if origin else {}
            async with person.post(f"{base(ui)}{SLOT}/hold", data={"reason": "x"},
                                   headers=headers) as answer:
                assert answer.status == 403, origin
                assert answer.headers["Cache-Control"] == "no-store"


async def test_a_form_the_plugin_refuses_is_not_sent(ui: uiapp.App) -> None:
    """The store is empty and the connection has no API: a refusal here wrote nothing."""
    cookies = {cookie(ui): ui.token}
    headers = {"Origin": base(ui), "HX-Request": "true"}
    async with session(cookies=cookies) as person:
        async with person.post(f"{base(ui)}{SLOT}/reassign", headers=headers,
                               data={"worker_class": "GPU", "reason": "r"}) as answer:
            text = await answer.text()
            assert answer.status == 200
            assert "not sent: argument --class: --class must match" in text
            assert 'class="answer refused"' in text
        async with person.post(f"{base(ui)}{SLOT}/hold", headers=headers, data={}) as answer:
            assert "the following arguments are required: --reason" in await answer.text()
        async with person.post(f"{base(ui)}{SLOT}/hold", headers=headers, data={
                "reason": "x" * actions.MAX_FORM_BYTES}) as answer:
            assert answer.status == 413  # bounded before it is read
            assert "default-src 'none'" in answer.headers["Content-Security-Policy"]
        async with person.post(f"{base(ui)}{SLOT}/launch", headers=headers,
                               data={}) as answer:
            assert answer.status == 404
            assert answer.headers["Cache-Control"] == "no-store"
        async with person.post(f"{base(ui)}/slots/a/Not_A_Name/hold", headers=headers,
                               data={"reason": "r"}) as answer:
            assert answer.status == 400


async def test_a_page_of_what_is_not_there_is_404(ui: uiapp.App) -> None:
    async with session(cookies={cookie(ui): ui.token}) as person:
        for path in ("/runs/a/nothing", "/slots/a/nothing", "/static/assets.py",
                     "/static/LICENSE.htmx", "/static/%2E%2E%2Fserver.py"):
            async with person.get(f"{base(ui)}{path}") as answer:
                assert answer.status == 404, path
        for name in uiapp.STATIC:
            async with person.get(f"{base(ui)}/static/{name}") as answer:
                assert answer.status == 200 and len(await answer.read()) > 0
                assert answer.headers["Cache-Control"] == "no-store"  # not its digest's URL
                assert answer.headers["X-Content-Type-Options"] == "nosniff"
            async with person.get(f"{base(ui)}/static/{name}?v={ui.versions[name]}") as answer:
                assert "immutable" in answer.headers["Cache-Control"]  # the handler's kept
                assert "default-src 'none'" in answer.headers["Content-Security-Policy"]


class Streams(dict[Any, Any]):
    """The hub's streams, telling when one is removed (its handler ended)."""

    def __init__(self) -> None:
        super().__init__()
        self.left = asyncio.Event()

    def pop(self, *args: Any) -> Any:
        self.left.set()
        return super().pop(*args)


async def test_the_live_stream_says_changed_at_once_when_behind(ui: uiapp.App) -> None:
    ui.hub.streams = Streams()
    async with session(cookies={cookie(ui): ui.token}) as person:
        async with person.get(f"{base(ui)}/live?view=runs&since=0") as answer:
            assert answer.headers["Content-Type"] == "text/event-stream"
            assert answer.headers["Cache-Control"] == "no-store"  # a stream's headers too
            assert await answer.content.readline() == b"retry: 2000\n"
            await answer.content.readline()
            assert await answer.content.readline() == f"id: {ui.store.generation}\n".encode()
            assert await answer.content.readline() == b"event: changed\n"
        await asyncio.wait_for(ui.hub.streams.left.wait(), timeout=10)  # type: ignore[attr-defined]
        assert ui.hub.streams == {}  # the browser went away: its stream ended at once
        async with person.get(f"{base(ui)}/live?view=run&namespace=a&name=r&since="
                              f"{ui.store.generation}") as answer:
            await answer.content.readline()
            await answer.content.readline()
            [queue] = list(ui.hub.streams)
            ui.hub.publish([Change(plural="slots", namespace="a", name="s", run="other")], 5)
            assert queue.empty()  # another run's slot: not this page's
            ui.hub.publish([Change(plural="slots", namespace="a", name="s", run="r")], 6)
            assert await answer.content.readline() == b"id: 6\n"


def test_the_vendored_assets_are_the_recorded_ones() -> None:
    assert assets.problems() == []


async def test_a_stream_resumed_says_changed_only_when_it_missed_one(ui: uiapp.App) -> None:
    """The browser's Last-Event-ID: behind, it is told at once; current, it waits;
    anything else (not a count of changes) counts as behind."""
    async with session(cookies={cookie(ui): ui.token}) as person:
        for seen, told in (("0", True), (str(ui.store.generation), False), ("²", True),
                           ("9" * 30, True)):
            async with person.get(f"{base(ui)}/live?view=runs",
                                  headers={"Last-Event-ID": seen}) as answer:
                assert answer.status == 200
                await answer.content.readline()
                await answer.content.readline()
                if not told:  # the next thing it says is a change made after it opened
                    ui.hub.publish([], ui.store.generation + 7)
                wanted = ui.store.generation + (0 if told else 7)
                assert await answer.content.readline() == f"id: {wanted}\n".encode(), seen


def test_a_form_is_the_command_line_it_stands_for(tmp_path: Path) -> None:
    """Each field as --flag=value (a value may start with '-'); an answer longer than
    --value takes goes through --file, so it is sent by reference as the plugin sends it."""
    commands = pages.commands()
    argv = actions.form_argv("hold", "s", {"reason": "-h --really"}, commands, spill=tmp_path)
    args = cli.parser(cls=flags.FormParser).parse_args(argv)
    assert (args.command, args.name, args.reason) == ("hold", "s", "-h --really")
    long = '"' + "x" * 4000 + '"'
    argv = actions.form_argv("answer", "s", {"question_key": "q", "value": long,
                                            "reason": "r"}, commands, spill=tmp_path)
    assert f"--file={tmp_path / 'value'}" in argv
    assert cli.parser(cls=flags.FormParser).parse_args(argv).value == long
    # --value's bound is in bytes: 300 Japanese characters (900 bytes) go by file too
    wide = '"' + "答" * 300 + '"'
    argv = actions.form_argv("answer", "s", {"question_key": "q", "value": wide,
                                            "reason": "r"}, commands, spill=tmp_path)
    assert f"--file={tmp_path / 'value'}" in argv
    assert cli.parser(cls=flags.FormParser).parse_args(argv).value == wide
    with pytest.raises(flags.Refused, match="--reason"):
        cli.parser(cls=flags.FormParser).parse_args(
            actions.form_argv("hold", "s", {}, commands, spill=tmp_path))


async def test_a_cancelled_call_holds_its_place_until_its_thread_ends() -> None:
    """The browser left (its handler cancelled): the thread still runs, so its place is
    kept and the next call waits for it, however many reloads come."""
    calls, started, gate = asyncio.Semaphore(1), threading.Event(), threading.Event()

    def slow() -> int:
        started.set()
        gate.wait(10)
        return 1
    first = asyncio.ensure_future(uiapp.in_thread(slow, calls=calls))
    assert await asyncio.to_thread(started.wait, 10)
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert calls.locked()  # the thread runs on: its place is held
    second = asyncio.ensure_future(uiapp.in_thread(lambda: 2, calls=calls))
    gate.set()
    assert await asyncio.wait_for(second, timeout=10) == 2
    assert not calls.locked()
