"""What a person types, bounded where it is parsed: the plugin's argparse types and flags.

Every value is checked as argparse reads it, against the bound the operator (or the API
server) holds it to, so a mistake is a usage error (exit 2) that names the flag and the
bound, before anything is read or written. The messages quote at most 40 characters of
what was typed, and :class:`Parser` escapes them (:mod:`agentrun.plugin.terminal`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn

from agentrun.api import bounds, records
from agentrun.core.commands.spec import Bound, Field
from agentrun.plugin import output, requests, terminal

TIMEOUT = (1.0, 3600.0, 60.0)  # --timeout: least, most, default seconds
# list/status -w --timeout: least, most seconds (no default: until Ctrl-C)
WATCH_TIMEOUT = (1.0, 7 * 86400.0)
JOURNAL_LIMIT = (1, 1000, 50)  # history --limit: least, most (the history API's), default
NAME_CHARS = 253
CONTEXT_CHARS = 1024  # a kubeconfig context's name (no bound of its own; cloud ones are long)
PATH_CHARS = 4096  # --kubeconfig: Linux's PATH_MAX
# -l/--selector: kubectl's label selector syntax, printable ASCII (the API server parses
# it: a malformed one is its 400, which the plugin reports as bad input)
SELECTOR_CHARS = 1024
SELECTOR_PATTERN = r"[ -~]*[!-~][ -~]*"


class Parser(argparse.ArgumentParser):
    """argparse, with its error messages (which quote what was typed) escaped."""

    def error(self, message: str) -> NoReturn:
        super().error(terminal.escape(message))


class Refused(ValueError):
    """What the command line would refuse, from a form: argparse's message, unescaped (the
    web UI escapes what it shows as HTML)."""


class FormParser(Parser):
    """The command line's parser for the web UI's forms: a value the command line refuses
    raises :class:`Refused` with the same message, instead of printing usage and exiting, so
    a form is checked exactly as the flags are."""

    def error(self, message: str) -> NoReturn:
        raise Refused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise Refused(message or f"exit {status}")


def bounded_text(what: str, *, chars: int | None = None, max_bytes: int | None = None,
                 pattern: str | None = None) -> Callable[[str], str]:
    """An argparse type: ``what`` within its bound (api/bounds.py), else a clear error."""
    def parse(text: str) -> str:
        why = bounds.problem(key=what, value=text, chars=chars, max_bytes=max_bytes,
                             pattern=pattern)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return text
    return parse


def seconds(least: float, most: float) -> Callable[[str], float]:
    """An argparse type: ``--timeout`` in seconds, within [least, most]."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"--timeout must be seconds, not {text[:40]!r}") from None
        if not least <= value <= most:  # also refuses nan
            raise argparse.ArgumentTypeError(
                f"--timeout must be between {least:g} and {most:g} seconds, not {text[:40]}")
        return value
    return parse


timeout = seconds(*TIMEOUT[:2])


UI_PORT = 8421


def port(text: str) -> int:
    """``ui --port``: 0 (any free port) to 65535."""
    if not text.isascii() or not text.isdigit() or len(text) > 5 or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"--port must be a number from 0 to 65535, not {text!r}")
    return int(text)


def limit(text: str) -> int:
    """An argparse type: ``history --limit``, a whole number within JOURNAL_LIMIT."""
    least, most, _ = JOURNAL_LIMIT
    if not text.isdigit() or not least <= int(text) <= most:
        raise argparse.ArgumentTypeError(
            f"--limit must be a whole number from {least} to {most}, not {text[:40]!r}")
    return int(text)


NAME = bounded_text("the name", chars=NAME_CHARS, pattern=bounds.RUN_PATTERN)
SELECTOR = bounded_text("--selector", chars=SELECTOR_CHARS, pattern=SELECTOR_PATTERN)


def record(text: str) -> str:
    """``--record``: a record's key, as the journal names it (its own check)."""
    try:
        return records.check_key(text)
    except records.RecordError as error:
        raise argparse.ArgumentTypeError(f"--record must be a record's key: {error}") from None


def field_text(what: str, bound: Bound) -> Callable[[str], str]:
    """An argparse type: a field's value within its bound, as the operator parses it."""
    def parse(text: str) -> str:
        why = requests.problem(what, text, bound)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return text
    return parse


def file_text(what: str, bound: Bound) -> Callable[[str], str]:
    """An argparse type: the path of a file whose text (trailing whitespace dropped) is a
    field's value within its bound; no more of it is read than the bound allows."""
    checked = field_text(what, bound)
    most = (bound.chars if bound.in_bytes else 4 * bound.chars) + 4096  # trailing blanks

    def parse(path: str) -> str:
        try:
            with open(path, "rb") as found:
                data = found.read(most + 1)
        except OSError as error:
            raise argparse.ArgumentTypeError(f"{what}: cannot read {path!r}: "
                                             f"{error.strerror}") from None
        if len(data) > most:
            raise argparse.ArgumentTypeError(f"{what}: {path!r} holds more than {most} bytes; "
                                             f"its value may be at most {bound.chars}")
        try:
            return checked(data.decode().rstrip())
        except UnicodeDecodeError:
            raise argparse.ArgumentTypeError(f"{what}: {path!r} is not UTF-8 text") from None
    return parse


def field_flag(made: argparse.ArgumentParser, field: Field) -> None:
    """The flag that fills ``field``: its choices, or its bound checked as it is typed (or
    as its file is read, for a field with a ``file_flag``: one of the two is given)."""
    assert field.flag is not None
    if field.choices:
        made.add_argument(field.flag, dest=field.name, required=field.required,
                          choices=field.choices, help=field.help, metavar=field.metavar)
        return
    where: argparse.ArgumentParser | argparse._MutuallyExclusiveGroup = made
    if field.file_flag is not None:
        where = made.add_mutually_exclusive_group(required=field.required)
        where.add_argument(field.file_flag, dest=field.name, metavar="FILE",
                           type=file_text(field.file_flag, field.by_reference or field.bound),
                           help=f"read {field.flag} from this file" + (
                               f" (up to {field.by_reference.chars} bytes: more than "
                               f"{field.flag} holds is sent by reference, in a ConfigMap)"
                               if field.by_reference else ""))
    where.add_argument(field.flag, dest=field.name, type=field_text(field.flag, field.bound),
                       required=field.required and field.file_flag is None,
                       help=field.help, metavar=field.metavar)


def common(parser: argparse.ArgumentParser, *, top: bool, namespaces: bool = False) -> None:
    """The flags every command takes, before or after it (``-n x status`` or ``status -n x``).

    On a subcommand their default is "not given", so it never overwrites the top's value.
    ``namespaces``: ``-n`` may be repeated (``ui``: each namespace to show).
    """
    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS
    if namespaces:
        parser.add_argument("-n", "--namespace", dest="namespaces", action="append",
                            type=NAME, metavar="NAMESPACE", default=[],
                            help="a namespace to show (repeatable; default: the context's), "
                                 "when you may not list runs in every one")
    else:
        parser.add_argument("-n", "--namespace", type=NAME, default=default(None),
                            help="the namespace (default: the context's, else 'default')")
    parser.add_argument("--context", default=default(None), type=bounded_text(
        "--context", chars=CONTEXT_CHARS, pattern=r"[^\x00-\x1f\x7f]+"),
        help="the kubeconfig context to use")
    parser.add_argument("--kubeconfig", default=default(None), type=bounded_text(
        "--kubeconfig", chars=PATH_CHARS, pattern=r"[^\x00]+"),
        help="path to the kubeconfig file")
    parser.add_argument("-o", "--output", choices=output.FORMATS, default=default("text"),
                        help="text (default); wide: list's extra columns (elsewhere as "
                             "text); json or yaml, for scripts")


def watch_flags(parser: argparse.ArgumentParser) -> None:
    """``-w`` and the ``--timeout`` that bounds it (list and status)."""
    parser.add_argument("-w", "--watch", action="store_true",
                        help="after printing, print again whenever it changes (a watch on "
                             "the API server); Ctrl-C ends it (exit 0)")
    parser.add_argument("--timeout", type=seconds(*WATCH_TIMEOUT), default=None,
                        help="with -w: stop watching after this many seconds (exit 0; "
                             "default: until Ctrl-C)")
