"""A slot's life through the *real* applier, over an in-memory API server.

Extends ``core/commands/test_guards_stateful.py`` (the core's decisions, simulated) one layer
down: ``SlotReconciler`` with its real ``Reader`` and ``Writer`` reads and writes
:mod:`apifake`, which keeps resourceVersions and answers 409 to a stale write. Between
reconciles workers renew, pods finish or vanish, time passes; a reconcile may meet an
injected conflict (another writer moved first) and may be cut short by a crash right
after any write (the reconciler and its memory are then replaced, as a restarted
operator's would be). Nothing here re-implements a decision: every step is ``next_step``
applied by the applier. Invariants after every step: a Pod only after its own Lease, at
most one claim under way, no attempt number lost or doubled, never a Claiming write
(no quota or squat here), at most one live pod, an ended attempt's lease stays ended.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from agentrun import rest
from agentrun.api import names
from agentrun.api.runs import Pin, Pins
from agentrun.controller.slots import SlotReconciler
from agentrun.core.base import naming
from agentrun.core.runs import runobjects
from agentrun.kube import reads, stores, writes
from tests.unit.core import corefakes as f
from tests.unit.kube import apifake

APPLIED = {"examples": 0, "reconciles": 0, "crashes": 0, "conflicts": 0, "active": 0}


def _path(plural: str, name: str | None = None) -> str:
    group = {"pods": "", "configmaps": "", "leases": "coordination.k8s.io"}.get(
        plural, names.GROUP)
    version = names.VERSION if group == names.GROUP else "v1"
    return rest.namespaced(group=group, version=version, plural=plural, namespace=f.NS,
                           name=name)


def seed(api: apifake.FakeApi) -> None:
    """A namespace of the tenant, a run pinned with its three snapshots, a LaunchSpec
    and one Pending slot of the run."""
    api.put_object(f"/api/v1/namespaces/{f.NS}",
                   {"metadata": {"name": f.NS, "labels": {names.TENANT_LABEL: f.TENANT}}})
    pins = {}
    for kind in names.CONFIG_KINDS:
        text = f"{kind}: 1"
        digest = runobjects.sha256_of(text)
        snapshot = naming.config_snapshot_name(run=f.RUN, kind=kind, sha256=digest)
        api.put_object(_path("configmaps", snapshot), {
            "metadata": {"name": snapshot, "labels": {names.CONFIG_KIND_LABEL: kind},
                         "ownerReferences": [{"uid": f.RUN_UID, "controller": True}]},
            "immutable": True, "data": {names.CONFIG_DATA_KEYS[kind]: text}})
        pins[kind] = Pin(source=f"{kind}-src", revision=1, uid=f"uid-{kind}",
                         sha256=digest, snapshot=snapshot)
    run = f.agent_run(max_attempts=3)
    run = run.model_copy(update={"status": run.status.model_copy(
        update={"pinned": Pins(**pins)})})
    api.put_object(_path("agentruns", f.RUN), run.wire())
    api.put_object(_path("launchspecs", f.CPU_SPEC.metadata.name), f.CPU_SPEC.wire())
    slot = f.slot().wire()
    slot["metadata"]["ownerReferences"] = [{
        "apiVersion": names.API_VERSION, "kind": "AgentRun", "name": f.RUN,
        "uid": f.RUN_UID, "controller": True}]
    slot["metadata"]["labels"] = {}
    api.put_object(_path("slots", f.SLOT), slot)


class AppliedLife(RuleBasedStateMachine):
    """One Automatic slot reconciled by the real applier; workers and time move between."""

    def __init__(self) -> None:
        super().__init__()
        APPLIED["examples"] += 1
        self.api = apifake.FakeApi()
        seed(self.api)
        self.now = f.T0
        self.restart()

    def restart(self) -> None:
        self.reconciler = SlotReconciler(
            reader=reads.Reader(self.api,  # type: ignore[arg-type]
                                operator_namespace=names.OPERATOR_NAMESPACE),
            writer=writes.Writer(self.api),  # type: ignore[arg-type]
            clock=lambda: self.now, ticks=lambda: self.now)

    def slot(self) -> dict[str, Any]:
        return self.api.objects[_path("slots", f.SLOT)]

    def attempts(self, plural: str) -> dict[int, dict[str, Any]]:
        prefix = _path(plural) + f"/{f.SLOT}-"
        return {int(p.removeprefix(prefix)): o for p, o in self.api.objects.items()
                if p.startswith(prefix)}

    @rule(crash_after=st.none() | st.integers(min_value=1, max_value=3),
          conflict=st.booleans())
    def reconcile(self, crash_after: int | None, conflict: bool) -> None:
        APPLIED["reconciles"] += 1
        self.api.crash_after, self.api.conflict_next = crash_after, conflict
        APPLIED["conflicts"] += conflict
        try:
            self.reconciler.reconcile(f.NS, f.SLOT)
        except apifake.Crashed:
            APPLIED["crashes"] += 1
            self.restart()  # a new process: no memory of lease renewals
        self.api.crash_after, self.api.conflict_next = None, False
        APPLIED["active"] += self.slot().get("status", {}).get("state") == "Active"

    @rule()
    def worker_renews(self) -> None:
        for lease in self.attempts("leases").values():
            if lease["spec"].get("holderIdentity"):
                lease["spec"]["renewTime"] = f"renewed-{next(self.api.versions)}"

    @rule(phase=st.sampled_from(["Running", "Succeeded", "Failed"]))
    def pod_moves(self, phase: str) -> None:
        pods = self.attempts("pods")
        if pods:
            pods[max(pods)]["status"] = {"phase": phase}

    @rule()
    def pod_vanishes(self) -> None:
        pods = self.attempts("pods")
        if pods:
            del self.api.objects[_path("pods", f"{f.SLOT}-{max(pods)}")]

    @rule(seconds=st.integers(min_value=1, max_value=200))
    def time_passes(self, seconds: int) -> None:
        self.now += f.seconds(seconds)

    @invariant()
    def a_pod_only_after_its_own_lease(self) -> None:
        leases = self.attempts("leases")
        for number in self.attempts("pods"):
            lease = leases.get(number)
            assert lease is not None, f"pod {number} without its Lease"
            name = f"{f.SLOT}-{number}"
            assert self.api.created[_path("leases", name)] < self.api.created[
                _path("pods", name)], "the Pod before its Lease"

    @invariant()
    def one_claim_at_a_time_and_no_number_lost(self) -> None:
        status = self.slot().get("status") or {}
        count = status.get("attemptCount", 0)
        assert status.get("state") != "Claiming"  # no quota, no squat: never written
        leases = sorted(self.attempts("leases"))
        assert leases == list(range(1, len(leases) + 1)), leases
        assert count <= len(leases) <= count + 1, (count, leases)
        numbers = [a["number"] for a in status.get("attempts", [])]
        assert numbers == list(range(1, count + 1)), (numbers, count)
        live = [n for n, p in self.attempts("pods").items()
                if (p.get("status") or {}).get("phase") in (None, "Pending", "Running")]
        assert len(live) <= 1, live

    @invariant()
    def an_ended_attempt_is_never_live_again(self) -> None:
        status = self.slot().get("status") or {}
        ended = {a["number"] for a in status.get("attempts", []) if a.get("endedAt")}
        for number, lease in self.attempts("leases").items():
            if number in ended and (lease["metadata"].get("annotations") or {}).get(
                    names.OUTCOME_ANNOTATION):
                assert not lease["spec"].get("holderIdentity"), lease


AppliedLife.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestAppliedLife = AppliedLife.TestCase


def test_a_cache_that_has_not_seen_the_run_pinned_spends_no_attempt() -> None:
    """Another operator pinned the run a moment ago; this one's watch still holds it
    unpinned when its claim reaches the Pod. The cache's word is checked against the API
    before the attempt is failed: the claim goes on, attempt 1 is the run's only one."""
    api = apifake.FakeApi()
    seed(api)
    reconciler = SlotReconciler(reader=reads.Reader(  # type: ignore[arg-type]
        api, operator_namespace=names.OPERATOR_NAMESPACE),
                                writer=writes.Writer(api),  # type: ignore[arg-type]
                                clock=lambda: f.T0, ticks=lambda: f.T0)
    lease = _path("leases", f"{f.SLOT}-1")
    api.crash_after = 1
    for _ in range(20):  # up to the claim's Lease: no Pod yet
        if lease in api.objects:
            break
        try:
            reconciler.reconcile(f.NS, f.SLOT)
        except apifake.Crashed:
            api.crash_after = 1
    else:
        pytest.fail("no Lease after 20 reconciles")
    api.crash_after = None
    assert _path("pods", f"{f.SLOT}-1") not in api.objects
    held = stores.Stores()
    stale = copy.deepcopy(api.objects[_path("agentruns", f.RUN)])
    del stale["status"]["pinned"]
    stale["metadata"]["namespace"] = f.NS
    held.observe(kind="AgentRun", event_type=None, body=stale)
    behind = SlotReconciler(reader=reads.Reader(  # type: ignore[arg-type]
        api, stores=held, operator_namespace=names.OPERATOR_NAMESPACE),
                            writer=writes.Writer(api),  # type: ignore[arg-type]
                            clock=lambda: f.T0, ticks=lambda: f.T0)
    behind.reconcile(f.NS, f.SLOT)
    status = api.objects[_path("slots", f.SLOT)]["status"]
    assert [a.get("outcome") for a in status.get("attempts", [])] in ([], [None]), status
    assert _path("pods", f"{f.SLOT}-1") in api.objects
    assert _path("leases", f"{f.SLOT}-2") not in api.objects


def teardown_module() -> None:
    print(f"\napplied life: {APPLIED}")
