"""The worker SDK's public API: ``agentrun.worker.__all__``, and nothing else outside it.

The package's modules are private but for the ``agentrun-worker`` command
(``agentrun.worker.cli``), the example agents, written as an author would write one,
import only the public names, and ``step`` and ``effect`` give the caller's own result
type (this module is type-checked by ``make lint``).
"""

from __future__ import annotations

import ast
import pkgutil
import subprocess
import sys
from pathlib import Path
from typing import assert_type

import agentrun.worker
import agentrun.worker.langgraph
from agentrun import examples
from agentrun.worker import Kind, Steps, Worker
from agentrun.worker._effects import Ledger
from agentrun.worker._prefix import Prefix
from agentrun.worker._records import Record
from tests.support.ledgers import DurableOnReturn

EXAMPLES = Path(examples.__file__).parent


def test_every_public_name_is_there() -> None:
    missing = [name for name in agentrun.worker.__all__ if not hasattr(agentrun.worker, name)]
    assert missing == []


def test_the_modules_are_private_but_the_command() -> None:
    public = [m.name for m in pkgutil.iter_modules(agentrun.worker.__path__)
              if not m.name.startswith("_")]
    assert public == ["cli", "langgraph"]
    inside = [m.name for m in pkgutil.iter_modules(agentrun.worker.langgraph.__path__)
              if not m.name.startswith("_")]
    assert inside == [] and agentrun.worker.langgraph.__all__ == [
        "ConcurrentToolCall", "JournalSaver", "Sent", "UsageCallback", "current",
        "durable_tool", "effect", "invoke"]


PUBLIC = {"agentrun.worker": agentrun.worker.__all__,
          "agentrun.worker.langgraph": agentrun.worker.langgraph.__all__}


def test_the_examples_import_only_public_names() -> None:
    found: list[str] = []
    for path in sorted(EXAMPLES.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                found += [f"{path.name}: import {a.name}" for a in node.names
                          if a.name.startswith("agentrun.worker.")]
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "agentrun.worker"):
                exported = PUBLIC.get(node.module or "", [])
                found += [f"{path.name}: from {node.module} import {a.name}" for a in node.names
                          if a.name not in exported]
    assert found == []


# The result types of step and effect: checked by mypy (``make lint`` checks this module
# too), so a step or an effect typed ``Any`` again fails there; assert_type does nothing
# when run.

class Memory(DurableOnReturn):
    def __init__(self) -> None:
        self.committed: dict[str, Record] = {}

    def commit(self, record: Record) -> Record:
        self.committed[record.key] = record
        return record

class AlwaysLive:
    def ensure_live(self) -> None:
        return None


def typed_worker(worker: Worker) -> None:
    """Never called: the types a Worker's step and effect give its caller."""
    assert_type(worker.step("count", do=lambda: 3), int)
    assert_type(worker.step("notes", do=lambda: ["a", "b"], kind=Kind.SOURCE_NOTES), list[str])
    assert_type(worker.effect("publish", key="publish", call=lambda key, token: {"id": key}),
                dict[str, str])


def test_step_and_effect_give_the_callers_type() -> None:
    memory = Memory()
    for attempt in (1, 2):  # the second attempt skips the step and returns the outcome
        steps = Steps(prefix=Prefix(attempt=attempt, committed=dict(memory.committed)),
                      ledger=memory)
        ledger = Ledger(steps=steps, keeper=AlwaysLive(), run_uid="uid-1", slot="s")

        def publish(key: str, token: int) -> dict[str, int]:
            return {"token": token}

        notes = steps.step("notes", do=lambda: {"count": 2})
        sent = ledger.effect("publish", key="publish", call=publish)
        assert_type(notes, dict[str, int])
        assert_type(sent, dict[str, int])
        assert (notes, sent) == ({"count": 2}, {"token": 1})
    assert steps.done == ["notes"]


def test_only_the_langgraph_package_loads_langgraph() -> None:
    """The SDK without the ``langgraph`` extra: every other module of it imports without
    LangGraph or LangChain (in a fresh interpreter, so nothing earlier loaded them)."""
    modules = [f"agentrun.worker.{m.name}" for m in pkgutil.iter_modules(agentrun.worker.__path__)
               if m.name != "langgraph"]
    script = ("import sys\n" + "".join(f"import {m}\n" for m in modules) +
              "loaded = sorted(m for m in sys.modules if m.split('.')[0] in "
              "('langgraph', 'langchain_core'))\nprint(loaded)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert len(modules) > 15 and done.stdout.strip() == "[]", done.stdout
