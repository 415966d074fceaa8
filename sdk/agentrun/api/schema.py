"""Pydantic JSON Schema to a Kubernetes *structural* OpenAPI v3 schema.

Why a converter rather than a hand-written CRD: the models are the one source of truth;
the API server and the operator must agree on every field, enum and limit. Pydantic
emits JSON Schema 2020-12; a CRD needs the structural subset of OpenAPI v3 that
apiextensions.k8s.io/v1 accepts:

- no ``$ref``/``$defs`` (inlined here; siblings of a ``$ref`` win, and CEL rules of
  both are kept);
- ``Optional[X]`` (``anyOf: [X, {type: null}]``) becomes ``X``: optional means "may be
  absent", never "may be null" (the operator writes ``exclude_none`` JSON, and a merge
  patch's ``null`` deletes the key rather than storing it);
- no ``title``, no ``additionalProperties: false`` (the server prunes unknown fields);
  ``additionalProperties: true`` (``extra="allow"``, ``dict[str, object]``) becomes
  ``x-kubernetes-preserve-unknown-fields: true``;
- ``const`` becomes a one-value ``enum``; numeric ``exclusiveMinimum``/``Maximum``
  become OpenAPI v3's boolean form;
- every node has a ``type`` unless it preserves unknown fields;
- a string enum gets ``maxLength`` (its longest value) so CEL cost estimation sees a
  bound; a ``default`` is kept only if it validates against its own node.

Pure: takes a model class, returns a dict. Anything it cannot express raises
``ValueError`` so that generation fails instead of emitting a schema the server rejects.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

Schema = dict[str, Any]

VALIDATIONS = "x-kubernetes-validations"
PRESERVE = "x-kubernetes-preserve-unknown-fields"
NULL = {"type": "null"}
DROPPED = frozenset({"title", "$defs", "examples", "readOnly", "writeOnly", "deprecated"})


def structural(model: type[BaseModel]) -> Schema:
    """The structural schema of ``model`` as the API server will validate it.

    Validation mode, not serialization: the API server checks what clients *send*
    (``kubectl apply``, the operator's writes), which is what the model accepts on
    input; fields with defaults are therefore optional, as they are for a client.
    """
    raw = model.model_json_schema(by_alias=True, mode="validation")
    defs: dict[str, Schema] = raw.get("$defs", {})
    return convert(raw, defs=defs, path=model.__name__)


def convert(node: Schema, *, defs: dict[str, Schema], path: str) -> Schema:
    """Convert one JSON Schema node (and everything under it) to structural form."""
    node = _resolve(node, defs=defs, path=path)
    out: Schema = {}
    for key, value in node.items():
        if key in DROPPED:
            continue
        if key == "properties":
            out[key] = {
                name: convert(child, defs=defs, path=f"{path}.{name}")
                for name, child in value.items()
            }
        elif key == "items":
            if not isinstance(value, dict):
                raise ValueError(f"{path}: tuple-style items are not structural")
            out[key] = convert(value, defs=defs, path=f"{path}[]")
        elif key == "additionalProperties":
            if value is True:
                out[PRESERVE] = True
            elif isinstance(value, dict):
                out[key] = convert(value, defs=defs, path=f"{path}{{}}")
        elif key == "description":
            out[key] = value.replace("``", "`")  # reST literals read as Markdown in kubectl explain
        elif key == "const":
            out["enum"] = [value]
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "uniqueItems":
            if value:
                out["x-kubernetes-list-type"] = "set"
        elif key in ("anyOf", "oneOf", "allOf", "not", "prefixItems", "discriminator"):
            raise ValueError(f"{path}: {key} cannot be expressed in a structural schema")
        else:
            out[key] = value
    if "required" in out:
        nullable = _nullable_properties(node)
        required = [name for name in out["required"] if name not in nullable]
        if required:
            out["required"] = required
        else:
            del out["required"]
    if "properties" in out and "additionalProperties" in out:
        raise ValueError(f"{path}: properties and additionalProperties together are not structural")
    if not out.get("type"):
        if out.get(PRESERVE):
            out["type"] = "object"
        else:
            raise ValueError(f"{path}: every node of a structural schema needs a type")
    if out["type"] == "string" and "enum" in out and "maxLength" not in out:
        out["maxLength"] = max(len(str(value)) for value in out["enum"])
    if "default" in out and not conforms(out["default"], out):
        del out["default"]
    return out


def _resolve(node: Schema, *, defs: dict[str, Schema], path: str) -> Schema:
    """Inline ``$ref`` and collapse ``anyOf: [X, null]`` into one node, keeping siblings."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in defs:
            raise ValueError(f"{path}: unknown $ref {node['$ref']}")
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        return _resolve(_merge(defs[name], siblings), defs=defs, path=path)
    if "anyOf" in node:
        branches = [branch for branch in node["anyOf"] if branch != NULL]
        if len(branches) != 1:
            raise ValueError(f"{path}: a union of several types is not structural")
        siblings = {k: v for k, v in node.items() if k != "anyOf"}
        if siblings.get("default", 0) is None:
            del siblings["default"]
        return _resolve(_merge(branches[0], siblings), defs=defs, path=path)
    return node


def _merge(base: Schema, extra: Schema) -> Schema:
    """``extra`` wins, except that CEL rules from both are kept (base first)."""
    merged = {**base, **extra}
    rules = [*base.get(VALIDATIONS, []), *extra.get(VALIDATIONS, [])]
    if rules:
        merged[VALIDATIONS] = rules
    return merged


def _nullable_properties(node: Schema) -> set[str]:
    """Properties declared ``X | None``: absent is how they say "none", so never required."""
    names: set[str] = set()
    for name, child in node.get("properties", {}).items():
        if NULL in child.get("anyOf", []):
            names.add(name)
    return names


def conforms(value: Any, node: Schema) -> bool:
    """Whether ``value`` passes the checks a structural ``node`` makes (no CEL, no formats).

    Used for defaults (a default the server would reject makes the whole CRD invalid, so
    one this cannot vouch for is dropped; the model still applies it when the operator
    reads) and by tests, to hold the examples against the generated CRDs. Unknown fields
    fail here although the server would prune them: in our own manifests they are typos.
    """
    kind = node.get("type")
    if value is None:
        return False
    if "enum" in node and value not in node["enum"]:
        return False
    if kind == "string":
        return (
            isinstance(value, str)
            and node.get("minLength", 0) <= len(value) <= node.get("maxLength", len(value))
            and ("pattern" not in node or re.search(node["pattern"], value) is not None)
        )
    if kind in ("integer", "number"):
        if isinstance(value, bool) or not isinstance(value, int | float):
            return False
        if kind == "integer" and not isinstance(value, int):
            return False
        low, high = node.get("minimum"), node.get("maximum")
        return (low is None or value >= low) and (high is None or value <= high)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "array":
        return (
            isinstance(value, list)
            and node.get("minItems", 0) <= len(value) <= node.get("maxItems", len(value))
            and all(conforms(item, node.get("items", {})) for item in value)
        )
    if kind == "object":
        return isinstance(value, dict) and _object_conforms(value, node)
    return False


def _object_conforms(value: dict[str, Any], node: Schema) -> bool:
    properties: Schema = node.get("properties", {})
    values: Schema | None = node.get("additionalProperties")
    free = node.get(PRESERVE, False) or ("properties" not in node and values is None)
    for name, item in value.items():
        if name in properties:
            if not conforms(item, properties[name]):
                return False
        elif values is not None:
            if not conforms(item, values):
                return False
        elif not free:
            return False
    return all(name in value for name in node.get("required", []))
