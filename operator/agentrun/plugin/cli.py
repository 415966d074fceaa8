"""kubectl agentrun: see runs, a run's slots and attempts, and send a slot a command.

Every command writes its annotations with one merge patch (a fresh request id; the run
from the slot; never the actor, which admission stamps), then waits for the operator's
ledger entry with that id and prints it. Exit codes: 0 accepted, 1 rejected (by the
operator, or refused by admission or RBAC), 2 usage or bad input, 3 timeout or API error.

Every line of text it writes, to stdout or stderr (views, ledger entries, errors, usage
errors), goes out through :func:`agentrun.plugin.output.write`, which escapes it
(:mod:`agentrun.plugin.terminal`): nothing anyone wrote into a slot, a run or an error
reaches the terminal as a control.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from agentrun.api import bounds, distributions
from agentrun.api.runs import FORK_AT_CHARS, FORK_AT_PATTERN
from agentrun.core.commands import registry
from agentrun.plugin import budgets, client, flags, forks, output, requests, shows
from agentrun.plugin.flags import NAME, TIMEOUT
from agentrun.plugin.requests import Object

# (The docstring above is the --help text. The reads, status, history, list and -w, are
# agentrun.plugin.shows; the flags, bounded as they are parsed, agentrun.plugin.flags.)
COMMANDS = sorted(registry.COMMANDS, key=lambda spec: spec.shown)  # as the help lists them
EXAMPLES = "\n".join((
    "examples:",
    "  kubectl agentrun list -A                            # every run you may see",
    "  kubectl agentrun status study                       # the run's tree: slots, attempts",
    "  kubectl agentrun status study -w                    # again on each change (Ctrl-C)",
    "  kubectl agentrun history study-research-1a2b3c4d    # attempts, ledger and journal",
    "  kubectl agentrun ui --port 8421                     # the web UI, on 127.0.0.1",
    *(f"  {line}" for spec in COMMANDS for line in spec.examples),
    "  kubectl agentrun fork study --name study-b --at draft:outline --reason 'try another "
    "outline'",
    "  kubectl agentrun -n team-a --context alice status study -o json | jq .slots",
    "",
    "exit codes: 0 accepted, 1 rejected (the message says why), 2 usage or bad input,",
    "3 timeout or API error; -w ends with 0 at Ctrl-C or --timeout",
    ""))


def parser(*, cls: type[flags.Parser] = flags.Parser) -> argparse.ArgumentParser:
    """The command line; ``cls``: its parsers' class (the UI's raises instead of exiting)."""
    top = cls(
        prog="kubectl agentrun", description=__doc__, epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    distributions.add_version_option(top, distribution=distributions.OPERATOR)
    flags.common(top, top=True)
    sub = top.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help_: str, *, target: str = "SLOT") -> argparse.ArgumentParser:
        made = sub.add_parser(name, help=help_, description=help_, epilog=EXAMPLES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
        made.add_argument("name", metavar=target, type=NAME)
        flags.common(made, top=False)
        if target == "SLOT" and name != "history":
            made.add_argument("--timeout", type=flags.timeout, default=TIMEOUT[2],
                              help="seconds to wait for the operator's decision (default 60)")
        return made

    listed = sub.add_parser(
        "list", help="the runs: state, slots succeeded/total, age, tenant", epilog=EXAMPLES,
        description="the runs of the namespace (-A: of every one): state, slots "
                    "succeeded/total, age,\ntenant; -o wide adds the workflow, claim policy, "
                    "creator, fork source and conditions",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.common(listed, top=False)
    listed.add_argument("-A", "--all-namespaces", action="store_true",
                        help="the runs of every namespace you may list (a NAMESPACE column)")
    listed.add_argument("-l", "--selector", type=flags.SELECTOR, metavar="SELECTOR",
                        help="a label selector, as kubectl's -l (e.g. team=a,tier!=test)")
    flags.watch_flags(listed)
    status = command("status", "a run's tree: slots and attempts (state, class, spec, pod, "
                               "lease)", target="RUN")
    flags.watch_flags(status)
    history = command("history", "a slot's attempts, command ledger (who, why, which spec) "
                                 "and journal (steps, sizes, effects: newest first)")
    least, most, default = flags.JOURNAL_LIMIT
    history.add_argument("--limit", type=flags.limit, default=default,
                         help=f"journal entries to show, newest first (default {default}, "
                              f"at most {most}; at least {least})")
    history.add_argument("--record", type=flags.record, metavar="KEY",
                         help="print the newest record KEY's payload, byte for byte, its "
                              "sha256 checked (an effect's payload waiting for approval: "
                              "<key>.payload)")
    fork = command("fork", "a new run that starts from this run's journal: every node's "
                           "committed steps copied, or (--at) a node's steps before one step "
                           "and nothing of the nodes after it; the source may then go",
                   target="RUN")
    fork.add_argument("--name", dest="new_name", required=True, type=NAME,
                      help="the new run's name")
    fork.add_argument("--at", metavar="NODE:STEP", type=flags.bounded_text(
        "--at", chars=FORK_AT_CHARS, pattern=FORK_AT_PATTERN),
        help="run NODE again from STEP (its steps before STEP copied), the nodes after it "
             "from their start")
    fork.add_argument("--reason", required=True, type=flags.bounded_text(
        "--reason", max_bytes=bounds.REASON_BYTES, pattern=r"(?s).*\S.*"), help="why")
    fork.add_argument("--timeout", type=flags.timeout, default=TIMEOUT[2],
                      help="seconds to wait for the operator to copy (default 60)")
    budget = command("budget", "raise a run's budget (the run's creator, or someone granted "
                               "override): its slots stopped at it go on",
                     target="RUN")
    budget.add_argument("--add", metavar="TOKENS", type=flags.bounded_text("--add", chars=16),
                        help="model tokens to add (input and output together)")
    budget.add_argument("--add-cost", metavar="AMOUNT", type=flags.bounded_text(
        "--add-cost", chars=16), help="an amount of the run's currency to add, e.g. 2.50")
    budget.add_argument("--reason", required=True, type=flags.bounded_text(
        "--reason", max_bytes=bounds.REASON_BYTES, pattern=r"(?s).*\S.*"), help="why")
    budget.add_argument("--timeout", type=flags.timeout, default=TIMEOUT[2],
                        help="seconds to wait for the operator's decision (default 60)")
    ui = sub.add_parser(
        "ui", help="a web UI on 127.0.0.1: runs, slots, attempts, and the commands as forms",
        description="serve a web UI on 127.0.0.1 as you (your kubeconfig, your rights): "
                    "the runs of every namespace you may list, else of the context's and "
                    "those given with -n; it prints its URL (with its token) and opens "
                    "nothing; Ctrl-C ends it", epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    flags.common(ui, top=False, namespaces=True)
    ui.add_argument("--port", type=flags.port, default=flags.UI_PORT,
                    help=f"the port on 127.0.0.1 (default {flags.UI_PORT}; 0: any free one)")
    for spec in COMMANDS:
        made = command(spec.word, spec.help)
        for field in spec.flags:
            flags.field_flag(made, field)
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


def send(args: argparse.Namespace, conn: client.Connection) -> int:
    """Write the command, wait for its ledger entry and print it (:func:`deliver`)."""
    document = deliver(args, conn, say=lambda lines: output.write(lines, file=sys.stderr))
    output.emit(args.output, document, [requests.describe(document["entry"])])
    return int(document["exitCode"])


def deliver(args: argparse.Namespace, conn: client.Connection, *,
            say: Callable[[list[str]], None]) -> Object:
    """Write the command, wait for its ledger entry; re-send once if stamping was unproven.

    What it did on the way (a value sent by reference, a field filled in from the slot, a
    re-send) is told to ``say``; the answer is the document ``-o json`` prints: the slot,
    its namespace, the ledger entry and the exit code it means. The web UI sends through
    it too, so a form and the command line write the same annotations.
    """
    kind = KINDS[args.command]
    slot = client.get(conn, "slots", args.name)
    run = str((slot.get("spec") or {}).get("run") or "")
    request = requests.Request(kind=kind, request_id=requests.new_request_id(),
                               fields=fields(args, run=run, slot=slot))
    try:
        large = requests.by_reference(kind, request.fields)
        requests.check(kind, {k: v for k, v in request.fields.items() if k not in large})
    except requests.BadInput as error:
        raise requests.Failure(str(error), code=requests.USAGE) from None
    written: list[str] = []
    if large and requests.pending_id(kind, slot) is not None:  # nothing written for naught
        raise requests.Failure(f"slot {args.name} already has a {kind} command waiting; wait "
                               "for its outcome (history) and retry", code=requests.USAGE)
    for name, value in large.items():  # written first, then the command that names it
        configmap = client.put_value(conn, name=f"agentrun-{args.command}-"
                                     f"{request.request_id}", value=value)
        written.append(configmap)
        fields_ = {k: v for k, v in request.fields.items() if k != name}
        fields_[f"{name}_from"] = requests.reference(configmap, value)
        request = requests.Request(kind=kind, request_id=request.request_id, fields=fields_)
        say([f"{name.replace('_', '-')} of {len(value.encode())} bytes sent by "
             f"reference: ConfigMap {configmap}"])
    for field in registry.BY_WORD[args.command].takes:  # what was filled in, said
        if field.fill is not None and getattr(args, field.name, None) is None and (
                field.name in request.fields):
            say([f"{field.flag} {request.fields[field.name]} (as the slot shows it now)"])
    try:
        client.send(conn, args.name, request)
        entry = client.wait_entry(conn, args.name, request, timeout=args.timeout)
    except requests.Failure:
        client.delete_values(conn, written)  # the command never landed: nothing names them
        raise
    first = None
    if requests.unproven(entry):
        first = entry
        request = requests.Request(kind=kind, request_id=requests.resend_id(request.request_id),
                                   fields=request.fields)
        say([requests.describe(entry), f"re-sending once as {request.request_id}"])
        client.send(conn, args.name, request)
        entry = client.wait_entry(conn, args.name, request, timeout=args.timeout)
    code = requests.exit_code(entry)
    if written and entry.get("outcome") != "Accepted":
        client.delete_values(conn, written)  # a rejected answer's: the next one writes anew
    return {"slot": args.name, "namespace": conn.namespace, "entry": entry,
            "exitCode": code, **({"firstAttempt": first} if first else {}),
            **({"configMaps": written} if written else {})}


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        conn = client.connect(kubeconfig=args.kubeconfig, context=args.context,
                              namespace=args.namespace)
        if args.command == "ui":  # loaded only here: aiohttp and Jinja2 are the UI's
            from agentrun.plugin.ui import server
            return server.main(args, conn)
        if args.command in ("status", "history", "list"):
            return shows.show(args, conn)
        if args.command == "budget":
            try:
                entry = budgets.send(conn, args.name, add=args.add, add_cost=args.add_cost,
                                     reason=args.reason, timeout=args.timeout)
            except requests.BadInput as error:
                raise requests.Failure(str(error), code=requests.USAGE) from None
            code = requests.exit_code(entry)
            output.emit(args.output, {"run": args.name, "namespace": conn.namespace,
                                      "entry": entry, "exitCode": code},
                        [requests.describe(entry)])
            return code
        if args.command == "fork":
            code, said = forks.fork(conn, source_name=args.name, name=args.new_name,
                                    at=args.at, reason=args.reason, timeout=args.timeout)
            output.emit(args.output, {"run": args.new_name, "namespace": conn.namespace,
                                      "exitCode": code, "message": said},
                        [f"run {args.new_name}: {said}"])
            return code
        return send(args, conn)
    except requests.Failure as failure:
        output.error(args.output, str(failure), failure.code)
        return failure.code
    except KeyboardInterrupt:  # Ctrl-C: the end a watch waits for; else the shell's 130
        return requests.ACCEPTED if getattr(args, "watch", False) else 130


if __name__ == "__main__":
    sys.exit(main())
