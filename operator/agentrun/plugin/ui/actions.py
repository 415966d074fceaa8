"""The web UI's forms: each a command of the plugin, checked by its parser and sent by its
own senders on the person's connection (docs/design/web-ui.md, "Commands from forms").
"""

from __future__ import annotations

import argparse
import secrets
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from agentrun.plugin import budgets, cli, flags, forks, requests
from agentrun.plugin.ui import handlers
from agentrun.plugin.ui.app import name_in, of

MAX_FORM_BYTES = 1 << 20  # a command's form: its longest value sent by reference fits


def form_argv(word: str, slot: str, form: dict[str, str],
              commands: Sequence[dict[str, Any]], *, spill: Path) -> list[str]:
    """The command line a form stands for: the command, the slot, each field given as
    ``--flag=value`` (a value may start with ``-``). A value longer than its flag takes
    (in the flag's own unit: characters, or UTF-8 bytes), for a field the plugin also reads
    from a file, goes through that file (written in ``spill``), so it is sent by reference
    exactly as the plugin sends it."""
    [command] = [c for c in commands if c["word"] == word]
    argv = [word, slot]
    for field in command["fields"]:
        value = form.get(field["name"], "")
        if value == "":
            continue
        size = len(value.encode()) if field["in_bytes"] else len(value)
        if field["file_flag"] and size > field["short"]:
            path = spill / field["name"]
            path.write_text(value, encoding="utf-8")
            argv.append(f"{field['file_flag']}={path}")
        else:
            argv.append(f"{field['flag']}={value}")
    return argv


async def _parsed(request: web.Request, forms: Sequence[dict[str, Any]]
                  ) -> tuple[str, str, str, argparse.Namespace | flags.Refused]:
    """The namespace, the object's name, the command's word, and the form parsed as the
    plugin's command line (or why the parser refused it). The form's size is bounded by
    the application (``client_max_size``: :data:`MAX_FORM_BYTES`)."""
    namespace, name = name_in(request, "namespace"), name_in(request, "name")
    word = request.match_info["word"]
    if word not in {c["word"] for c in forms}:
        raise web.HTTPNotFound(text=f"no command {word!r}")
    form = {key: str(value) for key, value in (await request.post()).items()}
    try:
        with tempfile.TemporaryDirectory(prefix="agentrun-ui-") as spill:  # 0700, ours
            return namespace, name, word, cli.parser(cls=flags.FormParser).parse_args(
                form_argv(word, name, form, forms, spill=Path(spill)))
    except flags.Refused as refused:
        return namespace, name, word, refused


def _answer(word: str, *, accepted: bool, said: str, notes: list[str]) -> dict[str, Any]:
    # the id: which answer a page shows (a test waits on it)
    return {"word": word, "accepted": accepted, "said": said, "notes": notes,
            "id": secrets.token_hex(6)}


async def send(request: web.Request) -> web.StreamResponse:
    """A form's command: checked as the plugin's flags are, sent as the plugin sends it
    (on the person's connection), its ledger entry or refusal shown verbatim."""
    ui = of(request)
    namespace, _, word, args = await _parsed(request, ui.commands)
    notes: list[str] = []
    if isinstance(args, flags.Refused):
        answer = _answer(word, accepted=False, said=f"not sent: {args}", notes=notes)
    else:
        parsed, conn = args, ui.store.connection(namespace)
        try:
            document = await ui.call(lambda: cli.deliver(parsed, conn, say=notes.extend))
            entry = document["entry"]
            answer = _answer(word, accepted=entry.get("outcome") == "Accepted",
                             said=requests.describe(entry), notes=notes)
        except requests.Failure as failure:
            answer = _answer(word, accepted=False, said=str(failure), notes=notes)
    if request.headers.get("HX-Request"):
        return ui.page(request, "answer.html", generation=ui.store.generation, answer=answer)
    return await handlers.slot_page(request, answer=answer)


async def send_run(request: web.Request) -> web.StreamResponse:
    """A run's command (budget, fork) from its form, as :func:`send` does a slot's."""
    ui = of(request)
    namespace, name, word, args = await _parsed(request, ui.run_commands)
    conn = ui.store.connection(namespace)
    try:
        if isinstance(args, flags.Refused):
            raise args
        parsed = args
        if word == "budget":
            entry = await ui.call(lambda: budgets.send(
                conn, name, add=parsed.add, add_cost=parsed.add_cost, reason=parsed.reason,
                timeout=parsed.timeout))
            answer = _answer(word, accepted=entry.get("outcome") == "Accepted",
                             said=requests.describe(entry), notes=[])
        else:
            code, said = await ui.call(lambda: forks.fork(
                conn, source_name=name, name=parsed.new_name, at=parsed.at,
                reason=parsed.reason, timeout=parsed.timeout))
            answer = _answer(word, accepted=code == requests.ACCEPTED,
                             said=f"run {parsed.new_name}: {said}", notes=[])
    except (flags.Refused, requests.BadInput) as refused:
        answer = _answer(word, accepted=False, said=f"not sent: {refused}", notes=[])
    except requests.Failure as failure:
        answer = _answer(word, accepted=False, said=str(failure), notes=[])
    if request.headers.get("HX-Request"):
        return ui.page(request, "answer.html", generation=ui.store.generation, answer=answer)
    return await handlers.run_page(request, answer=answer)
