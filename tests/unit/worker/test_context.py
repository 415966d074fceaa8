"""The worker's context: read from what the operator puts in a pod, verified, or refused once.

Covers: the environment :func:`attemptobjects.environment` builds and the snapshots mounted
where :func:`attemptobjects.pod_body` mounts them make a valid context (run, slot, node,
attempt, fencing token, lease, each pinned text with its digest); outside a pod, ONE
error lists everything missing; a bad name or number, a missing, oversized or altered
snapshot, a malformed digest and missing credentials are each named; and the SDK's
``Worker.from_env`` refuses the same way before it writes anything.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from agentrun.api import names
from agentrun.api.launchspecs import LaunchSpecSpec
from agentrun.api.meta import ObjectMeta, OwnerReference
from agentrun.api.runs import Pin, Pins
from agentrun.api.slots import PinnedLaunchSpec, Slot, SlotSpec
from agentrun.core.attempts import attemptobjects
from agentrun.core.base import naming
from agentrun.worker import _context as context
from agentrun.worker import _sdk as sdk
from agentrun.worker._context import Context, WorkerContextError

RUN = "research-1"
TEXTS = {"package": "name: research\nsteps: [gather, decide]\n",
         "workflow": "nodes: [review-sources]\n", "bindings": "model: stand-in  # é\n"}


RUN_UID = "0b6a4c1e-5d2f-4e9a-8c3b-7f1a2b3c4d5e"


def pins() -> Pins:
    def pin(kind: str) -> Pin:
        digest = hashlib.sha256(TEXTS[kind].encode()).hexdigest()
        return Pin(source=f"{kind}-src", revision=3, uid=f"uid-{kind}", sha256=digest,
                   snapshot=naming.config_snapshot_name(run=RUN, kind=kind, sha256=digest))
    return Pins(package=pin("package"), workflow=pin("workflow"), bindings=pin("bindings"))


def slot() -> Slot:
    return Slot(metadata=ObjectMeta(name=naming.slot_name(run=RUN, node="review-sources"),
                                    namespace="team-a", uid="uid-slot",
                                    owner_references=[OwnerReference(
                                        api_version="agentrun.dev/v1alpha1", kind="AgentRun",
                                        name=RUN, uid=RUN_UID, controller=True)]),
                spec=SlotSpec(run=RUN, node="review-sources", worker_class="cpu"))


def pod_env(root: Path, token: Path) -> dict[str, str]:
    """What a container of the operator's pod sees, with its mounts under ``root``."""
    token.write_text("a-token")
    found = {e["name"]: e.get("value") or "team-a"  # the namespace: downward API
             for e in attemptobjects.environment(slot=slot(), attempt=2, pins=pins())}
    found[names.ENV_CONFIG_DIR] = str(root)
    for kind, text in TEXTS.items():
        (root / kind).mkdir(parents=True)
        (root / kind / names.CONFIG_DATA_KEYS[kind]).write_bytes(text.encode())
    return {**found, "KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return pod_env(tmp_path / "config", tmp_path / "token")


def read(env: dict[str, str], tmp_path: Path) -> Context:
    return Context.from_env(env, token=tmp_path / "token")


def test_the_pod_the_operator_makes_has_a_valid_context(
        env: dict[str, str], tmp_path: Path) -> None:
    found = read(env, tmp_path)
    assert (found.namespace, found.run, found.node) == ("team-a", RUN, "review-sources")
    assert found.slot == slot().metadata.name
    assert (found.attempt, found.fencing_token) == (2, 2)
    assert found.run_uid == RUN_UID
    assert found.lease == found.identity == f"{found.slot}-2"
    assert {k: p.text for k, p in found.pinned.items()} == TEXTS
    assert {k: p.sha256 for k, p in found.pinned.items()} == {
        "package": pins().package.sha256, "workflow": pins().workflow.sha256,
        "bindings": pins().bindings.sha256}
    # the pod mounts each snapshot where the context reads it
    body = attemptobjects.pod_body(slot=slot(), pins=pins(), launch_spec=SPEC,
                                   pinned=PINNED_SPEC, attempt=2, owner_actor=None, tenant=None)
    mounts = {m["mountPath"] for m in body["spec"]["containers"][0]["volumeMounts"]}
    assert mounts == {f"{names.CONFIG_MOUNT_ROOT}/{kind}/" for kind in names.CONFIG_KINDS}


SPEC = LaunchSpecSpec.model_validate({
    "claim": {"workerClasses": ["cpu"]}, "lease": {"durationSeconds": 30},
    "template": {"spec": {"containers": [{"name": "w", "image": "x"}]}}})
PINNED_SPEC = PinnedLaunchSpec(name="cpu", uid="uid-cpu", generation=1, digest="f" * 64,
                               snapshot="research-1-lspec-ffffffffff")


def test_outside_a_pod_one_error_lists_everything_missing(tmp_path: Path) -> None:
    with pytest.raises(WorkerContextError) as raised:
        Context.from_env({names.ENV_CONFIG_DIR: str(tmp_path)}, token=tmp_path / "none")
    message = str(raised.value)
    assert message.startswith("not running in a claimed agentrun worker pod")
    for key in (names.ENV_NAMESPACE, names.ENV_RUN, names.ENV_RUN_UID, names.ENV_SLOT,
                names.ENV_NODE,
                names.ENV_ATTEMPT, names.ENV_FENCING_TOKEN, names.ENV_LEASE,
                *attemptobjects.ENV_PINNED_SHA256.values()):
        assert f"${key} is not set" in message
    for kind in names.CONFIG_KINDS:
        assert f"the pinned {kind} snapshot is not mounted at {tmp_path / kind}" in message
    assert "no credentials" in message
    assert len(raised.value.problems) == 15


@pytest.mark.parametrize(("key", "value", "says"), [
    (names.ENV_RUN, "Research_1", "is not a Kubernetes name"),
    (names.ENV_NAMESPACE, "a" * 64, "is not a Kubernetes name"),
    (names.ENV_ATTEMPT, "0", "is not an attempt number (1..1000)"),
    (names.ENV_FENCING_TOKEN, "1001", "is not an attempt number"),
    (names.ENV_ATTEMPT, "-1", "is not an attempt number"),
    (names.ENV_ATTEMPT, "٣", "is not an attempt number"),
    ("AGENTRUN_PACKAGE_SHA256", "abc", "is not a sha256"),
    ("AGENTRUN_WORKFLOW_SHA256", "0" * 64, "not the snapshot the run pinned"),
])
def test_a_wrong_value_is_named(env: dict[str, str], tmp_path: Path,
                                key: str, value: str, says: str) -> None:
    env[key] = value
    with pytest.raises(WorkerContextError, match=re.escape(says)) as raised:
        read(env, tmp_path)
    assert len(raised.value.problems) == 1 and key in raised.value.problems[0]


def test_an_altered_snapshot_is_refused(env: dict[str, str], tmp_path: Path) -> None:
    path = Path(env[names.ENV_CONFIG_DIR]) / "bindings" / "bindings.yaml"
    path.write_text(TEXTS["bindings"] + "extra: 1\n")
    with pytest.raises(WorkerContextError, match=r"bindings.yaml has sha256 .* not the run's"):
        read(env, tmp_path)


def test_an_oversized_snapshot_is_refused_unread(env: dict[str, str], tmp_path: Path) -> None:
    path = Path(env[names.ENV_CONFIG_DIR]) / "package" / "package.yaml"
    path.write_bytes(b"x" * (context.MAX_CONFIG_BYTES + 1))
    with pytest.raises(WorkerContextError, match="larger than a ConfigMap can be"):
        read(env, tmp_path)


def test_credentials_are_the_pods_or_a_kubeconfig(env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "token").unlink()
    with pytest.raises(WorkerContextError, match="no credentials"):
        read(env, tmp_path)
    assert read({**env, "KUBECONFIG": "/k"}, tmp_path).run == RUN


def test_the_sdk_refuses_outside_a_pod_before_any_request(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for key in (names.ENV_RUN, names.ENV_LEASE, names.ENV_NAMESPACE):
        monkeypatch.delenv(key, raising=False)

    class NoApi:
        def request(self, *_: object, **__: object) -> object:
            raise AssertionError("no request outside a pod")

    with pytest.raises(WorkerContextError, match=r"\$AGENTRUN_RUN is not set"):
        sdk.Worker.from_env(api=NoApi())  # type: ignore[arg-type]
