"""The example tenant, ``manifests/examples``, as ``kubectl apply -k`` sends it.

The examples are a kustomization (their configuration is generated from plain files as
immutable ConfigMaps), so a test reads what kustomize renders, never the files one by
one: what is checked is what a user applies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tests.support.cluster.clusters import Cluster

EXAMPLES = Path(__file__).resolve().parents[3] / "manifests" / "examples"
BASE = EXAMPLES.parent


def rendered(cluster: Cluster, folder: Path = EXAMPLES) -> list[dict[str, Any]]:
    """The objects of the kustomization in ``folder``, rendered by the cluster's kubectl."""
    result = cluster.kubectl("kustomize", str(folder))
    assert result.returncode == 0, result.stderr
    return [document for document in yaml.safe_load_all(result.stdout) if document]


def of_kind(documents: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [document for document in documents if document["kind"] == kind]


def named(documents: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (found,) = [document for document in of_kind(documents, kind)
                if document["metadata"]["name"] == name]
    return found
