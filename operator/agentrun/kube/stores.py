"""Watch-fed, in-memory copies of the objects the reconciles read.

Terms:

- *Observe*: take one object as a watch event, a LIST item or a write's answer delivered
  it. The store keeps, per kind and (namespace, name), the newest state it was given.
- *Newer*: with etcd behind the API server an object's ``resourceVersion`` is the etcd
  revision of its last change, one cluster-wide counter that only grows, so of two states
  of one object (or of a deleted object and its recreation) the larger integer is the
  later. Kubernetes calls the value opaque: where either is not an integer (another
  storage), they cannot be ordered and the later *arrival* wins, as in client-go's
  informers. A state older than the one held is dropped, so a late watch event or a slow
  write's answer never regresses an object.
- *Finished*, per kind: a Lease is *tombstoned* (holder cleared and our
  ``agentrun.dev/outcome`` recorded; nothing changes it after that but its deletion);
  a Pod is finished when its phase is Succeeded or Failed *and* the Lease of the same
  name (its attempt) is tombstoned, so a pod that may still act or still needs fencing
  stays. AgentRuns, Slots, LaunchSpecs and ConfigMaps are never finished while they
  exist: they are what the reconciles enumerate and compare (a run's summary counts its
  Succeeded slots, a dependency reads its sibling's state, a pin reads its snapshot), and
  their number is what people created. A finished object *leaves* the store: only a
  marker (its key and version, about 200 bytes) stays, so that :meth:`Stores.get` says
  "not known" and the read goes to the API. The answer of that read is kept in a small
  LRU (:data:`COLD_LIMIT`), kept current by the same events, so the on-demand path costs
  at most one GET per object while it stays there. A stranger's object found under one of
  our names by a create (without our labels: no watch of ours delivers its changes or its
  deletion) is marked the same way but never kept: it is asked of the API at each read,
  until a read finds it gone (a person removes a squatter; the slot looks every 10 s).
- *Primed*: a kind listed in a namespace (:meth:`Stores.prime`); only there does a miss
  mean "absent". A ConfigMap miss always asks the API (people create the sources).

``managedFields`` and ``kubectl.kubernetes.io/last-applied-configuration`` are dropped from
every stored object: nothing decides on them and they are often half its size.
"""

from __future__ import annotations

import copy
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentrun.api import names
from agentrun.kube import slimming

if TYPE_CHECKING:
    from agentrun import rest

Object = dict[str, Any]
Key = tuple[str, str]  # namespace, name
KINDS = ("AgentRun", "Slot", "LaunchSpec", "Pod", "ConfigMap", "Lease")
PLURALS = {"AgentRun": "agentruns", "Slot": "slots", "LaunchSpec": "launchspecs",
           "Pod": "pods", "ConfigMap": "configmaps", "Lease": "leases"}
GROUPS = {"Pod": ("", "v1"), "ConfigMap": ("", "v1"), "Lease": ("coordination.k8s.io", "v1")}
# What the operator lists (and must watch) of each kind: only its own Pods, attempt Leases
# and labelled ConfigMaps (configuration sources and run snapshots carry the config-kind
# label; LaunchSpec snapshots the snapshot-of one). Kinds not named: all of them.
SELECTORS: dict[str, tuple[str, ...]] = {
    "Pod": (names.SLOT_LABEL,), "Lease": (names.ATTEMPT_LABEL,),
    "ConfigMap": (names.CONFIG_KIND_LABEL, names.SNAPSHOT_LABEL)}
COLD_LIMIT = 256  # objects read on demand after they left the store
DELETED_LIMIT = 4096  # versions of deleted objects remembered, against late answers
PAGE = 500  # items per LIST page while priming
DROPPED_ANNOTATION = slimming.DROPPED_ANNOTATION


def path(kind: str, namespace: str | None, name: str | None = None,
         subresource: str | None = None) -> str:
    """The REST path of ``kind`` (namespaced; ``namespace=None``: cluster-wide list)."""
    group, version = GROUPS.get(kind, (names.GROUP, names.VERSION))
    base = f"/api/{version}" if group == "" else f"/apis/{group}/{version}"
    where = f"{base}/namespaces/{namespace}" if namespace is not None else base
    return "/".join([where, PLURALS[kind], *([name] if name else []),
                     *([subresource] if subresource else [])])


def newer(candidate: str | None, held: str | None) -> bool:
    """May state ``candidate`` replace state ``held`` (see "Newer" above)?"""
    if candidate is None or held is None:
        return True
    if candidate.isdigit() and held.isdigit():
        return int(candidate) >= int(held)
    return True


def tombstoned(lease: Object) -> bool:
    meta = lease.get("metadata") or {}
    return (not (lease.get("spec") or {}).get("holderIdentity")
            and names.OUTCOME_ANNOTATION in (meta.get("annotations") or {}))


def watched(kind: str, meta: Object) -> bool:
    """Would our watches deliver this object's changes (not a stranger's: see above)?"""
    return kind not in SELECTORS or bool(set(SELECTORS[kind]) & set(meta.get("labels") or {}))


def parse_selector(selector: str | None) -> list[tuple[str, str | None, bool]] | None:
    """``k=v,k2==v2,k3,!k4`` as (key, value or None for "exists", wanted); None if it
    says more (``!=``, ``in``, ``notin``: the API answers those)."""
    terms: list[tuple[str, str | None, bool]] = []
    for term in (selector or "").split(","):
        term = term.strip()
        if not term:
            continue
        wanted = not term.startswith("!")
        key, equals, value = term.lstrip("!").replace("==", "=").partition("=")
        if any(c in key for c in "!() ") or (equals and (not wanted or any(
                c in value for c in "!=() "))):
            return None
        terms.append((key.strip(), value.strip() if equals else None, wanted))
    return terms


@dataclass(frozen=True)
class Found:
    """A lookup: ``known`` means the store's answer stands (``body`` None: absent)."""

    body: Object | None
    known: bool


class Stores:
    """The objects of :data:`KINDS`, their indexes, and the markers of those *away*
    (finished, or a stranger's object found under one of our names)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._objects: dict[str, dict[str, dict[str, Object]]] = {k: {} for k in KINDS}
        # Keys the store must not answer for (finished, or a stranger's), with the version.
        self._away: dict[str, dict[Key, str | None]] = {k: {} for k in KINDS}
        self._deleted: OrderedDict[tuple[str, str, str], str | None] = OrderedDict()
        self._cold: OrderedDict[tuple[str, str, str], Object] = OrderedDict()
        self._primed: set[tuple[str, str | None]] = set()  # (kind, namespace or None: all)
        self._slots_by_run: dict[tuple[str, str], set[str]] = {}
        self._labels: dict[tuple[str, str, str | None], set[str]] = {}  # ConfigMaps

    # Feeding -------------------------------------------------------------------------

    def observe(self, *, kind: str, event_type: str | None, body: dict[str, Any]) -> None:
        """Take one state of an object (see the module docstring); unknown kinds are not
        stored (the caller need not filter)."""
        if kind not in PLURALS:
            return
        meta = body.get("metadata") or {}
        namespace, name = meta.get("namespace") or "", meta.get("name")
        if not name:
            return
        version = meta.get("resourceVersion")
        ours = watched(kind, meta)
        slim = slimming.slim(body)
        slim.setdefault("kind", kind)
        slim.setdefault("apiVersion", names.API_VERSION if kind not in GROUPS
                        else "/".join(p for p in GROUPS[kind] if p))
        with self._lock:
            held = self._version(kind, namespace, name)
            if not newer(version, held):
                return
            if event_type == "DELETED":
                self._remove(kind, namespace, name)
                self._away[kind].pop((namespace, name), None)
                self._cold.pop((kind, namespace, name), None)
                self._deleted[(kind, namespace, name)] = version
                self._deleted.move_to_end((kind, namespace, name))
                while len(self._deleted) > DELETED_LIMIT:
                    self._deleted.popitem(last=False)
                return
            self._deleted.pop((kind, namespace, name), None)
            if not ours or self._is_finished(kind, slim):
                self._remove(kind, namespace, name)
                self._away[kind][(namespace, name)] = version
                if (kind, namespace, name) in self._cold:
                    self._cold[(kind, namespace, name)] = slim
            else:
                self._away[kind].pop((namespace, name), None)
                self._cold.pop((kind, namespace, name), None)
                self._put(kind, namespace, name, slim)
            if kind == "Lease" and tombstoned(slim):
                pod = self._objects["Pod"].get(namespace, {}).get(name)
                if pod is not None and self._is_finished("Pod", pod):
                    self._remove("Pod", namespace, name)
                    self._away["Pod"][(namespace, name)] = (
                        pod["metadata"].get("resourceVersion"))

    def remember(self, *, kind: str, namespace: str, name: str, body: Object | None) -> None:
        """Keep what the API answered for an object away from the store (the on-demand
        path); ``None`` (a 404 of a quorum read) means it is gone: a miss is absent again."""
        key = (kind, namespace, name)
        with self._lock:
            if body is None:
                self._cold.pop(key, None)
                self._away[kind].pop((namespace, name), None)
                return
            held = self._away[kind].get((namespace, name))
            if not watched(kind, body.get("metadata") or {}):
                return  # a stranger's: asked of the API each time (see watched)
            if (namespace, name) not in self._away[kind] or not newer(
                    (body.get("metadata") or {}).get("resourceVersion"), held):
                return  # not away (the store holds it), or the marker is newer
            self._cold[key] = slimming.slim(body)
            self._cold.move_to_end(key)
            while len(self._cold) > COLD_LIMIT:
                self._cold.popitem(last=False)

    def prime(self, *, client: rest.Rest, namespaces: Sequence[str]) -> None:
        """LIST every kind (with :data:`SELECTORS`), paged, so a reconcile never decides on
        an empty store; what the store held from before and no list has, with a version
        older than every list's, was deleted meanwhile and is removed."""
        for kind in KINDS:
            scopes: list[str | None] = [*namespaces] or [None]
            for namespace in scopes:
                seen: set[Key] = set()
                versions: list[str | None] = []
                for selector in SELECTORS.get(kind, (None,)):
                    listed_at: str | None = None
                    for items, version in self._pages(client, kind, namespace, selector):
                        listed_at = version
                        for item in items:
                            meta = item.get("metadata") or {}
                            seen.add((meta.get("namespace") or "", meta.get("name") or ""))
                            self.observe(kind=kind, event_type=None, body=item)
                    versions.append(listed_at)
                if all(v is not None and v.isdigit() for v in versions):
                    self._forget_unlisted(kind, namespace, seen,
                                          min(int(v or 0) for v in versions))
                with self._lock:
                    self._primed.add((kind, namespace))

    @staticmethod
    def _pages(client: rest.Rest, kind: str, namespace: str | None,
               selector: str | None) -> Iterator[tuple[list[Object], str | None]]:
        """One LIST (one snapshot) page by page, with its resourceVersion: priming holds one
        page of full bodies at a time (a whole list of 10,000 pods doubled a resync's RSS)."""
        query = {"limit": str(PAGE), **({"labelSelector": selector} if selector else {})}
        while True:
            listed = client.request("GET", path(kind, namespace), query=query)
            meta = listed.get("metadata") or {}
            yield [{"kind": kind, **item} for item in listed.get("items") or []], meta.get(
                "resourceVersion")
            if not meta.get("continue"):
                return
            query = {**query, "continue": meta["continue"]}

    def _forget_unlisted(self, kind: str, namespace: str | None, seen: set[Key],
                         listed_at: int) -> None:
        with self._lock:
            held = [(ns, name, o) for ns, objects in self._objects[kind].items()
                    if namespace is None or ns == namespace for name, o in objects.items()]
            for ns, name, body in held:
                version = body["metadata"].get("resourceVersion")
                if (ns, name) not in seen and version is not None and version.isdigit() \
                        and int(version) < listed_at:
                    self._remove(kind, ns, name)

    # Reading -------------------------------------------------------------------------

    def get(self, *, kind: str, namespace: str, name: str) -> Found:
        """The object if held; absent if primed and not finished; else not known."""
        with self._lock:
            found = self._objects[kind].get(namespace, {}).get(name)
            if found is not None:
                return Found(copy.deepcopy(found), known=True)
            cold = self._cold.get((kind, namespace, name))
            if cold is not None:
                self._cold.move_to_end((kind, namespace, name))
                return Found(copy.deepcopy(cold), known=True)
            if (namespace, name) in self._away[kind] or kind == "ConfigMap":
                return Found(None, known=False)
            return Found(None, known=self.primed(kind=kind, namespace=namespace))

    def primed(self, *, kind: str, namespace: str) -> bool:
        return (kind, namespace) in self._primed or (kind, None) in self._primed

    def listing(self, *, kind: str, namespace: str) -> list[Object] | None:
        """Every held object of ``kind`` in ``namespace``; None when not primed there."""
        with self._lock:
            if not self.primed(kind=kind, namespace=namespace):
                return None
            return copy.deepcopy(list(self._objects[kind].get(namespace, {}).values()))

    def slots_of(self, *, namespace: str, run: str) -> list[Object] | None:
        """The Slots whose ``spec.run`` is ``run``, from the index; None when not primed."""
        with self._lock:
            if not self.primed(kind="Slot", namespace=namespace):
                return None
            held = self._objects["Slot"].get(namespace, {})
            return copy.deepcopy([held[n] for n in sorted(
                self._slots_by_run.get((namespace, run), ())) if n in held])

    def configmaps(self, *, namespace: str, selector: str) -> list[Object] | None:
        """The ConfigMaps matching ``selector`` (equality, existence and absence terms, one
        of them requiring a label key of :data:`SELECTORS`, through the label index); None
        when the store cannot tell (not primed, or a selector it does not index)."""
        terms = parse_selector(selector)
        watched = SELECTORS["ConfigMap"]
        if not terms or not any(key in watched and wanted for key, _, wanted in terms):
            return None  # it could match objects no watch of ours delivers
        with self._lock:
            if not self.primed(kind="ConfigMap", namespace=namespace):
                return None
            matching: set[str] | None = None
            for key, value, wanted in sorted(terms, key=lambda t: not t[2]):
                these = self._labels.get((namespace, key, value), set())
                if wanted:
                    matching = set(these) if matching is None else matching & these
                elif matching is not None:
                    matching -= these
            held = self._objects["ConfigMap"].get(namespace, {})
            return copy.deepcopy([held[n] for n in sorted(matching or ()) if n in held])

    def held(self, kind: str) -> list[Object]:
        """Every object of ``kind`` held now (shallow: the bodies are not to be changed;
        for a census at a scrape)."""
        with self._lock:
            return [body for by_name in self._objects[kind].values()
                    for body in by_name.values()]

    def sizes(self) -> dict[str, int]:
        """How many objects of each kind are held, and finished markers (for metrics)."""
        with self._lock:
            counts = {kind: sum(len(v) for v in self._objects[kind].values())
                      for kind in KINDS}
            counts["away"] = sum(len(v) for v in self._away.values())
            counts["cold"] = len(self._cold)
            return counts

    # Internals (under the lock) --------------------------------------------------------

    def _version(self, kind: str, namespace: str, name: str) -> str | None:
        held = self._objects[kind].get(namespace, {}).get(name)
        if held is not None:
            version: str | None = held["metadata"].get("resourceVersion")
            return version
        if (namespace, name) in self._away[kind]:
            return self._away[kind][(namespace, name)]
        return self._deleted.get((kind, namespace, name))

    def _is_finished(self, kind: str, body: Object) -> bool:
        if kind == "Lease":
            return tombstoned(body)
        if kind == "Pod":
            meta = body.get("metadata") or {}
            key = (meta.get("namespace") or "", meta.get("name") or "")
            return ((body.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    and key in self._away["Lease"])
        return False

    def _indexes(self, kind: str, namespace: str, body: Object,
                 ) -> list[tuple[dict[Any, set[str]], Any]]:
        """Which index entries hold ``body``: slots by (namespace, run); ConfigMaps by
        (namespace, label, value) and (namespace, label, None) for "has the label"."""
        if kind == "Slot":
            run = (body.get("spec") or {}).get("run")
            return [(self._slots_by_run, (namespace, run))] if run else []
        if kind == "ConfigMap":
            labels = (body.get("metadata") or {}).get("labels") or {}
            return [(self._labels, index) for key, value in labels.items()
                    for index in ((namespace, key, value), (namespace, key, None))]
        return []

    def _put(self, kind: str, namespace: str, name: str, body: Object) -> None:
        self._unindex(kind, namespace, name)
        self._objects[kind].setdefault(namespace, {})[name] = body
        for index, key in self._indexes(kind, namespace, body):
            index.setdefault(key, set()).add(name)

    def _remove(self, kind: str, namespace: str, name: str) -> None:
        self._unindex(kind, namespace, name)
        objects = self._objects[kind].get(namespace)
        if objects is not None:
            objects.pop(name, None)
            if not objects:
                del self._objects[kind][namespace]

    def _unindex(self, kind: str, namespace: str, name: str) -> None:
        held = self._objects[kind].get(namespace, {}).get(name)
        for index, key in self._indexes(kind, namespace, held) if held is not None else ():
            found = index.get(key)
            if found is not None:
                found.discard(name)
                if not found:
                    del index[key]
