"""ConfigMaps, runs and slots for the launch, resolution and run-status tests."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from agentrun.api import names
from agentrun.api.meta import ObjectMeta, OwnerReference
from agentrun.api.runs import AgentRun
from agentrun.api.slots import Slot, SlotSpec, SlotState, SlotStatus
from agentrun.core.base import naming

T0 = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
NS = "team-a"
TENANT = "acme"
RUN = "research-1"
RUN_UID = "uid-run-1"

PACKAGE = "outcome: A two-page report.\naudience: platform engineers\n"
WORKFLOW = """\
nodes:
  - name: research
    workerClass: cpu
    retry:
      maxAttempts: 5
  - name: report
    workerClass: cpu
    dependsOn: [research]
"""
BINDINGS = """\
nodes:
  - node: research
    agent: {name: researcher, revision: "2024.11.1"}
  - node: report
    agent: {name: writer, revision: "2024.10.4"}
"""
TEXTS = {"package": PACKAGE, "workflow": WORKFLOW, "bindings": BINDINGS}
CONFIG_NAMES = {"package": "brief", "workflow": "report-flow", "bindings": "report-agents"}


def config_map(kind: str, revision: str | int | None, *, text: str | None = None,
               accepted: bool = True, name: str | None = None, source: str | None = None,
               extra_labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A source ConfigMap as the API returns it (revision None: no revision label)."""
    config = name or CONFIG_NAMES[kind]
    labels = {names.CONFIG_KIND_LABEL: kind, names.CONFIG_NAME_LABEL: config}
    if revision is not None:
        labels[names.REVISION_LABEL] = str(revision)
    if accepted:
        labels[names.ACCEPTED_LABEL] = "true"
    labels.update(extra_labels or {})
    cm_name = source or f"{config}-r{revision}"
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": cm_name, "namespace": NS, "uid": f"uid-{cm_name}",
                     "resourceVersion": "1", "labels": labels},
        "data": {names.CONFIG_DATA_KEYS[kind]: TEXTS[kind] if text is None else text},
    }


def config_maps(**overrides: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Revision 1 of each kind, accepted; ``overrides`` replaces a kind's list."""
    found = {kind: [config_map(kind, 1)] for kind in names.CONFIG_KINDS}
    found.update(overrides)
    return found


def run(*, name: str = RUN, revisions: dict[str, int] | None = None,
        status: dict[str, Any] | None = None, deadline: int | None = None,
        generation: int = 1) -> AgentRun:
    refs: dict[str, Any] = {}
    for kind in names.CONFIG_KINDS:
        ref: dict[str, Any] = {"name": CONFIG_NAMES[kind]}
        if revisions and kind in revisions:
            ref["revision"] = revisions[kind]
        refs[kind] = ref
    spec: dict[str, Any] = dict(refs)
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    return AgentRun.model_validate({
        "metadata": {"name": name, "namespace": NS, "uid": RUN_UID, "generation": generation},
        "spec": spec, "status": status or {}})


def slot(node: str, state: SlotState = SlotState.PENDING, *, depends_on: list[str] | None = None,
         run_name: str = RUN, run_uid: str = RUN_UID) -> Slot:
    return Slot(
        metadata=ObjectMeta(
            name=naming.slot_name(run=run_name, node=node), namespace=NS, uid=f"uid-{node}",
            owner_references=[OwnerReference(api_version=names.API_VERSION, kind="AgentRun",
                                             name=run_name, uid=run_uid, controller=True,
                                             block_owner_deletion=True)]),
        spec=SlotSpec(run=run_name, node=node, worker_class="cpu",
                      depends_on=depends_on or []),
        status=SlotStatus(state=state))
