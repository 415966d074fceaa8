"""``-w``: list, then watch from the list's resourceVersion (as kubectl's reflector does),
and show again on each change.

A *source* is one collection a view is made of (``status``: the run, by a field selector
on its name, and its slots, by their run label; ``list``: the runs). Each is listed once
(:func:`agentrun.plugin.client.list_all`), then followed by a *follower* thread that holds
a watch on it from the list's resourceVersion and puts each change on one queue; the main
thread applies the changes to its copy of each collection (its *mirror*) and calls
``show``, which prints what changed. Only the API server's events wake it (and a tick of
:data:`TICK`, to notice the deadline): the API is never polled.

A watch is one long GET: the API server ends it after ``timeoutSeconds``
(:data:`WATCH_SECONDS`) and the follower starts the next from the last resourceVersion it
saw (bookmarks keep that recent); the read timeout is longer, so only a dead connection
trips it. A 410 (the version is too old: compacted away) lists again and hands the whole
collection over; any other error ends the watch with it (exit 3; a refusal, 1). Ctrl-C
ends it: KeyboardInterrupt reaches the main thread (exit 0, :mod:`.cli`); the followers
are daemon threads and end with the process.

Why not :meth:`agentrun.rest.Rest.request`: it reads an answer whole and counts a
request unanswered after 2 s as (the operator's) blind time; a watch here is the same
client (configuration, credentials, TLS, connection pool), read line by line.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from agentrun import rest
from agentrun.plugin import client, requests
from agentrun.plugin.requests import Object

WATCH_SECONDS = 300  # the API server ends each watch after this (timeoutSeconds)
READ_SECONDS = WATCH_SECONDS + 30  # no byte for this long: the connection is dead
CONNECT_SECONDS = 5.0
TICK = 1.0  # the main thread's longest wait between looks at the deadline
MAX_EVENT_BYTES = 16 << 20  # one event's JSON (an object is at most ~1.5 MiB in etcd)
MAX_ERROR_BYTES = 64 << 10
QUICK_ENDS = 3  # watches in a row ended at once, empty: the server will not hold one
LISTED = "LISTED"  # an event kind of ours: a re-list, the collection's every object
CHANGES = ("ADDED", "MODIFIED", "DELETED")

Key = tuple[str, str]  # namespace, name
Mirror = dict[Key, Object]


@dataclass(frozen=True, kw_only=True)
class Source:
    """One collection: its path, and the selectors of the list and its watches."""

    path: str
    query: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Event:
    """A change to source ``source``: ``kind`` ADDED, MODIFIED, DELETED (one object) or
    :data:`LISTED` (a re-list: every object the collection holds now)."""

    source: int
    kind: str
    objects: tuple[Object, ...]


# show(mirrors, events): print what changed (no events: the first look); False: stop.
Show = Callable[[Sequence[Mirror], Sequence[Event]], bool]
Streamer = Callable[[client.Connection, str, Mapping[str, str]], Iterator[Object]]


def key(obj: Object) -> Key:
    """An object's place in a mirror: (namespace, name)."""
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def apply(mirror: Mirror, event: Event) -> None:
    """``mirror`` after ``event``: a list replaces it whole, a change adds, updates or
    removes one object."""
    if event.kind == LISTED:
        mirror.clear()
        mirror.update({key(obj): obj for obj in event.objects})
    elif event.kind == "DELETED":
        for obj in event.objects:
            mirror.pop(key(obj), None)
    else:
        mirror.update({key(obj): obj for obj in event.objects})


def stream(conn: client.Connection, path: str, query: Mapping[str, str]) -> Iterator[Object]:
    """One watch: its events, parsed, as the API server sends them (one JSON a line)."""
    raw = conn.rest.open("GET", path, query=dict(query), stream=True,
                         timeout=rest.Timeout(connect=CONNECT_SECONDS, read=READ_SECONDS))
    try:
        if not 200 <= raw.status < 300:
            raise rest.ApiError(raw.status,
                                raw.read(MAX_ERROR_BYTES).decode(errors="replace"))
        pending = b""
        for chunk in raw.stream(amt=None, decode_content=False):
            pending += chunk
            *lines, pending = pending.split(b"\n")
            if len(pending) > MAX_EVENT_BYTES:
                raise ValueError(f"an event longer than {MAX_EVENT_BYTES} bytes")
            yield from (json.loads(line) for line in lines if line.strip())
        if pending.strip():
            yield json.loads(pending)
    finally:
        raw.close()  # never back to the pool half read


def follow(conn: client.Connection, index: int, source: Source, version: str | None, *,
           put: Callable[[Event | requests.Failure], None], stop: threading.Event,
           streamer: Streamer) -> None:
    """Watch ``source`` from ``version`` until ``stop``; every change, a re-list after a
    410, or the failure that ends it, to ``put`` (see the module docstring)."""
    quick = 0
    try:
        while not stop.is_set():
            query = {**source.query, "watch": "true", "allowWatchBookmarks": "true",
                     "timeoutSeconds": str(WATCH_SECONDS),
                     **({"resourceVersion": version} if version else {})}
            began, seen = time.monotonic(), False
            try:
                for event in streamer(conn, source.path, query):
                    if stop.is_set():
                        return
                    kind, obj = event.get("type"), event.get("object")
                    if not isinstance(obj, dict):
                        continue
                    if kind == "ERROR":
                        raise rest.ApiError(int(obj.get("code") or 500), json.dumps(obj))
                    seen = True
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if kind in CHANGES:
                        put(Event(source=index, kind=str(kind), objects=(obj,)))
            except rest.ApiError as error:
                if error.status != 410:
                    raise
                items, version = client.list_all(conn, source.path, query=dict(source.query))
                put(Event(source=index, kind=LISTED, objects=tuple(items)))
                continue
            quick = 0 if seen or time.monotonic() - began >= 1.0 else quick + 1
            if quick >= QUICK_ENDS:
                raise requests.Failure(f"watching {source.path}: the API server ended "
                                       f"{QUICK_ENDS} watches at once", code=requests.FAILED)
    except requests.Failure as failure:
        put(failure)
    except client.ERRORS as error:
        put(client.failure(f"watching {source.path}", error))
    except Exception as error:  # a follower that died silently would leave the watch hung
        put(requests.Failure(f"watching {source.path} failed: {error!r}", code=requests.FAILED))


def watch(conn: client.Connection, sources: Sequence[Source], *, show: Show,
          until: float | None, streamer: Streamer | None = None) -> None:
    """List every source, ``show`` it, then follow them all (with ``streamer``, else
    :func:`stream`) and ``show`` each batch of changes, until ``show`` says stop or the
    monotonic deadline ``until``; a follower's failure is raised here."""
    mirrors: list[Mirror] = []
    versions: list[str | None] = []
    for source in sources:
        items, version = client.list_all(conn, source.path, query=dict(source.query))
        mirrors.append({key(obj): obj for obj in items})
        versions.append(version)
    if not show(mirrors, ()):
        return
    events: queue.Queue[Event | requests.Failure] = queue.Queue()
    stop = threading.Event()
    for index, source in enumerate(sources):
        threading.Thread(target=follow, name=f"agentrun-watch-{index}", daemon=True,
                         args=(conn, index, source, versions[index]),
                         kwargs={"put": events.put, "stop": stop,
                                 "streamer": streamer or stream}).start()
    try:
        while True:
            left = None if until is None else until - time.monotonic()
            if left is not None and left <= 0:
                return
            try:
                batch = [events.get(timeout=TICK if left is None else min(TICK, left))]
            except queue.Empty:
                continue
            while not events.empty():  # what else came meanwhile: shown at once
                batch.append(events.get_nowait())
            changes: list[Event] = []
            for item in batch:
                if isinstance(item, requests.Failure):
                    raise item
                apply(mirrors[item.source], item)
                changes.append(item)
            if not show(mirrors, changes):
                return
    finally:
        stop.set()
