"""Builders for an attempt's objects: its Lease and its Pod, both named ``<slot>-<n>``.

A claim creates the Lease first (holder = the pod's name): the claim's commit point,
carrying the attempt number (label), the owner actor and, for a claim command, its
request id; then the Pod. Both carry an
owner reference to the Slot (``controller``, ``blockOwnerDeletion``) and the labels
``agentrun.dev/run``, ``slot``, ``attempt``, ``tenant`` and ``node``, so that an
``AlreadyExists`` after a crash can be told apart: it is this attempt's object (success)
only when :func:`matches_attempt` says so.

The Lease is created *without* ``renewTime``: the worker's first renewal is then visible
as the first ``renewTime`` the operator sees, which ends the start-deadline window.

The Pod comes from the pinned LaunchSpec's template with ``restartPolicy: Never`` (a pod
is one attempt; retries are new attempts), the three pinned configuration snapshots
mounted read-only by exact name at ``/etc/agentrun/config/{package,workflow,bindings}/``
in every container and init container, and the worker environment (the attempt number
is the fencing token; each snapshot's pinned sha256 is there too; ``TRACEPARENT`` names
the attempt's span in the run's trace, ``api.traces``). A run with a pinned
journal adds where it lives to that environment and, with its Secret, the Secret mounted
read-only at ``/var/run/agentrun/journal``. Bodies are plain dicts, as the API takes them.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

from agentrun.api import cuts, meta, modelusage, names, traces
from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.runs import JournalPin, Pins
from agentrun.api.slots import PinnedLaunchSpec, Slot
from agentrun.core.attempts import effectrecords, questionrecords
from agentrun.core.base import naming, owners
from agentrun.core.machine import transitions

COORDINATION_API_VERSION = "coordination.k8s.io/v1"
CONFIG_VOLUME_PREFIX = "agentrun-config-"
ANSWER_VOLUME_PREFIX = "agentrun-a-"  # + the question key (at most 48): a volume name, <= 63


def owner_reference(slot: Slot) -> dict[str, Any]:
    """The Slot as the controlling owner: garbage collection follows the slot."""
    return owners.controller(kind="Slot", metadata=slot.metadata)


def labels(*, slot: Slot, attempt: int, tenant: str | None) -> dict[str, str]:
    """The labels every attempt object carries (tenant only when the namespace has one)."""
    found = {
        names.RUN_LABEL: slot.spec.run,
        names.SLOT_LABEL: slot.metadata.name,
        names.ATTEMPT_LABEL: str(attempt),
        names.NODE_LABEL: slot.spec.node,
    }
    return naming.with_tenant(found, tenant=tenant)


def _annotations(*, owner_actor: str | None, launch_spec: PinnedLaunchSpec,
                 request_id: str | None = None) -> dict[str, str]:
    found = {names.LAUNCH_SPEC_ANNOTATION: transitions.launch_spec_ref(launch_spec)}
    if owner_actor is not None:
        found[names.OWNER_ACTOR_ANNOTATION] = owner_actor
    if request_id is not None:
        found[names.CLAIM_ID] = request_id
    return found


def lease_body(
    *, slot: Slot, attempt: int, owner_actor: str | None, tenant: str | None,
    launch_spec: PinnedLaunchSpec, lease_duration_seconds: int, request_id: str | None = None,
    budget: modelusage.Limits | None = None,
) -> dict[str, Any]:
    """The attempt's Lease: its durable record, held by the attempt's pod.

    ``request_id``: the claim command this attempt serves (a Manual claim), so that the
    command's ledger entry can be rebuilt from the Lease after a crash. The owner's
    answers to the slot's resolved effects ride along as ``<key>.resolved`` records of
    this attempt (``core.attempts.effectrecords``): the successor's ledger reads them.
    The slot's cuts (reruns: ``api.cuts``) ride along too: the prefix the worker reads.
    ``budget``: the run's budget in force (none: it has none), which the SDK checks the
    run's usage against before each model call or effect (``agentrun.dev/budget``).
    """
    name = naming.attempt_name(slot=slot.metadata.name, number=attempt)
    return {
        "apiVersion": COORDINATION_API_VERSION,
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": slot.metadata.namespace,
            "labels": labels(slot=slot, attempt=attempt, tenant=tenant),
            "annotations": {
                **_annotations(owner_actor=owner_actor, launch_spec=launch_spec,
                               request_id=request_id),
                **effectrecords.resolved_annotations(slot.status, attempt=attempt),
                **questionrecords.answer_annotations(slot.status, attempt=attempt),
                **cuts.annotation(slot.status.cuts, slot.status.resends),
                **({} if budget is None else {names.BUDGET_ANNOTATION: budget.text()})},
            "ownerReferences": [owner_reference(slot)],
        },
        "spec": {"holderIdentity": name, "leaseDurationSeconds": lease_duration_seconds},
    }


# The pinned digest of each configuration snapshot: shared with the worker, so it lives in
# agentrun.api.names (kept here under its old name for this module's callers).
ENV_PINNED_SHA256 = names.ENV_PINNED_SHA256


def environment(*, slot: Slot, attempt: int, pins: Pins) -> list[dict[str, Any]]:
    """The worker environment; the namespace comes from the downward API."""
    lease = naming.attempt_name(slot=slot.metadata.name, number=attempt)
    digests = {"package": pins.package.sha256, "workflow": pins.workflow.sha256,
               "bindings": pins.bindings.sha256}
    found: list[dict[str, Any]] = [
        {"name": names.ENV_NAMESPACE,
         "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": names.ENV_RUN, "value": slot.spec.run},
        {"name": names.ENV_RUN_UID, "value": owners.controller_uid(slot.metadata) or ""},
        {"name": names.ENV_SLOT, "value": slot.metadata.name},
        {"name": names.ENV_NODE, "value": slot.spec.node},
        {"name": names.ENV_ATTEMPT, "value": str(attempt)},
        {"name": names.ENV_FENCING_TOKEN, "value": str(attempt)},
        {"name": names.ENV_LEASE, "value": lease},
        {"name": names.ENV_CONFIG_DIR, "value": names.CONFIG_MOUNT_ROOT},
    ]
    run_uid, slot_uid = owners.controller_uid(slot.metadata), slot.metadata.uid
    if run_uid and slot_uid:  # the attempt's span, for the worker's spans to join the run's
        found.append({"name": traces.TRACEPARENT_ENV, "value": traces.traceparent(
            trace=traces.trace_id(run_uid), span=traces.attempt_span(slot_uid, attempt))})
    found += [{"name": ENV_PINNED_SHA256[kind], "value": digests[kind]}
              for kind in names.CONFIG_KINDS]
    return found + journal_environment(pins.journal)


def journal_environment(journal: JournalPin | None) -> list[dict[str, Any]]:
    """Where the run's journal lives, for every container (none: the run has no journal).

    The credentials are a path, not values: the Secret is mounted (:func:`journal_volume`),
    so a rotated Secret reaches workers already running, where an env ``secretKeyRef``
    would keep the old keys for the pod's life.
    """
    if journal is None:
        return []
    found = [{"name": names.ENV_JOURNAL_ENDPOINT, "value": journal.endpoint},
             {"name": names.ENV_JOURNAL_BUCKET, "value": journal.bucket},
             {"name": names.ENV_JOURNAL_PREFIX, "value": journal.prefix},
             {"name": names.ENV_JOURNAL_REGION, "value": journal.region}]
    if journal.secret is not None:
        found.append({"name": names.ENV_JOURNAL_CREDENTIALS,
                      "value": names.JOURNAL_CREDENTIALS_MOUNT})
    return found


def journal_volume(journal: JournalPin | None) -> tuple[list[dict[str, Any]],
                                                        list[dict[str, Any]]]:
    """The pinned Secret as a volume and its read-only mount (none without a Secret).

    Only its two keys are projected, so another key in the Secret never reaches a worker.
    Not optional: a pod whose Secret is missing waits in ContainerCreating (the kubelet
    says why in an Event) and its start deadline ends the attempt, instead of a worker
    starting to write its journal unsigned.
    """
    if journal is None or journal.secret is None:
        return [], []
    keys = (names.JOURNAL_ACCESS_KEY, names.JOURNAL_SECRET_KEY)
    volume = {"name": names.JOURNAL_CREDENTIALS_VOLUME,
              "secret": {"secretName": journal.secret,
                         "items": [{"key": key, "path": key} for key in keys]}}
    mount = {"name": names.JOURNAL_CREDENTIALS_VOLUME,
             "mountPath": names.JOURNAL_CREDENTIALS_MOUNT, "readOnly": True}
    return [volume], [mount]


def _with_agentrun(container: Mapping[str, Any], *, env: list[dict[str, Any]],
                   mounts: list[dict[str, Any]]) -> dict[str, Any]:
    """A container with our env and mounts replacing any of the same name or path."""
    ours_env = {e["name"] for e in env}
    ours_paths = {m["mountPath"] for m in mounts}
    ours_volumes = {m["name"] for m in mounts}
    found = dict(container)
    found["env"] = [e for e in container.get("env") or [] if e.get("name") not in ours_env] + env
    found["volumeMounts"] = [
        m for m in container.get("volumeMounts") or []
        if m.get("mountPath") not in ours_paths and m.get("name") not in ours_volumes
    ] + mounts
    return found


def pod_body(
    *, slot: Slot, pins: Pins, launch_spec: LaunchSpecSpec, pinned: PinnedLaunchSpec,
    attempt: int, owner_actor: str | None, tenant: str | None,
) -> dict[str, Any]:
    """The attempt's Pod from the pinned LaunchSpec's template (see the module docstring).
    The answers given by reference that the attempt is handed (``<key>.answer`` on its
    Lease names them) are mounted read-only at ``<ANSWERS_MOUNT_ROOT>/<question key>/``."""
    name = naming.attempt_name(slot=slot.metadata.name, number=attempt)
    template: dict[str, Any] = copy.deepcopy(launch_spec.template.wire())
    meta = dict(template.get("metadata") or {})
    spec = dict(template.get("spec") or {})
    snapshots = pins.snapshot_names()
    volumes = [{"name": f"{CONFIG_VOLUME_PREFIX}{kind}",
                "configMap": {"name": snapshots[kind]}} for kind in names.CONFIG_KINDS]
    mounts = [{"name": f"{CONFIG_VOLUME_PREFIX}{kind}",
               "mountPath": f"{names.CONFIG_MOUNT_ROOT}/{kind}/", "readOnly": True}
              for kind in names.CONFIG_KINDS]
    journal_volumes, journal_mounts = journal_volume(pins.journal)
    volumes += journal_volumes
    mounts += journal_mounts
    for key, configmap, item in questionrecords.answer_mounts(slot.status, attempt=attempt):
        # optional: a ConfigMap deleted since stops no pod; the SDK says it cannot be read
        volumes.append({"name": f"{ANSWER_VOLUME_PREFIX}{key}", "configMap": {
            "name": configmap, "optional": True,
            "items": [{"key": item, "path": names.ANSWERS_FILE}]}})
        mounts.append({"name": f"{ANSWER_VOLUME_PREFIX}{key}", "readOnly": True,
                       "mountPath": f"{names.ANSWERS_MOUNT_ROOT}/{key}"})
    env = environment(slot=slot, attempt=attempt, pins=pins)
    floors = launch_spec.approval_floors()
    if floors:  # the effects this LaunchSpec's workers send only once approved
        env.append({"name": names.ENV_APPROVALS,
                    "value": json.dumps(floors, sort_keys=True, separators=(",", ":"))})
    ours = {v["name"] for v in volumes}
    spec["volumes"] = [v for v in spec.get("volumes") or [] if v.get("name") not in ours] + volumes
    if launch_spec.sidecar is not None:
        spec["initContainers"] = [sidecar_container(launch_spec),
                                  *(spec.get("initContainers") or [])]
    for key in ("containers", "initContainers"):
        if key in spec:
            spec[key] = [_with_agentrun(c, env=env, mounts=mounts) for c in spec[key]]
    if launch_spec.sidecar is not None:  # where each main container finds the sidecar
        url = {"name": names.ENV_SIDECAR_URL,
               "value": f"http://127.0.0.1:{launch_spec.sidecar.port}"}
        spec["containers"] = [_with_agentrun(c, env=[url], mounts=[])
                              for c in spec["containers"]]
    spec["restartPolicy"] = "Never"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": slot.metadata.namespace,
            "labels": {**(meta.get("labels") or {}),
                       **labels(slot=slot, attempt=attempt, tenant=tenant)},
            "annotations": {**(meta.get("annotations") or {}),
                            **_annotations(owner_actor=owner_actor, launch_spec=pinned)},
            "ownerReferences": [owner_reference(slot)],
        },
        "spec": spec,
    }


def sidecar_container(launch_spec: LaunchSpecSpec) -> dict[str, Any]:
    """The worker sidecar (``spec.sidecar``) as the pod's first init container.

    ``restartPolicy: Always`` makes it a native sidecar: the kubelet starts it before the
    main containers and stops it after them. Its startup probe (``agentrun-worker ready``,
    an exec: the sidecar listens on 127.0.0.1 only, where an HTTP probe cannot reach)
    holds the main containers back until its first renewal, for at most the start
    deadline. It is first so that the lease is renewed as early as the pod can. Its
    ``resources`` are ``spec.sidecar.resources``, else requests and limits by default: a
    namespace whose ResourceQuota counts limits refuses a container without them. Its
    ``securityContext`` is ``spec.sidecar.securityContext``, else the restricted Pod
    Security Standard's: a namespace enforcing it refuses a pod any container of which
    falls short.
    """
    sidecar = launch_spec.sidecar
    assert sidecar is not None
    port = str(sidecar.port)
    return {
        "name": names.SIDECAR_CONTAINER,
        "image": sidecar.image,
        "restartPolicy": "Always",
        "command": ["agentrun-worker", "sidecar", "--port", port,
                    "--check-in-seconds", str(sidecar.check_in_seconds)],
        "startupProbe": {"exec": {"command": ["agentrun-worker", "ready", "--port", port]},
                         "periodSeconds": 1, "timeoutSeconds": 5,
                         "failureThreshold": launch_spec.start_deadline_seconds},
        "resources": sidecar.container_resources(),
        "securityContext": sidecar.container_security(),
    }


def matches_attempt(existing: Mapping[str, Any], *, slot_uid: str, attempt: int) -> bool:
    """Is an object found on ``AlreadyExists`` this attempt's own (so creation succeeded)?

    It must carry this attempt number's label and be controlled by this very Slot (by
    uid: a slot deleted and recreated with the same name is another slot).
    """
    metadata = existing.get("metadata") or {}
    if (metadata.get("labels") or {}).get(names.ATTEMPT_LABEL) != str(attempt):
        return False
    return owners.controlled_by(metadata, slot_uid)


def same_content(existing: Mapping[str, Any], *, kind: str, worker: str,
                 launch_spec: LaunchSpecSpec) -> bool:
    """Does an object that passed :func:`matches_attempt` also hold what we would create?

    Owner references and labels can be written by anyone who may create the kind: a
    Lease must name the attempt's pod as holder (or none, once released); a Pod must run
    the pinned template's containers (names and images).
    """
    if kind == "Lease":
        holder = (existing.get("spec") or {}).get("holderIdentity")
        return holder in (None, worker)
    found = [(c.get("name"), c.get("image"))
             for c in (existing.get("spec") or {}).get("containers") or []]
    wanted = [(c.get("name"), c.get("image")) for c in launch_spec.template.spec.containers]
    return found == wanted


def under_way(lease: Mapping[str, Any] | None, *, slot_uid: str, attempt: int) -> bool:
    """Does ``lease`` (read under ``<slot>-<attempt>``) say a claim of it is under way?

    The slot's own Lease of that attempt, not tombstoned: created by a claim that has not
    yet written its status (the Lease is the claim's commit point).
    """
    if lease is None or not matches_attempt(lease, slot_uid=slot_uid, attempt=attempt):
        return False
    holder = (lease.get("spec") or {}).get("holderIdentity")
    return bool(holder) and meta.annotation(lease, names.OUTCOME_ANNOTATION) is None
