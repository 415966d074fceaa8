"""The project's CRDs on a cluster: applied from ``crds/``, then waited for until served.

Why a module: the session's ``crds`` fixture and ``make test``'s driver
(:mod:`tests.support.cluster.session`, before its concurrent workers start) both apply them.
"""

from __future__ import annotations

import pathlib
from typing import Any

import kubernetes
import yaml
from kubernetes.client.rest import ApiException

from agentrun.api import names
from tests.support.waiting import wait_for

CRD_DIR = pathlib.Path(__file__).resolve().parents[3] / "crds"
ESTABLISH_TIMEOUT = 60.0


def _apply(api: kubernetes.client.ApiextensionsV1Api, body: dict[str, Any]) -> None:
    """Create, or replace under the current resourceVersion (a re-run keeps the cluster)."""
    name = body["metadata"]["name"]
    try:
        existing = api.read_custom_resource_definition(name)
    except ApiException as error:
        if error.status != 404:
            raise
        api.create_custom_resource_definition(body)
        return
    body["metadata"]["resourceVersion"] = existing.metadata.resource_version
    api.replace_custom_resource_definition(name, body)


def _established(api: kubernetes.client.ApiextensionsV1Api, name: str) -> bool:
    crd = api.read_custom_resource_definition(name)
    conditions = {c.type: c.status for c in (crd.status.conditions or [])}
    return conditions.get("Established") == "True" and conditions.get("NamesAccepted") == "True"


def _discovered(api: kubernetes.client.CustomObjectsApi, plural: str) -> bool:
    resources = api.get_api_resources(names.GROUP, names.VERSION).resources
    return any(r.name == plural and names.CATEGORY in (r.categories or []) for r in resources)


def apply_crds(api_client: kubernetes.client.ApiClient, *, write: bool = True) -> list[str]:
    """Apply ``crds/agentrun.dev_*.yaml`` (not the folder's kustomization.yaml; ``write``
    False: only wait for them); wait until each is Established and served; names."""
    extensions = kubernetes.client.ApiextensionsV1Api(api_client)
    custom = kubernetes.client.CustomObjectsApi(api_client)
    applied: list[tuple[str, str]] = []
    for path in sorted(CRD_DIR.glob(f"{names.GROUP}_*.yaml")):
        body = yaml.safe_load(path.read_text())
        if write:
            _apply(extensions, body)
        applied.append((body["metadata"]["name"], body["spec"]["names"]["plural"]))
    for name, plural in applied:
        wait_for(lambda name=name: _established(extensions, name),
                 timeout=ESTABLISH_TIMEOUT, message=f"CRD {name} to be Established")
        wait_for(lambda plural=plural: custom.list_cluster_custom_object(
                     names.GROUP, names.VERSION, plural) is not None,
                 timeout=ESTABLISH_TIMEOUT, message=f"{plural} to be served")
        # Discovery is updated asynchronously after Established; kubectl needs it.
        wait_for(lambda plural=plural: _discovered(custom, plural),
                 timeout=ESTABLISH_TIMEOUT, message=f"{plural} to be in discovery")
    return [name for name, _ in applied]
