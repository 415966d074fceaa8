"""What each page of the web UI shows, pure: plain dicts built from the API's objects and a
clock, rendered by the templates (``templates/``). The plugin's own views give the rows
(:mod:`agentrun.plugin.lists` for runs, :mod:`agentrun.plugin.views` for a run's tree and a
slot's history), so the UI and ``kubectl agentrun`` never disagree on a state.

Terms:
- *filters*: what the runs page is narrowed to (state, tenant, namespace, the newest age);
  each is checked where it is parsed (:func:`filters`), a bad one said on the page.
- *graph*: a run's workflow as its slots and their ``dependsOn``: each node placed in a
  column by its depth (its longest chain of dependencies), drawn as SVG by the template.
- *timeline*: a slot's attempts as bars from start to end (or now) on one time axis, with
  the ledger's commands as marks on it.
- *waiting*: what waits for a person: a question or approval pending, a slot held, or one
  in RetryWait in a Manual run (a person must reassign or claim it).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from agentrun.api import bounds
from agentrun.core.commands import registry
from agentrun.plugin import lists, views
from agentrun.plugin.requests import Object

STATES = ("Pending", "Running", "Succeeded", "Failed")
AGE_PATTERN = re.compile(r"([1-9][0-9]{0,4})([mhd])")  # --max-age as kubectl's: 30m, 6h, 7d
AGE_UNITS = {"m": 60, "h": 3600, "d": 86400}
FILTER_CHARS = 63  # a tenant or namespace filter: a label value or a namespace name
NAME_PATTERN = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
TENANT_PATTERN = re.compile(bounds.TENANT_PATTERN)
COLUMN_WIDTH, ROW_HEIGHT, NODE_WIDTH, NODE_HEIGHT = 190, 64, 160, 40


@dataclass(frozen=True, kw_only=True)
class Filters:
    state: str | None = None
    tenant: str | None = None
    namespace: str | None = None
    max_age: str | None = None  # as typed: 30m, 6h, 7d


def filters(query: Mapping[str, str]) -> tuple[Filters, list[str]]:
    """The runs page's filters from its query, and what was refused (each said, then ignored)."""
    problems: list[str] = []
    state = query.get("state") or None
    if state is not None and state not in STATES:
        problems.append(f"state must be one of {', '.join(STATES)}")
        state = None
    texts: dict[str, str | None] = {}
    for key, pattern, what in (
            ("tenant", TENANT_PATTERN, "letters, digits, '-', '_' and '.'"),
            ("namespace", NAME_PATTERN, "lower-case letters, digits, '-' and '.'")):
        value = query.get(key) or None
        if value is not None and (len(value) > FILTER_CHARS or not pattern.fullmatch(value)):
            problems.append(f"{key} must be a name of at most {FILTER_CHARS} characters "
                            f"({what})")
            value = None
        texts[key] = value
    age = query.get("age") or None
    if age is not None and not AGE_PATTERN.fullmatch(age):
        problems.append("age must be a number and a unit: 30m, 6h or 7d")
        age = None
    return Filters(state=state, tenant=texts["tenant"], namespace=texts["namespace"],
                   max_age=age), problems


def _seconds(max_age: str) -> int:
    matched = AGE_PATTERN.fullmatch(max_age)
    assert matched is not None
    return int(matched.group(1)) * AGE_UNITS[matched.group(2)]


def runs(found: Sequence[Object], *, chosen: Filters, now: datetime) -> Object:
    """The runs page: the counts by state (of the runs the other filters leave) and the rows
    the filters choose, newest first."""
    rows = lists.rows(list(found), now=now)
    created = {(str((r.get("metadata") or {}).get("namespace")),
                str((r.get("metadata") or {}).get("name"))):
               views.parse_time((r.get("metadata") or {}).get("creationTimestamp"))
               for r in found}
    oldest = None if chosen.max_age is None else now - timedelta(seconds=_seconds(chosen.max_age))

    def kept(row: Object) -> bool:
        when = created.get((str(row["namespace"]), str(row["name"])))
        return ((chosen.tenant is None or row.get("tenant") == chosen.tenant)
                and (chosen.namespace is None or row.get("namespace") == chosen.namespace)
                and (oldest is None or (when is not None and when >= oldest)))
    narrowed = [row for row in rows if kept(row)]
    counts = {state: sum(1 for row in narrowed if row["state"] == state) for state in STATES}
    shown = [row for row in narrowed if chosen.state is None or row["state"] == chosen.state]
    shown.sort(key=lambda row: (created.get((str(row["namespace"]), str(row["name"])))
                                or datetime.min.replace(tzinfo=now.tzinfo)), reverse=True)
    return {"rows": shown, "counts": counts, "total": len(narrowed),
            "tenants": sorted({str(r["tenant"]) for r in rows if r.get("tenant")
                               and r["tenant"] != views.NONE}),
            "namespaces": sorted({str(r["namespace"]) for r in rows})}


def graph(slots: Sequence[Object]) -> Object:
    """The workflow's nodes in columns by depth, and its edges, in SVG coordinates."""
    by_node = {str((s.get("spec") or {}).get("node") or "?"): s for s in slots}
    needs = {node: [str(d) for d in (s.get("spec") or {}).get("dependsOn") or []
                    if str(d) in by_node] for node, s in by_node.items()}
    depth: dict[str, int] = {}

    def depth_of(node: str, seen: frozenset[str]) -> int:
        if node not in depth:
            if node in seen:  # a cycle (admission refuses one): drawn flat, never a hang
                return 0
            depth[node] = 1 + max((depth_of(d, seen | {node}) for d in needs[node]),
                                  default=-1)
        return depth[node]
    for node in sorted(by_node):
        depth_of(node, frozenset())
    columns: dict[int, list[str]] = {}
    for node in sorted(by_node, key=lambda n: (depth[n], n)):
        columns.setdefault(depth[node], []).append(node)
    place = {node: (column * COLUMN_WIDTH + 10, row * ROW_HEIGHT + 10)
             for column, nodes in columns.items() for row, node in enumerate(nodes)}
    nodes = [{"node": node, "slot": views._name(by_node[node]),
              "state": str((by_node[node].get("status") or {}).get("state") or "Pending"),
              "x": place[node][0], "y": place[node][1]} for node in sorted(by_node)]
    edges = [{"from": dep, "to": node,
              "x1": place[dep][0] + NODE_WIDTH, "y1": place[dep][1] + NODE_HEIGHT // 2,
              "x2": place[node][0], "y2": place[node][1] + NODE_HEIGHT // 2}
             for node in sorted(by_node) for dep in needs[node]]
    width = (max(columns, default=0) + 1) * COLUMN_WIDTH + 20
    height = max((len(nodes_) for nodes_ in columns.values()), default=1) * ROW_HEIGHT + 20
    return {"nodes": nodes, "edges": edges, "width": width, "height": height,
            "nodeWidth": NODE_WIDTH, "nodeHeight": NODE_HEIGHT}


def run(found: Object, slots: Sequence[Object], events: Sequence[Object], *,
        now: datetime) -> Object:
    """A run's page: the plugin's tree, the graph, the pins, every condition, its Events."""
    status = found.get("status") or {}
    pinned = status.get("pinned") or {}
    return {"tree": views.tree(found, slots, now=now), "graph": graph(slots),
            "spec": found.get("spec") or {},
            "pins": [{"what": what, "source": pin.get("source"), "revision": pin.get("revision"),
                      "snapshot": pin.get("snapshot")}
                     for what in ("package", "workflow", "bindings")
                     if isinstance(pin := pinned.get(what), dict)],
            "journal": pinned.get("journal"),
            "conditions": [c for c in status.get("conditions") or [] if isinstance(c, dict)],
            "events": [{"time": e.get("lastTimestamp") or e.get("eventTime") or views.NONE,
                        "type": e.get("type"), "reason": e.get("reason"),
                        "message": e.get("message"), "count": e.get("count") or 1}
                       for e in events]}


def timeline(slot: Object, *, now: datetime) -> Object:
    """A slot's attempts as bars, its commands as marks and each attempt's end as a tick, in
    percent of one time axis. An attempt *ends* when the operator finds its pod and its
    lease both terminal (``endedAt``); its reason says which (a pod killed on its node ends
    its attempt only once the lease it stopped renewing has expired), so the tick is where
    the lease expired, released or went missing, in the operator's words."""
    status = slot.get("status") or {}
    attempts = [a for a in status.get("attempts") or [] if isinstance(a, dict)]
    commands = [c for c in status.get("commands") or [] if isinstance(c, dict)]
    times = [t for t in (views.parse_time(a.get(k)) for a in attempts
                         for k in ("startedAt", "endedAt")) if t is not None]
    times += [t for t in (views.parse_time(c.get("time")) for c in commands) if t is not None]
    start = min(times, default=now)
    span = max((now - start).total_seconds(), 1.0)

    def at(when: datetime | None) -> float:
        return 100.0 if when is None else round(
            min(max((when - start).total_seconds() / span, 0.0), 1.0) * 100, 2)
    bars = []
    for attempt in attempts:
        began = views.parse_time(attempt.get("startedAt"))
        ended = views.parse_time(attempt.get("endedAt"))
        left = at(began) if began else 0.0
        bars.append({"number": attempt.get("number"),
                     "outcome": attempt.get("outcome") or "Running",
                     "reason": attempt.get("reason") or "",
                     "owner": attempt.get("ownerActor") or views.NONE,
                     "class": attempt.get("workerClass") or views.NONE,
                     "started": attempt.get("startedAt") or views.NONE,
                     "ended": attempt.get("endedAt") or views.NONE,
                     "left": left, "width": max(at(ended) - left, 0.5)})
    marks = [{"at": at(views.parse_time(c.get("time"))), "kind": c.get("kind"),
              "actor": c.get("actor") or views.NONE, "outcome": c.get("outcome"),
              "predicate": c.get("predicate") or "", "reason": c.get("reason") or "",
              "time": c.get("time") or views.NONE} for c in commands]
    ends = [{"at": at(ended), "row": row, "number": a.get("number"),
             "outcome": a.get("outcome") or views.NONE, "reason": a.get("reason") or "",
             "time": a.get("endedAt")} for row, a in enumerate(attempts)
            if (ended := views.parse_time(a.get("endedAt"))) is not None]
    return {"bars": bars, "marks": marks, "ends": ends, "start": start.isoformat(),
            "end": now.isoformat()}


def steps(journal: Object | None) -> list[Object]:
    """The journal's entries by attempt, oldest attempt first (each attempt's entries newest
    first), and what each attempt did with the keys before it: *ran* (the keys it
    recorded), *repeated* (those an earlier attempt had recorded too: done again), and
    *skipped* (those earlier attempts recorded and it did not: taken from the recoverable
    prefix). Read from the entries shown (the history API's newest), so a truncated journal
    says less of the earliest attempts."""
    if not journal or "entries" not in journal:
        return []
    grouped: dict[int, list[Object]] = {}
    for entry in journal["entries"]:
        attempt = entry.get("attempt")
        if isinstance(attempt, int) and not isinstance(attempt, bool):
            grouped.setdefault(attempt, []).append(entry)
    found, before = [], set[str]()
    for attempt in sorted(grouped):
        mine = {str(e.get("key")) for e in grouped[attempt]}
        found.append({"attempt": attempt, "entries": grouped[attempt],
                      "commits": (journal.get("commits") or {}).get(str(attempt)),
                      "ran": sorted(mine), "repeated": sorted(mine & before),
                      "skipped": sorted(before - mine)})
        before |= mine
    return found


def slot(found: Object, *, journal: Object | None, now: datetime) -> Object:
    """A slot's page: the plugin's history, the timeline, the steps, the pinned LaunchSpec,
    and the commands a person may send (the registry's, each with its flags)."""
    history = views.history(found, now=now, journal=journal)
    status = found.get("status") or {}
    return {"history": history, "timeline": timeline(found, now=now),
            "steps": steps(history.get("journal")),
            "effects": [e for e in status.get("effects") or [] if isinstance(e, dict)],
            "launchSpec": status.get("launchSpec"), "spec": found.get("spec") or {},
            "namespace": (found.get("metadata") or {}).get("namespace"),
            "state": status.get("state") or "Pending"}


def commands() -> list[Object]:
    """The forms: every command of the registry, in the plugin's order, with its fields."""
    return [{"word": spec.word, "help": spec.help, "fields": [
        {"name": field.name, "flag": field.flag, "required": field.required,
         "help": field.help or "", "choices": list(field.choices),
         "long": field.by_reference is not None or field.bound.chars > 200,
         "chars": (field.by_reference or field.bound).chars,
         "short": field.bound.chars, "in_bytes": field.bound.in_bytes,
         "file_flag": field.file_flag}
        for field in spec.flags]}
        for spec in sorted(registry.COMMANDS, key=lambda s: s.shown)]


SHARED_FLAGS = frozenset({"help", "namespace", "context", "kubeconfig", "output", "timeout",
                          "name"})


def parser_forms(parser: argparse.ArgumentParser, *, words: Sequence[str]) -> list[Object]:
    """The forms of commands the plugin defines by its flags alone (a run's: ``budget``,
    ``fork``), from its parser: each flag but those every command shares, as the slot
    commands' forms are from the registry; the parser checks what is sent."""
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    made = []
    for word in words:
        command = sub.choices[word]
        made.append({"word": word, "help": command.description or "", "fields": [
            {"name": action.dest, "flag": max(action.option_strings, key=len),
             "required": action.required, "help": action.help or "",
             "choices": [str(c) for c in action.choices or ()],
             "long": action.dest == "reason", "chars": None, "short": None,
             "in_bytes": False, "file_flag": None}
            for action in command._actions
            if action.option_strings and action.dest not in SHARED_FLAGS]})
    return made


def waiting(runs_: Sequence[Object], slots: Sequence[Object]) -> list[Object]:
    """Every slot waiting for a person, and for what."""
    manual = {(str((r.get("metadata") or {}).get("namespace")),
               str((r.get("metadata") or {}).get("name")))
              for r in runs_ if (r.get("spec") or {}).get("claimPolicy") == "Manual"}
    found = []
    for s in slots:
        meta, status = s.get("metadata") or {}, s.get("status") or {}
        key = (str(meta.get("namespace")), str((s.get("spec") or {}).get("run")))
        why = [("approval" if q.get("approvers") else "question") + f" {q.get('key')}"
               for q in status.get("questions") or []
               if isinstance(q, dict) and q.get("state") == "Pending"]
        conditions = {c.get("type") for c in status.get("conditions") or []
                      if isinstance(c, dict) and c.get("status") == "True"}
        if "Held" in conditions:
            why.append("held")
        why += [f"effect {e.get('key')}: its outcome is unknown (resolve-effect)"
                for e in status.get("effects") or []
                if isinstance(e, dict) and e.get("state", "Unresolved") == "Unresolved"]
        if status.get("state") == "RetryWait" and key in manual:
            why.append("a Manual run's slot: reassign or claim it")
        if why:
            found.append({"namespace": key[0], "run": key[1], "slot": meta.get("name"),
                          "state": status.get("state") or "Pending", "why": why})
    return sorted(found, key=lambda w: (w["namespace"], w["run"], str(w["slot"])))
