"""The watch-fed stores, the Reader over them and the blind-time tracker, in memory.

Covers: a later state never replaced by an older one (integer resourceVersions; opaque
ones by arrival), a deletion not undone by a late answer, the indexes (slots by run,
ConfigMaps by label), what leaves the store (a tombstoned Lease, a finished Pod of an
ended attempt, a stranger's object) and the bounded on-demand path that reads it back,
priming (paged, deletions meanwhile), the Reader reading memory and not the API, and
the writer's write-through of a deletion and of a stranger found on create. The same
against a real API server: tests/integration/operator/test_stores_live.py; memory:
test_stores_memory.py; blind time: test_blind_time.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentrun import rest
from agentrun.api import names
from agentrun.kube import reads, stores, writes

NS = "team-a"


def meta(name: str, version: str | None, **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"name": name, "namespace": NS, **extra}
    if version is not None:
        found["resourceVersion"] = version
    return found


def slot(name: str, version: str, *, run: str = "r1", state: str = "Active") -> dict[str, Any]:
    return {"apiVersion": names.API_VERSION, "kind": "Slot", "metadata": meta(name, version),
            "spec": {"run": run, "node": name, "workerClass": "cpu"},
            "status": {"state": state}}


def lease(name: str, version: str, *, holder: str | None = "p",
          outcome: str | None = None) -> dict[str, Any]:
    annotations = {names.OUTCOME_ANNOTATION: outcome} if outcome else {}
    return {"kind": "Lease", "metadata": meta(name, version, labels={names.ATTEMPT_LABEL: "1"},
                                              annotations=annotations),
            "spec": {"holderIdentity": holder}}


def pod(name: str, version: str, *, phase: str = "Running") -> dict[str, Any]:
    return {"kind": "Pod", "metadata": meta(name, version, labels={names.SLOT_LABEL: "s"}),
            "status": {"phase": phase}}


def configmap(name: str, version: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"kind": "ConfigMap", "metadata": meta(name, version, labels=labels)}


def primed(*kinds: str) -> stores.Stores:
    held = stores.Stores()
    held.prime(client=FakeRest({}), namespaces=[NS])  # type: ignore[arg-type]
    return held


class FakeRest:
    """Answers GETs from a dict of path -> object (lists: path -> pages); counts them."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.gets: list[str] = []
        self.health = rest.Health()

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                **_: Any) -> dict[str, Any]:
        self.gets.append(path)
        answer = self.answers.get(path, {"items": [], "metadata": {"resourceVersion": "1"}})
        if isinstance(answer, list):  # pages, by the continue token
            return dict(answer[int((query or {}).get("continue", "0"))])
        return dict(answer)

    def get(self, path: str, *, query: dict[str, str] | None = None) -> dict[str, Any] | None:
        self.gets.append(path)
        found = self.answers.get(path)
        return None if found is None else dict(found)


def body(held: stores.Stores, kind: str, name: str) -> dict[str, Any] | None:
    return held.get(kind=kind, namespace=NS, name=name).body


def test_an_older_state_never_replaces_a_newer_one() -> None:
    held = primed()
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "20", state="Active"))
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "9", state="Claiming"))
    assert body(held, "Slot", "s1")["status"]["state"] == "Active"  # type: ignore[index]
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "21", state="RetryWait"))
    assert body(held, "Slot", "s1")["status"]["state"] == "RetryWait"  # type: ignore[index]


def test_versions_compare_as_integers_not_as_text() -> None:
    held = primed()
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "100", state="Active"))
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "99", state="Claiming"))
    assert body(held, "Slot", "s1")["status"]["state"] == "Active"  # type: ignore[index]


def test_opaque_versions_are_taken_in_arrival_order() -> None:
    held = primed()
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "b7", state="Active"))
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "a1", state="Claiming"))
    assert body(held, "Slot", "s1")["status"]["state"] == "Claiming"


def test_a_deletion_is_not_undone_by_a_late_older_answer() -> None:
    held = primed()
    held.observe(kind="Slot", event_type="ADDED", body=slot("s1", "5"))
    held.observe(kind="Slot", event_type="DELETED", body=slot("s1", "8"))
    held.observe(kind="Slot", event_type="MODIFIED", body=slot("s1", "6"))  # a slow write's
    found = held.get(kind="Slot", namespace=NS, name="s1")
    assert found.known and found.body is None
    held.observe(kind="Slot", event_type="ADDED", body=slot("s1", "9"))  # recreated
    assert body(held, "Slot", "s1") is not None


def test_slots_are_indexed_by_run_and_launch_specs_by_namespace() -> None:
    held = primed()
    for name, run in (("a", "r1"), ("b", "r1"), ("c", "r2")):
        held.observe(kind="Slot", event_type="ADDED", body=slot(name, "3", run=run))
    assert [s["metadata"]["name"] for s in held.slots_of(namespace=NS, run="r1") or []] == [
        "a", "b"]
    held.observe(kind="Slot", event_type="DELETED", body=slot("a", "4"))
    assert [s["metadata"]["name"] for s in held.slots_of(namespace=NS, run="r1") or []] == ["b"]
    assert held.slots_of(namespace="elsewhere", run="r1") is None  # not primed there
    held.observe(kind="LaunchSpec", event_type="ADDED", body={
        "kind": "LaunchSpec", "metadata": meta("cpu", "2")})
    assert [o["metadata"]["name"] for o in held.listing(kind="LaunchSpec", namespace=NS) or []
            ] == ["cpu"]


def test_configmaps_are_found_by_label_and_unindexed_selectors_go_to_the_api() -> None:
    held = primed()
    snapshot = {names.SNAPSHOT_LABEL: "launchspec", names.SLOT_LABEL: "s1"}
    held.observe(kind="ConfigMap", event_type="ADDED", body=configmap("s1-lspec", "3", snapshot))
    held.observe(kind="ConfigMap", event_type="ADDED", body=configmap(
        "s2-lspec", "3", {**snapshot, names.SLOT_LABEL: "s2"}))
    selector = f"{names.SLOT_LABEL}=s1,{names.SNAPSHOT_LABEL}=launchspec"
    assert [c["metadata"]["name"] for c in held.configmaps(namespace=NS, selector=selector)
            or []] == ["s1-lspec"]
    assert held.configmaps(namespace=NS, selector=f"{names.SLOT_LABEL}=s1") is None
    assert held.configmaps(namespace=NS, selector=f"{names.SNAPSHOT_LABEL}!=x") is None
    held.observe(kind="ConfigMap", event_type="ADDED", body=configmap(
        "pkg", "3", {names.CONFIG_KIND_LABEL: "package"}))
    sources = f"{names.CONFIG_KIND_LABEL}=package,!{names.SNAPSHOT_LABEL}"
    assert [c["metadata"]["name"] for c in held.configmaps(namespace=NS, selector=sources)
            or []] == ["pkg"]
    assert held.configmaps(namespace=NS, selector=f"!{names.CONFIG_KIND_LABEL}") is None
    held.observe(kind="ConfigMap", event_type="MODIFIED", body=configmap(  # relabelled
        "s1-lspec", "4", {**snapshot, names.SLOT_LABEL: "other"}))
    assert held.configmaps(namespace=NS, selector=selector) == []


def test_a_tombstoned_lease_leaves_and_is_read_back_on_demand_once() -> None:
    client = FakeRest({})
    held = stores.Stores()
    held.prime(client=client, namespaces=[NS])  # type: ignore[arg-type]
    reader = reads.Reader(client, stores=held,  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    held.observe(kind="Lease", event_type="ADDED", body=lease("s1-1", "5"))
    assert reader.lease(NS, "s1-1") is not None and client.gets.count(
        stores.path("Lease", NS, "s1-1")) == 0
    tomb = lease("s1-1", "7", holder=None, outcome="Failed")
    held.observe(kind="Lease", event_type="MODIFIED", body=tomb)
    assert held.sizes()["Lease"] == 0 and held.sizes()["away"] == 1
    assert not held.get(kind="Lease", namespace=NS, name="s1-1").known
    client.answers[stores.path("Lease", NS, "s1-1")] = tomb
    for _ in range(3):
        found = reader.lease(NS, "s1-1")
        assert found is not None and found["metadata"]["annotations"] == {
            names.OUTCOME_ANNOTATION: "Failed"}
    assert client.gets.count(stores.path("Lease", NS, "s1-1")) == 1  # then from the LRU
    held.observe(kind="Lease", event_type="DELETED", body=lease("s1-1", "9"))
    assert reader.lease(NS, "s1-1") is None and held.sizes()["cold"] == 0


def test_an_unknown_or_unprimed_object_is_asked_of_the_api() -> None:
    client = FakeRest({stores.path("Pod", NS, "p"): pod("p", "3")})
    reader = reads.Reader(client, stores=stores.Stores(),  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    assert reader.pod(NS, "p") is not None  # not primed: a miss is no proof of absence
    assert reader.pod(NS, "p") is not None
    assert client.gets == [stores.path("Pod", NS, "p")]  # the answer was kept


def test_a_finished_pod_leaves_once_its_attempt_ended_in_either_order() -> None:
    held = primed()
    held.observe(kind="Pod", event_type="ADDED", body=pod("s1-1", "3", phase="Failed"))
    assert body(held, "Pod", "s1-1") is not None  # the lease is not tombstoned yet
    held.observe(kind="Lease", event_type="ADDED", body=lease("s1-1", "4", holder=None,
                                                             outcome="Failed"))
    assert held.sizes()["Pod"] == 0 and not held.get(kind="Pod", namespace=NS,
                                                     name="s1-1").known
    held.observe(kind="Pod", event_type="ADDED", body=pod("s1-2", "5", phase="Running"))
    held.observe(kind="Lease", event_type="ADDED", body=lease("s1-2", "6", holder=None,
                                                             outcome="Lost"))
    assert body(held, "Pod", "s1-2") is not None  # running: still to be fenced
    held.observe(kind="Pod", event_type="MODIFIED", body=pod("s1-2", "7", phase="Failed"))
    assert held.sizes()["Pod"] == 0


def test_a_strangers_object_under_our_name_is_never_answered_from_memory() -> None:
    held = primed()
    stranger = {"kind": "Lease", "metadata": meta("s1-1", "3"), "spec": {"holderIdentity": "x"}}
    held.observe(kind="Lease", event_type=None, body=stranger)  # found by a create
    assert not held.get(kind="Lease", namespace=NS, name="s1-1").known


def test_stored_objects_drop_managed_fields_and_last_applied() -> None:
    held = primed()
    noisy = slot("s1", "3")
    noisy["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    noisy["metadata"]["annotations"] = {stores.DROPPED_ANNOTATION: "{...}", "keep": "1"}
    held.observe(kind="Slot", event_type="ADDED", body=noisy)
    kept = body(held, "Slot", "s1")
    assert kept is not None and "managedFields" not in kept["metadata"]
    assert kept["metadata"]["annotations"] == {"keep": "1"}
    assert noisy["metadata"]["managedFields"]  # the caller's object is left alone


def test_priming_lists_every_page_and_forgets_what_was_deleted_meanwhile() -> None:
    held = stores.Stores()
    held.observe(kind="Slot", event_type="ADDED", body=slot("gone", "2"))  # from before
    pages = [{"items": [slot("a", "5")], "metadata": {"resourceVersion": "10", "continue": "1"}},
             {"items": [slot("b", "6")], "metadata": {"resourceVersion": "10"}}]
    client = FakeRest({stores.path("Slot", NS): pages})
    held.prime(client=client, namespaces=[NS])  # type: ignore[arg-type]
    assert sorted(o["metadata"]["name"] for o in held.listing(kind="Slot", namespace=NS)
                  or []) == ["a", "b"]
    assert held.get(kind="Slot", namespace=NS, name="gone").known  # known absent now
    assert len([p for p in client.gets if p == stores.path("Slot", NS)]) == 2


def test_priming_takes_each_page_before_asking_for_the_next() -> None:
    """One page of full bodies held at a time, not the whole list (a 10,000-slot resync)."""
    pages = [{"items": [slot(f"s{i}", str(5 + i))],
              "metadata": {"resourceVersion": "10", **({"continue": str(i + 1)} if i < 2
                                                       else {})}} for i in range(3)]
    held = stores.Stores()
    client = FakeRest({stores.path("Slot", NS): pages})
    seen_at_request: list[int] = []
    answer = client.request

    def request(method: str, path: str, **rest: Any) -> dict[str, Any]:
        if path == stores.path("Slot", NS):
            seen_at_request.append(held.sizes()["Slot"])
        return answer(method, path, **rest)

    client.request = request  # type: ignore[method-assign]
    held.prime(client=client, namespaces=[NS])  # type: ignore[arg-type]
    assert seen_at_request == [0, 1, 2]
    assert held.sizes()["Slot"] == 3


def test_the_reader_reads_memory_not_the_api() -> None:
    client = FakeRest({})
    held = stores.Stores()
    held.prime(client=client, namespaces=[NS])  # type: ignore[arg-type]
    listed = len(client.gets)
    held.observe(kind="Slot", event_type="ADDED", body=slot("s1", "3"))
    reader = reads.Reader(client, stores=held,  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    assert reader.slot(NS, "s1") is not None and reader.lease(NS, "s1-1") is None
    assert [s.metadata.name for s in reader.slots_of(NS, "r1")] == ["s1"]
    assert len(client.gets) == listed
    fresh = reader.fresh()
    client.answers[stores.path("Slot", NS, "s1")] = slot("s1", "8", state="RetryWait")
    assert fresh.slot(NS, "s1").status.state == "RetryWait"  # type: ignore[union-attr]
    assert reader.slot(NS, "s1").status.state == "RetryWait"  # type: ignore[union-attr]


class WritingRest(FakeRest):
    """Answers writes with ``answers[(method, path)]`` (an ApiError is raised)."""

    def request(self, method: str, path: str, *, query: dict[str, str] | None = None,
                **kwargs: Any) -> dict[str, Any]:
        if method == "GET":
            return super().request(method, path, query=query, **kwargs)
        answer = self.answers[(method, path)]
        if isinstance(answer, rest.ApiError):
            raise answer
        return dict(answer)


def test_a_pod_deleted_with_a_grace_period_stays_and_one_gone_leaves() -> None:
    where = stores.path("Pod", NS, "s1-1")
    terminating = pod("s1-1", "9")
    terminating["metadata"].update(deletionTimestamp="2030-01-01T00:00:00Z",
                                   deletionGracePeriodSeconds=30)
    client = WritingRest({("DELETE", where): terminating})
    held = primed()
    held.observe(kind="Pod", event_type="ADDED", body=pod("s1-1", "5"))
    writer = writes.Writer(client, stores=held)  # type: ignore[arg-type]
    writer.delete_pod(namespace=NS, name="s1-1", uid=None, point="test")
    kept = body(held, "Pod", "s1-1")
    assert kept is not None and kept["metadata"]["deletionTimestamp"]  # it may still run
    client.answers[("DELETE", where)] = rest.ApiError(404, '{"reason": "NotFound"}')
    writer.delete_pod(namespace=NS, name="s1-1", uid=None, point="test")
    found = held.get(kind="Pod", namespace=NS, name="s1-1")
    assert found.known and found.body is None


def test_a_stranger_found_on_create_is_read_from_the_api_from_then_on() -> None:
    where = stores.path("Lease", NS)
    stranger = {"kind": "Lease", "metadata": meta("s1-1", "4"), "spec": {"holderIdentity": "x"}}
    client = WritingRest({("POST", where): rest.ApiError(409, '{"reason": "AlreadyExists"}'),
                          stores.path("Lease", NS, "s1-1"): stranger})
    held = primed()
    writer = writes.Writer(client, stores=held)  # type: ignore[arg-type]
    with pytest.raises(writes.Exists) as exists:
        writer.create(lease("s1-1", None), point="test")
    assert exists.value.found == stranger
    reader = reads.Reader(client, stores=held,  # type: ignore[arg-type]
                          operator_namespace=names.OPERATOR_NAMESPACE)
    assert reader.lease(NS, "s1-1") == stranger  # not "absent": the API was asked
    del client.answers[stores.path("Lease", NS, "s1-1")]  # a person deleted it: no watch
    assert reader.lease(NS, "s1-1") is None  # of ours tells; the API is asked every time
    assert held.get(kind="Lease", namespace=NS, name="s1-1").known  # absent, from then on


def test_a_conflict_reads_the_winner_into_the_stores() -> None:
    """Another operator moved the slot first: the step that reads again must see its state,
    not the one that lost, though the watch has not delivered it yet."""
    where = stores.path("Slot", NS, "s1", "status")
    client = WritingRest({("PUT", where): rest.ApiError(409, '{"reason": "Conflict"}'),
                          stores.path("Slot", NS, "s1"): slot("s1", "12", state="RetryWait")})
    held = primed()
    held.observe(kind="Slot", event_type="ADDED", body=slot("s1", "10", state="Active"))
    writer = writes.Writer(client, stores=held)  # type: ignore[arg-type]
    with pytest.raises(writes.Conflict):
        writer.custom_status({"kind": "Slot", "metadata": meta("s1", "10"),
                              "status": {"state": "Succeeded"}}, point="test")
    assert body(held, "Slot", "s1")["status"]["state"] == "RetryWait"  # type: ignore[index]
