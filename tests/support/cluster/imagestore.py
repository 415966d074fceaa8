"""The image store and cache of tests/support/cluster/images.py: buildah on storage of our own.

Why a module of its own: the recipes (:mod:`images`) say *what* each image is made of;
this says *where* images live and how the cache behaves: ``~/.cache/agentrun/images``
(or ``$XDG_CACHE_HOME``) holds buildah's storage, the OCI archives and a lock per image.
Terms: a *key* is 16 hex digits of a SHA-256 over an image's named inputs; an image's
tag is its key. Archives not used recently are pruned (:func:`prune`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# The storage driver buildah uses here: this kernel has overlayfs built in (vfs also
# works but copies every layer whole).
STORAGE_DRIVER = "overlay"
KEEP = 4  # archives kept per image (most recently used): a few worktrees' worth


@dataclass(frozen=True)
class ImageArchive:
    """An image saved as an OCI archive: what ``ctr -n k8s.io images import`` loads.

    ``ref`` is the name the archive carries (and what a pod's ``image`` must say, with
    ``imagePullPolicy: Never``).
    """

    ref: str
    path: Path


def cache_root() -> Path:
    """Outside the clone, so clean clones and CI reuse what was built."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "agentrun" / "images"


def log(message: str) -> None:
    print(f"images: {message}", file=sys.stderr, flush=True)


def run(args: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a tool; on failure raise with its output, so the cause is in the error."""
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args[:4])} ... failed ({result.returncode}):\n"
            f"{result.stdout[-3000:]}{result.stderr[-3000:]}"
        )
    return result.stdout


def require(tool: str, package: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(
            f"{tool} is not installed: run `make image` (it installs it) or "
            f"`apt-get install -y {package}`"
        )
    return path


def buildah_command(*args: str, offline: bool = False) -> list[str]:
    """buildah on the cache's own storage (root, no daemon): nothing else shares it.

    ``offline`` runs it in a network namespace of its own holding only a loopback that
    is down: what the build runs cannot reach anything.
    """
    root = cache_root()
    return [
        *(["unshare", "--net"] if offline else []),
        require("buildah", "buildah"),
        "--root", str(root / "storage"),
        "--runroot", str(root / "run"),
        "--storage-driver", STORAGE_DRIVER,
        *args,
    ]


def buildah(*args: str, offline: bool = False) -> str:
    """Run :func:`buildah_command` to its end; its standard output."""
    return run(buildah_command(*args, offline=offline))


def has_image(ref: str) -> bool:
    try:
        buildah("inspect", "--type", "image", "--format", "{{.FromImageID}}", ref)
    except RuntimeError:
        return False
    return True


def key(parts: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, value in parts:
        for piece in (name.encode(), value):
            digest.update(len(piece).to_bytes(8, "big"))
            digest.update(piece)
    return digest.hexdigest()[:16]


def tool_version(*args: str) -> bytes:
    return run(list(args)).splitlines()[0].encode()


@contextlib.contextmanager
def locked(name: str) -> Iterator[None]:
    """One builder of an image at a time; a second waits, then finds it cached."""
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def cached(path: Path) -> bool:
    """Whether an archive is there; marks it used, so pruning keeps what is in use."""
    try:
        os.utime(path)
    except FileNotFoundError:
        return False
    return True


def prune(*, repository: str, prefix: str, keep: int = KEEP) -> None:
    """Drop all but the ``keep`` most recently used archives of an image (and their copies
    in the storage): every source change is a new 350 MB image. A worktree whose archive
    went rebuilds it on its next request."""
    archives = sorted(cache_root().glob(f"{prefix}*.oci.tar"),
                      key=lambda p: p.stat().st_mtime, reverse=True)
    for old in archives[keep:]:
        key = old.name.removeprefix(prefix).removesuffix(".oci.tar")
        old.unlink(missing_ok=True)
        with contextlib.suppress(RuntimeError):  # already gone from the storage
            buildah("rmi", f"{repository}:{key}")


def save(ref: str, path: Path) -> ImageArchive:
    """Write ``ref`` from the storage to an OCI archive, atomically (rename at the end)."""
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    buildah("push", "--quiet", ref, f"oci-archive:{partial}:{ref}")
    partial.rename(path)
    return ImageArchive(ref=ref, path=path)


@contextlib.contextmanager
def working_container(image: str) -> Iterator[str]:
    container = buildah("from", "--pull-never", image).strip()
    try:
        yield container
    finally:
        buildah("rm", container)
