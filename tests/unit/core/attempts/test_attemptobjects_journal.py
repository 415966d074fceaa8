"""A pinned journal in the attempt's pod (pure: ``attemptobjects.pod_body``).

Covers: every agentrun container (main, init, the sidecar) gets where the journal lives;
with a Secret, the Secret's two keys are a read-only volume at the credentials mount and
``AGENTRUN_JOURNAL_CREDENTIALS`` names it (a mounted Secret, never ``secretKeyRef``, so a
rotated Secret reaches running workers); a template's own volume or mount of that name or
path gives way; and a run pinned without a journal gets the very pod it got before
journals existed, byte for byte.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from agentrun.api import names
from agentrun.api.launchspecs import DEFAULT_SIDECAR_SECURITY, LaunchSpecSpec
from agentrun.api.runs import JournalPin, Pins
from agentrun.core.attempts import attemptobjects
from tests.unit.core import corefakes as f

SPEC = f.launch_spec(
    "cpu-spec", classes=["cpu"], generation=4,
    containers=[{"name": "worker", "image": "w", "env": [{"name": "KEEP", "value": "1"}],
                 "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}]}],
    init_containers=[{"name": "init", "image": "i"}])
WITH_SIDECAR = LaunchSpecSpec.model_validate(
    {**SPEC.spec.wire(), "sidecar": {"image": "localhost/agentrun:abc"}})
JOURNAL = JournalPin(endpoint="http://minio.storage:9000", bucket="journals",
                     prefix=f"agentrun/{f.NS}/{f.RUN_UID}", region="eu-west-1")
JOURNAL_ENV = {names.ENV_JOURNAL_ENDPOINT: "http://minio.storage:9000",
               names.ENV_JOURNAL_BUCKET: "journals",
               names.ENV_JOURNAL_PREFIX: f"agentrun/{f.NS}/{f.RUN_UID}",
               names.ENV_JOURNAL_REGION: "eu-west-1"}


def pins(journal: JournalPin | None) -> Pins:
    return f.pins().model_copy(update={"journal": journal})


def pod(*, journal: JournalPin | None, spec: LaunchSpecSpec = WITH_SIDECAR) -> dict[str, Any]:
    return attemptobjects.pod_body(slot=f.slot(), pins=pins(journal), launch_spec=spec,
                                   pinned=f.PINNED, attempt=2, owner_actor="alice",
                                   tenant=f.TENANT)


def containers(body: dict[str, Any]) -> list[dict[str, Any]]:
    spec = body["spec"]
    return [*spec["containers"], *spec["initContainers"]]


def env_of(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_every_agentrun_container_learns_where_the_journal_lives() -> None:
    body = pod(journal=JOURNAL)
    found = containers(body)
    assert [c["name"] for c in found] == ["worker", names.SIDECAR_CONTAINER, "init"]
    for container in found:
        env = env_of(container)
        assert {k: env[k] for k in JOURNAL_ENV} == JOURNAL_ENV, container["name"]
        assert names.ENV_JOURNAL_CREDENTIALS not in env  # no Secret: unsigned requests
        mounts = {m["mountPath"] for m in container["volumeMounts"]}
        assert names.JOURNAL_CREDENTIALS_MOUNT not in mounts
    volumes = {v["name"] for v in body["spec"]["volumes"]}
    assert names.JOURNAL_CREDENTIALS_VOLUME not in volumes


def test_the_secret_is_mounted_read_only_and_named_by_path() -> None:
    body = pod(journal=JOURNAL.model_copy(update={"secret": "journal-keys"}))
    (volume,) = [v for v in body["spec"]["volumes"]
                 if v["name"] == names.JOURNAL_CREDENTIALS_VOLUME]
    assert volume == {"name": "agentrun-journal-credentials", "secret": {
        "secretName": "journal-keys",
        "items": [{"key": "accessKeyId", "path": "accessKeyId"},
                  {"key": "secretAccessKey", "path": "secretAccessKey"}]}}
    for container in containers(body):
        env = env_of(container)
        assert env[names.ENV_JOURNAL_CREDENTIALS] == names.JOURNAL_CREDENTIALS_MOUNT
        assert {k: env[k] for k in JOURNAL_ENV} == JOURNAL_ENV
        assert not any("secretKeyRef" in (e.get("valueFrom") or {}) for e in container["env"])
        mounts = [m for m in container["volumeMounts"]
                  if m["name"] == names.JOURNAL_CREDENTIALS_VOLUME]
        assert mounts == [{"name": "agentrun-journal-credentials",
                           "mountPath": "/var/run/agentrun/journal", "readOnly": True}]
    assert {"name": "scratch", "mountPath": "/scratch"} in body["spec"]["containers"][0][
        "volumeMounts"]


def test_a_templates_own_volume_or_mount_of_ours_gives_way() -> None:
    template = SPEC.spec.template.wire()
    spec_part: dict[str, Any] = dict(template["spec"])  # type: ignore[arg-type]
    spec_part["volumes"] = [{"name": names.JOURNAL_CREDENTIALS_VOLUME, "emptyDir": {}}]
    spec_part["containers"] = [{
        "name": "worker", "image": "w",
        "env": [{"name": names.ENV_JOURNAL_BUCKET, "value": "mine"}],
        "volumeMounts": [{"name": "other", "mountPath": names.JOURNAL_CREDENTIALS_MOUNT}]}]
    own = LaunchSpecSpec.model_validate({**SPEC.spec.wire(),
                                         "template": {**template, "spec": spec_part}})
    body = pod(journal=JOURNAL.model_copy(update={"secret": "journal-keys"}), spec=own)
    (volume,) = [v for v in body["spec"]["volumes"]
                 if v["name"] == names.JOURNAL_CREDENTIALS_VOLUME]
    assert volume["secret"]["secretName"] == "journal-keys"
    (worker,) = body["spec"]["containers"]
    assert [e["value"] for e in worker["env"] if e["name"] == names.ENV_JOURNAL_BUCKET] == [
        "journals"]
    assert [m["name"] for m in worker["volumeMounts"]
            if m["mountPath"] == names.JOURNAL_CREDENTIALS_MOUNT] == [
        names.JOURNAL_CREDENTIALS_VOLUME]


# The pods the builder made before journals existed (sha256 of their JSON): a run pinned
# without a journal, as every run an older operator pinned is, must get exactly these, but
# for the sidecar's securityContext (the restricted standard's, added since, on purpose:
# every sidecar pod made from now on complies, whenever its run was pinned).
BEFORE_JOURNALS = {
    "no sidecar": "e681707b4b29ee4ea2ea5df134d6c5409fad675bfcff525b34baff01ba1649ed",
    "sidecar": "3638d07573af004e061410d365be7ff5a026d74c2efca0ec8bccfeda06a5c90c",
}


def test_without_a_journal_the_pod_is_byte_for_byte_what_it_was() -> None:
    for what, spec in (("no sidecar", SPEC.spec), ("sidecar", WITH_SIDECAR)):
        body = pod(journal=None, spec=spec)
        for sidecar in body["spec"].get("initContainers", []):
            if sidecar["name"] == names.SIDECAR_CONTAINER:
                assert sidecar.pop("securityContext") == DEFAULT_SIDECAR_SECURITY.wire()
        text = json.dumps(body)
        assert hashlib.sha256(text.encode()).hexdigest() == BEFORE_JOURNALS[what], what
        assert "JOURNAL" not in text and "journal" not in text
