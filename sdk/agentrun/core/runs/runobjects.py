"""Launching a run: pin its resolved configuration into snapshots and lay out its slots.

See docs/design/runs-and-configuration.md. Once :mod:`agentrun.core.runs.resolution` has chosen
and validated the package, workflow and bindings, the operator copies each into an
immutable snapshot ConfigMap owned by the run, writes ``status.pinned`` once and creates
one Slot per workflow node. When the operator is configured with a journal store, the
run's journal location is pinned with the configuration (:func:`journal_pin`). Bodies are
plain dicts, as the API server takes them; the ``matches_*`` functions tell an
``AlreadyExists`` after a crash (our object: success) from a stranger.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentrun.api import names
from agentrun.api.configs import WorkflowDocument, WorkflowNode
from agentrun.api.runs import AgentRun, JournalPin, JournalSettings, Pin, Pins
from agentrun.api.slots import SlotSpec
from agentrun.core.base import naming, owners
from agentrun.core.runs.resolution import Resolution, Resolved, sha256_of


def needs_pinning(run: AgentRun) -> bool:
    """Resolve only while ``status.pinned`` is absent: pins are written once, never redone.

    A run being deleted is not pinned either: its snapshots and slots would be created only
    to be garbage-collected.
    """
    return run.status.pinned is None and run.metadata.deletion_timestamp is None


def owner_reference(run: AgentRun) -> dict[str, Any]:
    """The run as controlling owner: its snapshots and slots go when it goes."""
    return owners.controller(kind="AgentRun", metadata=run.metadata)


def snapshot_name(*, run: AgentRun, resolved: Resolved) -> str:
    return naming.config_snapshot_name(run=run.metadata.name, kind=resolved.kind,
                                       sha256=resolved.sha256)


def snapshot_body(*, run: AgentRun, resolved: Resolved, tenant: str | None) -> dict[str, Any]:
    """The immutable copy workers read, so a GitOps prune of the source cannot break the run.

    Only the one data key is copied, byte for byte (its sha256 is the pin's). It carries the
    kind, name and revision labels for people, never ``accepted`` (a copy is not a source),
    and ``agentrun.dev/snapshot-of`` so resolution skips it.
    """
    labels = {
        names.RUN_LABEL: run.metadata.name,
        names.CONFIG_KIND_LABEL: resolved.kind,
        names.CONFIG_NAME_LABEL: resolved.name,
        names.REVISION_LABEL: str(resolved.revision),
        names.SNAPSHOT_LABEL: resolved.source,
    }
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": snapshot_name(run=run, resolved=resolved),
            "namespace": run.metadata.namespace,
            "labels": naming.with_tenant(labels, tenant=tenant),
            "ownerReferences": [owner_reference(run)],
        },
        "immutable": True,
        "data": {names.CONFIG_DATA_KEYS[resolved.kind]: resolved.text},
    }


def matches_snapshot(existing: Mapping[str, Any], *, run_uid: str, sha256: str) -> bool:
    """Is a ConfigMap found on ``AlreadyExists`` our snapshot (so creation succeeded)?

    Controlled by this very run (by uid: a deleted and recreated run of the same name is
    another run), immutable (so it stays what we checked), and its data key holds exactly
    the text whose digest is ``sha256``.
    """
    metadata = (existing.get("metadata") or {})
    kind = (metadata.get("labels") or {}).get(names.CONFIG_KIND_LABEL)
    if existing.get("immutable") is not True or kind not in names.CONFIG_DATA_KEYS:
        return False
    text = (existing.get("data") or {}).get(names.CONFIG_DATA_KEYS[kind])
    return (owners.controlled_by(metadata, run_uid) and isinstance(text, str)
            and sha256_of(text) == sha256)


def pin(*, run: AgentRun, resolved: Resolved) -> Pin:
    """One ``status.pinned`` entry: the source, its revision, uid and digest, the snapshot."""
    return Pin(source=resolved.source, revision=resolved.revision, uid=resolved.uid,
               sha256=resolved.sha256, snapshot=snapshot_name(run=run, resolved=resolved))


def journal_pin(*, run: AgentRun, journal: JournalSettings | None) -> JournalPin | None:
    """Where this run's journal lives, from the operator's settings at launch (None: none).

    The prefix is ``<settings' prefix>/<namespace>/<run uid>``: the uid, not the name, so a
    run deleted and recreated under the same name starts an empty journal instead of
    reading the old run's progress. Pinned, so that settings changed later leave this run's
    journal where its attempts wrote it.
    """
    if journal is None:
        return None
    namespace, uid = run.metadata.namespace, run.metadata.uid
    if not namespace or not uid:  # the API server gives every run both
        raise ValueError(f"run {run.metadata.name!r} has no namespace or uid: its journal "
                         "prefix needs both")
    prefix = "/".join(part for part in (journal.prefix, namespace, uid) if part)
    return JournalPin(endpoint=journal.endpoint, bucket=journal.bucket, prefix=prefix,
                      region=journal.region, secret=journal.secret,
                      retention_seconds=journal.retention_seconds)


def pins(*, run: AgentRun, resolution: Resolution, journal: JournalSettings | None) -> Pins:
    """``status.pinned``: the three configurations and, if the operator has a journal
    store configured (``journal``), where the run's journal lives."""
    return Pins(package=pin(run=run, resolved=resolution.package),
                workflow=pin(run=run, resolved=resolution.workflow),
                bindings=pin(run=run, resolved=resolution.bindings),
                journal=journal_pin(run=run, journal=journal))


def slot_body(*, run: AgentRun, node: WorkflowNode, tenant: str | None) -> dict[str, Any]:
    """One Slot for one workflow node, its spec fixed from the pinned workflow.

    No status: the Slot starts ``Pending`` by its model's default, and the status
    subresource ignores status in a create anyway.
    """
    labels = naming.with_tenant({names.RUN_LABEL: run.metadata.name,
                                 names.NODE_LABEL: node.name}, tenant=tenant)
    spec = SlotSpec(run=run.metadata.name, node=node.name, worker_class=node.worker_class,
                    depends_on=list(node.depends_on), retry=node.retry)
    return {
        "apiVersion": names.API_VERSION,
        "kind": "Slot",
        "metadata": {
            "name": naming.slot_name(run=run.metadata.name, node=node.name),
            "namespace": run.metadata.namespace,
            "labels": labels,
            "ownerReferences": [owner_reference(run)],
        },
        "spec": spec.wire(),
    }


def slot_bodies(
    *, run: AgentRun, workflow: WorkflowDocument, tenant: str | None,
) -> list[dict[str, Any]]:
    """Every node's Slot, in workflow order (dependencies need not exist first)."""
    return [slot_body(run=run, node=node, tenant=tenant) for node in workflow.nodes]


def matches_slot(existing: Mapping[str, Any], *, run_uid: str, node: str) -> bool:
    """Is a Slot found on ``AlreadyExists`` this run's slot for ``node``?

    Its immutable ``spec.node`` must be ``node`` and it must be controlled by this very run.
    """
    spec = existing.get("spec") or {}
    metadata = existing.get("metadata") or {}
    return spec.get("node") == node and owners.controlled_by(metadata, run_uid)
