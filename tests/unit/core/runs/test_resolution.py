"""Resolving a run's configuration: which revision, and is it valid.

See docs/design/runs-and-configuration.md.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import names
from agentrun.api.runs import ConfigRef
from agentrun.core.runs import resolution
from agentrun.core.runs.resolution import Problem, Resolution, Resolved
from tests.unit.core import launchfakes as lf


def choose(kind: str, maps: list[dict[str, Any]],
           revision: int | None = None) -> Resolved | Problem:
    ref = ConfigRef(name=lf.CONFIG_NAMES[kind], revision=revision)
    return resolution.choose(kind=kind, ref=ref, config_maps=maps, namespace=lf.NS)


def chosen(kind: str, maps: list[dict[str, Any]], revision: int | None = None) -> Resolved:
    found = choose(kind, maps, revision)
    assert isinstance(found, Resolved), found
    return found


def problem(kind: str, maps: list[dict[str, Any]], revision: int | None = None) -> Problem:
    found = choose(kind, maps, revision)
    assert isinstance(found, Problem), found
    return found


# --- choosing a revision ------------------------------------------------------------------

def test_explicit_revision_found() -> None:
    maps = [lf.config_map("workflow", r) for r in (1, 2, 3)]
    found = chosen("workflow", maps, revision=2)
    assert (found.source, found.revision, found.uid) == ("report-flow-r2", 2, "uid-report-flow-r2")
    assert found.text == lf.WORKFLOW
    assert found.sha256 == resolution.sha256_of(lf.WORKFLOW)


def test_explicit_revision_absent_is_config_not_found_and_lists_what_exists() -> None:
    found = problem("workflow", [lf.config_map("workflow", r) for r in (1, 3)], revision=2)
    assert found.reason == "ConfigNotFound"
    assert "workflow 'report-flow' revision 2" in found.message
    assert "revisions present: 1, 3" in found.message
    assert lf.NS in found.message


def test_explicit_revision_not_accepted() -> None:
    maps = [lf.config_map("workflow", 1), lf.config_map("workflow", 2, accepted=False)]
    found = problem("workflow", maps, revision=2)
    assert found.reason == "ConfigNotAccepted"
    assert "revision 2" in found.message
    assert names.ACCEPTED_LABEL in found.message


def test_highest_accepted_is_numeric_ten_beats_nine() -> None:
    maps = [lf.config_map("workflow", r) for r in ("9", "10", "2")]
    assert chosen("workflow", maps).revision == 10


def test_unaccepted_higher_revision_is_ignored() -> None:
    maps = [lf.config_map("workflow", 4), lf.config_map("workflow", 5, accepted=False)]
    assert chosen("workflow", maps).revision == 4


def test_accepted_must_be_exactly_true() -> None:
    odd = lf.config_map("workflow", 5, accepted=False,
                        extra_labels={names.ACCEPTED_LABEL: "True"})
    assert chosen("workflow", [lf.config_map("workflow", 4), odd]).revision == 4


def test_no_accepted_revision_at_all() -> None:
    maps = [lf.config_map("workflow", r, accepted=False) for r in (1, 2)]
    found = problem("workflow", maps)
    assert found.reason == "ConfigNotAccepted"
    assert "revisions 1, 2 exist" in found.message


def test_nothing_at_all_is_config_not_found_and_says_how_to_label() -> None:
    found = problem("package", [])
    assert found.reason == "ConfigNotFound"
    assert "package 'brief'" in found.message
    assert f"{names.CONFIG_NAME_LABEL}=brief" in found.message


def test_other_names_and_kinds_are_not_candidates() -> None:
    maps = [lf.config_map("workflow", 7, name="other-flow"),
            lf.config_map("package", 8, name="report-flow", source="pkg"),
            lf.config_map("workflow", 2)]
    assert chosen("workflow", maps).revision == 2


def test_snapshots_are_never_candidates() -> None:
    snapshot = lf.config_map("workflow", 9, source="research-1-workflow-abc",
                             extra_labels={names.SNAPSHOT_LABEL: "report-flow-r9"})
    assert chosen("workflow", [lf.config_map("workflow", 2), snapshot]).revision == 2


@pytest.mark.parametrize("label", ["v3", "01", "0", "-2", "3.0", " 3", "3\n", "", "x" * 19,
                                   "1" * 19])
def test_non_integer_revision_labels_are_skipped_with_a_note(label: str) -> None:
    maps = [lf.config_map("workflow", 2), lf.config_map("workflow", label, source="odd")]
    found = chosen("workflow", maps)
    assert found.revision == 2
    assert len(found.notes) == 1
    assert "'odd'" in found.notes[0]
    assert repr(label) in found.notes[0]


def test_only_invalid_revision_labels_is_revision_invalid_and_says_which() -> None:
    maps = [lf.config_map("workflow", "v3", source="flow-v3"),
            lf.config_map("workflow", None, source="flow-unlabelled")]
    found = problem("workflow", maps)
    assert found.reason == "RevisionInvalid"
    assert "'flow-v3'" in found.message
    assert "'v3'" in found.message
    assert "'flow-unlabelled'" in found.message
    assert "missing" in found.message


def test_many_skipped_configmaps_are_summarised() -> None:
    maps = [lf.config_map("workflow", f"v{i}", source=f"flow-v{i}") for i in range(20)]
    found = problem("workflow", maps)
    assert "'flow-v4'" in found.message
    assert "'flow-v5'" not in found.message
    assert "and 15 more" in found.message


def test_explicit_revision_absent_mentions_skipped_labels() -> None:
    maps = [lf.config_map("workflow", 1), lf.config_map("workflow", "03", source="flow-03")]
    found = problem("workflow", maps, revision=3)
    assert found.reason == "ConfigNotFound"
    assert "'flow-03'" in found.message


def test_two_accepted_configmaps_for_one_revision_are_ambiguous() -> None:
    maps = [lf.config_map("workflow", 4, source="a"), lf.config_map("workflow", 4, source="b"),
            lf.config_map("workflow", 3)]
    found = problem("workflow", maps)
    assert found.reason == "RevisionInvalid"
    assert "a, b" in found.message


def test_an_unaccepted_duplicate_does_not_make_a_revision_ambiguous() -> None:
    maps = [lf.config_map("workflow", 4, source="a"),
            lf.config_map("workflow", 4, source="draft", accepted=False)]
    assert chosen("workflow", maps, revision=4).source == "a"


def test_missing_data_key_is_config_invalid() -> None:
    cm = lf.config_map("workflow", 1)
    cm["data"] = {"other.yaml": "x"}
    found = problem("workflow", [cm])
    assert found.reason == "ConfigInvalid"
    assert "workflow.yaml" in found.message


# --- validating the documents together ----------------------------------------------------

def resolve(**overrides: list[dict[str, Any]]) -> Resolution | Problem:
    return resolution.resolve(run=lf.run(), config_maps=lf.config_maps(**overrides))


def resolve_problem(**overrides: list[dict[str, Any]]) -> Problem:
    found = resolve(**overrides)
    assert isinstance(found, Problem), found
    return found


def test_resolve_valid_configuration() -> None:
    found = resolve()
    assert isinstance(found, Resolution)
    assert [n.name for n in found.workflow_document.nodes] == ["research", "report"]
    assert found.package_document.outcome == "A two-page report."
    assert [r.kind for r in found.all()] == ["package", "workflow", "bindings"]
    assert found.notes == ()


def test_invalid_yaml_is_config_invalid() -> None:
    found = resolve_problem(workflow=[lf.config_map("workflow", 1, text="nodes: [a\n  - b: }")])
    assert found.reason == "ConfigInvalid"
    assert "workflow 'report-flow' revision 1 (ConfigMap 'report-flow-r1')" in found.message
    assert "not valid YAML" in found.message


def test_schema_error_names_the_field() -> None:
    text = "nodes:\n  - name: research\n"
    found = resolve_problem(workflow=[lf.config_map("workflow", 1, text=text)])
    assert found.reason == "ConfigInvalid"
    assert "nodes.0.workerClass" in found.message


def test_dag_cycle_is_config_invalid_and_shows_the_cycle() -> None:
    text = ("nodes:\n  - {name: a, workerClass: cpu, dependsOn: [b]}\n"
            "  - {name: b, workerClass: cpu, dependsOn: [a]}\n")
    bindings = ("nodes:\n  - {node: a, agent: {name: x, revision: '1'}}\n"
                "  - {node: b, agent: {name: x, revision: '1'}}\n")
    found = resolve_problem(workflow=[lf.config_map("workflow", 1, text=text)],
                            bindings=[lf.config_map("bindings", 1, text=bindings)])
    assert found.reason == "ConfigInvalid"
    assert "a -> b -> a" in found.message
    assert "Value error" not in found.message


def test_bindings_not_covering_the_workflow() -> None:
    bindings = "nodes:\n  - {node: research, agent: {name: x, revision: '1'}}\n"
    found = resolve_problem(bindings=[lf.config_map("bindings", 1, text=bindings)])
    assert found.reason == "ConfigInvalid"
    assert "bindings 'report-agents' revision 1" in found.message
    assert "workflow 'report-flow' revision 1" in found.message
    assert "no binding for nodes: report" in found.message


def test_every_kind_problem_is_reported_at_once_with_the_first_reason() -> None:
    found = resolve_problem(package=[], bindings=[lf.config_map("bindings", 1, accepted=False)])
    assert found.reason == "ConfigNotFound"
    assert "package 'brief'" in found.message
    assert "bindings 'report-agents'" in found.message


def test_notes_survive_a_successful_resolution() -> None:
    found = resolve(workflow=[lf.config_map("workflow", 1),
                              lf.config_map("workflow", "two", source="flow-two")])
    assert isinstance(found, Resolution)
    assert len(found.notes) == 1
    assert "'flow-two'" in found.notes[0]


def test_explicit_revisions_on_the_run_are_honoured() -> None:
    run = lf.run(revisions={"workflow": 1})
    maps = lf.config_map("workflow", 1), lf.config_map("workflow", 2)
    found = resolution.resolve(run=run, config_maps=lf.config_maps(workflow=list(maps)))
    assert isinstance(found, Resolution)
    assert found.workflow.revision == 1


def test_parse_rereads_a_snapshot_text() -> None:
    found = resolution.parse(kind="workflow", text=lf.WORKFLOW, origin="snapshot x")
    assert not isinstance(found, Problem)
    multi = resolution.parse(kind="package", text="outcome: a\n---\noutcome: b\n",
                             origin="snapshot y")
    assert isinstance(multi, Problem)
    assert multi.message.startswith("snapshot y: ")


def test_a_namespace_without_a_tenant_label_serves_no_run() -> None:
    problem = resolution.tenancy(run=lf.run(), tenant=None)
    assert problem is not None
    assert problem.reason == "NotATenantNamespace"
    assert names.TENANT_LABEL in problem.message


def test_spec_tenant_must_agree_with_the_namespace() -> None:
    run = lf.run()
    mismatched = run.model_copy(update={"spec": run.spec.model_copy(update={"tenant": "other"})})
    problem = resolution.tenancy(run=mismatched, tenant="demo")
    assert problem is not None
    assert problem.reason == "TenantMismatch"
    agreeing = run.model_copy(update={"spec": run.spec.model_copy(update={"tenant": "demo"})})
    assert resolution.tenancy(run=agreeing, tenant="demo") is None
    assert resolution.tenancy(run=run, tenant="demo") is None
