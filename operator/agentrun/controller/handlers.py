"""Kopf handlers: thin. Each observes its event into the stores, adds a key, and returns.

Only event handlers are used (``kopf.on.event``): they keep no progress and write no
diff-base annotations, so every write to a user's object is the applier's own, under a
precondition. Reconciling is level-based: a handler never acts on what the event says,
only queues a fresh read-decide-apply of the object it concerns (``controller.queues``).

Which objects: AgentRuns, Slots and LaunchSpecs; Pods, Leases and ConfigMaps only with our
labels, filtered by the API server (``settings.watching.label_selectors``). A Lease's
renewal is an event like any other: no timer looks at Active slots.
"""

from __future__ import annotations

import logging
from typing import Any

import kopf

from agentrun.api import names
from agentrun.controller import configuration, runtime, sessions

RUNS = (names.GROUP, names.VERSION, "agentruns")
SLOTS = (names.GROUP, names.VERSION, "slots")
LAUNCHSPECS = (names.GROUP, names.VERSION, "launchspecs")
LEASES = ("coordination.k8s.io", "v1", "leases")


def registry() -> kopf.OperatorRegistry:
    """The registry these handlers were registered into (Kopf's default, on import)."""
    return kopf.get_default_registry()


def _operator(memo: Any) -> runtime.Operator:
    found: runtime.Operator = memo.operator
    return found


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: Any,
                  logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
    configuration.configure(settings)
    operator = runtime.Operator.build(
        context=memo.context, bucket=memo.bucket, workers=memo.workers,
        timeout=memo.reconcile_timeout, meters=memo.meters, journal=memo.journal,
        election=memo.election, identity=memo.identity, leading=memo.leading,
        telemetry=memo.get("telemetry"), logger=logging.getLogger("agentrun"),
        operator_namespace=memo.operator_namespace)
    memo.operator = operator
    await operator.begin(namespaces=memo.namespaces)
    logger.info("agentrun operator started")


@kopf.on.cleanup()
async def cleanup(*, memo: Any, **_: Any) -> None:
    await _operator(memo).stop()


@kopf.on.login()
async def login(*, memo: Any, **_: Any) -> kopf.AiohttpSession:
    return sessions.login(context=memo.context, bucket=memo.bucket)


@kopf.on.event(*SLOTS)
async def slot_event(*, event: kopf.RawEvent, name: str, namespace: str | None, memo: Any,
                     **_: Any) -> None:
    namespace = namespace or ""
    operator = _operator(memo)
    operator.observe(kind="Slot", event=event)
    if event["type"] == "DELETED":
        operator.forget(("Slot", namespace, name))
        # Its run may be waiting to create a slot of the same name (a recreated run).
        run = (event["object"].get("spec") or {}).get("run")
        if run:
            operator.queue.add(("AgentRun", namespace, run))
        return
    operator.queue.add(("Slot", namespace, name))


@kopf.on.event(*RUNS)
async def run_event(*, event: kopf.RawEvent, name: str, namespace: str | None, memo: Any,
                    **_: Any) -> None:
    namespace = namespace or ""
    operator = _operator(memo)
    operator.observe(kind="AgentRun", event=event)
    if event["type"] == "DELETED":
        operator.forget(("AgentRun", namespace, name))
        return
    operator.queue.add(("AgentRun", namespace, name))


@kopf.on.event("v1", "pods", labels={names.SLOT_LABEL: kopf.PRESENT})
async def pod_event(*, event: kopf.RawEvent, labels: kopf.Labels, namespace: str | None,
                    memo: Any, **_: Any) -> None:
    operator = _operator(memo)
    operator.observe(kind="Pod", event=event)
    operator.queue.add(("Slot", namespace or "", labels[names.SLOT_LABEL]))


@kopf.on.event(*LEASES, labels={names.SLOT_LABEL: kopf.PRESENT})
async def lease_event(*, event: kopf.RawEvent, labels: kopf.Labels, namespace: str | None,
                      memo: Any, **_: Any) -> None:
    """A renewal, a release or a tombstone of an attempt's Lease concerns its slot."""
    operator = _operator(memo)
    operator.observe(kind="Lease", event=event)
    operator.queue.add(("Slot", namespace or "", labels[names.SLOT_LABEL]))


@kopf.on.event(*LAUNCHSPECS)
async def launch_spec_event(*, event: kopf.RawEvent, name: str, namespace: str | None,
                            memo: Any, **_: Any) -> None:
    """A new or changed LaunchSpec may serve a slot that is Pending for want of one, or a
    claim waiting on its LaunchSpec; its own status (validity, pins) is looked at too."""
    operator = _operator(memo)
    namespace = namespace or ""
    operator.observe(kind="LaunchSpec", event=event)
    if event["type"] == "DELETED":
        operator.forget(("LaunchSpec", namespace, name))
    else:
        operator.queue.add(("LaunchSpec", namespace, name))
    operator.wake_pending(namespace, claiming=True)


@kopf.on.event("v1", "configmaps", labels={names.CONFIG_KIND_LABEL: kopf.PRESENT})
async def config_event(*, event: kopf.RawEvent, namespace: str | None, memo: Any,
                       **_: Any) -> None:
    """A new or accepted configuration may let an unpinned run pin."""
    operator = _operator(memo)
    operator.observe(kind="ConfigMap", event=event)
    operator.wake_unpinned(namespace or "")
