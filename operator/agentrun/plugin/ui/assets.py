"""The web UI's vendored front-end files: which npm package and version each comes from,
and its digest.

pip installs no JavaScript and runs no JavaScript build, so the two files the UI needs
(htmx and its Server-Sent Events extension, as their packages publish them: nothing is
built here) ship in the wheel under ``static/``, served by the UI itself (no CDN). This
table is their one record: ``make ui-assets`` fetches them again with ``npm pack`` (from the
registry, at the pinned versions) and rewrites the files; ``make lint`` checks the files
against the digests (``--check``), so a file edited by hand or a version changed without
fetching is an error.

    python -m agentrun.plugin.ui.assets --check
    python -m agentrun.plugin.ui.assets --fetch
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

STATIC = Path(__file__).resolve().parent / "static"


@dataclass(frozen=True, kw_only=True)
class Asset:
    file: str  # in static/
    package: str  # on the npm registry
    version: str
    member: str  # the file in the package's tarball
    sha256: str
    license: str  # the package's LICENSE, copied beside it


ASSETS = (
    Asset(file="htmx.min.js", package="htmx.org", version="2.0.11",
          member="package/dist/htmx.min.js", license="LICENSE.htmx",
          sha256="d6fdc75f204e6bdefa99b69bf1e6d4ac69b8a364f77929f45c13476b4000f717"),
    Asset(file="sse.min.js", package="htmx-ext-sse", version="2.2.4",
          member="package/dist/sse.min.js", license="LICENSE.htmx-ext-sse",
          sha256="98a46496de0c3605fbffdce9167ba427bdd9553184f83f149c261891a92c0136"),
)


def problems() -> list[str]:
    """Each vendored file that is missing or differs from its recorded digest."""
    found = []
    for asset in ASSETS:
        path = STATIC / asset.file
        if not path.is_file():
            found.append(f"{path} is missing: make ui-assets")
        elif hashlib.sha256(path.read_bytes()).hexdigest() != asset.sha256:
            found.append(f"{path} is not {asset.package}@{asset.version}'s {asset.member} "
                         "(its sha256 differs): make ui-assets, or record the new digest")
        if not (STATIC / asset.license).is_file():
            found.append(f"{STATIC / asset.license} is missing: make ui-assets")
    return found


def fetch() -> None:
    """Each asset from its package (``npm pack``), checked against its digest, then written."""
    with tempfile.TemporaryDirectory() as work:
        for asset in ASSETS:
            packed = subprocess.run(["npm", "pack", "--silent", f"{asset.package}@{asset.version}"],
                                    cwd=work, check=True, capture_output=True, text=True)
            with tarfile.open(Path(work) / packed.stdout.strip().splitlines()[-1]) as tar:
                body = _member(tar, asset.member)
                notice = _member(tar, "package/LICENSE")
            digest = hashlib.sha256(body).hexdigest()
            if digest != asset.sha256:
                raise SystemExit(f"{asset.package}@{asset.version}'s {asset.member} has "
                                 f"sha256 {digest}, not the recorded {asset.sha256}")
            (STATIC / asset.file).write_bytes(body)
            (STATIC / asset.license).write_bytes(notice)


def _member(tar: tarfile.TarFile, name: str) -> bytes:
    extracted = tar.extractfile(name)
    if extracted is None:
        raise SystemExit(f"{name} is not a file in the package")
    return extracted.read()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    what = parser.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true")
    what.add_argument("--fetch", action="store_true")
    args = parser.parse_args(argv)
    if args.fetch:
        fetch()
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
