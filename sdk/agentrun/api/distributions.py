"""The two distributions the project ships, and their installed versions.

``agentrun-worker`` is the worker SDK and what it stands on (the API's models, the pure
core, the REST client, the object store client, the owner's kit); ``agentrun-operator``
is the operator, its plugin and its packaging, and depends on the first at the same
version. Both install into the one ``agentrun`` namespace package (PEP 420: no
``agentrun/__init__.py`` in either), so ``agentrun.worker`` imports the same with or
without the operator.
"""

from __future__ import annotations

from importlib import metadata
from typing import Final

OPERATOR: Final = "agentrun-operator"
WORKER: Final = "agentrun-worker"


def version(distribution: str) -> str:
    """The installed ``distribution``'s version, for every command's ``--version``.

    Read from the installed metadata (each ``pyproject.toml``'s one ``version``), so no
    second copy of the number can drift; a tree imported without installing it says so
    instead of failing the command that only asked.
    """
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"
