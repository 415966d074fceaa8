"""The image builder's cache keys and pip target, without building anything.

Covers: a key changes with any input's name or content and cannot be forged by moving
bytes between inputs; the project's inputs are the Dockerfile, packaging files and every
source file, never caches or build metadata, and the offline context holds those and the
wheels alone; the wheels are for the image's CPython on
glibc up to bookworm's, including the older manylinux tags most wheels carry.
"""

from __future__ import annotations

import os
import platform
import tomllib
from pathlib import Path

import pytest

from tests.support.cluster import images, imagestore


def test_a_key_changes_with_any_input() -> None:
    base = imagestore.key([("a", b"1"), ("b", b"2")])
    assert len(base) == 16 and int(base, 16) >= 0
    assert imagestore.key([("a", b"1"), ("b", b"2")]) == base
    assert imagestore.key([("a", b"1"), ("b", b"3")]) != base
    assert imagestore.key([("a", b"1"), ("c", b"2")]) != base
    # Length prefixes: moving bytes from one input to the next is a different key.
    assert imagestore.key([("a", b"12"), ("b", b"")]) != imagestore.key([("a", b"1"), ("b", b"2")])


def test_the_project_inputs_are_its_sources_only() -> None:
    relative = {str(p.relative_to(images.REPO)) for p in images._project_sources()}
    top = {"Dockerfile", "pyproject.toml", "README.md", "LICENSE", "sdk/pyproject.toml",
           "sdk/README.md", "sdk/LICENSE"}
    assert {*top, "sdk/agentrun/worker/cli.py", "operator/agentrun/cli.py",
            "sdk/agentrun/worker/py.typed", "operator/agentrun/plugin/py.typed"} <= relative
    assert not [p for p in relative if "__pycache__" in p or ".egg-info" in p]
    assert all(p.startswith(("operator/", "sdk/agentrun/")) for p in relative - top)


def test_the_offline_context_is_the_keys_sources_and_the_wheels(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels-cache"
    wheels.mkdir()
    (wheels / "dep-1.0-py3-none-any.whl").write_bytes(b"wheel")
    context = images.build_context(tmp_path / "context", wheels)
    sent = {str(p.relative_to(context)) for p in context.rglob("*") if p.is_file()}
    sources = {str(p.relative_to(images.REPO)) for p in images._project_sources()}
    assert sent == sources | {"wheels/dep-1.0-py3-none-any.whl"}


def test_the_offline_build_args_are_the_dockerfiles() -> None:
    dockerfile = (images.REPO / "Dockerfile").read_text()
    for arg in images.OFFLINE_BUILD_ARGS:
        assert f"ARG {arg.split('=')[0]}=" in dockerfile
    assert "COPY . /src/" in dockerfile  # where PIP_FIND_LINKS finds the context's wheels/
    assert "PIP_FIND_LINKS=/src/wheels" in images.OFFLINE_BUILD_ARGS
    # The build backend comes from the wheels too: the image builds the project's wheel.
    backend = tomllib.loads((images.REPO / "pyproject.toml").read_text())["build-system"]
    assert set(backend["requires"]) <= set(images.wheel_requirements())


def test_wheels_target_the_images_python_and_glibc() -> None:
    args = images._platform_args()
    machine = platform.machine()
    assert "--only-binary=:all:" in args  # --platform needs it; no sdist is ever built
    assert "--python-version=3.11" in args and "--abi=cp311" in args
    platforms = [a.removeprefix("--platform=") for a in args if a.startswith("--platform=")]
    assert f"manylinux_2_{images.BASE_GLIBC_MINOR}_{machine}" in platforms
    assert f"manylinux_2_17_{machine}" in platforms and f"manylinux2014_{machine}" in platforms
    assert f"manylinux_2_{images.BASE_GLIBC_MINOR + 1}_{machine}" not in platforms


def test_pruning_keeps_the_most_recently_used_archives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    root = imagestore.cache_root()
    root.mkdir(parents=True)
    archives = [root / f"thing-{n:016x}.oci.tar" for n in range(6)]
    for age, path in enumerate(reversed(archives)):  # archives[0] is the oldest
        path.write_bytes(b"")
        os.utime(path, (1_000_000 - age, 1_000_000 - age))
    other = root / "pause-0000000000000000.oci.tar"
    other.write_bytes(b"")
    assert imagestore.cached(archives[0])  # used now: the newest
    assert not imagestore.cached(root / "thing-missing.oci.tar")
    imagestore.prune(repository="localhost/agentrun/thing", prefix="thing-", keep=4)
    assert sorted(p.name for p in root.glob("thing-*")) == sorted(
        p.name for p in [archives[0], *archives[3:]])
    assert other.exists()  # another image's archives are not its to prune


def test_the_store_image_uses_the_test_extras_seaweedfs_pin() -> None:
    pinned = images.seaweedfs_requirement()
    assert pinned.startswith(f"{images.SEAWEEDFS_PROJECT}==")
    assert pinned.split("==", 1)[1].count(".") >= 1  # an exact version, never a range
