"""How what the plugin shows leaves it: ``-o text`` (the default), ``wide``, ``json``, ``yaml``.

Text goes out through :func:`write`, the one way text leaves the plugin, which escapes
each line (:mod:`agentrun.plugin.terminal`): nothing anyone wrote into a slot, a run or an
error reaches the terminal as a control. JSON and YAML are exact instead, and ASCII:
``json.dumps`` writes every non-ASCII or control character as ``\\uNNNN``, and YAML
(the safe dumper, ``allow_unicode=False``) double-quotes every string that is not plain
printable text and escapes the character (``\\n``, ``\\e``, ``\\u202E``), so the
document parses back to the very value, a value stays on its line, and no byte of it is
a control either. ``wide`` is text with more columns where a table has
them (``list``), and text elsewhere, as ``kubectl get -o wide`` is for kinds without.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

import yaml

from agentrun.plugin import terminal

FORMATS = ("text", "wide", "json", "yaml")
STRUCTURED = ("json", "yaml")


def write(lines: Sequence[str], *, file: TextIO | None = None) -> None:
    """Print ``lines`` as text, each escaped: the one way text leaves the plugin."""
    print("\n".join(terminal.escape(line) for line in lines), file=file or sys.stdout)


class _Dumper(yaml.SafeDumper):
    """YAML's safe dumper, with every string that is not one plain printable line written
    double-quoted, its line breaks escaped (``\\n``): left to itself, PyYAML writes a
    value with a newline over several lines, where a reader sees a forged key."""


def _string(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style = None if text.isprintable() else '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _string)


def dump(document: Any, *, form: str) -> str:
    """``document`` as JSON (indented, keys sorted) or YAML, ASCII either way."""
    if form == "json":
        return json.dumps(document, indent=2, sort_keys=True) + "\n"
    return yaml.dump(document, Dumper=_Dumper, sort_keys=True, default_flow_style=False,
                     allow_unicode=False, width=float("inf"))  # unfolded, as kubectl's


def emit(form: str, document: Any, lines: Sequence[str], *, again: bool = False) -> None:
    """``document`` in the structured ``form``, else ``lines`` as text. ``again``: one
    more document of a watch (YAML's documents are separated by ``---``, JSON's follow
    one another, as ``kubectl get -w -o json`` prints them)."""
    if form in STRUCTURED:
        text = dump(document, form=form)
        sys.stdout.write(("---\n" if again and form == "yaml" else "") + text)
        sys.stdout.flush()  # a watch's reader (jq, a pipe) sees each change as it comes
    else:
        write(lines)
        sys.stdout.flush()


def error(form: str, message: str, code: int) -> None:
    """A failure: on stderr as text always; as a document on stdout too, for a script
    that parses what ``-o json``/``-o yaml`` print."""
    if form in STRUCTURED:
        sys.stdout.write(dump({"error": message, "exitCode": code}, form=form))
    write([f"error: {message}"], file=sys.stderr)
