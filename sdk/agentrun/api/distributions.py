"""The two distributions the project ships, and their installed versions.

``agentrun-worker`` is the worker SDK and what it stands on (the API's models, the pure
core, the REST client, the object store client, the owner's kit); ``agentrun-operator``
is the operator, its plugin and its packaging, and depends on the first at the same
version. Both install into the one ``agentrun`` namespace package (PEP 420: no
``agentrun/__init__.py`` in either), so ``agentrun.worker`` imports the same with or
without the operator.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any, Final

OPERATOR: Final = "agentrun-operator"
WORKER: Final = "agentrun-worker"


def version(distribution: str) -> str:
    """The installed ``distribution``'s version, for every command's ``--version``.

    Read from the installed metadata (each ``pyproject.toml``'s one ``version``), so no
    second copy of the number can drift; a tree imported without installing it says so
    instead of failing the command that only asked.
    """
    from importlib import metadata  # 5-15 ms: paid by ``--version``, not by every command

    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"


def add_version_option(parser: argparse.ArgumentParser, *, distribution: str) -> None:
    """``--version`` on ``parser``: ``<prog> <version>`` on one line, exit 0.

    argparse's own ``version`` action takes the text when the parser is built, so every
    command would read the installed metadata; this reads it only when asked (the
    sidecar's startup probe is one of those commands, run every second while it starts).
    """
    class Version(argparse.Action):
        def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                     values: str | Sequence[Any] | None, option_string: str | None = None,
                     ) -> None:
            print(f"{parser.prog} {version(distribution)}")
            parser.exit()

    parser.add_argument("--version", action=Version, nargs=0, default=argparse.SUPPRESS,
                        help="show the installed version and exit")
