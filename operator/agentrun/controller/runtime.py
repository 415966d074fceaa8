"""The running operator: its client, stores, reconcilers and work queue, in one place.

Kopf handlers reach it through ``memo.operator``: they observe each event into the stores
and add a key to the queue, nothing more. The queue's workers run the synchronous
reconcilers in threads of the operator's own pool (two per worker: one spare for a
reconcile abandoned at its timeout), post the Events they return through our own client,
and say when to look next (``scheduling.next_look``). What is remembered here: each slot's
last state (to wake Pending slots when a LaunchSpec appears, and the run when a slot's
state changes) and which runs are not pinned yet.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from agentrun import rest
from agentrun.api.runs import AgentRun, JournalSettings
from agentrun.api.slots import SlotState
from agentrun.controller import (
    launchspecs,
    leadership,
    metrics,
    queues,
    runs,
    scheduling,
    slots,
    stamping,
)
from agentrun.core.base import census as census_
from agentrun.core.policies import leadership as leadership_rules
from agentrun.core.policies import stamping as stamping_policy
from agentrun.kube import clients, events, reads, stores, writes
from agentrun.rest import clocks, throttle
from agentrun.telemetry import Telemetry

Key = scheduling.Key
T = TypeVar("T")
SlotResult = slots.Result  # (the class's fields named slots and runs hide the modules)
RunResult = runs.Result
BUSY = frozenset({SlotState.CLAIMING, SlotState.ACTIVE})
RESYNC_SECONDS = 60.0
BLIND_WINDOW = timedelta(minutes=5)  # the window agentrun_blind_seconds covers
PRIME_BACKOFF = queues.Backoff(base=0.5, cap=30.0)
# Three GETs a pass; commands never wait on it (they read stamping themselves), only a
# minting does: at most this much after the enforcement delay.
STAMPING_PERIOD_SECONDS = 2.0
STAMPING_WAIT_SECONDS = 0.5  # before the first reconcile: how often the keeper looks
SLOW_PASS_SECONDS = 0.05  # a run's pass that takes this much CPU is logged at INFO


def views(client: rest.Rest, store: stores.Stores, *,
          operator_namespace: str) -> tuple[reads.Reader, writes.Writer]:
    """The reader and writer over ``store``: reads from memory, writes through into it."""
    return (reads.Reader(client, stores=store, operator_namespace=operator_namespace),
            writes.Writer(client, stores=store))


def prime_namespaces(patterns: Sequence[str]) -> list[str]:
    """What to LIST at startup: the names served, or everything (empty) when any is a glob
    (a LIST takes one namespace or all; the watches then fill in what was left out)."""
    if any(char in pattern for pattern in patterns for char in "*?[!"):
        return []
    return list(patterns)


@dataclass
class Operator:
    client: rest.Rest
    stores: stores.Stores
    slots: slots.SlotReconciler
    runs: runs.RunReconciler
    launch_specs: launchspecs.LaunchSpecReconciler
    keeper: stamping.Keeper
    poster: events.Poster
    logger: logging.Logger
    workers: int
    timeout: float
    executor: concurrent.futures.ThreadPoolExecutor
    meters: metrics.Metrics = field(default_factory=metrics.Metrics)
    queue: queues.Queue[Key] = field(init=False)
    states: dict[Key, SlotState] = field(default_factory=dict)
    unpinned: set[Key] = field(default_factory=set)
    generations: dict[Key, int | None] = field(default_factory=dict)
    raises: dict[Key, int] = field(default_factory=dict)  # a run's budget raises, as last seen
    keeping: asyncio.Task[None] | None = None
    # Leader election (None: this process reconciles alone, as it always did).
    elector: leadership.Elector | None = None
    serving: asyncio.Task[None] | None = None
    primed: list[str] = field(default_factory=list)  # the namespaces listed at start
    # Where the spans each write completed go (off: nowhere; the caller shuts it down).
    telemetry: Telemetry = field(default_factory=Telemetry)

    def __post_init__(self) -> None:
        meters = self.meters
        self.queue = queues.Queue(work=self.work, workers=self.workers, timeout=self.timeout,
                                  resync=RESYNC_SECONDS, logger=self.logger,
                                  waited=lambda key, seconds: meters.queued(key[0], seconds),
                                  retried=lambda key: meters.retried(key[0]))
        meters.watch_depth(lambda: self.queue.depth)
        meters.watch_census(self.census)
        if self.client is not None:  # (a test's operator may have none)
            meters.watch_blind(lambda: self.client.health.blind_time(
                since=clocks.ticks() - BLIND_WINDOW).total_seconds())
            self.client.observe = meters.api_request
        if self.elector is not None:  # its own client (its own timeouts): counted too
            self.elector.client.observe = meters.api_request

    def census(self) -> census_.Census | None:
        """The slots and runs by state from the stores, while this replica leads (a
        standby's would count them twice)."""
        if self.elector is not None and not self.elector.leading.is_set():
            return None
        return census_.count(slots=self.stores.held("Slot"),
                             runs=self.stores.held("AgentRun"), now=clocks.system())

    @classmethod
    def build(cls, *, context: str | None, bucket: throttle.Bucket | None, workers: int,
              timeout: float, logger: logging.Logger,
              meters: metrics.Metrics | None = None,
              journal: JournalSettings | None = None,
              election: leadership_rules.Timing | None = None,
              identity: str = events.COMPONENT,
              leading: threading.Event | None = None,
              telemetry: Telemetry | None = None,
              operator_namespace: str) -> Operator:
        """The operator over one client; ``journal``: where new runs' journals go (pinned
        on each at launch), None: runs get no journal; ``election``: elect a leader on the
        leader Lease with this timing, as ``identity`` (its pod's name: what its Events
        name, and what the fencing policy lets write); ``leading``: the event the elector
        sets while this replica leads (shared with the history API's certificate);
        ``telemetry``: where the spans of the runs' traces go (None: nowhere);
        ``operator_namespace``: the namespace it runs in, where its leader Lease, fencing
        token and stamping Secret are (:mod:`agentrun.kube.ownnamespace`)."""
        threads = 2 * workers  # the reconcile executor's, which share the one client
        client = rest.Rest(clients.configure(context=context), throttle=bucket,
                           connections=max(threads, rest.DEFAULT_CONNECTIONS))
        store = stores.Stores()
        reader, writer = views(client, store, operator_namespace=operator_namespace)
        elector = None if election is None else leadership.Elector(
            # Its requests time out within one retry period: a hung one must not hold the
            # renewals (the watchdog stops a leader past its renew deadline regardless).
            client=rest.Rest(clients.configure(context=context), timeout=rest.Timeout(
                connect=min(5.0, election.retry), read=election.retry)),
            identity=identity, timing=election, logger=logger, namespace=operator_namespace,
            leading=leading if leading is not None else threading.Event())
        keeper = stamping.Keeper(reader=reader, writer=writer, logger=logger)
        if elector is not None:
            keeper.may_mint = elector.leading.is_set
        return cls(client=client, stores=store, elector=elector,
                   slots=slots.SlotReconciler(reader=reader, writer=writer, logger=logger),
                   runs=runs.RunReconciler(reader=reader, writer=writer, journal=journal,
                                           logger=logger),
                   launch_specs=launchspecs.LaunchSpecReconciler(
                       reader=reader, writer=writer, logger=logger),
                   keeper=keeper,
                   poster=events.Poster(client, logger=logger, instance=identity),
                   logger=logger,
                   workers=workers, timeout=timeout, meters=meters or metrics.Metrics(),
                   telemetry=telemetry or Telemetry(),
                   executor=concurrent.futures.ThreadPoolExecutor(
                       max_workers=threads, thread_name_prefix="reconcile"))

    async def begin(self, *, namespaces: Sequence[str]) -> None:
        """Prime the stores (retrying with backoff), wait for the stamping epoch
        (:meth:`until_stamping`), then start the workers and keeper.

        Handlers may add keys before this ends: they wait in the queue, so no reconcile
        decides from stores that hold nothing yet. Under leader election it returns once
        the stores are primed (Kopf starts its watches only after this: they keep a
        standby's stores current) and :meth:`serve` waits for the lead in a task.
        """
        self.primed = prime_namespaces(namespaces)
        await self.patiently(functools.partial(
            self.stores.prime, client=self.client, namespaces=self.primed),
            what="priming the caches")
        self.meters.unready("the stamping epoch is not in force yet")
        if self.elector is None:
            await self.serve()
            return
        self.elector.start()
        self.keeping = asyncio.create_task(self.keep_stamping())  # readiness: the epoch
        self.serving = asyncio.create_task(self.serve())

    async def serve(self) -> None:
        """Once this replica leads (at once without election), wait for the epoch and
        start the work queue: the keys added meanwhile are its first work."""
        if self.elector is not None:
            self.logger.info("leading: %s stands by, its caches primed",
                             self.elector.identity)
            led = asyncio.Event()
            loop = asyncio.get_running_loop()
            self.elector.on_lead = lambda: loop.call_soon_threadsafe(led.set)
            if self.elector.leading.is_set():  # (led before the callback was set)
                led.set()
            await led.wait()
            # Fenced in: the former leader writes nothing more. List everything again,
            # so no decision (maxActive above all) rests on a cache that missed its last
            # writes.
            await self.patiently(functools.partial(
                self.stores.prime, client=self.client, namespaces=self.primed),
                what="priming the caches again as the new leader")
        await self.until_stamping()
        self.queue.start()
        if self.keeping is None:
            self.keeping = asyncio.create_task(self.keep_stamping())

    async def until_stamping(self) -> None:
        """Wait until the stamping epoch is in force (minting it when due), before the
        first reconcile.

        Until the epoch Secret exists, the stamping policy's binding refuses every create
        and update of a Slot or an AgentRun (its params are not found), the operator's own
        slot creates and command removals included: reconciling earlier only meets 403s
        and retries. Waiting is pointless only when no epoch can be minted (the policy or
        its binding missing or edited): then it reconciles at once, and commands are
        refused (``CommandsRefused``) until stamping is back, as they always were.
        """
        while True:
            found = await self.patiently(self.keeper.check, what="stamping: the epoch check")
            self.stamped(found)
            if found.epoch is not None:
                return
            if not found.mint_needed:
                self.logger.warning("stamping is not in force and waiting cannot bring it "
                                    "(%s): reconciling without it", found.problem)
                return
            await asyncio.sleep(STAMPING_WAIT_SECONDS)  # the minting's polling period

    async def patiently(self, call: Callable[[], T], *, what: str) -> T:
        """``call`` in a thread, retried with backoff while it raises (an unreachable or
        failing API server)."""
        failures = 0
        while True:
            try:
                return await self.in_thread(call)
            except Exception as error:
                failures += 1
                delay = PRIME_BACKOFF.delay(failures)
                self.logger.warning("%s failed (%s); again in %.1f s", what, error, delay)
                await asyncio.sleep(delay)

    def stamped(self, found: stamping_policy.Stamping) -> None:
        """``/readyz`` follows the epoch: ready only while stamping is in force."""
        if found.epoch is not None:
            self.meters.ready.set()
        else:
            self.meters.unready(f"stamping is not in force: {found.problem}")

    async def keep_stamping(self) -> None:
        """Check the stamping epoch every few seconds, minting when due."""
        while True:
            try:
                self.stamped(await self.in_thread(self.keeper.check))
            except Exception:  # a 500 or a timeout: the next pass tries again
                self.logger.exception("stamping: the epoch check failed")
            await asyncio.sleep(STAMPING_PERIOD_SECONDS)  # the check's period

    async def stop(self) -> None:
        for task in (self.serving, self.keeping):  # first: they would set /readyz again
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self.meters.unready("stopping")
        await self.queue.stop()
        if self.elector is not None:  # last (a reconcile thread still midway is fenced)
            await asyncio.get_running_loop().run_in_executor(None, self.elector.stop)
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def in_thread(self, call: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)

    def observe(self, *, kind: str, event: Any) -> None:
        """Record a watch event in the stores (before any key it concerns is added)."""
        self.stores.observe(kind=kind, event_type=event.get("type"),
                            body=dict(event.get("object") or {}))

    def forget(self, key: Key) -> None:
        self.queue.forget(key)
        self.states.pop(key, None)
        self.unpinned.discard(key)
        self.generations.pop(key, None)
        self.raises.pop(key, None)
        if key[0] == "Slot":
            self.slots.forget(namespace=key[1], slot=key[2])

    async def work(self, key: Key) -> queues.Next:
        """One pass over ``key``, for a worker of the queue; an error is counted by kind,
        its duration measured."""
        started = time.monotonic()
        try:
            following = await self.look(key)
        except Exception:
            self.meters.reconcile_error(key[0])
            raise
        finally:
            self.meters.reconciled(key[0], time.monotonic() - started)
        if following.retry:
            self.meters.reconcile_error(key[0])
        return following

    async def look(self, key: Key) -> queues.Next:
        if key[0] == "AgentRun":
            return await self.reconcile_run(key)
        if key[0] == "LaunchSpec":
            done = await self.in_thread(functools.partial(
                self.launch_specs.reconcile, key[1], key[2]))
            return scheduling.next_look(retry=done.retry, until=done.until, now=clocks.system())
        return await self.reconcile_slot(key)

    def slot_pass(self, namespace: str, name: str) -> SlotResult:
        started = time.thread_time()
        result = self.slots.reconcile(namespace, name)
        self.logger.debug("slot %s/%s: a pass of %.3f s CPU", namespace, name,
                          time.thread_time() - started)
        for tally in result.tallies:
            self.meters.count(tally)
        for slot, event in result.events:
            self.poster.post(slot.model_dump(mode="json", by_alias=True), event)
        self.telemetry.report_all(result.spans)  # after the Events: see report_all
        return result

    def run_pass(self, namespace: str, name: str) -> tuple[RunResult, AgentRun | None]:
        """One pass over a run; its CPU time is logged, at INFO from ``SLOW_PASS_SECONDS``
        (a run's pass is what grows with its width: every slot laid out in one step)."""
        started = time.thread_time()
        result = self.runs.reconcile(namespace, name)
        used = time.thread_time() - started
        self.logger.log(logging.INFO if used >= SLOW_PASS_SECONDS else logging.DEBUG,
                        "run %s/%s: a pass of %.3f s CPU", namespace, name, used)
        for subject, event in result.events:
            self.meters.run_event(event.reason)  # an Event is kept only once its write returned
            self.poster.post(subject.model_dump(mode="json", by_alias=True), event)
        self.telemetry.report_all(result.spans)
        return result, self.runs.reader.run(namespace, name)

    async def reconcile_slot(self, key: Key) -> queues.Next:
        _, namespace, name = key
        result = await self.in_thread(functools.partial(self.slot_pass, namespace, name))
        if result.state is None and not result.retry:
            self.forget(key)
            return queues.Next()
        previous = self.states.get(key)
        if result.state is not None:
            self.states[key] = result.state
        if previous is not result.state and result.launch_spec is not None:
            self.queue.add(("LaunchSpec", namespace, result.launch_spec))
        if previous is not result.state and result.run is not None:
            # A batch of slot changes costs the run one status write, not one per slot.
            self.queue.add_after(("AgentRun", namespace, result.run),
                                 scheduling.RUN_BATCH_SECONDS)
            if previous in BUSY and result.state not in BUSY:
                await self.wake_slots(namespace, result.run)  # one under maxActive may go
            if result.state in (SlotState.SUCCEEDED, SlotState.FAILED):
                self.wake_pending(namespace)
            elif previous in (SlotState.SUCCEEDED, SlotState.FAILED):
                # Finished no more: rerun (or superseded). Its dependents follow it, and
                # nothing else would wake a finished one (core.slots.rerunsteps).
                await self.wake_slots(namespace, result.run)
        until = result.wait.until if result.wait is not None else None
        return scheduling.next_look(retry=result.retry, until=until, now=clocks.system())

    async def reconcile_run(self, key: Key) -> queues.Next:
        _, namespace, name = key
        result, run = await self.in_thread(functools.partial(self.run_pass, namespace, name))
        if run is None or run.status.pinned is not None:
            self.unpinned.discard(key)
        else:
            self.unpinned.add(key)
        if run is not None:
            # A spec change (suspend lifted, a new deadline) concerns slots that wait on
            # nothing else: wake them. (At startup every slot is reconciled anyway.)
            previous = self.generations.get(key, run.metadata.generation)
            self.generations[key] = run.metadata.generation
            # So does a raise of its budget: the slots parked at it may go on.
            raises = run.status.budget.raises if run.status.budget is not None else 0
            raised = self.raises.get(key, raises) != raises
            self.raises[key] = raises
            if previous != run.metadata.generation or raised:
                await self.wake_slots(namespace, name)
        return scheduling.next_look(retry=result.retry, until=result.until, now=clocks.system())

    async def wake_slots(self, namespace: str, run: str) -> None:
        found = await self.in_thread(functools.partial(
            self.runs.reader.slots_of, namespace, run))
        for slot in found:
            self.queue.add(("Slot", namespace, slot.metadata.name))

    def wake_pending(self, namespace: str, *, claiming: bool = False) -> None:
        """Pending slots look again; with ``claiming`` (a LaunchSpec changed) also claims
        under way, which may wait on their LaunchSpec (core.slots.refusedclaims)."""
        woken = (SlotState.PENDING, SlotState.CLAIMING) if claiming else (SlotState.PENDING,)
        for key, state in list(self.states.items()):
            if key[1] == namespace and state in woken:
                self.queue.add(key)

    def wake_unpinned(self, namespace: str) -> None:
        for key in list(self.unpinned):
            if key[1] == namespace:
                self.queue.add(key)
