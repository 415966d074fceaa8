"""agentrun: durable execution across worker lifecycles for AI-agent runs on Kubernetes.

Layers, each importing only those below it (enforced by import-linter):
``cli`` → ``controller`` (Kopf handlers) → ``kube`` (the only code that calls the
API) → ``core`` (pure decisions) → ``api`` (models and names).
"""

from importlib import metadata

DISTRIBUTION = "agentrun-operator"


def version() -> str:
    """The installed distribution's version, for every command's ``--version``.

    Read from the installed metadata (``pyproject.toml``'s one ``version``), so no second
    copy of the number can drift; a tree imported without installing it says so instead
    of failing the command that only asked.
    """
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "unknown (not installed as a distribution)"
