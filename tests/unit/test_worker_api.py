"""The worker SDK's public API: ``agentrun.worker.__all__``, and nothing else outside it.

The package's modules are private but for the ``agentrun-worker`` command
(``agentrun.worker.cli``), and the example agents, written as an author would write one,
import only the public names.
"""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

import agentrun.worker
from agentrun import examples

EXAMPLES = Path(examples.__file__).parent


def test_every_public_name_is_there() -> None:
    missing = [name for name in agentrun.worker.__all__ if not hasattr(agentrun.worker, name)]
    assert missing == []


def test_the_modules_are_private_but_the_command() -> None:
    public = [m.name for m in pkgutil.iter_modules(agentrun.worker.__path__)
              if not m.name.startswith("_")]
    assert public == ["cli"]


def test_the_examples_import_only_public_names() -> None:
    found: list[str] = []
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names
                          if a.name.startswith("agentrun.worker.")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "agentrun.worker"):
                found += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                          if node.module != "agentrun.worker"
                          or a.name not in agentrun.worker.__all__]
    assert found == []
