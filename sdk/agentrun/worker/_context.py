"""What a worker knows about itself: its attempt, from the environment and the mounted pins.

The operator builds every worker pod (:mod:`agentrun.core.attempts.attemptobjects`) with:
- the environment: ``AGENTRUN_NAMESPACE`` (downward API), ``AGENTRUN_RUN``,
  ``AGENTRUN_RUN_UID`` (the run's ``metadata.uid``: a recreated run of the same name is
  another run, so effects' idempotency keys are derived from it),
  ``AGENTRUN_SLOT``, ``AGENTRUN_NODE``, ``AGENTRUN_ATTEMPT``, ``AGENTRUN_FENCING_TOKEN``
  (the attempt number: higher in every later attempt of the slot), ``AGENTRUN_LEASE``
  (the attempt's Lease, named like its pod: the lease's holder), ``AGENTRUN_CONFIG_DIR``,
  and ``AGENTRUN_{PACKAGE,WORKFLOW,BINDINGS}_SHA256``: the run's ``status.pinned``
  digests, copied when the pod was made (a pod's spec cannot change afterwards);
- the three pinned snapshots, mounted read-only at ``<config dir>/<kind>/<kind>.yaml``.

Why the digests come from the environment and not from reading the run: the worker's
ServiceAccount may read and renew its own Lease and nothing else, and the pod's spec is
written by the operator from the very ``status.pinned`` it verifies (write-once, checked
by the API server). The worker checks each mounted file's sha256 against its digest, so a
wrong mount, a truncated file or a snapshot replaced under the same name is refused.

:meth:`Context.from_env` outside a claimed pod (or in a pod the operator did not make)
raises :class:`WorkerContextError` once, listing everything missing or wrong.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from agentrun.api import bounds, names
from agentrun.worker import _approvals as approvals

SHA256 = re.compile(r"[0-9a-f]{64}")
UID = re.compile(r"[0-9a-fA-F-]{1,64}")
# A ConfigMap holds at most 1 MiB: a longer file is not a snapshot the operator made.
MAX_CONFIG_BYTES = 1024 * 1024
SERVICE_ACCOUNT_TOKEN = Path("/var/run/secrets/kubernetes.io/serviceaccount/token")
_NAMES = {names.ENV_NAMESPACE: bounds.DNS_LABEL, names.ENV_RUN: bounds.DNS_SUBDOMAIN,
          names.ENV_SLOT: bounds.DNS_SUBDOMAIN, names.ENV_NODE: bounds.DNS_SUBDOMAIN,
          names.ENV_LEASE: bounds.DNS_SUBDOMAIN}
_NUMBERS = (names.ENV_ATTEMPT, names.ENV_FENCING_TOKEN)


class WorkerContextError(Exception):
    """Not in a worker pod the operator claimed; the message lists every problem."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        super().__init__(
            "not running in a claimed agentrun worker pod (the operator sets these in the "
            "pods it creates for an attempt): " + "; ".join(problems))


@dataclass(frozen=True, kw_only=True)
class PinnedConfig:
    """One pinned configuration as mounted: its text, verified against ``sha256``."""

    kind: str  # package, workflow or bindings
    path: Path
    text: str
    sha256: str


@dataclass(frozen=True, kw_only=True)
class Context:
    """The attempt this process works for. ``identity`` is the pod's name, which the
    operator makes the Lease's name and holder (``<slot>-<attempt>``)."""

    namespace: str
    run: str
    run_uid: str
    slot: str
    node: str
    attempt: int
    fencing_token: int
    lease: str
    config_dir: Path
    pinned: Mapping[str, PinnedConfig]
    approvals: Mapping[str, int] = field(default_factory=dict)  # the LaunchSpec's floors

    @property
    def identity(self) -> str:
        return self.lease

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, *,
                 token: Path = SERVICE_ACCOUNT_TOKEN) -> Context:
        """Read and verify the context (``environ``: default ``os.environ``; ``token``: the
        service-account token a pod has, needed unless ``$KUBECONFIG`` says otherwise)."""
        env = os.environ if environ is None else environ
        problems: list[str] = []
        found: dict[str, str] = {}
        for key, pattern in _NAMES.items():
            value = env.get(key, "")
            if not value:
                problems.append(f"${key} is not set")
            elif not pattern.fullmatch(value):
                problems.append(f"${key}={value[:80]!r} is not a Kubernetes name")
            else:
                found[key] = value
        run_uid = env.get(names.ENV_RUN_UID, "")
        if not run_uid:
            problems.append(f"${names.ENV_RUN_UID} is not set")
        elif not UID.fullmatch(run_uid):
            problems.append(f"${names.ENV_RUN_UID}={run_uid[:80]!r} is not a uid")
        numbers: dict[str, int] = {}
        for key in _NUMBERS:
            value = env.get(key, "")
            if not value:
                problems.append(f"${key} is not set")
            elif not (value.isascii() and value.isdigit()
                      and 1 <= int(value) <= bounds.MAX_ATTEMPT_NUMBER):
                problems.append(f"${key}={value[:20]!r} is not an attempt number "
                                f"(1..{bounds.MAX_ATTEMPT_NUMBER})")
            else:
                numbers[key] = int(value)
        if not env.get("KUBECONFIG") and not (env.get("KUBERNETES_SERVICE_HOST")
                                              and token.is_file()):
            problems.append(f"no credentials: neither $KUBECONFIG nor a pod's service account "
                            f"($KUBERNETES_SERVICE_HOST and {token})")
        root = Path(env.get(names.ENV_CONFIG_DIR) or names.CONFIG_MOUNT_ROOT)
        pinned = {kind: config for kind in names.CONFIG_KINDS
                  if (config := _pinned(kind, root=root, env=env, problems=problems))}
        try:
            floors = approvals.floors(env.get(names.ENV_APPROVALS))
        except approvals.ApprovalError as error:
            problems.append(str(error))
        if problems:
            raise WorkerContextError(problems)
        return cls(approvals=floors, namespace=found[names.ENV_NAMESPACE], run=found[names.ENV_RUN],
                   run_uid=run_uid,
                   slot=found[names.ENV_SLOT], node=found[names.ENV_NODE],
                   attempt=numbers[names.ENV_ATTEMPT],
                   fencing_token=numbers[names.ENV_FENCING_TOKEN],
                   lease=found[names.ENV_LEASE], config_dir=root, pinned=pinned)


def _pinned(kind: str, *, root: Path, env: Mapping[str, str],
            problems: list[str]) -> PinnedConfig | None:
    """The mounted snapshot of ``kind``, verified; None (and a problem noted) if it is not."""
    key = names.ENV_PINNED_SHA256[kind]
    digest = env.get(key, "")
    if not SHA256.fullmatch(digest):
        problems.append(f"${key} is not set" if not digest
                        else f"${key}={digest[:80]!r} is not a sha256 (64 hex digits)")
    path = root / kind / names.CONFIG_DATA_KEYS[kind]
    try:
        with path.open("rb") as file:
            data = file.read(MAX_CONFIG_BYTES + 1)
    except OSError as error:
        problems.append(f"the pinned {kind} snapshot is not mounted at {path} "
                        f"({error.strerror or error})")
        return None
    if len(data) > MAX_CONFIG_BYTES:
        problems.append(f"{path} is larger than a ConfigMap can be ({MAX_CONFIG_BYTES} bytes)")
        return None
    actual = hashlib.sha256(data).hexdigest()
    if not SHA256.fullmatch(digest):
        return None
    if actual != digest:
        problems.append(f"{path} has sha256 {actual[:12]}…, not the run's pinned "
                        f"{digest[:12]}… (${key}): not the snapshot the run pinned")
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        problems.append(f"{path} is not UTF-8 text")
        return None
    return PinnedConfig(kind=kind, path=path, text=text, sha256=digest)
