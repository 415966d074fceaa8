"""The images built without a registry (tests/support/cluster/images.py), opened and run.

Covers: the pause image is the static binary from the pinned Kubernetes source, run as
nobody; the project image runs as uid 65532 with the operator as entrypoint and holds the
renewer; both archives are OCI layouts that name their ref (what ``ctr images import``
tags); a second request is served from the cache; the build's commands see no network
but a loopback. Building needs buildah and mmdebstrap: without them these tests fail
and say so (``make test`` and ``make image`` install them).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.cluster import images, imagestore


class OciArchive:
    """An OCI image-layout tar, read: its index, the one manifest, config and layers."""

    def __init__(self, path: Path) -> None:
        with tarfile.open(path) as tar:
            self.members = {m.name: tar.extractfile(m).read()  # type: ignore[union-attr]
                            for m in tar if m.isfile()}
        self.index = json.loads(self.members["index.json"])
        (entry,) = self.index["manifests"]
        self.manifest = self.blob_json(entry["digest"])
        self.config = self.blob_json(self.manifest["config"]["digest"])

    def blob(self, digest: str) -> bytes:
        return self.members["blobs/sha256/" + digest.removeprefix("sha256:")]

    def blob_json(self, digest: str) -> Any:
        return json.loads(self.blob(digest))

    def files(self) -> dict[str, bytes]:
        """Regular files of all layers (the last layer wins), by path without a leading /."""
        found: dict[str, bytes] = {}
        for layer in self.manifest["layers"]:
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(self.blob(layer["digest"])))) \
                    as content:
                for member in content:
                    if member.isfile():
                        data = content.extractfile(member)
                        found[member.name.lstrip("./")] = data.read() if data else b""
        return found


@pytest.fixture(scope="session")
def pause() -> imagestore.ImageArchive:
    return images.pause_image()


@pytest.fixture(scope="session")
def project() -> imagestore.ImageArchive:
    return images.project_image()


def test_the_archive_names_its_ref(pause: imagestore.ImageArchive,
                                   project: imagestore.ImageArchive) -> None:
    for image in (pause, project):
        archive = OciArchive(image.path)
        (entry,) = archive.index["manifests"]
        assert entry["annotations"]["org.opencontainers.image.ref.name"] == image.ref
        assert image.ref.startswith("localhost/agentrun/")
        assert image.path.parent == imagestore.cache_root()


def test_pause_is_the_static_binary_run_as_nobody(pause: imagestore.ImageArchive) -> None:
    archive = OciArchive(pause.path)
    assert archive.config["config"]["Entrypoint"] == ["/pause"]
    assert archive.config["config"]["User"] == "65535:65535"
    files = archive.files()
    assert set(files) == {"pause"}
    binary = files["pause"]
    assert binary[:4] == b"\x7fELF"
    assert b"/lib64/ld-linux" not in binary  # static: no program interpreter
    assert b"v3." in binary and b"-agentrun" in binary  # upstream's VERSION, our revision


def test_the_project_image_runs_the_operator_as_non_root(project: imagestore.ImageArchive) -> None:
    config = OciArchive(project.path).config["config"]
    assert config["User"] == "65532:65532"
    assert config["Entrypoint"] == ["agentrun-operator"]
    assert config["Cmd"] == ["run"]
    assert any(e.startswith("PATH=/opt/agentrun/bin:") for e in config["Env"])


def _run_in(ref: str, script: str) -> str:
    container = imagestore.buildah("from", "--pull-never", ref).strip()
    try:
        return imagestore.buildah("run", "--isolation", "chroot", container, "--",
                              "sh", "-c", script, offline=True)
    finally:
        imagestore.buildah("rm", container)


def test_the_project_image_holds_the_renewer(project: imagestore.ImageArchive) -> None:
    out = _run_in(project.ref, "id -u; agentrun-worker run --help; agentrun-operator --help;"
                  " python3 -c 'import agentrun.worker._renewer, kopf; print(\"imports\")'")
    lines = out.splitlines()
    assert lines[0] == "65532"
    assert "usage: agentrun-worker run" in out
    assert "usage: agentrun-operator" in out
    assert lines[-1] == "imports"


def test_a_second_request_is_served_from_the_cache(project: imagestore.ImageArchive) -> None:
    started = time.monotonic()
    again = images.project_image()
    assert again == project
    assert time.monotonic() - started < 5.0


def test_build_commands_see_no_network() -> None:
    with tempfile.TemporaryDirectory() as context:
        (Path(context) / "Dockerfile").write_text(
            f"FROM {images.base_image()}\nRUN cat /proc/net/dev > /interfaces\n")
        image_id = imagestore.buildah("build", "--quiet", "--isolation", "chroot", "--pull-never",
                                  str(context), offline=True).strip().splitlines()[-1]
    try:
        interfaces = _run_in(image_id, "tail -n +3 /interfaces | cut -d: -f1 | tr -d ' '")
    finally:
        imagestore.buildah("rmi", image_id)
    assert interfaces.split() == ["lo"]
