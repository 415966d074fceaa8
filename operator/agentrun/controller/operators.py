"""The running operator: its API client, reconcilers, schedule and timer loop, in one place.

Kopf handlers reach it through ``memo.operator``. It runs the synchronous reconcilers in
worker threads, posts the Events they return, and keeps the little it must remember:
each slot's last state (to wake Pending slots when a LaunchSpec appears, and the run
when a slot's state changes) and which runs are not pinned yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import kopf
import kubernetes

from agentrun.api import bounds
from agentrun.api.runs import AgentRun
from agentrun.api.slots import SlotState
from agentrun.controller import launchspecs, runs, scheduling, slots, stamping
from agentrun.core import clocks, guards
from agentrun.kube import clients, reads, rest, writes

Key = scheduling.Key
BUSY = frozenset({SlotState.CLAIMING, SlotState.ACTIVE})
RETRY_BACKOFF = timedelta(seconds=5)  # after an unexpected error (a 500, a timeout, a quota)
# Three GETs a pass; commands never wait on it (they read stamping themselves), only a
# minting does: at most this much after the enforcement delay.
STAMPING_PERIOD_SECONDS = 2.0


def connection_info(*, context: str | None) -> kopf.ConnectionInfo:
    """Kopf's credentials from the same kubeconfig context the reconcilers use."""
    clients.configure(context=context)
    config = kubernetes.client.Configuration.get_default_copy()
    header = (config.get_api_key_with_prefix("BearerToken")
              or config.get_api_key_with_prefix("authorization") or "")
    scheme, _, token = header.partition(" ")
    return kopf.ConnectionInfo(
        server=config.host, ca_path=config.ssl_ca_cert, insecure=not config.verify_ssl,
        scheme=scheme if token else None, token=token or scheme or None,
        certificate_path=config.cert_file, private_key_path=config.key_file)


@dataclass
class Operator:
    slots: slots.SlotReconciler
    runs: runs.RunReconciler
    launch_specs: launchspecs.LaunchSpecReconciler
    logger: logging.Logger
    tick: float
    schedule: scheduling.Schedule = field(default_factory=scheduling.Schedule)
    states: dict[Key, SlotState] = field(default_factory=dict)
    unpinned: set[Key] = field(default_factory=set)
    generations: dict[Key, int | None] = field(default_factory=dict)
    coalescer: scheduling.Coalescer | None = None
    timer: asyncio.Task[None] | None = None
    keeper: stamping.Keeper | None = None
    keeping: asyncio.Task[None] | None = None

    @classmethod
    def start(cls, *, context: str | None, tick: float, logger: logging.Logger) -> Operator:
        api = clients.configure(context=context)
        client = rest.Rest(api)
        reader, writer = reads.Reader(client), writes.Writer(client)
        operator = cls(slots=slots.SlotReconciler(reader=reader, writer=writer, logger=logger),
                       runs=runs.RunReconciler(reader=reader, writer=writer, logger=logger),
                       launch_specs=launchspecs.LaunchSpecReconciler(
                           reader=reader, writer=writer, logger=logger),
                       logger=logger, tick=tick)
        operator.coalescer = scheduling.Coalescer(operator.reconcile, logger)
        operator.keeper = stamping.Keeper(reader=reader, writer=writer, logger=logger)
        operator.keeping = asyncio.create_task(operator.keep_stamping())
        return operator

    async def keep_stamping(self) -> None:
        """Check the stamping epoch every few seconds, minting when due."""
        assert self.keeper is not None
        while True:
            try:
                await asyncio.to_thread(self.keeper.check)
            except Exception:  # a 500 or a timeout: the next pass tries again
                self.logger.exception("stamping: the epoch check failed")
            await asyncio.sleep(STAMPING_PERIOD_SECONDS)  # the check's period

    def start_timer(self) -> None:
        """Start the timer loop from the first handler that triggers work, not at startup.

        The task inherits the context it is created in, and ``kopf.event`` needs Kopf's
        event queue, which Kopf puts only in the context of object handlers: a timer
        started by the startup handler would lose every Event of the reconciles it runs
        (an attempt ended by lease expiry, a fenced pod, a passed deadline).
        """
        if self.timer is None:
            assert self.coalescer is not None
            self.timer = asyncio.create_task(scheduling.timer_loop(
                schedule=self.schedule, coalescer=self.coalescer, tick=self.tick))

    async def stop(self) -> None:
        for task in (self.timer, self.keeping):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def trigger(self, key: Key) -> None:
        assert self.coalescer is not None
        self.start_timer()
        await self.coalescer.trigger(key)

    def forget(self, key: Key) -> None:
        self.schedule.forget(key)
        self.states.pop(key, None)
        self.unpinned.discard(key)
        self.generations.pop(key, None)
        if key[0] == "Slot":
            self.slots.forget(namespace=key[1], slot=key[2])

    def retry_at(self) -> datetime:
        return clocks.system() + RETRY_BACKOFF

    async def reconcile(self, key: Key) -> None:
        kind, namespace, name = key
        if kind == "AgentRun":
            await self.reconcile_run(key)
            return
        if kind == "LaunchSpec":
            done = await asyncio.to_thread(self.launch_specs.reconcile, namespace, name)
            self.schedule.note(key, state=None,
                               until=self.retry_at() if done.retry else done.until)
            return
        result = await asyncio.to_thread(self.slots.reconcile, namespace, name)
        for slot, event in result.events:
            self.post(slot.model_dump(mode="json", by_alias=True), event)
        if result.state is None and not result.retry:
            self.forget(key)
            return
        previous = self.states.get(key)
        if result.state is not None:
            self.states[key] = result.state
        until = self.retry_at() if result.retry else result.wait.until if result.wait else None
        self.schedule.note(key, state=result.state, until=until)
        if previous is not result.state and result.launch_spec is not None:
            await self.trigger(("LaunchSpec", namespace, result.launch_spec))
        if previous is not result.state and result.run is not None:
            await self.trigger(("AgentRun", namespace, result.run))
            if previous in BUSY and result.state not in BUSY:
                await self.wake_slots(namespace, result.run)  # one under maxActive may go
            if result.state in (SlotState.SUCCEEDED, SlotState.FAILED):
                await self.wake_pending(namespace)

    async def reconcile_run(self, key: Key) -> None:
        _, namespace, name = key
        result = await asyncio.to_thread(self.runs.reconcile, namespace, name)
        for subject, event in result.events:
            self.post(subject.model_dump(mode="json", by_alias=True), event)
        run: AgentRun | None = await asyncio.to_thread(self.read_run, namespace, name)
        if run is None or run.status.pinned is not None:
            self.unpinned.discard(key)
        else:
            self.unpinned.add(key)
        self.schedule.note(key, state=None,
                           until=self.retry_at() if result.retry else result.until)
        if run is not None:
            # A spec change (suspend lifted, a new deadline) concerns slots that wait on
            # nothing else: wake them. (At startup every slot is reconciled anyway.)
            previous = self.generations.get(key, run.metadata.generation)
            self.generations[key] = run.metadata.generation
            if previous != run.metadata.generation:
                await self.wake_slots(namespace, name)

    def read_run(self, namespace: str, name: str) -> AgentRun | None:
        return self.runs.reader.run(namespace, name)

    async def wake_slots(self, namespace: str, run: str) -> None:
        found = await asyncio.to_thread(self.runs.reader.slots_of, namespace, run)
        await asyncio.gather(*(self.trigger(("Slot", namespace, slot.metadata.name))
                               for slot in found))

    async def wake_pending(self, namespace: str) -> None:
        waiting = [key for key, state in self.states.items()
                   if key[1] == namespace and state is SlotState.PENDING]
        await asyncio.gather(*(self.trigger(key) for key in waiting))

    def post(self, body: dict[str, Any], event: guards.Event) -> None:
        message = bounds.clip(event.message, limit=bounds.MESSAGE_CHARS)
        with contextlib.suppress(LookupError):  # outside Kopf's context: log only
            kopf.event(kopf.Body(cast(kopf.RawBody, body)), type=event.type,
                       reason=event.reason, message=message)
        self.logger.info("%s %s: %s", event.type, event.reason, message)
