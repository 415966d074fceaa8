"""Names of the objects the operator creates, derived deterministically from identity.

A name is a function of what the object *is* (run, node, attempt number, content), so a
crashed operator recomputes the same name and finds its own object instead of making a
second one. All names stay DNS labels (63 characters) except where Kubernetes allows a
DNS subdomain (ConfigMaps: 253).
"""

from __future__ import annotations

import hashlib

from agentrun.api import names


def short_hash(text: str, *, length: int) -> str:
    """The first ``length`` hex digits of sha256(text)."""
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def slot_name(*, run: str, node: str) -> str:
    """``<run>-<8 hex of sha256(node)>``: at most 58 characters when the run has at most 49.

    The node is hashed rather than appended so that long node names still fit and two
    nodes never collide by truncation; ``spec.node`` and the node label keep the name.
    """
    if len(run) > names.MAX_RUN_NAME:
        raise ValueError(f"run name {run!r} is longer than {names.MAX_RUN_NAME} characters")
    return f"{run}-{short_hash(node, length=names.SLOT_HASH_LENGTH)}"


def attempt_name(*, slot: str, number: int) -> str:
    """``<slot>-<n>``: the name of attempt ``n``'s Pod and of its Lease."""
    if number < 1:
        raise ValueError(f"attempt numbers start at 1, not {number}")
    return f"{slot}-{number}"


def config_snapshot_name(*, run: str, kind: str, sha256: str) -> str:
    """``<run>-<kind>-<sha256 prefix 10>``: an immutable pinned configuration snapshot."""
    return f"{run}-{kind}-{sha256[:10]}"


def launch_spec_snapshot_name(*, run: str, digest: str) -> str:
    """``<run>-lspec-<digest prefix 10>``: the pinned LaunchSpec copy owned by the run.

    One per (run, spec digest), shared by every slot of the run that pins that spec (a
    run of 1,000 slots on one spec makes one copy, not 1,000). Slots pinned before this
    rule name their own copy, ``<slot>-lspec-<digest prefix 10>``, and keep reading it.
    At most 49 + 7 + 10 = 66 characters: a ConfigMap name is a DNS subdomain (253).
    """
    return f"{run}-lspec-{digest[:10]}"


def with_tenant(labels: dict[str, str], *, tenant: str | None) -> dict[str, str]:
    """``labels`` plus the tenant label when the namespace has a tenant."""
    return labels if tenant is None else {**labels, names.TENANT_LABEL: tenant}
