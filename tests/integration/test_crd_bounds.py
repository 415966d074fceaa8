"""Every number in every spec is bounded, and the API server enforces the bounds.

A generated matrix (the bad-input matrix, integer part): every integer or number
field found in the generated CRDs' ``spec`` schemas x {min, max} accepted and
{min-1, max+1, 2^63-1} rejected with 422, each a server-side dry run of a valid example
with that one field changed. A field without both bounds fails the first test, so a new
unbounded number cannot be added unnoticed.
"""

from __future__ import annotations

import copy
import pathlib
from collections.abc import Iterator
from typing import Any

import kubernetes
import pytest
import yaml
from kubernetes.client.rest import ApiException

from agentrun.api import names

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("crds")]

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRDS = {"AgentRun": "agentrun.dev_agentruns.yaml", "LaunchSpec": "agentrun.dev_launchspecs.yaml",
        "Slot": "agentrun.dev_slots.yaml"}
PLURALS = {"AgentRun": "agentruns", "LaunchSpec": "launchspecs", "Slot": "slots"}
INT64_MAX = 2**63 - 1


def example(kind: str) -> dict[str, Any]:
    if kind == "Slot":
        return {"apiVersion": names.API_VERSION, "kind": "Slot",
                "metadata": {"name": "study-0a1b2c3d"},
                "spec": {"run": "study", "node": "research", "workerClass": "cpu"}}
    file_name = {"AgentRun": "30-agentrun.yaml", "LaunchSpec": "20-launchspec-cpu.yaml"}[kind]
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "manifests/examples" / file_name).read_text())
    if kind == "LaunchSpec":  # spec.sidecar's numbers are checked beside its required image
        loaded["spec"]["sidecar"] = {"image": "localhost/agentrun/agentrun-operator:dev"}
    return loaded


def numbers(schema: dict[str, Any], path: tuple[str, ...] = ()) -> Iterator[
        tuple[tuple[str, ...], dict[str, Any]]]:
    """Every integer/number property under ``schema`` (objects only), with its path."""
    if schema.get("type") in ("integer", "number"):
        yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from numbers(sub, (*path, key))


def spec_numbers() -> list[tuple[str, tuple[str, ...], dict[str, Any]]]:
    found = []
    for kind, file_name in CRDS.items():
        crd = yaml.safe_load((ROOT / "crds" / file_name).read_text())
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
        found += [(kind, ("spec", *path), field) for path, field in numbers(schema)]
    return found


FIELDS = spec_numbers()
IDS = [f"{kind}.{'.'.join(path)}" for kind, path, _ in FIELDS]


def test_every_spec_number_has_both_bounds() -> None:
    assert FIELDS, "no numbers found: the walk is broken"
    unbounded = [i for i, (_, _, f) in zip(IDS, FIELDS, strict=True)
                 if "minimum" not in f or "maximum" not in f]
    assert not unbounded


def with_value(body: dict[str, Any], path: tuple[str, ...], value: object) -> dict[str, Any]:
    body = copy.deepcopy(body)
    where = body
    for key in path[:-1]:
        where = where.setdefault(key, {})
    where[path[-1]] = value
    return body


def dry_run(api_client: kubernetes.client.ApiClient, namespace: str,
            body: dict[str, Any]) -> int:
    """The HTTP status of a server-side dry-run create of ``body`` (201 when accepted)."""
    body["metadata"]["namespace"] = namespace
    try:
        kubernetes.client.CustomObjectsApi(api_client).create_namespaced_custom_object(
            names.GROUP, names.VERSION, namespace, PLURALS[body["kind"]], body, dry_run="All")
    except ApiException as error:
        return int(error.status)
    return 201


@pytest.mark.parametrize(("kind", "path", "field"), FIELDS, ids=IDS)
def test_bounds_are_enforced_at_min_minus_one_max_plus_one_and_int64_max(
        api_client: kubernetes.client.ApiClient, namespace: str, kind: str,
        path: tuple[str, ...], field: dict[str, Any]) -> None:
    low, high = field["minimum"], field["maximum"]
    step = 1 if field["type"] == "integer" else 0.5
    base = example(kind)
    for value in (low, high):
        assert dry_run(api_client, namespace, with_value(base, path, value)) == 201, value
    for value in (low - step, high + step, INT64_MAX):
        assert dry_run(api_client, namespace, with_value(base, path, value)) == 422, value
