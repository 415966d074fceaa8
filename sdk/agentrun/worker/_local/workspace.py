"""What the operator gives a worker pod, written into the harness's directory.

Layout of ``DIR`` (kept between runs; ``--fresh`` removes what the harness made in it):
- ``.agentrun-local``: the marker that the harness made the directory; the harness writes
  only in a new or empty directory, or one with this marker (or an earlier harness's:
  ``state.json`` and nothing but the harness's own entries), so ``--dir .`` in a project
  is refused, not filled nor emptied;
- ``state.json``: each run's uid (made once, so the effects' idempotency keys, derived
  from it, stay the same across invocations as they do across a run's attempts) and the
  API's bearer token;
- ``kube/leases.json`` (the API's Leases) and ``kube/kubeconfig`` (the API's address,
  new each invocation: its port is the kernel's pick);
- ``config/<kind>/<kind>.yaml``: the pinned package, workflow and bindings, as the pod
  mounts them, each verified by the worker against its ``AGENTRUN_<KIND>_SHA256``;
- ``credentials/``: an access key and secret, as the journal's Secret is mounted, so the
  worker signs its S3 requests as it does in a cluster (the fake accepts any signature);
- ``s3/<bucket>/``: the store (``agentrun.worker._local.s3store``).
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agentrun.api import configs, names
from agentrun.core.base import naming
from agentrun.worker._local import settings


class SetupError(Exception):
    """Input the harness cannot run with (the CLI exits 2 with it)."""


@dataclass(kw_only=True)
class Workspace:
    """The directory and what is pinned for this invocation's run."""

    root: Path
    run: str
    node: str
    run_uid: str
    token: str
    documents: Mapping[str, bytes] = field(repr=False)

    @property
    def slot(self) -> str:
        return naming.slot_name(run=self.run, node=self.node)

    @property
    def leases_file(self) -> Path:
        return self.root / "kube" / "leases.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kube" / "kubeconfig"

    @property
    def store_root(self) -> Path:
        return self.root / "s3"

    @property
    def journal_prefix(self) -> str:
        return f"{settings.JOURNAL_BASE}/{settings.NAMESPACE}/{self.run_uid}"

    def lease(self, attempt: int) -> str:
        return naming.attempt_name(slot=self.slot, number=attempt)

    @classmethod
    def prepare(cls, *, root: Path, run: str, node: str | None, fresh: bool,
                given: Mapping[str, bytes]) -> Workspace:
        """Make (or reuse) ``root``; the documents ``given`` by kind, the others defaults;
        each checked as the operator checks them before it pins a run."""
        documents = dict(given)
        listed = _nodes(documents.get("workflow"))
        node = node or (listed[0] if listed else settings.DEFAULT_NODE)
        documents.setdefault("package", settings.DEFAULT_PACKAGE.encode())
        documents.setdefault("workflow", settings.DEFAULT_WORKFLOW.format(node=node).encode())
        documents.setdefault("bindings", ("nodes:\n" + "".join(
            settings.DEFAULT_BINDING.format(node=each) for each in listed or [node])).encode())
        _check(documents, node=node)
        _claim(root, fresh=fresh)
        for folder in ("kube", "s3", "credentials"):
            (root / folder).mkdir(parents=True, exist_ok=True)
        state_file = root / "state.json"
        try:
            state = json.loads(state_file.read_text()) if state_file.is_file() else {}
            runs = state.setdefault("runs", {})
            run_uid = str(runs.setdefault(run, str(uuid.uuid4())))
            token = str(state.setdefault("token", secrets.token_urlsafe(24)))
        except (ValueError, AttributeError) as error:
            raise SetupError(f"{state_file} cannot be read ({error}): --fresh starts "
                             "over") from None
        private(state_file, json.dumps(state, indent=1).encode())
        return cls(root=root, run=run, node=node, run_uid=run_uid, token=token,
                   documents=documents)

    def write(self, *, api: str) -> None:
        """The kubeconfig naming ``api``, the pinned files and the journal's keys."""
        private(self.kubeconfig, yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "local",
            "clusters": [{"name": "local", "cluster": {"server": api}}],
            "users": [{"name": "local", "user": {"token": self.token}}],
            "contexts": [{"name": "local", "context": {
                "cluster": "local", "user": "local", "namespace": settings.NAMESPACE}}]}
            ).encode())
        for kind, data in self.documents.items():
            folder = self.root / "config" / kind
            folder.mkdir(parents=True, exist_ok=True)
            (folder / names.CONFIG_DATA_KEYS[kind]).write_bytes(data)
        for name, value in ((names.JOURNAL_ACCESS_KEY, "local"),
                            (names.JOURNAL_SECRET_KEY, "local-secret")):
            private(self.root / "credentials" / name, value.encode())

    def environment(self, *, attempt: int, s3: str,
                    inherited: Mapping[str, str] = os.environ) -> dict[str, str]:
        """Attempt ``attempt``'s environment: ``inherited`` without what would point the
        SDK elsewhere (another attempt's ``AGENTRUN_*``, a pod's in-cluster API, a trace
        of a cluster's run), plus what the operator's pod builder sets."""
        lease = self.lease(attempt)
        env = {key: value for key, value in inherited.items()
               if not key.startswith(("AGENTRUN_", "KUBERNETES_SERVICE_"))
               and key not in ("KUBECONFIG", "TRACEPARENT")}
        env |= {
            "KUBECONFIG": str(self.kubeconfig.resolve()), "HOSTNAME": lease,
            names.ENV_NAMESPACE: settings.NAMESPACE, names.ENV_RUN: self.run,
            names.ENV_RUN_UID: self.run_uid, names.ENV_SLOT: self.slot,
            names.ENV_NODE: self.node, names.ENV_ATTEMPT: str(attempt),
            names.ENV_FENCING_TOKEN: str(attempt), names.ENV_LEASE: lease,
            names.ENV_CONFIG_DIR: str((self.root / "config").resolve()),
            names.ENV_JOURNAL_ENDPOINT: s3, names.ENV_JOURNAL_BUCKET: settings.BUCKET,
            names.ENV_JOURNAL_PREFIX: self.journal_prefix,
            names.ENV_JOURNAL_REGION: settings.REGION,
            names.ENV_JOURNAL_CREDENTIALS: str((self.root / "credentials").resolve())}
        env |= {names.ENV_PINNED_SHA256[kind]: hashlib.sha256(data).hexdigest()
                for kind, data in self.documents.items()}
        return env


OWN = ("state.json", "kube", "s3", "credentials", "config", settings.SUMMARY_FILE)


def _claim(root: Path, *, fresh: bool) -> None:
    """Make ``root`` the harness's (a new or empty directory: marked), or find it is
    (marked, or an earlier harness's); ``fresh``: remove what the harness made in it,
    only that. Any other directory is refused: it is someone's, not the harness's."""
    if root.exists() and not root.is_dir():
        raise SetupError(f"--dir {root}: not a directory")
    found = {path.name for path in root.iterdir()} if root.is_dir() else set()
    if found and not ((root / settings.MARKER_FILE).is_file()
                      or ("state.json" in found and found <= set(OWN))):
        raise SetupError(f"--dir {root}: not a directory the harness made (it has no "
                         f"{settings.MARKER_FILE} marker and holds other files); name a "
                         "new or empty one")
    if fresh:
        for name in OWN:
            path = root / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    root.mkdir(parents=True, exist_ok=True)
    (root / settings.MARKER_FILE).write_text(
        "This directory is agentrun-worker local's state: its --fresh removes "
        f"{', '.join(OWN)} here.\n")


def private(path: Path, data: bytes) -> None:
    """Write ``path`` whole, readable by its owner only from its creation (0600): it is
    written beside and renamed into place, so no reader sees it half written."""
    staged = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    descriptor = os.open(staged, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as file:
        file.write(data)
    os.replace(staged, path)


def _nodes(workflow: bytes | None) -> list[str]:
    """The node names of a workflow given (the harness runs the first by default)."""
    try:
        loaded = yaml.safe_load(workflow) if workflow is not None else None
        nodes = loaded.get("nodes") if isinstance(loaded, dict) else None
        return [str(each["name"]) for each in nodes or () if isinstance(each, dict)
                and "name" in each]
    except (yaml.YAMLError, TypeError):
        return []  # _check says what is wrong with it


def _check(documents: Mapping[str, bytes], *, node: str) -> None:
    """The operator's checks before it pins a run: each a valid document, the bindings
    cover the workflow, and the harness's node is one of the workflow's."""
    parsed: dict[str, object] = {}
    for kind, data in documents.items():
        if len(data) > settings.MAX_DOCUMENT_BYTES:
            raise SetupError(f"the {kind} is over {settings.MAX_DOCUMENT_BYTES} bytes (a "
                             "ConfigMap's most)")
        try:
            parsed[kind] = configs.parse_document(kind, yaml.safe_load(data.decode()))
        except (UnicodeDecodeError, yaml.YAMLError, ValueError) as error:
            raise SetupError(f"the {kind} is not one the operator would pin: "
                             f"{' '.join(str(error).split())[:400]}") from None
    workflow, bindings = parsed["workflow"], parsed["bindings"]
    assert isinstance(workflow, configs.WorkflowDocument)
    assert isinstance(bindings, configs.BindingsDocument)
    try:
        bindings.check_covers(workflow)
    except ValueError as error:
        raise SetupError(f"the bindings do not fit the workflow: {error}") from None
    if node not in {each.name for each in workflow.nodes}:
        raise SetupError(f"--node {node}: not a node of the workflow "
                         f"({', '.join(each.name for each in workflow.nodes)})")
