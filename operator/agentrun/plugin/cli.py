"""kubectl agentrun: see a run's slots and attempts, and send a slot a command.

Every command writes its annotations with one merge patch (a fresh request id; the run
from the slot; never the actor, which admission stamps), then waits for the operator's
ledger entry with that id and prints it. Exit codes: 0 accepted, 1 rejected (by the
operator, or refused by admission or RBAC), 2 usage or bad input, 3 timeout or API error.

Every line of text it writes, to stdout or stderr (views, ledger entries, errors, usage
errors), goes out through :func:`write`, which escapes it (:mod:`agentrun.plugin.terminal`):
nothing anyone wrote into a slot, a run or an error reaches the terminal as a control.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import NoReturn, TextIO

from agentrun.api import bounds, names, records
from agentrun.api.runs import FORK_AT_CHARS, FORK_AT_PATTERN
from agentrun.core.commands import registry
from agentrun.core.commands.spec import Bound, Field
from agentrun.plugin import budgets, client, forks, requests, terminal, views
from agentrun.plugin.requests import Object

TIMEOUT = (1.0, 3600.0, 60.0)  # --timeout: least, most, default seconds
JOURNAL_LIMIT = (1, 1000, 50)  # history --limit: least, most (the history API's), default
NAME_CHARS = 253

COMMANDS = sorted(registry.COMMANDS, key=lambda spec: spec.shown)  # as the help lists them
EXAMPLES = "\n".join((
    "examples:",
    "  kubectl agentrun status study                       # the run's tree: slots, attempts",
    "  kubectl agentrun history study-research-1a2b3c4d    # attempts, ledger and journal",
    *(f"  {line}" for spec in COMMANDS for line in spec.examples),
    "  kubectl agentrun fork study --name study-b --at draft:outline --reason 'try another "
    "outline'",
    "  kubectl agentrun -n team-a --context alice status study -o json | jq .slots",
    "",
    "exit codes: 0 accepted, 1 rejected (the message says why), 2 usage or bad input,",
    "3 timeout or API error",
    ""))


def write(lines: Sequence[str], *, file: TextIO | None = None) -> None:
    """Print ``lines`` as text, each escaped: the one way text leaves the plugin."""
    print("\n".join(terminal.escape(line) for line in lines), file=file or sys.stdout)


class Parser(argparse.ArgumentParser):
    """argparse, with its error messages (which quote what was typed) escaped."""

    def error(self, message: str) -> NoReturn:
        super().error(terminal.escape(message))


def _bounded_text(what: str, *, chars: int | None = None, max_bytes: int | None = None,
                  pattern: str | None = None) -> Callable[[str], str]:
    """An argparse type: ``what`` within its bound (api/bounds.py), else a clear error."""
    def parse(text: str) -> str:
        why = bounds.problem(key=what, value=text, chars=chars, max_bytes=max_bytes,
                             pattern=pattern)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return text
    return parse


def _timeout(text: str) -> float:
    least, most, _ = TIMEOUT
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--timeout must be seconds, not {text[:40]!r}") from None
    if not least <= value <= most:  # also refuses nan
        raise argparse.ArgumentTypeError(
            f"--timeout must be between {least:g} and {most:g} seconds, not {text[:40]}")
    return value


def _limit(text: str) -> int:
    least, most, _ = JOURNAL_LIMIT
    if not text.isdigit() or not least <= int(text) <= most:
        raise argparse.ArgumentTypeError(
            f"--limit must be a whole number from {least} to {most}, not {text[:40]!r}")
    return int(text)


NAME = _bounded_text("the name", chars=NAME_CHARS, pattern=bounds.RUN_PATTERN)


def _record(text: str) -> str:
    """``--record``: a record's key, as the journal names it (its own check)."""
    try:
        return records.check_key(text)
    except records.RecordError as error:
        raise argparse.ArgumentTypeError(f"--record must be a record's key: {error}") from None


def _field_text(what: str, bound: Bound) -> Callable[[str], str]:
    """An argparse type: a field's value within its bound, as the operator parses it."""
    def parse(text: str) -> str:
        why = requests.problem(what, text, bound)
        if why is not None:
            raise argparse.ArgumentTypeError(why)
        return text
    return parse


def _file_text(what: str, bound: Bound) -> Callable[[str], str]:
    """An argparse type: the path of a file whose text (trailing whitespace dropped) is a
    field's value within its bound; no more of it is read than the bound allows."""
    checked = _field_text(what, bound)
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


def _flag(made: argparse.ArgumentParser, field: Field) -> None:
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
                           type=_file_text(field.file_flag, field.by_reference or field.bound),
                           help=f"read {field.flag} from this file" + (
                               f" (up to {field.by_reference.chars} bytes: more than "
                               f"{field.flag} holds is sent by reference, in a ConfigMap)"
                               if field.by_reference else ""))
    where.add_argument(field.flag, dest=field.name, type=_field_text(field.flag, field.bound),
                       required=field.required and field.file_flag is None,
                       help=field.help, metavar=field.metavar)


def _common(parser: argparse.ArgumentParser, *, top: bool) -> None:
    """The flags every command takes, before or after it (``-n x status`` or ``status -n x``).

    On a subcommand their default is "not given", so it never overwrites the top's value.
    """
    def default(value: object) -> object:
        return value if top else argparse.SUPPRESS
    parser.add_argument("-n", "--namespace", type=NAME, default=default(None),
                        help="the namespace (default: the context's, else 'default')")
    parser.add_argument("--context", default=default(None),
                        help="the kubeconfig context to use")
    parser.add_argument("--kubeconfig", default=default(None),
                        help="path to the kubeconfig file")
    parser.add_argument("-o", "--output", choices=("text", "json"), default=default("text"),
                        help="text (default) or json, for scripts")


def parser() -> argparse.ArgumentParser:
    top = Parser(
        prog="kubectl agentrun", description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    _common(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, *, target: str = "SLOT") -> argparse.ArgumentParser:
        made = sub.add_parser(name, help=help_, description=help_, epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        made.add_argument("name", metavar=target, type=NAME)
        _common(made, top=False)
        if target == "SLOT" and name != "history":
            made.add_argument("--timeout", type=_timeout, default=TIMEOUT[2],
                              help="seconds to wait for the operator's decision (default 60)")
        return made

    command("status", "a run's tree: slots and attempts (state, class, spec, pod, lease)",
            target="RUN")
    history = command("history", "a slot's attempts, command ledger (who, why, which spec) "
                                 "and journal (steps, sizes, effects: newest first)")
    history.add_argument("--limit", type=_limit, default=JOURNAL_LIMIT[2],
                         help=f"journal entries to show, newest first (default "
                              f"{JOURNAL_LIMIT[2]}, at most {JOURNAL_LIMIT[1]})")
    history.add_argument("--record", type=_record, metavar="KEY",
                         help="print the newest record KEY's payload, byte for byte, its "
                              "sha256 checked (an effect's payload waiting for approval: "
                              "<key>.payload)")
    fork = command("fork", "a new run that starts from this run's journal: every node's "
                           "committed steps copied, or (--at) a node's steps before one step "
                           "and nothing of the nodes after it; the source may then go",
                   target="RUN")
    fork.add_argument("--name", dest="new_name", required=True, type=NAME,
                      help="the new run's name")
    fork.add_argument("--at", metavar="NODE:STEP", type=_bounded_text(
        "--at", chars=FORK_AT_CHARS, pattern=FORK_AT_PATTERN),
        help="run NODE again from STEP (its steps before STEP copied), the nodes after it "
             "from their start")
    fork.add_argument("--reason", required=True, type=_bounded_text(
        "--reason", max_bytes=bounds.REASON_BYTES, pattern=r"(?s).*\S.*"), help="why")
    fork.add_argument("--timeout", type=_timeout, default=TIMEOUT[2],
                      help="seconds to wait for the operator to copy (default 60)")
    budget = command("budget", "raise a run's budget (the run's creator, or someone granted "
                               "override): its slots stopped at it go on",
                     target="RUN")
    budget.add_argument("--add", metavar="TOKENS", type=_bounded_text("--add", chars=16),
                        help="model tokens to add (input and output together)")
    budget.add_argument("--add-cost", metavar="AMOUNT", type=_bounded_text(
        "--add-cost", chars=16), help="an amount of the run's currency to add, e.g. 2.50")
    budget.add_argument("--reason", required=True, type=_bounded_text(
        "--reason", max_bytes=bounds.REASON_BYTES, pattern=r"(?s).*\S.*"), help="why")
    budget.add_argument("--timeout", type=_timeout, default=TIMEOUT[2],
                        help="seconds to wait for the operator's decision (default 60)")
    for spec in COMMANDS:
        made = command(spec.word, spec.help)
        for field in spec.flags:
            _flag(made, field)
    return top


KINDS = {spec.word: spec.kind for spec in registry.COMMANDS}


def fields(args: argparse.Namespace, *, run: str,
           slot: Object | None = None) -> dict[str, str]:
    """The command's fields from its flags; the run is the slot's own (``spec.run``); a
    field with a ``fill`` not given is filled from ``slot`` (the slot read)."""
    takes = registry.BY_WORD[args.command].takes
    found = {f.name: getattr(args, f.name, None) if f.flag else (
        run if f.name == "run" else None) for f in takes}
    given = {name: value for name, value in found.items() if value is not None}
    for field in takes:
        if field.fill is not None and field.name not in given and slot is not None:
            filled = field.fill(slot, given)
            if filled is not None:
                given[field.name] = filled
    return given


def _print(args: argparse.Namespace, document: Object, lines: Sequence[str]) -> None:
    if args.output == "json":
        print(json.dumps(document, indent=2, sort_keys=True))  # ASCII: every \uNNNN escaped
    else:
        write(lines)


def show(args: argparse.Namespace, conn: client.Connection) -> int:
    now = datetime.now(UTC)
    if args.command == "history" and args.record is not None:
        found = client.journal(conn, args.name, limit=1, record=args.record)
        if "error" in found:  # refused: 1; no such slot or record: 2; else 3
            status = found.get("status")
            raise client.Failure(str(found["error"]), code=requests.REJECTED if status == 403
                                 else requests.USAGE if status in (404, 410)
                                 else requests.FAILED)
        waiting = None
        if args.record.endswith(names.PAYLOAD_SUFFIX):  # an effect's payload: its approval
            key = args.record.removesuffix(names.PAYLOAD_SUFFIX)
            entries = (client.get(conn, "slots", args.name).get("status") or {}).get(
                "questions") or []
            waiting = next((str(q.get("digest")) for q in reversed(entries)
                            if q.get("key") == key and q.get("approvers")
                            and q.get("state") == "Pending"), None)
        shown = views.record(found.get("record") or {}, approval=waiting)
        _print(args, shown, views.render_record(shown))
        return requests.ACCEPTED if shown["verified"] else requests.FAILED
    if args.command == "history":
        slot = client.get(conn, "slots", args.name)
        view = views.history(slot, now=now,
                             journal=client.journal(conn, args.name, limit=args.limit))
        _print(args, view, views.render_history(view))
        return requests.ACCEPTED
    run = client.get(conn, "agentruns", args.name)
    slots = client.slots_of(conn, args.name)
    live = {a.get("lease") for s in slots for a in (s.get("status") or {}).get("attempts") or []
            if not a.get("outcome")}
    tree = views.tree(run, slots, now=now, leases=client.leases(conn, live - {None}))
    _print(args, tree, views.render_tree(tree))
    return requests.ACCEPTED


def send(args: argparse.Namespace, conn: client.Connection) -> int:
    """Write the command, wait for its ledger entry; re-send once if stamping was unproven."""
    kind = KINDS[args.command]
    slot = client.get(conn, "slots", args.name)
    run = str((slot.get("spec") or {}).get("run") or "")
    request = requests.Request(kind=kind, request_id=requests.new_request_id(),
                               fields=fields(args, run=run, slot=slot))
    try:
        large = requests.by_reference(kind, request.fields)
        requests.check(kind, {k: v for k, v in request.fields.items() if k not in large})
    except requests.BadInput as error:
        raise client.Failure(str(error), code=requests.USAGE) from None
    written: list[str] = []
    if large and requests.pending_id(kind, slot) is not None:  # nothing written for naught
        raise client.Failure(f"slot {args.name} already has a {kind} command waiting; wait "
                             "for its outcome (history) and retry", code=requests.USAGE)
    for name, value in large.items():  # written first, then the command that names it
        configmap = client.put_value(conn, name=f"agentrun-{args.command}-"
                                     f"{request.request_id}", value=value)
        written.append(configmap)
        fields_ = {k: v for k, v in request.fields.items() if k != name}
        fields_[f"{name}_from"] = requests.reference(configmap, value)
        request = requests.Request(kind=kind, request_id=request.request_id, fields=fields_)
        write([f"{name.replace('_', '-')} of {len(value.encode())} bytes sent by reference: "
               f"ConfigMap {configmap}"], file=sys.stderr)
    for field in registry.BY_WORD[args.command].takes:  # what was filled in, said
        if field.fill is not None and getattr(args, field.name, None) is None and (
                field.name in request.fields):
            write([f"{field.flag} {request.fields[field.name]} (as the slot shows it now)"],
                  file=sys.stderr)
    try:
        client.send(conn, args.name, request)
        entry = client.wait_entry(conn, args.name, request, timeout=args.timeout)
    except client.Failure:
        client.delete_values(conn, written)  # the command never landed: nothing names them
        raise
    first = None
    if requests.unproven(entry):
        first = entry
        request = requests.Request(kind=kind, request_id=requests.resend_id(request.request_id),
                                   fields=request.fields)
        write([requests.describe(entry), f"re-sending once as {request.request_id}"],
              file=sys.stderr)
        client.send(conn, args.name, request)
        entry = client.wait_entry(conn, args.name, request, timeout=args.timeout)
    code = requests.exit_code(entry)
    if written and entry.get("outcome") != "Accepted":
        client.delete_values(conn, written)  # a rejected answer's: the next one writes anew
    document = {"slot": args.name, "namespace": conn.namespace, "entry": entry,
                "exitCode": code, **({"firstAttempt": first} if first else {}),
                **({"configMaps": written} if written else {})}
    _print(args, document, [requests.describe(entry)])
    return code


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        conn = client.connect(kubeconfig=args.kubeconfig, context=args.context,
                              namespace=args.namespace)
        if args.command in ("status", "history"):
            return show(args, conn)
        if args.command == "budget":
            try:
                entry = budgets.send(conn, args.name, add=args.add, add_cost=args.add_cost,
                                     reason=args.reason, timeout=args.timeout)
            except requests.BadInput as error:
                raise client.Failure(str(error), code=requests.USAGE) from None
            code = requests.exit_code(entry)
            _print(args, {"run": args.name, "namespace": conn.namespace, "entry": entry,
                          "exitCode": code}, [requests.describe(entry)])
            return code
        if args.command == "fork":
            code, said = forks.fork(conn, source_name=args.name, name=args.new_name,
                                    at=args.at, reason=args.reason, timeout=args.timeout)
            _print(args, {"run": args.new_name, "namespace": conn.namespace, "exitCode": code,
                          "message": said}, [f"run {args.new_name}: {said}"])
            return code
        return send(args, conn)
    except client.Failure as failure:
        if args.output == "json":
            print(json.dumps({"error": str(failure), "exitCode": failure.code}))
        write([f"error: {failure}"], file=sys.stderr)
        return failure.code


if __name__ == "__main__":
    sys.exit(main())
