"""The recoverable prefix: which records a successor trusts (sealed earlier Leases and its
own, never an unsealed one or a later attempt's), which record wins a clash, and
"skip if committed, else do and commit" (exhaustively over committed/missing/unreadable
for a step, and for every ordering of three attempts' Leases)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from agentrun.api import bounds
from agentrun.worker import _prefix as prefix
from agentrun.worker import _records as records
from tests.support.ledgers import Remembered

Kind = records.Kind


def lease(attempt: int, committed: dict[str, Any], *, sealed: bool = True,
          bad: dict[str, str] | None = None) -> dict[str, Any]:
    annotations = {f"{bounds.RECORD_ANNOTATION_PREFIX}{key}": records.encode(records.make(
        key=key, kind=Kind.STEP_RESULT, attempt=attempt, payload=value))
        for key, value in committed.items()}
    annotations.update(bad or {})
    if sealed:
        annotations["agentrun.dev/outcome"] = "Failed"
    return {"metadata": {"name": f"s-{attempt}",
                         "labels": {"agentrun.dev/attempt": str(attempt)},
                         "annotations": annotations},
            "spec": {"holderIdentity": None if sealed else f"s-{attempt}"}}


def values(found: prefix.Prefix) -> dict[str, Any]:
    return {key: record.inline for key, record in found.committed.items()}


def test_sealed_earlier_attempts_and_its_own_are_trusted() -> None:
    leases = [lease(1, {"gather": [1]}), lease(2, {"decide": "x"}),
              lease(3, {"write": "w"}, sealed=False)]
    for ordering in itertools.permutations(leases):
        found = prefix.prefix(leases=list(ordering), attempt=3)
        assert values(found) == {"gather": [1], "decide": "x", "write": "w"}
        assert found.unsealed == () and found.problems == ()


def test_an_unsealed_earlier_lease_is_reported_not_used() -> None:
    found = prefix.prefix(leases=[lease(1, {"gather": 1}, sealed=False), lease(2, {})],
                          attempt=2)
    assert values(found) == {} and found.unsealed == (1,)
    # released by its holder only: sealed against writes, but not yet by the operator, whose
    # tombstone records which pod wrote it
    released = lease(1, {"gather": 1}, sealed=False)
    released["metadata"]["annotations"]["agentrun.dev/released"] = "2026-12-06T12:00:00Z"
    found = prefix.prefix(leases=[released, lease(2, {})], attempt=2)
    assert values(found) == {} and found.unsealed == (1,)


def test_later_attempts_and_unlabelled_leases_are_ignored() -> None:
    stranger = lease(9, {"gather": 9})
    stranger["metadata"]["labels"] = {}
    found = prefix.prefix(leases=[lease(4, {"gather": 4}), stranger, lease(1, {"a": 1})],
                          attempt=2)
    assert values(found) == {"a": 1}


def test_a_clash_is_reported_and_the_latest_attempt_wins() -> None:
    found = prefix.prefix(leases=[lease(2, {"gather": "two"}), lease(1, {"gather": "one"})],
                          attempt=3)
    assert values(found) == {"gather": "two"}
    assert found.problems == ("record gather: attempt 2 committed other content than "
                              "attempt 1; attempt 2's is used",)
    same = prefix.prefix(leases=[lease(1, {"gather": 1}), lease(2, {"gather": 1})],
                         attempt=3)
    assert same.problems == ()


@pytest.mark.parametrize(("key", "kind"), [("publish.intent", Kind.EFFECT_INTENT),
                                           ("publish.unresolved", Kind.DECISION)])
def test_each_attempts_own_effect_intent_or_stop_is_no_clash(key: str, kind: Kind) -> None:
    leases = []
    for attempt in (1, 2):
        intent = records.make(key=key, kind=kind, attempt=attempt,
                              payload={"fencingToken": attempt})
        leases.append({"metadata": {"labels": {"agentrun.dev/attempt": str(attempt)},
                                    "annotations": {intent.annotation: records.encode(intent),
                                                    "agentrun.dev/outcome": "Lost"}},
                       "spec": {}})
    found = prefix.prefix(leases=leases, attempt=3)
    assert found.problems == () and found.get(key).attempt == 2  # type: ignore[union-attr]


def test_unreadable_records_are_problems_not_results() -> None:
    found = prefix.prefix(leases=[lease(1, {}, bad={"record.agentrun.dev/x": "{}"})],
                          attempt=2)
    assert values(found) == {} and "record x of attempt 1 is malformed" in found.problems[0]



@pytest.mark.parametrize("state", ["committed", "missing", "unreadable"])
def test_step_skips_if_committed_else_does_and_commits(state: str, tmp_path: Path) -> None:
    store = records.FsspecStore(f"file://{tmp_path}")
    big = "x" * (bounds.INLINE_PAYLOAD_BYTES + 1)
    earlier = records.make(key="gather", kind=Kind.STEP_RESULT, attempt=1, payload=big,
                           store=store)
    if state == "unreadable":
        Path(tmp_path / "sha256" / earlier.digest).unlink()
    committed = {} if state == "missing" else {"gather": earlier}
    memory = Remembered()
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=2, committed=committed),
                         ledger=memory, store=store)
    calls: list[int] = []

    def do() -> str:
        calls.append(1)
        return big if state == "unreadable" else "fresh"

    result = steps.step("gather", do=do)
    if state == "committed":
        assert (result, calls, memory.committed, steps.done) == (big, [], [], ["gather"])
        return
    assert calls == [1] and [r.key for r in memory.committed] == ["gather"]
    assert memory.committed[0].attempt == 2
    assert steps.repeated == (["gather"] if state == "unreadable" else [])
    assert steps.step("gather", do=do) == result and calls == [1]  # now committed
    assert steps.done == ["gather"]


@pytest.mark.parametrize("key", ["Bad", "a.intent", "a_b", "-a", "x" * 49, ""])
def test_a_step_with_a_bad_key_does_nothing(key: str) -> None:
    memory = Remembered()
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=1), ledger=memory)
    with pytest.raises(records.RecordError, match="step key"):
        steps.step(key, do=lambda: pytest.fail("not called"))
    assert memory.committed == []


def test_a_failing_step_commits_nothing() -> None:
    memory = Remembered()
    steps = prefix.Steps(prefix=prefix.Prefix(attempt=1), ledger=memory)

    def boom() -> None:
        raise RuntimeError("tool failed")
    with pytest.raises(RuntimeError, match="tool failed"):
        steps.step("gather", do=boom)
    assert memory.committed == [] and steps.prefix.get("gather") is None


class Lister:
    def __init__(self) -> None:
        self.queries: list[tuple[str, Any]] = []

    def request(self, method: str, path: str, *, query: Any = None) -> dict[str, Any]:
        self.queries.append((path, query))
        return {"items": [lease(1, {"a": 1})]}


def test_list_leases_selects_the_slot_and_run() -> None:
    api = Lister()
    found = prefix.list_leases(api=api, namespace="ns", slot="s", run="r")  # type: ignore[arg-type]
    assert len(found) == 1
    assert api.queries == [("/apis/coordination.k8s.io/v1/namespaces/ns/leases", {
        "labelSelector": "agentrun.dev/slot=s,agentrun.dev/run=r,agentrun.dev/attempt"})]


def bound(found: dict[str, Any], *, holder: str | None, pod: str | None) -> dict[str, Any]:
    """``found`` bound by admission to the pod ``holder``; its tombstone naming ``pod``."""
    annotations = found["metadata"]["annotations"]
    for key, value in (("agentrun.dev/holder-uid", holder), ("agentrun.dev/pod-uid", pod)):
        if value is not None:
            annotations[key] = value
    return found


@pytest.mark.parametrize(("holder", "pod", "trusted"), [
    ("uid-1", "uid-1", True),  # its attempt's own pod wrote them
    (None, "uid-1", True), (None, None, True),  # written before Leases were bound
    ("uid-impostor", "uid-1", False),  # a pod of the same name, run by someone else
    ("uid-impostor", None, True),  # its pod's uid not recorded: the bound writer is trusted
])
def test_a_sealed_leases_records_count_only_if_its_attempts_pod_wrote_them(
        holder: str | None, pod: str | None, trusted: bool) -> None:
    sealed = bound(lease(1, {"gather": "forged"}, bad={
        f"{bounds.RECORD_ANNOTATION_PREFIX}junk": "{}"}), holder=holder, pod=pod)
    found = prefix.prefix(leases=[sealed, lease(2, {"decide": "x"}, sealed=False)], attempt=2)
    if trusted:
        assert values(found) == {"gather": "forged", "decide": "x"}
        assert len(found.problems) == 1 and "junk" in found.problems[0]  # read as before
    else:
        assert values(found) == {"decide": "x"}
        assert found.problems == (
            f"the 2 record(s) on Lease s-1 are not trusted: it is bound to the pod of uid "
            f"{holder}, not to its attempt's pod (uid {pod}): a pod of the "
            "same name run by someone else wrote them",)


def test_its_own_leases_records_are_its_own_whatever_the_binding() -> None:
    own = bound(lease(2, {"decide": "x"}, sealed=False), holder="uid-2", pod=None)
    assert values(prefix.prefix(leases=[own], attempt=2)) == {"decide": "x"}


def test_a_lease_without_records_reports_nothing_whatever_the_binding() -> None:
    empty = bound(lease(1, {}), holder="uid-impostor", pod="uid-1")
    assert records.written_by(empty, pod_uid="uid-1") == ({}, [])


def effect_lease(*, holder: str, pod: str | None) -> dict[str, Any]:
    """Attempt 1's sealed Lease, bound to ``holder``, holding an effect's intent."""
    intent = records.make(key="publish.intent", kind=Kind.EFFECT_INTENT, attempt=1,
                          payload={"effect": "publish", "idempotencyKey": "k"})
    sealed = bound(lease(1, {}), holder=holder, pod=pod)
    sealed["metadata"]["annotations"][intent.annotation] = records.encode(intent)
    return sealed


def test_a_bound_leases_records_are_kept_when_its_attempts_pod_uid_is_unknown() -> None:
    found, problems = records.written_by(effect_lease(holder="uid-1", pod=None),
                                         pod_uid=None)
    assert list(found) == ["publish.intent"] and problems == []  # the successor reconciles


def test_a_bound_leases_records_are_dropped_when_its_attempts_pod_is_another() -> None:
    found, problems = records.written_by(effect_lease(holder="uid-impostor", pod="uid-1"),
                                         pod_uid="uid-1")
    assert found == {} and len(problems) == 1 and "uid-impostor" in problems[0]
