"""``kubectl agentrun fork``'s pure side: the run it creates and how it reads the answer.

The whole command against the real API server and operator: the node test
``tests/integration/node/test_forks.py``.
"""

from __future__ import annotations

from agentrun.api.runs import AgentRun
from agentrun.plugin import forks, requests

SOURCE = {"apiVersion": "agentrun.dev/v1alpha1", "kind": "AgentRun",
          "metadata": {"name": "study", "namespace": "team-a", "uid": "uid-study",
                       "resourceVersion": "7", "annotations": {"agentrun.dev/creator": "bob"}},
          "spec": {"package": {"name": "brief"}, "workflow": {"name": "flow", "revision": 3},
                   "bindings": {"name": "agents"}, "suspend": True, "maxActive": 2,
                   "claimPolicy": "Manual"},
          "status": {"pinned": {}}}


def test_the_fork_copies_the_sources_spec_and_names_it_by_uid() -> None:
    made = forks.body(SOURCE, name="study-b", at="draft:outline", reason="another outline")
    assert made["metadata"] == {"name": "study-b", "namespace": "team-a"}  # nothing of bob's
    assert made["spec"] == {"package": {"name": "brief"}, "workflow": {"name": "flow",
                                                                      "revision": 3},
                            "bindings": {"name": "agents"}, "maxActive": 2,
                            "claimPolicy": "Manual",  # not suspend: a fork starts
                            "fork": {"run": "study", "uid": "uid-study", "at": "draft:outline",
                                     "reason": "another outline"}}
    AgentRun.model_validate(made)  # what the CRD takes
    whole = forks.body(SOURCE, name="study-c", at=None, reason="r")
    assert "at" not in whole["spec"]["fork"]


def run(*conditions: tuple[str, str, str]) -> dict[str, object]:
    return {"status": {"conditions": [{"type": t, "status": s, "reason": r, "message": r}
                                      for t, s, r in conditions]}}


def test_the_operators_answer_is_the_forked_or_pinned_condition() -> None:
    assert forks._verdict(run()) is None
    assert forks._verdict(run(("Pinned", "True", "Pinned"))) is None  # copying
    assert forks._verdict(run(("Pinned", "True", "Pinned"), ("Forked", "True", "Copied"))) == (
        requests.ACCEPTED, "Copied")
    code, said = forks._verdict(run(("Forked", "False", "ForkSlotLive"))) or (0, "")
    assert code == requests.REJECTED and said.startswith("ForkSlotLive: ForkSlotLive (the "
                                                         "run stays and tries again")
    assert forks._verdict(run(("Forked", "False", "StepNotCommitted"))) == (
        requests.REJECTED, "StepNotCommitted: StepNotCommitted")  # said once: no retry
    assert forks._verdict(run(("Forked", "False", "ForkCopying"))) is None  # goes on
    code, said = forks._verdict(run(("Pinned", "False", "ForkSourceUnusable"))) or (0, "")
    assert code == requests.REJECTED and said.startswith("ForkSourceUnusable: ")
