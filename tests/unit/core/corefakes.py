"""Cheap builders of API objects for the core's unit tests (no cluster, no I/O)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.meta import ObjectMeta
from agentrun.api.runs import Pin, Pins
from agentrun.api.slots import (
    AttemptRecord,
    Outcome,
    PinnedLaunchSpec,
    Slot,
    SlotSpec,
    SlotState,
    SlotStatus,
)
from agentrun.core import naming

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NS = "team-a"
TENANT = "acme"
RUN = "research-1"
NODE = "review-sources"
SLOT = naming.slot_name(run=RUN, node=NODE)
SLOT_UID = "uid-slot-1"


def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def launch_spec(name: str, *, classes: list[str], runs: list[str] | None = None,
                nodes: list[str] | None = None, priority: int = 0, namespace: str = NS,
                generation: int = 1, containers: list[dict[str, Any]] | None = None,
                init_containers: list[dict[str, Any]] | None = None) -> LaunchSpec:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers or [{"name": "worker", "image": "example/worker:1"}],
    }
    if init_containers is not None:
        pod_spec["initContainers"] = init_containers
    return LaunchSpec.model_validate({
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "generation": generation},
        "spec": {"claim": {"workerClasses": classes},
                 "scope": {"runs": runs or [], "nodes": nodes or []},
                 "priority": priority,
                 "template": {"metadata": {"labels": {"app": "worker"}}, "spec": pod_spec}},
    })


PINNED = PinnedLaunchSpec(name="cpu-spec", uid="uid-cpu-spec", generation=1,
                          digest="0" * 64, snapshot=f"{SLOT}-lspec-0000000000")


def slot(status: SlotStatus | None = None, *, run: str = RUN, node: str = NODE) -> Slot:
    return Slot(metadata=ObjectMeta(name=naming.slot_name(run=run, node=node), namespace=NS,
                                    uid=SLOT_UID),
                spec=SlotSpec(run=run, node=node, worker_class="cpu"),
                status=status or SlotStatus())


def attempt(number: int, *, owner: str | None = None, outcome: Outcome | None = Outcome.FAILED,
            ended: bool = True) -> AttemptRecord:
    name = naming.attempt_name(slot=SLOT, number=number)
    return AttemptRecord(number=number, pod=name, lease=name, worker_class="cpu",
                         launch_spec="cpu-spec@1", owner_actor=owner, started_at=T0,
                         ended_at=T0 + seconds(60) if ended else None,
                         outcome=outcome if ended else None)


def retry_wait(*, owner: str | None = None, attempts_used: int = 1,
               retry_at: datetime | None = None) -> SlotStatus:
    """A slot whose attempt ``attempts_used`` failed: RetryWait with a prior worker."""
    return SlotStatus(
        state=SlotState.RETRY_WAIT, worker_class="cpu", launch_spec=PINNED,
        prior_worker=naming.attempt_name(slot=SLOT, number=attempts_used),
        attempts=[attempt(n, owner=owner if n == attempts_used else None)
                  for n in range(1, attempts_used + 1)],
        attempt_count=attempts_used, retry_at=retry_at)


def pins() -> Pins:
    def pin(kind: str) -> Pin:
        return Pin(source=f"{kind}-src", revision=1, uid=f"uid-{kind}", sha256="a" * 64,
                   snapshot=naming.config_snapshot_name(run=RUN, kind=kind, sha256="a" * 64))
    return Pins(package=pin("package"), workflow=pin("workflow"), bindings=pin("bindings"))
