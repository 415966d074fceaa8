"""Kopf handlers: thin. Each observes an event, names the object to reconcile, and returns.

Only event handlers are used (``kopf.on.event``): they keep no progress and write no
diff-base annotations, so every write to a user's object is the applier's own, under a
precondition. Reconciling is level-based: a handler never acts on what the event says,
only triggers a fresh read-decide-apply of the object it concerns.

Which objects: AgentRuns, Slots and LaunchSpecs; Pods and ConfigMaps only with our labels,
filtered by the API server (``settings.watching.label_selectors``); Leases are never
watched, only read for Active slots by the timer loop.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import kopf

from agentrun.api import names
from agentrun.controller import configuration, operators

RUNS = (names.GROUP, names.VERSION, "agentruns")
SLOTS = (names.GROUP, names.VERSION, "slots")
LAUNCHSPECS = (names.GROUP, names.VERSION, "launchspecs")


def registry() -> kopf.OperatorRegistry:
    """The registry these handlers were registered into (Kopf's default, on import)."""
    return kopf.get_default_registry()


def _operator(memo: Any) -> operators.Operator:
    found: operators.Operator = memo.operator
    return found


@kopf.on.startup()
async def startup(*, settings: kopf.OperatorSettings, memo: Any,
                  logger: logging.Logger | logging.LoggerAdapter[Any], **_: Any) -> None:
    configuration.configure(settings)
    memo.operator = operators.Operator.start(context=memo.context, tick=memo.tick,
                                             logger=logging.getLogger("agentrun"))
    logger.info("agentrun operator started")


@kopf.on.cleanup()
async def cleanup(*, memo: Any, **_: Any) -> None:
    await _operator(memo).stop()


@kopf.on.login()
def login(*, memo: Any, **_: Any) -> kopf.ConnectionInfo:
    return operators.connection_info(context=memo.context)


@kopf.on.event(*SLOTS)
async def slot_event(*, event: kopf.RawEvent, name: str, namespace: str | None, memo: Any,
                     **_: Any) -> None:
    namespace = namespace or ""
    operator = _operator(memo)
    if event["type"] == "DELETED":
        operator.forget(("Slot", namespace, name))
        # Its run may be waiting to create a slot of the same name (a recreated run).
        run = (event["object"].get("spec") or {}).get("run")
        if run:
            await operator.trigger(("AgentRun", namespace, run))
        return
    await operator.trigger(("Slot", namespace, name))


@kopf.on.event(*RUNS)
async def run_event(*, event: kopf.RawEvent, name: str, namespace: str | None, memo: Any,
                    **_: Any) -> None:
    namespace = namespace or ""
    operator = _operator(memo)
    if event["type"] == "DELETED":
        operator.forget(("AgentRun", namespace, name))
        return
    await operator.trigger(("AgentRun", namespace, name))


@kopf.on.event("v1", "pods", labels={names.SLOT_LABEL: kopf.PRESENT})
async def pod_event(*, labels: kopf.Labels, namespace: str | None, memo: Any,
                    **_: Any) -> None:
    await _operator(memo).trigger(("Slot", namespace or "", labels[names.SLOT_LABEL]))


@kopf.on.event(*LAUNCHSPECS)
async def launch_spec_event(*, event: kopf.RawEvent, name: str, namespace: str | None,
                            memo: Any, **_: Any) -> None:
    """A new or changed LaunchSpec may serve a slot that is Pending for want of one; its
    own status (validity, pins) is looked at too."""
    operator = _operator(memo)
    namespace = namespace or ""
    if event["type"] == "DELETED":
        operator.forget(("LaunchSpec", namespace, name))
    else:
        await operator.trigger(("LaunchSpec", namespace, name))
    await operator.wake_pending(namespace)


@kopf.on.event("v1", "configmaps", labels={names.CONFIG_KIND_LABEL: kopf.PRESENT})
async def config_event(*, namespace: str | None, memo: Any, **_: Any) -> None:
    """A new or accepted configuration may let an unpinned run pin."""
    operator = _operator(memo)
    unpinned = [key for key in operator.unpinned if key[1] == namespace]
    await asyncio.gather(*(operator.trigger(key) for key in unpinned))
