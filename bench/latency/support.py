"""The latency benchmark's instruments: watches that stamp each event on receipt.

Every time the latency benchmark reports is a receipt time on this process's monotonic
clock: a watch thread per kind (pods, slots, leases, jobs) records each event the moment
it is read, and the bench's own writes are stamped just before they are sent. Both
systems (the operator and the Job controller) are observed the same way, by the same
watches, so the watch delay is in both figures alike.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kubernetes

Object = dict[str, Any]
ListCall = Callable[..., Any]


@dataclass(frozen=True, kw_only=True)
class Seen:
    """One event of one object, at its receipt time."""

    at: float  # time.monotonic() when the bench read it
    kind: str  # ADDED / MODIFIED / DELETED
    obj: Object


@dataclass
class Feed:
    """A watch of one list call, restarted where it left off when the server ends it."""

    call: ListCall
    args: tuple[Any, ...]
    seen: dict[str, list[Seen]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopping: threading.Event = field(default_factory=threading.Event)
    started: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()
        if not self.started.wait(timeout=30):
            raise RuntimeError("a watch did not start in 30 s")

    def stop(self) -> None:
        self.stopping.set()

    def _run(self) -> None:
        version: str | None = None
        while not self.stopping.is_set():
            watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
            try:
                if version is None:  # list first: the watch then starts after it
                    listed = self.call(*self.args, _preload_content=False)
                    version = json.loads(listed.data)["metadata"]["resourceVersion"]
                    self.started.set()
                for event in watch.stream(self.call, *self.args, resource_version=version,
                                          timeout_seconds=60):
                    at = time.monotonic()
                    obj: Object = event["raw_object"]
                    version = obj["metadata"]["resourceVersion"]
                    with self.lock:
                        self.seen.setdefault(obj["metadata"]["name"], []).append(
                            Seen(at=at, kind=event["type"], obj=obj))
                    if self.stopping.is_set():
                        break
            except kubernetes.client.ApiException as error:
                if error.status == 410:  # too old: list again (events in between are lost)
                    version = None
                else:
                    time.sleep(0.2)  # a retry pause, not synchronisation
            except Exception:  # a dropped connection: watch again
                time.sleep(0.2)  # a retry pause, not synchronisation
            finally:
                watch.stop()  # type: ignore[no-untyped-call]

    def events(self, name: str) -> list[Seen]:
        with self.lock:
            return list(self.seen.get(name, []))

    def first(self, name: str, predicate: Callable[[Object], bool], *,
              after: float = 0.0) -> float | None:
        """Receipt time of the first event of ``name`` at or after ``after`` that holds."""
        return next((s.at for s in self.events(name) if s.at >= after and predicate(s.obj)),
                    None)

    def names(self) -> list[str]:
        with self.lock:
            return list(self.seen)


def wait_first(feed: Feed, name: str, predicate: Callable[[Object], bool], *, after: float,
               timeout: float, message: str) -> float:
    """Block until :meth:`Feed.first` finds it (polling the feed's own memory)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = feed.first(name, predicate, after=after)
        if found is not None:
            return found
        time.sleep(0.05)  # polling this process's memory, not the API server
    raise TimeoutError(f"{message} not seen in {timeout:g} s")


def indexes(text: str | None) -> set[int]:
    """A Job's ``status.failedIndexes`` ("1,3-5") as a set of ints."""
    found: set[int] = set()
    for part in (text or "").split(","):
        if not part:
            continue
        low, _, high = part.partition("-")
        found.update(range(int(low), int(high or low) + 1))
    return found


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (p99 of 200 values is the 198th smallest)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), int(-(-q * len(ordered) // 100))))
    return ordered[rank - 1]


def summary(values: list[float]) -> str:
    if not values:
        return "n 0"
    return (f"n {len(values)}, p50 {percentile(values, 50):.3f} s, p99 "
            f"{percentile(values, 99):.3f} s, max {max(values):.3f} s, mean "
            f"{statistics.fmean(values):.3f} s")


def slot_state(obj: Object) -> str | None:
    state: str | None = (obj.get("status") or {}).get("state")
    return state


def entry(obj: Object, *, key: str, match: str, value: object) -> Object:
    """The element of the status list ``key`` whose ``match`` is ``value`` ({} if none)."""
    found: Object = next((e for e in (obj.get("status") or {}).get(key) or []
                          if e.get(match) == value), {})
    return found


def attempt_outcome(obj: Object, number: int) -> str | None:
    outcome: str | None = entry(obj, key="attempts", match="number", value=number).get(
        "outcome")
    return outcome


def ledger_outcome(obj: Object, request_id: str) -> str | None:
    outcome: str | None = entry(obj, key="commands", match="requestId",
                                value=request_id).get("outcome")
    return outcome


def pod_phase(obj: Object) -> str | None:
    phase: str | None = (obj.get("status") or {}).get("phase")
    return phase
