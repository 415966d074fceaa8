"""A real watch feeding :class:`agentrun.kube.stores.Stores`, as the operator's Kopf
handlers do, with a gate a test closes to hold the events back.

A thread runs the kubernetes library's watch of one kind in one namespace (resuming from
the last resourceVersion when the server ends the stream) and calls ``Stores.observe``
with each event's raw object. While the gate is closed the thread waits before delivering
the next event, so a test can write, read its own write from the stores *before* the
watch delivered it, then open the gate and see what the late events do. ``delivered``
records each delivered event's type and resourceVersion, and the version the stores held
for that object right after it (to show an older event did not regress it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import kubernetes

from agentrun.api import names
from agentrun.kube import stores

SERVER_TIMEOUT = 5  # seconds a watch stream lasts before the thread resumes it


def _lister(api: kubernetes.client.ApiClient, kind: str) -> Callable[..., Any]:
    if kind == "Lease":
        return kubernetes.client.CoordinationV1Api(api).list_namespaced_lease
    if kind in ("Pod", "ConfigMap"):
        core = kubernetes.client.CoreV1Api(api)
        return core.list_namespaced_pod if kind == "Pod" else core.list_namespaced_config_map
    custom = kubernetes.client.CustomObjectsApi(api)

    def listing(namespace: str, **kwargs: Any) -> Any:
        return custom.list_namespaced_custom_object(names.GROUP, names.VERSION, namespace,
                                                    stores.PLURALS[kind], **kwargs)
    return listing


class Feed:
    def __init__(self, *, api: kubernetes.client.ApiClient, held: stores.Stores, kind: str,
                 namespace: str, selector: str | None = None, since: str | None = None) -> None:
        """``since``: the resourceVersion to watch from (a LIST's), so that no event after
        it is missed however late the thread's request goes out; by default a LIST's made
        on entering, before the test writes anything."""
        self.held, self.kind, self.namespace = held, kind, namespace
        self.since = since
        self.selector = selector
        self.list = _lister(api, kind)
        self.gate = threading.Event()
        self.gate.set()
        self.delivered: list[tuple[str, str, str | None]] = []  # type, version, held after
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._watch = kubernetes.watch.Watch()
        self._thread = threading.Thread(target=self._run, name=f"feed-{kind}", daemon=True)

    def listed_at(self) -> str:
        """The resourceVersion of a LIST of the kind now: a point to watch from."""
        listed = self.list(self.namespace, limit=1)
        meta = listed["metadata"] if isinstance(listed, dict) else listed.metadata
        return str(meta["resourceVersion"] if isinstance(meta, dict) else meta.resource_version)

    def __enter__(self) -> Feed:
        if self.since is None:
            self.since = self.listed_at()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self.gate.set()
        self._watch.stop()
        self._thread.join(timeout=SERVER_TIMEOUT + 5)

    def _run(self) -> None:
        version = self.since
        kwargs = {"label_selector": self.selector} if self.selector else {}
        try:
            while not self._stop.is_set():
                for event in self._watch.stream(self.list, self.namespace,
                                                timeout_seconds=SERVER_TIMEOUT,
                                                resource_version=version, **kwargs):
                    self.gate.wait()
                    if self._stop.is_set():
                        return
                    raw = event["raw_object"]
                    version = raw["metadata"]["resourceVersion"]
                    self.held.observe(kind=self.kind, event_type=event["type"],
                                      body={"kind": self.kind, **raw})
                    found = self.held.get(kind=self.kind, namespace=self.namespace,
                                          name=raw["metadata"]["name"]).body
                    self.delivered.append((event["type"], version, None if found is None
                                           else found["metadata"]["resourceVersion"]))
        except BaseException as error:  # reported by the test, never swallowed
            if not self._stop.is_set():
                self.errors.append(error)
