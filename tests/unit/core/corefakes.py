"""Cheap builders of API objects for the core's unit tests (no cluster, no I/O).

The last section builds :class:`agentrun.core.slots.inputs.World` values for ``steps.next_step``:
slot statuses by state, an attempt's Pod and Lease as the API returns them, an AgentRun,
and command annotations.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, TypeVar

from agentrun.api import conditions, names
from agentrun.api.launchspecs import LaunchSpec
from agentrun.api.meta import ObjectMeta
from agentrun.api.runs import AgentRun, ClaimPolicy, Pin, Pins
from agentrun.api.slots import (
    AttemptRecord,
    Outcome,
    PinnedLaunchSpec,
    Slot,
    SlotSpec,
    SlotState,
    SlotStatus,
)
from agentrun.core.attempts.observations import LeaseObservation
from agentrun.core.base import naming
from agentrun.core.launchspecs import launchpins
from agentrun.core.policies import stamping
from agentrun.core.slots import inputs

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NS = "team-a"
TENANT = "acme"
EPOCH = "ZXBvY2gtb25l"  # as stamped: the params Secret's data.epoch, verbatim
IN_FORCE = stamping.Stamping(epoch=EPOCH, problem=None)
RUN = "research-1"
NODE = "review-sources"
SLOT = naming.slot_name(run=RUN, node=NODE)
SLOT_UID = "uid-slot-1"


# The run's creator as verified at pinning: the owner of its automatic attempts.
CREATOR = "alice"

def seconds(n: float) -> timedelta:
    return timedelta(seconds=n)


def launch_spec(name: str, *, classes: list[str], runs: list[str] | None = None,
                nodes: list[str] | None = None, priority: int = 0, namespace: str = NS,
                generation: int = 1, containers: list[dict[str, Any]] | None = None,
                init_containers: list[dict[str, Any]] | None = None,
                lease_seconds: int | None = None,
                start_deadline_seconds: int | None = None) -> LaunchSpec:
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": containers or [{"name": "worker", "image": "example/worker:1"}],
    }
    if init_containers is not None:
        pod_spec["initContainers"] = init_containers
    spec: dict[str, Any] = {
        "claim": {"workerClasses": classes},
        "scope": {"runs": runs or [], "nodes": nodes or []},
        "priority": priority,
        "template": {"metadata": {"labels": {"app": "worker"}}, "spec": pod_spec}}
    if lease_seconds is not None:
        spec["lease"] = {"durationSeconds": lease_seconds}
    if start_deadline_seconds is not None:
        spec["startDeadlineSeconds"] = start_deadline_seconds
    return LaunchSpec.model_validate({
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}",
                     "generation": generation},
        "spec": spec,
    })


PINNED = PinnedLaunchSpec(name="cpu-spec", uid="uid-cpu-spec", generation=1,
                          digest="0" * 64, snapshot=f"{SLOT}-lspec-0000000000")


def slot(status: SlotStatus | None = None, *, run: str = RUN, node: str = NODE) -> Slot:
    status = status or SlotStatus()
    labels = ({names.LAUNCH_SPEC_LABEL: status.launch_spec.name}
              if status.launch_spec is not None else {})
    return Slot(metadata=ObjectMeta(name=naming.slot_name(run=run, node=node), namespace=NS,
                                    uid=SLOT_UID, labels=labels),
                spec=SlotSpec(run=run, node=node, worker_class="cpu"),
                status=status or SlotStatus())


def attempt(number: int, *, owner: str | None = CREATOR, outcome: Outcome | None = Outcome.FAILED,
            ended: bool = True) -> AttemptRecord:
    name = naming.attempt_name(slot=SLOT, number=number)
    return AttemptRecord(number=number, pod=name, lease=name, worker_class="cpu",
                         launch_spec="cpu-spec@1", owner_actor=owner, started_at=T0,
                         ended_at=T0 + seconds(60) if ended else None,
                         outcome=outcome if ended else None)


def retry_wait(*, owner: str | None = CREATOR, attempts_used: int = 1,
               retry_at: datetime | None = None) -> SlotStatus:
    """A slot whose attempt ``attempts_used`` failed: RetryWait with a prior worker."""
    return SlotStatus(
        state=SlotState.RETRY_WAIT, worker_class="cpu", launch_spec=PINNED,
        prior_worker=naming.attempt_name(slot=SLOT, number=attempts_used),
        attempts=[attempt(n, owner=owner if n == attempts_used else CREATOR)
                  for n in range(1, attempts_used + 1)],
        attempt_count=attempts_used, retry_at=retry_at)


def pins() -> Pins:
    def pin(kind: str) -> Pin:
        return Pin(source=f"{kind}-src", revision=1, uid=f"uid-{kind}", sha256="a" * 64,
                   snapshot=naming.config_snapshot_name(run=RUN, kind=kind, sha256="a" * 64))
    return Pins(package=pin("package"), workflow=pin("workflow"), bindings=pin("bindings"))


# --- worlds for steps.next_step --------------------------------------------------------

RUN_UID = "uid-run-1"
LEASE_SECONDS = 45
START_DEADLINE = 120
CPU_SPEC = launch_spec("cpu-spec", classes=["cpu"], lease_seconds=LEASE_SECONDS,
                       start_deadline_seconds=START_DEADLINE)


def _run_snapshot() -> str:
    return naming.launch_spec_snapshot_name(run=RUN, digest=launchpins.digest(CPU_SPEC.spec))


PINNED_RUN_SNAPSHOT = _run_snapshot()  # the run's snapshot of CPU_SPEC


def worker(number: int) -> str:
    """``<slot>-<n>``: attempt ``number``'s Pod and Lease."""
    return naming.attempt_name(slot=SLOT, number=number)


def ready() -> SlotStatus:
    return SlotStatus(state=SlotState.READY, worker_class="cpu", launch_spec=PINNED)


def claiming(number: int = 1, *, owner: str | None = None) -> SlotStatus:
    """Attempt ``number`` consumed and being created (earlier attempts failed)."""
    return SlotStatus(
        state=SlotState.CLAIMING, worker_class="cpu", launch_spec=PINNED,
        pending_worker=worker(number), prior_worker=worker(number - 1) if number > 1 else None,
        attempts=[attempt(n) for n in range(1, number)], attempt_count=number,
        next_owner_actor=owner)


def active(number: int = 1, *, owner: str | None = CREATOR) -> SlotStatus:
    """Attempt ``number`` running since T0 (earlier attempts failed)."""
    return SlotStatus(
        state=SlotState.ACTIVE, worker_class="cpu", launch_spec=PINNED,
        active_worker=worker(number), prior_worker=worker(number - 1) if number > 1 else None,
        attempts=[*(attempt(n) for n in range(1, number)),
                  attempt(number, owner=owner, ended=False)],
        attempt_count=number)


def agent_run(*, claim_policy: ClaimPolicy = "Automatic", suspend: bool = False,
              deadline: int | None = None, start_time: datetime | None = T0,
              max_attempts: int | None = None) -> AgentRun:
    spec: dict[str, Any] = {kind: {"name": f"{kind}-src"} for kind in names.CONFIG_KINDS}
    spec.update(claimPolicy=claim_policy, suspend=suspend)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    if max_attempts is not None:
        spec["retry"] = {"maxAttempts": max_attempts}
    return AgentRun.model_validate({
        "metadata": {"name": RUN, "namespace": NS, "uid": RUN_UID, "generation": 1},
        "spec": spec,
        "status": {"pinned": pins().wire(), "creator": CREATOR,
                   **({"startTime": start_time.isoformat()} if start_time else {})}})


def pod(number: int, phase: str | None = "Running", *, attempt_label: int | None = None,
        owner_uid: str = SLOT_UID, deleting: bool = False,
        exit_code: int | None = None) -> dict[str, Any]:
    """Attempt ``number``'s Pod as the API returns it (labels of ``attempt_label``)."""
    metadata: dict[str, Any] = {
        "name": worker(number), "namespace": NS, "uid": f"uid-pod-{number}",
        "labels": {names.ATTEMPT_LABEL: str(attempt_label or number)},
        "ownerReferences": [{"apiVersion": names.API_VERSION, "kind": "Slot", "name": SLOT,
                             "uid": owner_uid, "controller": True}]}
    if deleting:
        metadata["deletionTimestamp"] = T0.isoformat()
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if exit_code is not None:
        status["containerStatuses"] = [{"name": "worker",
                                        "state": {"terminated": {"exitCode": exit_code}}}]
    spec = {"containers": [{"name": "worker", "image": "example/worker:1"}]}  # CPU_SPEC's
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec,
            "status": status}


def lease(number: int, *, renew_time: str | None = None, duration: int = LEASE_SECONDS,
          holder: bool = True, outcome: str | None = None, attempt_label: int | None = None,
          owner_uid: str = SLOT_UID, released: bool = False) -> dict[str, Any]:
    """Attempt ``number``'s Lease; ``outcome`` set means tombstoned, ``released`` that its
    holder released it (as its worker ended)."""
    annotations = {names.OUTCOME_ANNOTATION: outcome} if outcome else {}
    if released:
        annotations[names.RELEASED_ANNOTATION] = "2026-01-01T00:00:00Z"
    spec: dict[str, Any] = {"leaseDurationSeconds": duration}
    if holder:
        spec["holderIdentity"] = worker(number)
    if renew_time is not None:
        spec["renewTime"] = renew_time
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": worker(number), "namespace": NS,
                         "labels": {names.ATTEMPT_LABEL: str(attempt_label or number)},
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": names.API_VERSION, "kind": "Slot",
                                              "name": SLOT, "uid": owner_uid,
                                              "controller": True}]},
            "spec": spec}


def objects(number: int, *, pod: Mapping[str, Any] | None = None,
            lease: Mapping[str, Any] | None = None) -> inputs.AttemptObjects:
    return inputs.AttemptObjects(name=worker(number), pod=pod, lease=lease)


def observed(at: datetime, renew_time: str = "2030-01-01T12:00:00.000000Z") -> LeaseObservation:
    return LeaseObservation(renew_time=renew_time, observed_at=at)


def command(kind: str, request_id: str = "req-1", *, actor: str | None = "alice",
            epoch: str | None = EPOCH, **fields: str) -> dict[str, str]:
    """The annotations of one command: ``kind`` is the prefix (reassign, claim, give-up...).

    ``actor`` and ``epoch`` are what admission stamped (None: nothing stamped); the world's
    default stamping is in force under :data:`EPOCH`.
    """
    found = {f"agentrun.dev/{kind}-id": request_id}
    if actor is not None:
        found[f"agentrun.dev/{kind}-actor"] = actor
        if epoch is not None:
            found[f"agentrun.dev/{kind}-epoch"] = epoch
    found.update({f"agentrun.dev/{kind}-{key.replace('_', '-')}": value
                  for key, value in fields.items()})
    return found


def finished(state: SlotState, *, record: bool = True, owner: str | None = CREATOR) -> SlotStatus:
    """A slot that finished after attempt 1 (record: the attempt is in status.attempts)."""
    outcome = Outcome.SUCCEEDED if state is SlotState.SUCCEEDED else Outcome.GAVE_UP
    return SlotStatus(state=state, worker_class="cpu", launch_spec=PINNED,
                      prior_worker=worker(1), attempt_count=1,
                      attempts=[attempt(1, owner=owner, outcome=outcome)] if record else [])


def world(status: SlotStatus | None = None, *, annotations: dict[str, str] | None = None,
          generation: int | None = None, run: AgentRun | Literal["default"] | None = "default",
          depends_on: list[str] | None = None, **kwargs: Any) -> inputs.World:
    """A world for ``next_step``: the slot with ``status``, its run, CPU_SPEC everywhere.

    ``kwargs`` are the other World fields (``now``, ``attempt``, ``snapshots``, ...).
    """
    the_slot = slot(status)
    if annotations or generation is not None:
        the_slot = the_slot.model_copy(update={"metadata": the_slot.metadata.model_copy(
            update={"annotations": annotations or {}, "generation": generation})})
    if depends_on:
        the_slot = the_slot.model_copy(update={"spec": the_slot.spec.model_copy(
            update={"depends_on": depends_on})})
    defaults: dict[str, Any] = {"tenant": TENANT, "now": T0, "launch_specs": (CPU_SPEC,),
                                "launch_spec": CPU_SPEC.spec, "stamping": IN_FORCE}
    defaults.update(kwargs)
    return inputs.World(slot=the_slot, run=agent_run() if isinstance(run, str) else run,
                        **defaults)


def condition(status: SlotStatus, type_: str) -> conditions.Condition:
    """The condition ``type_`` of ``status`` (it must be there)."""
    found = conditions.find(status.conditions, type_)
    assert found is not None, f"no condition {type_} in {status.conditions}"
    return found


StepT = TypeVar("StepT")


def expect(step: object, kind: type[StepT]) -> StepT:
    """``step`` is a ``kind`` (the exact step type); returned narrowed for the asserts."""
    assert isinstance(step, kind) and type(step) is kind, \
        f"expected {kind.__name__}, got {step!r}"
    return step
