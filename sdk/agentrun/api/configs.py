"""The configuration documents a run pins: package, workflow and bindings.

They arrive as ConfigMaps (data keys ``package.yaml``, ``workflow.yaml``,
``bindings.yaml``) managed by GitOps; the operator validates them here before it pins
a run to them. A *node* is one step of the workflow; each becomes one Slot.
"""

from __future__ import annotations

from typing import Any, Self

from pydantic import ConfigDict, Field, model_validator

from agentrun.api import names
from agentrun.api.models import Model
from agentrun.api.modelusage import PriceTable
from agentrun.api.policies import RetryPolicy

NODE_NAME_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
WORKER_CLASS_PATTERN = names.WORKER_CLASS_PATTERN
MAX_NODES = 256  # nodes in a workflow, so also the dependencies one node can list


class PackageDocument(Model):
    """What the run must produce. Free-form beyond ``outcome``: the package is content."""

    model_config = ConfigDict(extra="allow")

    outcome: str = Field(min_length=1)


class WorkflowNode(Model):
    name: str = Field(min_length=1, max_length=63, pattern=NODE_NAME_PATTERN)
    worker_class: str = Field(min_length=1, max_length=63, pattern=WORKER_CLASS_PATTERN)
    depends_on: list[str] = Field(default_factory=list, max_length=MAX_NODES)
    retry: RetryPolicy | None = None


class WorkflowDocument(Model):
    nodes: list[WorkflowNode] = Field(min_length=1, max_length=MAX_NODES)

    @model_validator(mode="after")
    def _is_a_dag(self) -> Self:
        names = [node.name for node in self.nodes]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"node names must be unique; repeated: {', '.join(duplicates)}")
        known = set(names)
        for node in self.nodes:
            missing = [d for d in node.depends_on if d not in known]
            if missing:
                raise ValueError(
                    f"node {node.name!r} depends on unknown nodes: {', '.join(missing)}")
        cycle = find_cycle({node.name: node.depends_on for node in self.nodes})
        if cycle:
            raise ValueError(f"dependsOn must form a DAG; cycle: {' -> '.join(cycle)}")
        return self

    def node(self, name: str) -> WorkflowNode:
        return next(n for n in self.nodes if n.name == name)


def find_cycle(edges: dict[str, list[str]]) -> list[str]:
    """Return one cycle as a path that starts and ends at the same node, or []."""
    white, grey, black = 0, 1, 2
    colour = dict.fromkeys(edges, white)
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        colour[node] = grey
        stack.append(node)
        for dep in edges.get(node, []):
            if colour.get(dep) == grey:
                return [*stack[stack.index(dep):], dep]
            if colour.get(dep) == white:
                found = visit(dep)
                if found:
                    return found
        stack.pop()
        colour[node] = black
        return []

    for start in edges:
        if colour[start] == white:
            found = visit(start)
            if found:
                return found
    return []


class AgentRef(Model):
    name: str = Field(min_length=1)
    revision: str = Field(min_length=1)


class Attachments(Model):
    prompts: list[str] = Field(default_factory=list)
    skills: list[str] = Field(default_factory=list)
    libraries: list[str] = Field(default_factory=list)


class NodeBinding(Model):
    node: str = Field(min_length=1, max_length=63)
    agent: AgentRef
    attachments: Attachments = Field(default_factory=Attachments)


MAX_URL_CHARS = 2048


class EffectTarget(Model):
    """The service an effect goes to (its *owner*): the example agent's ``publish``."""

    url: str = Field(min_length=1, max_length=MAX_URL_CHARS, pattern=r"^https?://[^\s]+$")


class ModelTarget(Model):
    """The model service the example agent calls (a provider's API in a real deployment)."""

    url: str = Field(min_length=1, max_length=MAX_URL_CHARS, pattern=r"^https?://[^\s]+$")


class BindingsDocument(Model):
    nodes: list[NodeBinding] = Field(min_length=1)
    # Where the example research-report agent publishes (agentrun.examples); optional.
    publish: EffectTarget | None = None
    # What model calls cost (agentrun.api.modelusage): pinned with the run, read by the SDK.
    prices: PriceTable | None = None
    # The model service the example agent calls (agentrun.examples.modelclient); optional.
    model: ModelTarget | None = None

    def check_covers(self, workflow: WorkflowDocument) -> None:
        """Every workflow node has exactly one binding, and no binding names a stranger."""
        bound = [b.node for b in self.nodes]
        names = {n.name for n in workflow.nodes}
        unbound = sorted(names - set(bound))
        unknown = sorted(set(bound) - names)
        repeated = sorted({b for b in bound if bound.count(b) > 1})
        problems = []
        if unbound:
            problems.append(f"no binding for nodes: {', '.join(unbound)}")
        if unknown:
            problems.append(f"bindings for nodes not in the workflow: {', '.join(unknown)}")
        if repeated:
            problems.append(f"nodes bound more than once: {', '.join(repeated)}")
        if problems:
            raise ValueError("; ".join(problems))


def parse_document(kind: str, data: Any) -> PackageDocument | WorkflowDocument | BindingsDocument:
    documents: dict[str, type[PackageDocument | WorkflowDocument | BindingsDocument]] = {
        "package": PackageDocument,
        "workflow": WorkflowDocument,
        "bindings": BindingsDocument,
    }
    return documents[kind].model_validate(data)
