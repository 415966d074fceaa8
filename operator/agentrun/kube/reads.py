"""Reading what the decisions need, as plain dicts (camelCase, as the API returns them).

With :class:`stores.Stores` (the operator), objects are read from memory, fed by the
watches and by the writer's answers; the API is asked only where the store cannot answer
(not primed, an object away from it, a ConfigMap it does not hold, a label selector it
does not index). Without (``stores=None``, the CLI), every read goes to the API.
:meth:`Reader.fresh` reads from the API (quorum reads) and writes each answer through into
the same stores: the controller uses it before a step a cache must not decide
(docs/design/caches-and-queue.md, "Stores: what a cache may decide").

Two more reads are cached because their answers change rarely and are asked often: a
namespace's tenant (a few seconds: see :meth:`Reader.tenant`), and the content of an
immutable LaunchSpec snapshot (forever: it cannot change). Whether actor stamping is in
force is never cached: it is read afresh, after the command, each time a command is
decided (``core.policies.stamping``).
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from agentrun import rest
from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpec, LaunchSpecSpec
from agentrun.api.runs import AgentRun
from agentrun.api.slots import PinnedLaunchSpec, Slot
from agentrun.core.base import owners
from agentrun.core.policies import stamping
from agentrun.core.runs import runobjects
from agentrun.core.slots import specsnapshots
from agentrun.kube import stores

Object = dict[str, Any]
CACHE_SECONDS = 5.0
NODES_KEPT = 1024
KINDS = {plural: kind for kind, plural in stores.PLURALS.items()}
Stores = stores.Stores  # the parameter of that name hides the module in Reader
ADMISSION = "/apis/admissionregistration.k8s.io/v1"


def stamping_secret_path(*, namespace: str) -> str:
    """The stamping epoch Secret in the operator's ``namespace``."""
    return rest.namespaced(group="", version="v1", plural="secrets", namespace=namespace,
                           name=names.STAMPING_SECRET)


def custom_path(plural: str, namespace: str, name: str | None = None) -> str:
    return rest.namespaced(group=names.GROUP, version=names.VERSION, plural=plural,
                           namespace=namespace, name=name)


class Reader:
    """Reads for one API client, from ``stores`` where they can answer (see above);
    ``operator_namespace``: where the operator keeps its stamping Secret (the namespace it
    runs in, :mod:`agentrun.kube.ownnamespace`; required: a default would quietly read
    another install's Secret when the operator is elsewhere)."""

    def __init__(self, client: rest.Rest, *, operator_namespace: str,
                 stores: Stores | None = None) -> None:
        self.rest = client
        self.stores = stores
        self.operator_namespace = operator_namespace
        self._through: Stores | None = None  # fresh(): answers written into these
        self._snapshots: dict[tuple[str, str], LaunchSpecSpec] = {}
        self._tenants: dict[str, tuple[float, str | None]] = {}
        self._tenants_lock = threading.Lock()  # one GET per expiry, not one per thread
        self._nodes: dict[str, tuple[float, Object | None]] = {}

    def fresh(self) -> Reader:
        """A reader that asks the API (reads without a resourceVersion: quorum reads) and
        writes each answer through into these stores, for a step no cache may decide."""
        reader = Reader(self.rest, operator_namespace=self.operator_namespace)
        reader._through = self.stores if self.stores is not None else self._through
        reader._snapshots = self._snapshots  # immutable content: shared
        return reader

    def blind_time(self, *, since: datetime) -> timedelta:
        """How long since the monotonic moment ``since`` this process was blind: its API
        requests failed or timed out (``rest.Health``). Zero when it never was."""
        return self.rest.health.blind_time(since=since)

    def _get(self, kind: str, namespace: str, name: str) -> Object | None:
        """One object by name: from the store when it knows, else from the API (and the
        answer kept: written through, or remembered for an object away from the store)."""
        if self.stores is not None:
            found = self.stores.get(kind=kind, namespace=namespace, name=name)
            if found.known:
                return found.body
        answer = self.rest.get(stores.path(kind, namespace, name))
        held = self.stores if self.stores is not None else self._through
        if held is not None:
            if answer is not None:
                held.observe(kind=kind, event_type=None, body={"kind": kind, **answer})
            held.remember(kind=kind, namespace=namespace, name=name, body=answer)
        return answer

    def custom_object(self, plural: str, namespace: str, name: str) -> Object | None:
        return self._get(KINDS[plural], namespace, name)

    def custom_objects(self, plural: str, namespace: str, *,
                       selector: str | None = None) -> list[Object]:
        if self.stores is not None and selector is None:
            held = self.stores.listing(kind=KINDS[plural], namespace=namespace)
            if held is not None:
                return held
        listed = self.rest.get(custom_path(plural, namespace),
                               query={"labelSelector": selector} if selector else None) or {}
        items: list[Object] = listed.get("items") or []
        for item in items:  # list items omit these; the models expect them
            item.setdefault("apiVersion", names.API_VERSION)
            if self._through is not None:
                self._through.observe(kind=KINDS[plural], event_type=None,
                                      body={"kind": KINDS[plural], **item})
        return items

    def slot(self, namespace: str, name: str) -> Slot | None:
        found = self.custom_object("slots", namespace, name)
        return Slot.model_validate(found) if found else None

    def run(self, namespace: str, name: str) -> AgentRun | None:
        found = self.custom_object("agentruns", namespace, name)
        return AgentRun.model_validate(found) if found else None

    def slots_in(self, namespace: str) -> list[Slot]:
        return [Slot.model_validate({**o, "kind": "Slot"})
                for o in self.custom_objects("slots", namespace)]

    def slots_of(self, namespace: str, run: str) -> list[Slot]:
        """The slots whose ``spec.run`` is ``run`` (immutable), never by the run label.

        A person can change a label: a relabelled slot must still count for its run (its
        dependents would otherwise never start). The caller checks the controlling owner.
        """
        if self.stores is not None:
            held = self.stores.slots_of(namespace=namespace, run=run)
            if held is not None:
                return [Slot.model_validate(o) for o in held]
        return [s for s in self.slots_in(namespace) if s.spec.run == run]

    def launch_specs(self, namespace: str) -> list[LaunchSpec]:
        return [LaunchSpec.model_validate({**o, "kind": "LaunchSpec"})
                for o in self.custom_objects("launchspecs", namespace)]

    def tenant(self, namespace: str) -> str | None:
        """The namespace's tenant label, cached a few seconds: every step asks, an admin
        changes it rarely. Not watched: one GET per namespace per few seconds does not
        grow with the number of slots, and a watch of namespaces would need the operator
        to hold every namespace's labels for this one; what the label guards is also
        checked at request time by admission (the command's tenant), so a few seconds'
        staleness decides nothing alone. :meth:`fresh` reads it from the API."""
        cached = self._cached_tenant(namespace)
        if cached is not None:
            return cached[1]
        # The work queue's threads share this reader: when the entry expires, the first
        # refreshes it and the others wait for its answer (without the lock each asked:
        # namespace GETs grew with the reconciles per second, i.e. with the slots).
        with self._tenants_lock:
            cached = self._cached_tenant(namespace)
            if cached is not None:
                return cached[1]
            found = self.rest.get(f"/api/v1/namespaces/{namespace}")
            labels = ((found or {}).get("metadata") or {}).get("labels") or {}
            tenant: str | None = labels.get(names.TENANT_LABEL)
            self._tenants[namespace] = (time.monotonic(), tenant)
            return tenant

    def default_budget(self, namespace: str) -> str | None:
        """The namespace's default budget (``agentrun.dev/default-budget``), read from the
        API: only while a run is unpinned, once a pass."""
        found = self.rest.get(f"/api/v1/namespaces/{namespace}")
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        text = annotations.get(names.DEFAULT_BUDGET_ANNOTATION)
        return None if text is None else str(text)

    def _cached_tenant(self, namespace: str) -> tuple[float, str | None] | None:
        cached = self._tenants.get(namespace)
        if cached is not None and self._through is None and (
                time.monotonic() - cached[0] < CACHE_SECONDS):
            return cached
        return None

    def node(self, name: str) -> Object | None:
        """A Node by name, cached a few seconds. Read only for an attempt's pod that
        cannot be confirmed gone (``core.attempts.lostnodes``): rare, and a watch of every
        Node for it would hold the whole cluster's nodes. At most ``NODES_KEPT`` names are
        remembered (a cluster's nodes come and go under new names)."""
        cached = self._nodes.get(name)
        if cached is not None and self._through is None and (
                time.monotonic() - cached[0] < CACHE_SECONDS):
            return cached[1]
        found = self.rest.get(f"/api/v1/nodes/{name}")
        if len(self._nodes) >= NODES_KEPT:
            self._nodes.clear()
        self._nodes[name] = (time.monotonic(), found)
        return found

    def pod(self, namespace: str, name: str) -> Object | None:
        return self._get("Pod", namespace, name)

    def lease(self, namespace: str, name: str) -> Object | None:
        return self._get("Lease", namespace, name)

    def configmap(self, namespace: str, name: str) -> Object | None:
        return self._get("ConfigMap", namespace, name)

    def configmap_once(self, namespace: str, name: str) -> Object | None:
        """A ConfigMap read from the API and not kept (a person's, named by one command
        and read once when it is decided: remembering each would grow without bound)."""
        return self.rest.get(stores.path("ConfigMap", namespace, name))

    def configmaps(self, namespace: str, *, selector: str) -> list[Object]:
        if self.stores is not None:
            held = self.stores.configmaps(namespace=namespace, selector=selector)
            if held is not None:
                return held
        listed = self.rest.get(stores.path("ConfigMap", namespace),
                               query={"labelSelector": selector}) or {}
        items: list[Object] = listed.get("items") or []
        if self._through is not None:
            for item in items:
                self._through.observe(kind="ConfigMap", event_type=None,
                                      body={"kind": "ConfigMap", **item})
        return items

    def launch_spec_snapshots(self, namespace: str, slot: str, *,
                              slot_uid: str) -> frozenset[str]:
        """The LaunchSpec snapshots of run ``slot`` that the object of uid ``slot_uid``
        controls (labels alone prove nothing).

        Since one snapshot per (run, spec digest) is the rule, the caller passes
        the run's name and uid here (the parameter names are the shared interface's).
        """
        selector = f"{names.RUN_LABEL}={slot},{names.SNAPSHOT_LABEL}=launchspec"
        return frozenset(cm["metadata"]["name"]
                         for cm in self.configmaps(namespace, selector=selector)
                         if owners.controlled_by(cm["metadata"], slot_uid))

    def pinned_launch_spec(self, namespace: str, pinned: PinnedLaunchSpec, *,
                           slot_uid: str) -> tuple[LaunchSpecSpec | None, str | None]:
        """The pinned spec from its snapshot, or why it cannot be had.

        ``slot_uid``: the uid that must control the snapshot: its run's for a per-run
        copy, the slot's own for one pinned before (``core.slots.specsnapshots.owner_uid``).
        """
        key = (namespace, pinned.snapshot)
        if key in self._snapshots:
            return self._snapshots[key], None
        found = self.configmap(namespace, pinned.snapshot)
        if found is None:
            return None, f"the LaunchSpec snapshot {pinned.snapshot} is missing"
        if not owners.controlled_by(found.get("metadata") or {}, slot_uid):
            return None, (f"the LaunchSpec snapshot {pinned.snapshot} is not the pinned copy "
                          "(another controller); delete it and reassign the slot")
        try:
            spec = specsnapshots.read(found, pinned=pinned)
        except ValueError as error:
            return None, str(error)
        self._snapshots[key] = spec
        return spec, None

    def stamping(self) -> stamping.Stamping:
        """Is actor stamping in force now, under which epoch (``core.policies.stamping.assess``)?

        Three reads without a resourceVersion, so each is a quorum read served at the
        latest state; called after the command was read, never cached.
        """
        return stamping.assess(
            policy=self.rest.get(f"{ADMISSION}/mutatingadmissionpolicies/{names.STAMP_POLICY}"),
            binding=self.rest.get(
                f"{ADMISSION}/mutatingadmissionpolicybindings/{names.STAMP_POLICY}"),
            secret=self.rest.get(stamping_secret_path(namespace=self.operator_namespace)),
            namespace=self.operator_namespace)

    def config_snapshots_problem(self, run: AgentRun) -> str | None:
        """Why the run's pinned snapshots cannot be mounted as pinned, or None.

        Immutable ConfigMaps cannot be edited, but they can be deleted and recreated under
        the same name: each must still be controlled by the run and hash to its pin.
        """
        pins = run.status.pinned
        if pins is None:
            return "the run is not pinned"
        namespace = run.metadata.namespace or ""
        for kind, pin in (("package", pins.package), ("workflow", pins.workflow),
                          ("bindings", pins.bindings)):
            found = self.configmap(namespace, pin.snapshot)
            if found is None or not runobjects.matches_snapshot(
                    found, run_uid=run.metadata.uid or "", sha256=pin.sha256):
                return (f"the pinned {kind} snapshot {pin.snapshot} is missing or is not the "
                        "run's pinned copy; workers would not read what was pinned (recreate "
                        "the run to pin again)")
        return None
