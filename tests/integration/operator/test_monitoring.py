"""The alert rules and the dashboard, evaluated by a real Prometheus scraping the operator.

The rules (``agentrun.monitoring``, as the chart ships them) pass ``promtool check rules``;
every metric they and the dashboard read is one the operator exports (Prometheus's own
list of what it scraped); and every alert expression and every panel returns data, each
once the trace below made its condition true (an alert's expression is queried as it is, its
``for`` aside):

- a standby replica (``--leader-elect``; the leader Lease held by another holder), its
  queue holding the namespace's 110 LaunchSpecs: no leader;
- the Lease released: it leads at one request a second, the queue saturated;
- then a replica at its defaults: alice's Manual run, its attempt's worker (as its pod)
  stops on an effect its owner answers "unknown", the pod fails; bob's reassignment is
  refused (NotOwner); a run whose pods name a missing ServiceAccount (ClaimFailed); a
  worker that asks a question; six slots whose workers never start (StartTimeout: lease
  expiries); a run with a budget whose worker reports more usage than it and stops
  (OverBudget); a run claimed under a ResourceQuota of no pods (stuck claiming).

An alert on a wait's age (a claim 15 minutes, an effect 15 minutes, a question an hour) is
seen here with its wait aging (its signal above 0); promtool's tests of the rules
(``tests/unit/test_monitoring.py``) show each threshold and ``for``.

The chart's ServiceMonitor, PrometheusRule and dashboard ConfigMap are applied against
prometheus-operator's own CRDs (``tests/data/prometheus-operator``) on the real API server,
and one that breaks their schema is refused.
"""

from __future__ import annotations

import copy
import re
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml

from agentrun import monitoring
from agentrun.api import names
from agentrun.api.modelusage import ModelUsage
from agentrun.worker import _records as records
from tests.integration.operator.test_effect_unresolved import (
    Owner,
    manual_slot,
    pod_api,
    stop_on_unknown,
)
from tests.support.actors.leaders import TOKEN
from tests.support.actors.operators import OperatorProcess
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.helm import CHART, NAMESPACE, helm_binary
from tests.support.cluster.processes import free_port
from tests.support.plays.scenarios import GROUP, VERSION, Scenario, request_id, workflow
from tests.support.prometheus import Prometheus, promtool
from tests.support.waiting import wait_for

# serial: the leader Lease and prometheus-operator's CRDs are cluster-wide.
pytestmark = pytest.mark.serial
REPO = Path(__file__).resolve().parents[3]
CRDS = REPO / "tests" / "data" / "prometheus-operator"
QUEUED = 110  # LaunchSpecs: keys in the queue past the saturation alert's 100
ALERTS = {a.name: a.expr for a in monitoring.ALERTS}
# Alerts on the age of a wait (15 minutes, an hour): the trace makes the wait and sees its
# age grow (the signal above 0); promtool's tests (tests/unit/test_monitoring.py) show the
# threshold.
AGED = {"AgentrunSlotsStuckClaiming", "AgentrunUnresolvedEffects", "AgentrunSlotsParked"}
DATA_TIMEOUT = 90.0


def has_data(prometheus: Prometheus, expr: str, *, what: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = wait_for(lambda: prometheus.query(expr), timeout=DATA_TIMEOUT,
                                           message=f"{what} to return data: {expr}")
    return found


@pytest.fixture
def leader_lease(cluster: Cluster, installed: None) -> Iterator[Callable[[], None]]:
    """The leader Lease, held by someone else for five minutes; the fixture gives its
    release (the holder gone, as a graceful stop leaves it). Deleted before and after,
    with the fencing token a leader of this test writes."""
    api = kubernetes.client.CoordinationV1Api(cluster.client())

    def delete() -> None:
        try:
            api.delete_namespaced_lease(names.LEADER_LEASE, names.OPERATOR_NAMESPACE)
        except kubernetes.client.ApiException as error:
            if error.status != 404:
                raise
        cluster.kubectl("delete", "--ignore-not-found", *TOKEN)

    def release() -> None:
        api.patch_namespaced_lease(names.LEADER_LEASE, names.OPERATOR_NAMESPACE,
                                   {"spec": {"holderIdentity": ""}})

    delete()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # a MicroTime
    api.create_namespaced_lease(names.OPERATOR_NAMESPACE, {
        "metadata": {"name": names.LEADER_LEASE},
        "spec": {"holderIdentity": "someone-else", "leaseDurationSeconds": 300,
                 "acquireTime": now, "renewTime": now, "leaseTransitions": 0}})
    yield release
    delete()


def test_every_alert_and_panel_returns_data_from_the_operators_own_metrics(
        cluster: Cluster, scenario: Scenario, installed: None, tmp_path: Path,
        leader_lease: Callable[[], None]) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump({"groups": monitoring.rule_groups()}))
    checked = promtool("check", "rules", str(rules))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(monitoring.ALERTS)} rules found" in checked.stdout

    for i in range(QUEUED):
        scenario.launch_spec(f"idle-{i:03d}", classes=["idle"])
    port = free_port()
    seen: dict[str, list[dict[str, Any]]] = {}
    operator = OperatorProcess(
        cluster=cluster, namespace=scenario.namespace, log=tmp_path / "standby.log",
        args=["--metrics-port", str(port), "--leader-elect", "--identity", "monitoring-test",
              "--qps", "1", "--burst", "1", "--workers", "1"])
    with Prometheus(targets=[f"127.0.0.1:{port}"], rules=rules) as prometheus:
        try:
            operator.start()
            seen["alert/AgentrunNoLeader"] = has_data(
                prometheus, ALERTS["AgentrunNoLeader"], what="the standby's no-leader alert")
            leader_lease()
            seen["alert/AgentrunWorkQueueSaturated"] = has_data(
                prometheus, ALERTS["AgentrunWorkQueueSaturated"],
                what="the leader's saturated queue")
        finally:
            operator.stop()
            print(f"--- standby, then leader (tail) ---\n{operator.tail(30)}")
        operator = OperatorProcess(cluster=cluster, namespace=scenario.namespace,
                                   log=tmp_path / "operator.log",
                                   args=["--metrics-port", str(port)])
        try:
            operator.start()
            trace(scenario)
            for alert in monitoring.ALERTS:
                where = f"alert/{alert.name}"
                if where in seen:
                    continue
                if alert.name in AGED:  # its threshold is an age: the wait's, aging
                    found = has_data(prometheus, f"{alert.signal} > 0", what=where)
                else:
                    found = has_data(prometheus, alert.expr, what=where)
                seen[where] = found
            for where, expr in monitoring.expressions().items():
                if where not in seen:
                    seen[where] = has_data(prometheus, expr, what=where)
            scraped = prometheus.names()
        finally:
            operator.stop()
            print(f"--- operator (tail) ---\n{operator.tail(30)}")
    print("\n".join(f"{where}: {len(found)} series, e.g. {found[0]['value'][1]}"
                    for where, found in seen.items()))
    assert set(seen) == set(monitoring.expressions())
    read = {name for expr in monitoring.expressions().values()
            for name in re.findall(r"\b((?:agentrun|process)_[a-z_]+)", expr)}
    assert read - scraped == set()  # every name read is one the operator exported


def trace(scenario: Scenario) -> None:
    """The replica at its defaults: each parked or failing state the alerts look for."""
    slot = manual_slot(scenario)  # alice's Manual run "study", on cpu-workers
    assert scenario.annotate(slot, user="alice", claim_id=request_id()).returncode == 0
    scenario.wait_state(slot, "Active")
    run_uid = scenario.agentrun("study")["metadata"]["uid"]
    stop_on_unknown(scenario, slot=slot, run_uid=run_uid, key="publish", owner=Owner())
    scenario.finish(f"{slot}-1", "Failed", exit_code=3)
    scenario.wait_condition(slot, "EffectUnresolved", "True")
    refused = request_id()
    assert scenario.annotate(slot, user="bob", reassign_id=refused, reassign_run="study",
                             reassign_worker_class="cpu",
                             reassign_reason="mine now").returncode == 0
    assert scenario.wait_ledger(slot, refused)["predicate"] == "NotOwner"

    spec = copy.deepcopy(scenario.launch_spec("nosa-workers", classes=["nosa"]))
    spec["spec"]["template"]["spec"]["serviceAccountName"] = "missing"
    scenario.custom.replace_namespaced_custom_object(
        GROUP, VERSION, scenario.namespace, "launchspecs", "nosa-workers", spec)
    configs(scenario, "broken", nodes=[("research", "nosa")])
    scenario.run("broken", config="broken", max_attempts=1)

    scenario.launch_spec("slow-workers", classes=["slow"], start_deadline_seconds=5)
    configs(scenario, "slow", nodes=[(f"part-{i}", "slow") for i in range(6)])
    scenario.run("slow", config="slow", max_attempts=1)

    configs(scenario, "costly", nodes=[("research", "cpu")], prices={
        "currency": "EUR", "models": {"m": {"inputPerMillion": "3", "outputPerMillion": "15"}}})
    scenario.run("costly", config="costly", max_attempts=1, extra={"budget": {"tokens": 100}})
    over_budget(scenario, scenario.slot_name_eventually("costly", "research"))

    configs(scenario, "asking", nodes=[("research", "cpu")])
    scenario.run("asking", config="asking", max_attempts=1)
    asking = scenario.slot_name_eventually("asking", "research")
    scenario.wait_state(asking, "Active")
    records.LeaseRecords(api=pod_api(scenario, f"{asking}-1"), namespace=scenario.namespace,
                         lease=f"{asking}-1", attempt=1).commit(records.make(
        key="plan.question", kind=records.Kind.DECISION, attempt=1,
        payload={"question": "Go on?", "schema": {"type": "boolean"}}))
    scenario.finish(f"{asking}-1", "Succeeded", exit_code=0)
    scenario.wait_condition(asking, names.QUESTION_PENDING_CONDITION, "True")

    ended("ClaimFailed", scenario, scenario.slot_name_eventually("broken", "research"))
    for i in range(6):
        ended("StartTimeout", scenario, scenario.slot_name_eventually("slow", f"part-{i}"))

    quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    scenario.core.create_namespaced_resource_quota(scenario.namespace, quota)
    wait_for(lambda: (scenario.core.read_namespaced_resource_quota(
        "no-pods", scenario.namespace).status.hard or {}).get("pods") == "0", timeout=30,
        message="the quota's status counted")
    configs(scenario, "stuck", nodes=[("research", "cpu")])
    scenario.run("stuck", config="stuck")
    stuck = scenario.slot_name_eventually("stuck", "research")
    scenario.wait_condition(stuck, "QuotaExceeded", "True")
    assert scenario.slot(stuck)["status"]["state"] == "Claiming"


def ended(outcome: str, scenario: Scenario, slot: str) -> None:
    """Wait until ``slot``'s first attempt ended ``outcome``."""
    scenario.wait_slot(slot, lambda s: [a.get("outcome") for a in s.get("status", {}).get(
        "attempts", [])] == [outcome], message=f"attempt 1 {outcome}")


def configs(scenario: Scenario, name: str, *, nodes: list[tuple[str, str]],
            prices: dict[str, Any] | None = None) -> None:
    """A package, a workflow of ``nodes`` (name, worker class) and bindings (with a price
    table) named ``name``."""
    scenario.config(kind="package", name=name, revision=1, text="outcome: a report\n")
    scenario.config(kind="workflow", name=name, revision=1,
                    text=workflow(*((n, c, []) for n, c in nodes)))
    scenario.config(kind="bindings", name=name, revision=1, text=yaml.safe_dump({
        "nodes": [{"node": n, "agent": {"name": "researcher", "revision": "7"}}
                  for n, _ in nodes], **({"prices": prices} if prices else {})}))


def over_budget(scenario: Scenario, slot: str) -> None:
    """Attempt 1's worker, as its pod: 150 tokens reported on its Lease (past the run's
    100), its stop recorded (``budget.exceeded``), its pod ended: OverBudget."""
    lease = f"{slot}-1"
    scenario.wait_state(slot, "Active")
    api = pod_api(scenario, lease)
    used = ModelUsage(input_tokens=100, output_tokens=50, cost_micros=1050, currency="EUR")
    api.request("PATCH", records.LeaseRecords(
        api=api, namespace=scenario.namespace, lease=lease, attempt=1).path,
        body={"metadata": {"annotations": {names.MODEL_USAGE_ANNOTATION: used.text()}}},
        content_type="application/merge-patch+json")
    records.LeaseRecords(api=api, namespace=scenario.namespace, lease=lease, attempt=1).commit(
        records.make(key=f"{names.BUDGET_KEY}{names.EXCEEDED_SUFFIX}",
                     kind=records.Kind.DECISION, attempt=1,
                     payload={"reason": "150 tokens used of a budget of 100",
                              "used": used.text()}))
    scenario.finish(lease, "Succeeded", exit_code=0)
    scenario.wait_condition(slot, "BudgetExceeded", "True")


def test_the_charts_monitoring_objects_pass_prometheus_operators_own_schemas(
        cluster: Cluster, installed: None, tmp_path: Path) -> None:
    files = {plural: CRDS / f"monitoring.coreos.com_{plural}.yaml"
             for plural in ("prometheusrules", "servicemonitors")}
    made = [path for plural, path in files.items() if cluster.kubectl(
        "get", "crd", f"{plural}.monitoring.coreos.com").returncode != 0]
    for path in made:  # a cluster that has them keeps its own, untouched
        applied = cluster.kubectl("apply", "--server-side", "-f", str(path))
        assert applied.returncode == 0, applied.stderr
    try:
        for plural in files:
            wait_for(lambda plural=plural: cluster.kubectl(
                "get", f"{plural}.monitoring.coreos.com", "-A").returncode == 0, timeout=30,
                message=f"{plural} served")
        rendered = subprocess.run(
            [str(helm_binary()), "template", "agentrun-operator", str(CHART), "--namespace",
             NAMESPACE, "--set", "monitoring.serviceMonitor.enabled=true",
             "--set", "monitoring.serviceMonitor.interval=15s",
             "--set", "monitoring.prometheusRule.enabled=true",
             "--set", "monitoring.dashboard.enabled=true",
             "--set-json", 'monitoring.labels={"release": "kube-prometheus-stack"}'],
            capture_output=True, text=True, check=True).stdout
        ours = [d for d in yaml.safe_load_all(rendered) if d and (
            d["kind"] in ("ServiceMonitor", "PrometheusRule")
            or d["metadata"].get("labels", {}).get("grafana_dashboard") == "1")]
        assert sorted(d["kind"] for d in ours) == ["ConfigMap", "PrometheusRule",
                                                  "ServiceMonitor"]
        assert all(d["metadata"]["labels"]["release"] == "kube-prometheus-stack"
                   for d in ours if d["kind"] != "ConfigMap")
        (rule,) = [d for d in ours if d["kind"] == "PrometheusRule"]
        assert rule["spec"]["groups"] == monitoring.rule_groups()  # {{ $value }} literal
        (board,) = [d for d in ours if d["kind"] == "ConfigMap"]
        assert board["data"] == {"agentrun-operator.json": monitoring.dashboard_json()}
        accepted = dry_run(cluster, ours, tmp_path / "ours.yaml")
        assert accepted.returncode == 0, accepted.stderr
        broken = copy.deepcopy([d for d in ours if d["kind"] == "ServiceMonitor"])
        broken[0]["spec"]["endpoints"][0]["interval"] = "soon"
        refused = dry_run(cluster, broken, tmp_path / "broken.yaml")
        assert refused.returncode != 0 and "spec.endpoints[0].interval" in refused.stderr, (
            refused.stderr)
    finally:
        for path in made:
            cluster.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(path))


def dry_run(cluster: Cluster, documents: list[dict[str, Any]],
            path: Path) -> subprocess.CompletedProcess[str]:
    path.write_text(yaml.safe_dump_all(documents))
    result: subprocess.CompletedProcess[str] = cluster.kubectl(
        "apply", "--dry-run=server", "-f", str(path))
    return result

