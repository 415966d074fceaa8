"""What the chart gives Prometheus and Grafana: alert rules and a dashboard over the
operator's metrics (``controller.metrics``), as data, one source for both.

Every expression reads only the operator's own series (``agentrun_*``, and the process
series of the targets that export ``agentrun_build_info``), never a job or namespace label
of the installer's choosing, so the rules work whatever scrapes them. A gauge a standby
replica also exports is read from the leader only where the standby's value would mislead
(the queue: a standby holds every key it is not allowed to work).

Terms: *parked* is a slot waiting for a person (an unresolved effect, a question, an
approval, its run's budget): the census's ``agentrun_waiting_for_person``. An alert about
a wait compares the age of the longest one (``agentrun_oldest_wait_seconds``) with how long
is too long, not a count held above 0 over time, which a steady flow of brief waits would
hold for ever. Descriptions show ``$value`` humanized (``increase`` is an estimate).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from agentrun.api.slots import Outcome
from agentrun.core.base import census

GROUP = "agentrun"
LEADER_ONLY = "and on (instance, job) (agentrun_leader == 1)"
OURS = "and on (instance, job) agentrun_build_info"  # a process series of our targets


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One alerting rule: ``signal`` compared with ``threshold`` (``expr``) for ``for_``
    fires it. ``signal`` alone is what the condition is measured by (a count, an age)."""

    name: str
    signal: str
    threshold: str  # the comparison, such as "> 100"
    for_: str
    severity: str
    summary: str
    description: str

    @property
    def expr(self) -> str:
        return f"{self.signal} {self.threshold}"


def oldest(what: str) -> str:
    """The age, in seconds, of the longest wait of kind ``what`` (a regex of them: by kind)."""
    if what in census.AGES:
        return f'max(agentrun_oldest_wait_seconds{{what="{what}"}})'
    return f'max by (what) (agentrun_oldest_wait_seconds{{what=~"{what}"}})'


ALERTS: tuple[Alert, ...] = (
    Alert(name="AgentrunNoLeader", signal="(sum(agentrun_leader) or vector(0))",
          threshold="< 1", for_="2m", severity="critical",
          summary="No replica of agentrun-operator leads",
          description="No replica leads (or none is scraped): no claim is made, no command "
                      "decided, no lease judged. See the replicas' pods and logs and the "
                      "Lease agentrun-operator in the operator's namespace."),
    Alert(name="AgentrunWorkQueueSaturated",
          signal=f"max(agentrun_queue_depth {LEADER_ONLY})", threshold="> 100", for_="10m",
          severity="warning", summary="The leader's work queue holds over 100 keys",
          description="{{ $value | humanize }} keys wait in the leader's queue: reconciles "
                      "are slower than changes (raise --workers or --qps, or look at "
                      "agentrun_reconcile_duration_seconds and agentrun_blind_seconds)."),
    Alert(name="AgentrunSlotsStuckClaiming", signal=oldest("claim"), threshold="> 900",
          for_="0m", severity="warning", summary="A slot's claim has waited 15 minutes",
          description="A claim has waited {{ $value | humanizeDuration }} for a "
                      "ResourceQuota or on a Pod its LaunchSpec makes that cannot be created "
                      "(the slot's QuotaExceeded or LaunchSpecRefused condition says which)."),
    Alert(name="AgentrunClaimFailures",
          signal=f'sum(increase(agentrun_transitions_total{{kind="Attempt",'
                 f'outcome="{Outcome.CLAIM_FAILED}"}}[15m]))',
          threshold="> 0", for_="0m", severity="warning", summary="Claims failed",
          description="About {{ $value | humanize }} attempts ended ClaimFailed in 15 "
                      "minutes: their Lease or Pod was refused (a policy, a missing "
                      "ServiceAccount); the slot's ClaimFailed Event says why."),
    Alert(name="AgentrunLeaseExpiries",
          signal="sum(increase(agentrun_lease_expiries_total[15m]))", threshold="> 5",
          for_="0m", severity="warning", summary="Workers are losing their leases",
          description="About {{ $value | humanize }} attempts ended Lost or StartTimeout in "
                      "15 minutes: workers die, cannot start, or lose their node."),
    Alert(name="AgentrunUnresolvedEffects", signal=oldest("effect"), threshold="> 900",
          for_="0m", severity="warning", summary="An effect has waited 15 minutes for a person",
          description="An effect whose outcome no one knows has waited {{ $value | "
                      "humanizeDuration }}; a person resolves it (kubectl agentrun "
                      "resolve-effect) from its owner's answer."),
    Alert(name="AgentrunBudgetExceeded",
          signal='sum(agentrun_waiting_for_person{what="budget"})', threshold="> 0",
          for_="0m", severity="warning", summary="Runs stopped at their budget",
          description="{{ $value | humanize }} slots wait for their run's budget to be "
                      "raised (kubectl agentrun budget)."),
    Alert(name="AgentrunSlotsParked", signal=oldest("question|approval"), threshold="> 3600",
          for_="0m", severity="info", summary="A slot has waited an hour for a person",
          description="A {{ $labels.what }} has waited {{ $value | humanizeDuration }} for "
                      "a person (kubectl agentrun answer, approve or deny)."),
)


@dataclass(frozen=True, kw_only=True)
class Panel:
    """One dashboard panel: a time series of ``expr`` in ``unit`` (Grafana's unit ids)."""

    title: str
    expr: str
    legend: str = ""
    unit: str = "short"


def quantile(q: float, metric: str, *, by: str = "", window: str = "5m") -> str:
    """The ``q`` quantile of histogram ``metric`` over ``window`` (by a label, if any)."""
    labels = ", ".join(["le", *([by] if by else [])])
    return f"histogram_quantile({q}, sum by ({labels}) (rate({metric}_bucket[{window}])))"


PANELS: tuple[Panel, ...] = (
    Panel(title="Slots by state", expr="sum by (state) (agentrun_slots)", legend="{{state}}"),
    Panel(title="Runs by state", expr="sum by (state) (agentrun_runs)", legend="{{state}}"),
    Panel(title="Slots waiting for a person", expr="sum by (what) (agentrun_waiting_for_person)",
          legend="{{what}}"),
    Panel(title="The longest wait, by what for",
          expr="max by (what) (agentrun_oldest_wait_seconds)", legend="{{what}}", unit="s"),
    Panel(title="Replicas leading", expr="sum(agentrun_leader)"),
    Panel(title="Transitions per second",
          expr="sum by (kind, outcome) (rate(agentrun_transitions_total[5m]))",
          legend="{{kind}} {{outcome}}", unit="ops"),
    Panel(title="Commands in the last hour",
          expr="sum by (kind, outcome, predicate) (increase(agentrun_commands_total[1h]))",
          legend="{{kind}} {{outcome}} {{predicate}}"),
    Panel(title="Claim latency p99", expr=quantile(0.99, "agentrun_claim_latency_seconds",
                                                    window="15m"), unit="s"),
    Panel(title="Attempt duration p90 by outcome",
          expr=quantile(0.9, "agentrun_attempt_duration_seconds", by="outcome", window="1h"),
          legend="{{outcome}}", unit="s"),
    Panel(title="Lease expiries in the last hour",
          expr="sum(increase(agentrun_lease_expiries_total[1h]))"),
    Panel(title="Effects unresolved, questions asked, approvals requested (last hour)",
          expr='label_replace(sum(increase(agentrun_effects_unresolved_total[1h])), "what", '
               '"effects unresolved", "", "") or label_replace(sum(increase('
               'agentrun_questions_asked_total[1h])), "what", "questions asked", "", "") or '
               'label_replace(sum(increase(agentrun_approvals_requested_total[1h])), "what", '
               '"approvals requested", "", "")', legend="{{what}}"),
    Panel(title="Work queue depth (the leader's)",
          expr=f"max(agentrun_queue_depth {LEADER_ONLY})"),
    Panel(title="Work queue wait p99", expr=quantile(0.99, "agentrun_queue_wait_seconds"),
          unit="s"),
    Panel(title="Work queue retries per second",
          expr="sum by (kind) (rate(agentrun_queue_retries_total[5m]))", legend="{{kind}}",
          unit="ops"),
    Panel(title="Reconcile duration p99 by kind",
          expr=quantile(0.99, "agentrun_reconcile_duration_seconds", by="kind"),
          legend="{{kind}}", unit="s"),
    Panel(title="Reconcile errors per second",
          expr="sum by (kind) (rate(agentrun_reconcile_errors_total[5m]))", legend="{{kind}}",
          unit="ops"),
    Panel(title="API requests per second",
          expr="sum by (method, code) (rate(agentrun_api_requests_total[5m]))",
          legend="{{method}} {{code}}", unit="reqps"),
    Panel(title="API request latency p99 by method",
          expr=quantile(0.99, "agentrun_api_request_duration_seconds", by="method"),
          legend="{{method}}", unit="s"),
    Panel(title="Blind time in the last 5 minutes", expr="max(agentrun_blind_seconds)",
          unit="s"),
    Panel(title="Model tokens in the last hour",
          expr="sum by (direction) (increase(agentrun_model_tokens_total[1h]))",
          legend="{{direction}}"),
    Panel(title="Model cost in the last hour",
          expr="sum by (currency) (increase(agentrun_model_cost_total[1h]))",
          legend="{{currency}}"),
    Panel(title="Resident memory", expr=f"process_resident_memory_bytes {OURS}",
          legend="{{instance}}", unit="bytes"),
    Panel(title="CPU", expr=f"rate(process_cpu_seconds_total[5m]) {OURS}",
          legend="{{instance}}", unit="percentunit"),
    Panel(title="Build", expr="agentrun_build_info", legend="{{version}} (Python {{python}})"),
)


def rule_groups() -> list[dict[str, Any]]:
    """The rules as Prometheus takes them (a rule file's ``groups``, a PrometheusRule's
    ``spec.groups``)."""
    return [{"name": GROUP, "rules": [
        {"alert": a.name, "expr": a.expr, "for": a.for_,
         "labels": {"severity": a.severity},
         "annotations": {"summary": a.summary, "description": a.description}}
        for a in ALERTS]}]


def dashboard() -> dict[str, Any]:
    """The Grafana dashboard (its JSON model), on a Prometheus data source chosen when it is
    opened (the variable ``datasource``)."""
    source = {"type": "prometheus", "uid": "${datasource}"}
    panels = [{
        "id": i + 1, "type": "timeseries", "title": p.title, "datasource": source,
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": p.unit}, "overrides": []},
        "targets": [{"refId": "A", "datasource": source, "expr": p.expr,
                     "legendFormat": p.legend or "__auto"}],
    } for i, p in enumerate(PANELS)]
    return {
        "uid": "agentrun-operator", "title": "agentrun-operator", "tags": ["agentrun"],
        "timezone": "browser", "schemaVersion": 39, "editable": False, "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [{"name": "datasource", "label": "Prometheus",
                                 "type": "datasource", "query": "prometheus"}]},
        "panels": panels,
    }


def dashboard_json() -> str:
    """:func:`dashboard` as the chart's ConfigMap holds it."""
    return json.dumps(dashboard(), indent=2) + "\n"


def expressions() -> dict[str, str]:
    """Every expression shipped, by where it is (``alert/<name>``, ``panel/<title>``)."""
    return {**{f"alert/{a.name}": a.expr for a in ALERTS},
            **{f"panel/{p.title}": p.expr for p in PANELS}}
