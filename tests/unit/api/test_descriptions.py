"""Every field of the three kinds says what it means.

``kubectl explain`` and docs/reference/api.md print the CRDs' descriptions, and a field
without one leaves a person to guess its unit, its writer and what its absence means. The
walk is over the structural schemas ``crds.py`` builds from the models (what the API server
is given), not over the YAML on disk: ``test_crds.py`` holds the two equal. A description
comes from ``Field(description=...)`` or, for a nested object, its model's docstring.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentrun.api import crds, schema

KINDS = {kind.kind: kind for kind in crds.KINDS}


def undescribed(node: dict[str, Any], *, path: str = "") -> list[str]:
    """The paths of the properties under ``node`` that have no description (a list's items
    are ``<field>[]``, a map's values ``<field>{}``), the root's ``metadata`` left out: the
    API server allows nothing but ``type`` there and shows ObjectMeta's own description."""
    found: list[str] = []
    for name, child in node.get("properties", {}).items():
        where = f"{path}.{name}" if path else name
        if not (path == "" and name == "metadata") and not str(
                child.get("description", "")).strip():
            found.append(where)
        found += undescribed(child, path=where)
    if isinstance(node.get("items"), dict):
        found += undescribed(node["items"], path=f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        found += undescribed(node["additionalProperties"], path=f"{path}{{}}")
    return found


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_field_has_a_description(kind: str) -> None:
    missing = undescribed(crds.root_schema(KINDS[kind]))
    assert not missing, (
        f"{kind}: {len(missing)} field(s) without a description (give them "
        "Field(description=...) or their model a docstring):\n" + "\n".join(missing))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_root_metadata_is_bare_and_described_by_the_reference(kind: str) -> None:
    """The one exception above is the API server's rule, not an oversight: a description
    on the root ``metadata`` makes it refuse the whole CRD."""
    assert crds.root_schema(KINDS[kind])["properties"]["metadata"] == {"type": "object"}
    assert crds.METADATA_DESCRIPTION.startswith("standard object metadata")


class Inner(BaseModel):
    """Documented by its docstring."""

    told: int = Field(description="said")
    untold: int


class Outer(BaseModel):
    """A spec."""

    documented: Inner
    listed: list[Inner] = Field(description="a list")
    mapped: dict[str, Inner] = Field(description="a map")
    metadata: dict[str, str]  # not the root's: held to the rule


def test_the_walk_names_each_undescribed_field_wherever_it_is() -> None:
    """It could fail: one undescribed field under an object, a list and a map is found
    three times, by path, and a nested ``metadata`` once; a docstring describes the
    object it documents, and only the root's ``metadata`` is let off."""
    found = undescribed({"type": "object", "properties": {
        "metadata": {"type": "object"}, "spec": schema.structural(Outer)}})
    assert found == ["spec.documented.untold", "spec.listed[].untold",
                     "spec.mapped{}.untold", "spec.metadata"]
