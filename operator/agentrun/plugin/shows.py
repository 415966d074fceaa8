"""The commands that only read: ``status`` (a run's tree), ``history`` (a slot's attempts,
ledger and journal, or one record's bytes) and ``list`` (the runs), and ``-w`` on
``status`` and ``list`` (:mod:`.watching`).

Each prints through :func:`agentrun.plugin.output.emit`: text (escaped), or the same
view exact as ``-o json``/``-o yaml``. Exit 0, or as :class:`~.requests.Failure` says.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from agentrun.api import names
from agentrun.plugin import client, lists, output, requests, views, watching
from agentrun.plugin.requests import Object


def show(args: argparse.Namespace, conn: client.Connection) -> int:
    if args.command == "history":
        return history(args, conn) if args.record is None else record(args, conn)
    if args.command == "list":
        return listing(args, conn)
    return status(args, conn)


def record(args: argparse.Namespace, conn: client.Connection) -> int:
    """One record's payload, its digest checked (and an approval's: whose bytes)."""
    found = client.journal(conn, args.name, limit=1, record=args.record)
    if "error" in found:  # refused: 1; no such slot or record: 2; else 3
        status = found.get("status")
        raise requests.Failure(str(found["error"]), code=requests.REJECTED if status == 403
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
    output.emit(args.output, shown, views.render_record(shown))
    return requests.ACCEPTED if shown["verified"] else requests.FAILED


def history(args: argparse.Namespace, conn: client.Connection) -> int:
    slot = client.get(conn, "slots", args.name)
    view = views.history(slot, now=datetime.now(UTC),
                         journal=client.journal(conn, args.name, limit=args.limit))
    output.emit(args.output, view, views.render_history(view))
    return requests.ACCEPTED


def _tree(conn: client.Connection, run: Object, slots: Sequence[Object]) -> Object:
    live = {a.get("lease") for s in slots for a in (s.get("status") or {}).get("attempts") or []
            if not a.get("outcome")}
    return views.tree(run, slots, now=datetime.now(UTC),
                      leases=client.leases(conn, live - {None}))


def _until(args: argparse.Namespace) -> float | None:
    """The watch's monotonic deadline: ``--timeout`` from now, or none (until Ctrl-C)."""
    return None if args.timeout is None else time.monotonic() + args.timeout


def status(args: argparse.Namespace, conn: client.Connection) -> int:
    """The run's tree; with ``-w``, again whenever the run or one of its slots changes
    (and what it shows differs), until Ctrl-C, ``--timeout``, or the run is deleted."""
    run = client.get(conn, "agentruns", args.name)  # not there: exit 2, said as for a read
    if not args.watch:
        tree = _tree(conn, run, client.slots_of(conn, args.name))
        output.emit(args.output, tree, views.render_tree(tree))
        return requests.ACCEPTED
    sources = (watching.Source(path=client.resource_path("agentruns", conn.namespace),
                               query={"fieldSelector": f"metadata.name={args.name}"}),
               watching.Source(path=client.resource_path("slots", conn.namespace),
                               query={"labelSelector": f"{names.RUN_LABEL}={args.name}"}))
    last: list[Object] = []  # the tree printed last

    def again(mirrors: Sequence[watching.Mirror], _events: Sequence[watching.Event]) -> bool:
        runs, slots = mirrors
        tree = _tree(conn, next(iter(runs.values())), list(slots.values())) if runs else {
            "run": args.name, "namespace": conn.namespace, "deleted": True}
        if last and last[0] == tree:
            return True
        if last and args.output not in output.STRUCTURED:
            output.write([""])  # one tree from the next
        output.emit(args.output, tree, views.render_tree(tree) if runs else [
            f"run {conn.namespace}/{args.name} was deleted"], again=bool(last))
        last[:] = [tree]
        return bool(runs)
    watching.watch(conn, sources, show=again, until=_until(args))
    return requests.ACCEPTED


def _nothing(conn: client.Connection, namespace: str | None) -> None:
    """No runs: said on stderr as kubectl says it, or that the namespace does not exist."""
    if namespace is not None and client.namespace_missing(conn):
        raise requests.Failure(f"namespace {namespace!r} does not exist (check -n and "
                               "--context)", code=requests.USAGE)
    output.write(["No runs found" + (f" in namespace {namespace}." if namespace else ".")],
                 file=sys.stderr)


def listing(args: argparse.Namespace, conn: client.Connection) -> int:
    """The runs of the namespace (``-A``: of every namespace), ``-l`` selecting them; with
    ``-w``, then a row (or a document) for each run that changes, until Ctrl-C or
    ``--timeout``, as ``kubectl get -w`` prints them."""
    namespace = None if args.all_namespaces else conn.namespace
    path = (f"/apis/{names.GROUP}/{names.VERSION}/agentruns" if namespace is None
            else client.resource_path("agentruns", namespace))
    query = {"labelSelector": args.selector} if args.selector else {}
    cols = lists.columns(all_namespaces=namespace is None, wide=args.output == "wide")
    structured = args.output in output.STRUCTURED
    if not args.watch:
        runs, _ = client.list_all(conn, path, query=query)
        shown = lists.rows(runs, now=datetime.now(UTC))
        if not shown and not structured:
            _nothing(conn, namespace)
            return requests.ACCEPTED
        output.emit(args.output, lists.document(shown, namespace=namespace),
                    lists.render(shown, cols))
        return requests.ACCEPTED
    sizes: list[int] = []
    printed: dict[watching.Key, Object] = {}  # each run's row as printed last, its age out

    def rows(found: Sequence[Object]) -> None:
        for row in found:
            key = (str(row["namespace"]), str(row["name"]))
            same = {k: v for k, v in row.items() if k != "age"}
            if printed.get(key) == same:
                continue
            printed[key] = same
            output.emit(args.output, row, lists.render([row], cols, header=False,
                                                       sizes=sizes), again=True)

    def again(mirrors: Sequence[watching.Mirror], events: Sequence[watching.Event]) -> bool:
        now = datetime.now(UTC)
        if not events:  # the first look: the header, then every run
            shown = lists.rows(list(mirrors[0].values()), now=now)
            sizes[:] = lists.widths(shown, cols)
            if not structured:
                output.write(lists.render([], cols, sizes=sizes))
            rows(shown)
            return True
        for event in events:
            if event.kind == watching.LISTED:  # those gone meanwhile, then the rest
                here = {watching.key(run) for run in event.objects}
                rows([{**printed[k], "age": views.NONE, "state": lists.DELETED}
                      for k in list(printed) if k not in here])
                rows(lists.rows(list(event.objects), now=now))
            else:
                rows([lists.row(run, now=now, deleted=event.kind == "DELETED")
                      for run in event.objects])
        return True
    watching.watch(conn, (watching.Source(path=path, query=query),), show=again,
                   until=_until(args))
    return requests.ACCEPTED
