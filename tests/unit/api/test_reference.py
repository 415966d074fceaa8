"""docs/reference/api.md is what the models give, and says what the CRDs say.

Drift: regenerating from the models must reproduce the file byte for byte (``make crds``
fixes a failure), as for ``crds/``. Content: every field of every kind has its row, with
its description, so the reference is never thinner than ``kubectl explain``.
"""

from __future__ import annotations

import pathlib

import pytest

from agentrun.api import crds, reference

REPO = pathlib.Path(__file__).resolve().parents[3]
ON_DISK = REPO / reference.PATH


def test_the_file_on_disk_matches_the_models() -> None:
    assert reference.main(["--out", str(ON_DISK), "--check"]) == 0, (
        f"{reference.PATH} is stale; run `make crds`")


def test_check_exits_1_with_a_diff_on_drift(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "api.md"
    assert reference.main(["--out", str(out)]) == 0
    assert reference.main(["--out", str(out), "--check"]) == 0
    out.write_text(out.read_text().replace("| `spec.suspend` |", "| `spec.suspended` |"))
    capsys.readouterr()

    assert reference.main(["--out", str(out), "--check"]) == 1
    assert "+| `spec.suspend` |" in capsys.readouterr().out
    out.unlink()
    assert reference.main(["--out", str(out), "--check"]) == 1


def fields(node: dict[str, object], *, path: str = "") -> list[str]:
    """Every property path under ``node``, as the reference names them."""
    found: list[str] = []
    properties = node.get("properties")
    for name, child in (properties if isinstance(properties, dict) else {}).items():
        where = f"{path}.{name}" if path else name
        found.append(where)
        found += fields(child, path=where)
    items = node.get("items")
    if isinstance(items, dict):
        found += fields(items, path=f"{path}[]")
    return found


@pytest.mark.parametrize("kind", crds.KINDS, ids=lambda kind: kind.kind)
def test_every_field_has_its_row_in_its_kind_section(kind: crds.Kind) -> None:
    text = reference.render()
    start = text.index(f"\n## {kind.kind}\n")
    end = text.find("\n## ", start + 1)
    section = text[start:end if end > 0 else len(text)]
    for path in fields(crds.root_schema(kind)):
        assert f"| `{path}` |" in section, (kind.kind, path)
    assert crds.METADATA_DESCRIPTION in section


@pytest.mark.parametrize(("raw", "cell"), [
    ("plain", "plain"),
    ("<slot>-<n> | a & b", "&lt;slot&gt;-&lt;n&gt; \\| a &amp; b"),
    ("kept `<x> | y` as code", "kept `<x> \\| y` as code"),
    ("two\n  lines", "two lines"),
    ("a*b*", "a\\*b\\*"),
])
def test_a_description_is_one_safe_table_cell(raw: str, cell: str) -> None:
    assert reference.text(raw) == cell


def test_bounds_say_ranges_lengths_values_and_defaults() -> None:
    assert reference.bounds_of({"type": "integer", "minimum": 1, "maximum": 5, "default": 2},
                               required=True) == ["required", "1 ≤ n ≤ 5", "default `2`"]
    assert reference.bounds_of({"type": "integer", "minimum": 0, "exclusiveMinimum": True},
                               required=False) == ["0 < n"]
    assert reference.bounds_of({"type": "string", "enum": ["A", "B"], "maxLength": 1},
                               required=False) == ["one of `A`, `B`"]
    assert reference.bounds_of({"type": "string", "minLength": 1, "maxLength": 9,
                                "pattern": "^a|b$"}, required=False) == [
        "length 1..9", "pattern `^a\\|b$`"]
    assert reference.type_of({"type": "array", "items": {"type": "string",
                                                          "format": "date-time"}}) == (
        "[]string (date-time)")
