"""What the web UI shows, kept by watches: the runs, slots and their Events of the
namespaces it shows, current by the API server's events (a page never LISTs).

Terms:
- *scope*: where the UI looks. The whole cluster when the person may list runs there (one
  watch per kind); else each namespace named (the context's, and those given with ``-n``)
  that they may list, one watch per kind in each. A namespace whose runs they may not list
  is left out and said (:attr:`Store.refused`): the UI never shows what their own
  ``kubectl get`` would not.
- *source*: one collection followed (:class:`agentrun.plugin.watching.Source`), with its
  own *mirror*: a re-list after a 410 replaces that source's objects only.
- *change*: what one event touched (:class:`Change`); the server pushes it to the pages
  that show it.

The followers are :func:`agentrun.plugin.watching.follow`, the same as ``-w``'s; one that
ends with an error (the API server restarted, a dropped connection) is listed again and
followed anew after :data:`RETRY_SECONDS`, and the error is shown until then.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from agentrun.api import names
from agentrun.plugin import client, requests, watching
from agentrun.plugin.requests import Object

RETRY_SECONDS = 2.0  # between a follower's failure and its re-list
KINDS = ("agentruns", "slots", "events")  # what each scope follows
EVENTS_QUERY = {"fieldSelector": f"involvedObject.apiVersion={names.GROUP}/{names.VERSION}"}
MAX_EVENTS = 20_000  # Events kept at most, in all (the oldest go first): bounded memory
EVENTS_SLACK = 1_000


@dataclass(frozen=True, kw_only=True)
class Change:
    """One object changed: its kind (plural), namespace and name, and its run (a run's own
    name; a slot's ``spec.run``; an Event's object's run when it names one)."""

    plural: str
    namespace: str
    name: str
    run: str | None


@dataclass(frozen=True, kw_only=True)
class Followed:
    plural: str
    source: watching.Source


def _path(plural: str, namespace: str | None) -> str:
    if plural == "events":
        return "/api/v1/events" if namespace is None else f"/api/v1/namespaces/{namespace}/events"
    if namespace is None:
        return f"/apis/{names.GROUP}/{names.VERSION}/{plural}"
    return client.resource_path(plural, namespace)


def sources(namespaces: Sequence[str] | None) -> list[Followed]:
    """Every collection a scope follows: per kind, cluster-wide (``None``) or per namespace."""
    where: Sequence[str | None] = [None] if namespaces is None else namespaces
    return [Followed(plural=plural, source=watching.Source(
        path=_path(plural, namespace), query=EVENTS_QUERY if plural == "events" else {}))
        for namespace in where for plural in KINDS]


def run_of(plural: str, obj: Object) -> str | None:
    """The run an object belongs to (see :class:`Change`)."""
    if plural == "agentruns":
        return str((obj.get("metadata") or {}).get("name") or "") or None
    if plural == "slots":
        return str((obj.get("spec") or {}).get("run") or "") or None
    involved = obj.get("involvedObject") or {}
    if involved.get("kind") == "AgentRun":
        return str(involved.get("name") or "") or None
    return None


def scope(conn: client.Connection, *, named: Sequence[str],
          may_list: Callable[[str | None], str | None]) -> tuple[list[str] | None, dict[str, str]]:
    """Where to look: ``None`` (the cluster) when runs may be listed cluster-wide, else
    the ``named`` namespaces (the connection's first) whose runs may be listed; and those
    refused, each with why. ``may_list(namespace)`` is None when allowed, else why not."""
    if may_list(None) is None:
        return None, {}
    allowed: list[str] = []
    refused: dict[str, str] = {}
    for namespace in dict.fromkeys([conn.namespace, *named]):
        why = may_list(namespace)
        if why is None:
            allowed.append(namespace)
        else:
            refused[namespace] = why
    return allowed, refused


class Store:
    """The mirrors of every source, and who to tell of a change (``on_change``, called in a
    follower's thread: it must hand over to its own loop)."""

    def __init__(self, conn: client.Connection, followed: Sequence[Followed], *,
                 on_change: Callable[[Sequence[Change]], None]) -> None:
        self.conn = conn
        self.followed = list(followed)
        self.on_change = on_change
        self.generation = 0  # changes applied so far: a page says which it shows
        self.problems: dict[int, str] = {}  # a source's last failure, until it lists again
        self._mirrors: list[watching.Mirror] = [{} for _ in self.followed]
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def start(self) -> None:
        """List every source (a failure here is the caller's: nothing to show yet), then
        follow each in its own thread."""
        versions = []
        for index, followed in enumerate(self.followed):
            items, version = self._list(followed)
            self._mirrors[index] = {watching.key(obj): obj for obj in items}
            versions.append(version)
        self._trim()
        self.generation = 1
        for index, version in enumerate(versions):
            threading.Thread(target=self._follow, args=(index, version), daemon=True,
                             name=f"agentrun-ui-watch-{index}").start()

    def stop(self) -> None:
        self._stop.set()

    def _list(self, followed: Followed) -> tuple[list[Object], str | None]:
        if followed.plural != "events":
            return client.list_all(self.conn, followed.source.path,
                                   query=dict(followed.source.query))
        try:  # Events are a nicety: a person who may not list them sees the rest
            return client.list_all(self.conn, followed.source.path,
                                   query=dict(followed.source.query))
        except requests.Failure as failure:
            if failure.code == requests.REJECTED:
                return [], None
            raise

    def _follow(self, index: int, version: str | None) -> None:
        followed = self.followed[index]
        while not self._stop.is_set():
            if version is None and followed.plural == "events":
                return  # not readable by this person: nothing to follow
            watching.follow(self.conn, index, followed.source, version,
                            put=lambda item: self._put(index, item),
                            stop=self._stop, streamer=watching.stream)
            if self._stop.wait(RETRY_SECONDS):
                return
            try:
                items, listed = self._list(followed)
            except requests.Failure as failure:  # the API server still away: again later
                self._problem(index, str(failure))
                continue
            version = listed
            self._put(index, watching.Event(source=index, kind=watching.LISTED,
                                            objects=tuple(items)))

    def _problem(self, index: int, why: str | None) -> None:
        """A source's failure (``why``), or its recovery (None): either is told to every
        page (its banner of what is not current)."""
        with self._lock:
            if self.problems.get(index) == why:
                return
            if why is None:
                del self.problems[index]
            else:
                self.problems[index] = why
            self.generation += 1
        self.on_change([])

    def _put(self, index: int, item: watching.Event | requests.Failure) -> None:
        if isinstance(item, requests.Failure):
            self._problem(index, str(item))
            return
        if index in self.problems:  # events again: current
            self._problem(index, None)
        plural = self.followed[index].plural
        with self._lock:
            mirror = self._mirrors[index]
            before = list(mirror.values()) if item.kind == watching.LISTED else []
            watching.apply(mirror, item)
            if plural == "events":
                self._trim()
            self.generation += 1
        touched = [*before, *item.objects]
        self.on_change([Change(plural=plural, namespace=watching.key(obj)[0],
                               name=watching.key(obj)[1], run=run_of(plural, obj))
                        for obj in touched])

    def _trim(self) -> None:
        """At most :data:`MAX_EVENTS` Events in all (the oldest go), trimmed once they are
        :data:`EVENTS_SLACK` over, so a busy namespace does not sort them at each one."""
        held = [(index, key) for index, followed in enumerate(self.followed)
                if followed.plural == "events" for key in self._mirrors[index]]
        if len(held) <= MAX_EVENTS + EVENTS_SLACK:
            return
        held.sort(key=lambda place: _event_time(self._mirrors[place[0]][place[1]]))
        for index, key in held[:len(held) - MAX_EVENTS]:
            del self._mirrors[index][key]

    def objects(self, plural: str) -> list[Object]:
        """Every object of one kind now (a copy of the list; the objects are shared: read
        them, never change them)."""
        with self._lock:
            return [obj for index, followed in enumerate(self.followed)
                    if followed.plural == plural for obj in self._mirrors[index].values()]

    def find(self, plural: str, namespace: str, name: str) -> Object | None:
        with self._lock:
            for index, followed in enumerate(self.followed):
                if followed.plural == plural:
                    found = self._mirrors[index].get((namespace, name))
                    if found is not None:
                        return found
        return None

    def slots_of(self, namespace: str, run: str) -> list[Object]:
        return [slot for slot in self.objects("slots")
                if watching.key(slot)[0] == namespace and run_of("slots", slot) == run]

    def events_of(self, namespace: str, kind: str, name: str) -> list[Object]:
        """The Events about one object, oldest first."""
        found = [event for event in self.objects("events")
                 if watching.key(event)[0] == namespace
                 and (event.get("involvedObject") or {}).get("kind") == kind
                 and (event.get("involvedObject") or {}).get("name") == name]
        return sorted(found, key=_event_time)

    def problem_list(self) -> list[str]:
        with self._lock:
            return sorted(set(self.problems.values()))

    def connection(self, namespace: str) -> client.Connection:
        """The person's connection, aimed at ``namespace`` (the plugin's commands act on
        their connection's namespace)."""
        return replace(self.conn, namespace=namespace)



def _event_time(event: Object) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime")
               or (event.get("metadata") or {}).get("creationTimestamp") or "")
