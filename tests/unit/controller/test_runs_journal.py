"""The operator's journal settings reach an unpinned run's world, where launch pins them."""

from __future__ import annotations

from typing import Any

from agentrun.api.budgets import Budget
from agentrun.api.runs import AgentRun, JournalSettings
from agentrun.controller.runs import RunReconciler
from agentrun.core.policies.stamping import Stamping
from tests.unit.core import launchfakes as lf

SETTINGS = JournalSettings(endpoint="http://minio:9000", bucket="journals")


class Reads:
    """The reads a run's world takes while it is unpinned: the run, its tenant, ConfigMaps,
    the stamping epoch (after the run), the namespace's default budget."""

    def __init__(self, run: AgentRun) -> None:
        self.found = run

    def run(self, namespace: str, name: str) -> AgentRun | None:
        return self.found

    def tenant(self, namespace: str) -> str | None:
        return lf.TENANT

    def configmaps(self, namespace: str, *, selector: str) -> list[dict[str, Any]]:
        return []

    def stamping(self) -> Stamping:
        return Stamping(epoch="e1", problem=None)

    def default_budget(self, namespace: str) -> str | None:
        return '{"tokens": 10}'



def test_the_stamping_epoch_is_in_the_unpinned_runs_world() -> None:
    assert world_of(SETTINGS).stamping_epoch == "e1"


def test_the_namespaces_default_budget_is_in_the_unpinned_runs_world() -> None:
    assert world_of(SETTINGS).default_budget == '{"tokens": 10}'
    own = lf.run()
    own = own.model_copy(update={"spec": own.spec.model_copy(update={
        "budget": Budget(tokens=3)})})
    assert world_of(SETTINGS, run=own).default_budget is None  # its own: not read


def world_of(journal: JournalSettings | None, *, run: AgentRun | None = None) -> Any:
    reconciler = RunReconciler(reader=Reads(run or lf.run()),  # type: ignore[arg-type]
                               writer=None, journal=journal)  # type: ignore[arg-type]
    return reconciler.read_world(lf.NS, lf.RUN, taken={})


def test_the_settings_are_in_the_unpinned_runs_world() -> None:
    assert world_of(SETTINGS).journal == SETTINGS


def test_no_settings_none_in_the_world() -> None:
    assert world_of(None).journal is None
