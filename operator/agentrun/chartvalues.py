"""The chart's ``values.yaml`` (documented) and ``values.schema.json`` (bounded).

Defaults are the manifests' own (:mod:`agentrun.manifests`: image, pull policy,
resources, metrics port), so ``helm template`` with no values renders what
``manifests/deploy/`` holds. The schema rejects any key it does not name
(``additionalProperties: false`` at every level: a misspelt key is an error, not a
silent default) and bounds every string and number, as ``api/bounds.py`` does for what
people write into the API.
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from agentrun import bundledstore, telemetry, workload
from agentrun.api import names, runs

REPOSITORY, TAG = workload.IMAGE.rsplit(":", 1)
STORE_REPOSITORY, STORE_TAG = bundledstore.STORE_IMAGE.rsplit(":", 1)
PULL_POLICIES = ["Always", "IfNotPresent", "Never"]
LOG_LEVELS = ["info", "debug", "warning", "error"]
MAX_NAMESPACES = 100
MAX_REPLICAS = 5  # more only watch and list the API server for nothing
# A Kubernetes quantity as people write one (500m, 1.5, 256Mi, 1G).
QUANTITY = r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$"
RESOURCE_NAMES = ["cpu", "memory", "ephemeral-storage"]


def defaults() -> dict[str, Any]:
    """The default values (what ``values.yaml`` sets)."""
    return {
        "image": {"repository": REPOSITORY, "tag": "", "pullPolicy": workload.PULL_POLICY},
        "imagePullSecrets": [],
        "replicas": workload.REPLICAS,
        "watchNamespaces": [],
        "logLevel": "info",
        "resources": workload.RESOURCES,
        "extraArgs": [],
        "extraEnv": [],
        "podAnnotations": {},
        "podLabels": {},
        "nodeSelector": {},
        "tolerations": [],
        "affinity": workload.SPREAD,
        "priorityClassName": "",
        "metrics": {"port": workload.METRICS_PORT, "service": {"enabled": True}},
        "history": {"enabled": True},
        "tracing": {"endpoint": ""},
        "monitoring": {"serviceMonitor": {"enabled": False, "interval": "30s"},
                       "prometheusRule": {"enabled": False},
                       "dashboard": {"enabled": False}, "labels": {}},
        "networkPolicy": {"enabled": False, "metricsFrom": []},
        "journal": {"endpoint": "", "bucket": "", "prefix": runs.JOURNAL_BASE_PREFIX,
                    "region": runs.JOURNAL_REGION, "secretName": "",
                    "retentionSeconds": None},
        "store": {"enabled": True,
                  "image": {"repository": STORE_REPOSITORY, "tag": STORE_TAG,
                            "pullPolicy": workload.PULL_POLICY},
                  "storageClassName": "", "size": bundledstore.STORE_SIZE,
                  "nodeSelector": {}, "tolerations": [], "affinity": {}},
    }


# One comment block per key, in the order of defaults(); nested keys by dotted path.
COMMENTS = {
    "image": "The operator's image.",
    "image.repository": "Registry and repository, without the tag (at most 255 characters).",
    "image.tag": "The image tag; \"\": the chart's appVersion.",
    "image.pullPolicy": f"One of {', '.join(PULL_POLICIES)} (Never: the image is loaded "
                        "into the node, as on the local control plane).",
    "imagePullSecrets": "Secrets (of kubernetes.io/dockerconfigjson type, in the release's "
                        "namespace) for pulling the operator's and the store's images, as "
                        "[{name: regcred}].",
    "replicas": f"Operator pods, 1 to {MAX_REPLICAS}: one leads (leader election on the "
                "Lease agentrun-operator in the release's namespace, its writes fenced by "
                "admission), "
                "the others stand by with their caches primed, take over about a lease "
                "(15 s) after the leader is lost, and serve the history API. A "
                "PodDisruptionBudget lets a drain take one at a time (on a cluster of one "
                "node, use 1: a drain would wait for the other's replacement).",
    "watchNamespaces": "Namespaces (names or globs such as team-*) the operator serves; "
                       f"[] = every namespace. At most {MAX_NAMESPACES}. The operator's "
                       "ClusterRole is cluster-wide either way.",
    "logLevel": "info: one JSON line per transition (its object as fields); debug: also "
                "Kopf's per-event lines (the operator's --verbose); warning, error: only "
                "Warning Events and problems (--log-level).",
    "resources": "The operator container's requests and limits (cpu, memory, "
                 "ephemeral-storage as Kubernetes quantities). Requests are required.",
    "extraArgs": "More flags for the operator (agentrun-operator run --help), such as "
                 "[--qps, \"20\", --workers, \"8\"] (strings: --set-json, or quote "
                 "numbers), after the chart's own; none of the flags the chart sets or "
                 "depends on (--metrics-*, --history-*, --journal-*, --leader-*, --identity, "
                 "--namespace, --operator-*, --context, --otlp-*, --verbose, --log-*).",
    "extraEnv": "More environment variables of the operator container, as in a pod's env "
                "([{name: HTTPS_PROXY, value: ...}] or valueFrom); not POD_NAME nor "
                "POD_NAMESPACE, which are the chart's.",
    "podAnnotations": "Annotations of the operator's pods.",
    "podLabels": "More labels of the operator's pods (not app.kubernetes.io/ ones, which "
                 "are the chart's).",
    "nodeSelector": "Node labels the operator's pods must run on (a pod's nodeSelector).",
    "tolerations": "Taints the operator's pods tolerate (a pod's tolerations).",
    "affinity": "The operator's pods' affinity (a pod's affinity). The default spreads the "
                "replicas over nodes when it can; what you set is merged into it (Helm "
                "merges maps), and null drops it.",
    "priorityClassName": "The operator's pods' PriorityClass; \"\": the cluster's default.",
    "metrics": "The Prometheus endpoint (/metrics), which also answers the probes "
               "(/healthz liveness, /readyz readiness).",
    "metrics.port": "Container port of /metrics, /healthz and /readyz (1-65535).",
    "metrics.service": "A ClusterIP Service agentrun-operator-metrics in front of that port.",
    "metrics.service.enabled": "false: no Service (scrape the pod directly).",
    "history": "The history API: people read a slot's journal through the API server, under "
               "RBAC (kubectl agentrun history; the APIService v1alpha1.history.agentrun.dev "
               "and its Service, served by the operator on port "
               f"{workload.HISTORY_PORT}).",
    "history.enabled": "false: none. While the API server cannot reach it (the operator "
                       "scaled to 0, say), its discovery fails and namespace deletion waits.",
    "tracing": "OpenTelemetry traces of the runs: a run is one trace, its slots, attempts and "
               "commands spans in it (the operator's --otlp-endpoint). A worker's own spans "
               "(its steps and effects) go where its LaunchSpec's template sets "
               "OTEL_EXPORTER_OTLP_ENDPOINT.",
    "tracing.endpoint": "An OTLP/HTTP collector's base URL, such as "
                        "http://otel-collector.observability:4318 (spans go to "
                        "<url>/v1/traces); \"\": no tracing.",
    "monitoring": "Objects for the Prometheus Operator and Grafana (their CRDs must be "
                  "installed for the first two).",
    "monitoring.serviceMonitor": "A ServiceMonitor scraping the metrics Service (needs "
                                 "metrics.service.enabled).",
    "monitoring.serviceMonitor.enabled": "true: make it.",
    "monitoring.serviceMonitor.interval": "How often Prometheus scrapes (a Prometheus "
                                          "duration such as 30s or 1m).",
    "monitoring.prometheusRule": "A PrometheusRule of the alerts: no leader, a saturated "
                                 "work queue, slots stuck claiming, claim failures, lease "
                                 "expiries, unresolved effects, budgets reached, slots parked "
                                 "for a person (docs/design/operating.md).",
    "monitoring.prometheusRule.enabled": "true: make it.",
    "monitoring.dashboard": "A ConfigMap holding the Grafana dashboard, labelled "
                            "grafana_dashboard: \"1\" for Grafana's dashboard sidecar.",
    "monitoring.dashboard.enabled": "true: make it.",
    "monitoring.labels": "More labels on the ServiceMonitor and the PrometheusRule, for a "
                         "Prometheus that selects them (kube-prometheus-stack: release: "
                         "<its release>).",
    "networkPolicy": "NetworkPolicies admitting only what the pods serve: the operator's "
                     "history port (from anywhere: the API server calls it) and metrics "
                     "port, and the store's S3 port (from anywhere: workers in every "
                     "namespace write their journals); every other port of those pods is "
                     "refused. Ingress only. Enforced only where the cluster's network "
                     "plugin enforces NetworkPolicy.",
    "networkPolicy.enabled": "true: make them.",
    "networkPolicy.metricsFrom": "Who may scrape the metrics port (NetworkPolicyPeers: "
                                 "podSelector, namespaceSelector, ipBlock); []: anyone.",
    "journal": "The S3-compatible store where slots keep their journals (the operator's "
               "--journal-* flags). Each run launched pins it, so a change here reaches new "
               "runs only. endpoint and bucket: both or neither (neither: the bundled store when "
               "store.enabled, else runs get no journal).",
    "journal.endpoint": "The S3 API's URL, http:// or https://, host and optional port only "
                        "(such as http://minio.storage:9000); \"\": none.",
    "journal.bucket": "The bucket holding every run's journal (S3's bucket naming rules).",
    "journal.prefix": "Where in the bucket; each run's journal goes under "
                      "<prefix>/<namespace>/<run uid> (\"\": at the bucket's root).",
    "journal.region": "The store's region (most S3-compatible stores accept any).",
    "journal.secretName": "A Secret, in each run's namespace, with the keys accessKeyId and "
                          "secretAccessKey, mounted into the run's workers; \"\": none "
                          f"(unsigned requests), or {names.JOURNAL_SECRET}, the one name "
                          "the operator may read (it checks the Secret before launching a "
                          "run and signs the deletion of a run's journal with it).",
    "journal.retentionSeconds": "Seconds a finished run's journal is kept, counted from "
                                "when the run finished; then the operator deletes it and "
                                "the run stays (0: at once; null: kept until the run is "
                                "deleted; Helm drops a null, so it is optional). Pinned on "
                                "each run at launch.",
    "store": "The bundled S3-compatible object store (SeaweedFS) the slots' journals live "
             f"in: a Deployment, a Service {bundledstore.STORE} (port "
             f"{bundledstore.STORE_PORT}) and a PersistentVolumeClaim of the same name. It "
             "accepts anonymous requests (no identities configured yet): anything that "
             "reaches the Service may read and write.",
    "store.enabled": "false: none (bring your own S3 store).",
    "store.image": "The store's image: the static weed binary, run as uid 65532.",
    "store.image.repository": "Registry and repository, without the tag.",
    "store.image.tag": "The image tag (the SeaweedFS version).",
    "store.image.pullPolicy": f"One of {', '.join(PULL_POLICIES)}.",
    "store.storageClassName": "The claim's StorageClass; empty: the cluster's default class.",
    "store.size": "The claim's size (a Kubernetes quantity).",
    "store.nodeSelector": "Node labels the store's pod must run on.",
    "store.tolerations": "Taints the store's pod tolerates.",
    "store.affinity": "The store's pod's affinity.",
}


# Objects shown whole under their key (their keys are Kubernetes', not the chart's).
LEAVES = frozenset({"resources", "affinity"})


def values_yaml() -> str:
    """``values.yaml``: every key with the comment that says what it does."""
    lines = ["# Values of the agentrun-operator chart; values.schema.json rejects any other key",
             "# and says what each one takes.",
             "# Install into any namespace but a tenant's (labelled "
             f"{names.TENANT_LABEL}), once per cluster:",
             "# its roles and admission policies are cluster-wide (the chart fails otherwise)."]

    def walk(node: dict[str, Any], path: str, depth: int) -> None:
        for key, value in node.items():
            dotted = f"{path}{key}"
            if depth == 0:
                lines.append("")
            lines.extend(f"{'  ' * depth}# {c}" for c in wrap(COMMENTS[dotted], 88 - 2 * depth))
            if isinstance(value, dict) and value and dotted not in LEAVES:  # {}: a leaf
                lines.append(f"{'  ' * depth}{key}:")
                walk(value, f"{dotted}.", depth + 1)
            else:
                dumped = yaml.safe_dump({key: value}, sort_keys=False, width=100)
                lines.extend(f"{'  ' * depth}{line}" for line in dumped.splitlines())

    walk(defaults(), "", 0)
    return "\n".join(lines) + "\n"


def wrap(text: str, width: int) -> list[str]:
    """Words of ``text`` in lines of at most ``width`` characters."""
    out: list[str] = []
    for word in text.split():
        if out and len(out[-1]) + 1 + len(word) <= width:
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def _object(properties: dict[str, Any], *, required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties,
            **({"required": required} if required else {})}


def _or_empty(pattern: str, most: int) -> dict[str, Any]:
    """A string the operator's flag checks with ``pattern``, or "" for "not set"."""
    return {"type": "string", "maxLength": most, "pattern": f"^$|{pattern}"}


def _image(*, tag_optional: bool = False) -> dict[str, Any]:
    """An image's repository, tag and pull policy (the operator's, whose tag may be "" for
    the chart's appVersion, and the store's)."""
    tag = r"[A-Za-z0-9_][A-Za-z0-9_.-]*"
    return _object({
        "repository": {"type": "string", "minLength": 1, "maxLength": 255,
                       "pattern": r"^[a-z0-9]([a-z0-9._:/-]*[a-z0-9])?$"},
        "tag": ({"type": "string", "maxLength": 128, "pattern": f"^$|^{tag}$"} if tag_optional
                else {"type": "string", "minLength": 1, "maxLength": 128, "pattern": f"^{tag}$"}),
        "pullPolicy": {"type": "string", "enum": PULL_POLICIES},
    }, required=["repository", "tag", "pullPolicy"])


# Kubernetes' shapes of a label's key and value, and of a DNS subdomain name.
LABEL_KEY = {"maxLength": 317, "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?"
                                           r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"}
LABEL_VALUE = {"type": "string", "maxLength": 63,
               "pattern": r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"}
SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


def _scheduling() -> dict[str, dict[str, Any]]:
    """A pod's nodeSelector, tolerations and affinity, bounded (their insides are the API
    server's to check)."""
    return {
        "nodeSelector": {"type": "object", "maxProperties": 32, "propertyNames": LABEL_KEY,
                         "additionalProperties": LABEL_VALUE},
        "tolerations": {"type": "array", "maxItems": 32, "items": _object({
            "key": {"type": "string", **LABEL_KEY, "pattern": f"^$|{LABEL_KEY['pattern']}"},
            "operator": {"type": "string", "enum": ["Exists", "Equal"]},
            "value": LABEL_VALUE,
            "effect": {"type": "string", "enum": ["", "NoSchedule", "PreferNoSchedule",
                                                  "NoExecute"]},
            "tolerationSeconds": {"type": "integer"}})},
        "affinity": _object({kind: {"type": "object"} for kind in (
            "nodeAffinity", "podAffinity", "podAntiAffinity")}),
    }


def _operator_pod() -> dict[str, dict[str, Any]]:
    """What the operator's pods may be given beyond the chart's own settings."""
    return {
        "imagePullSecrets": {"type": "array", "maxItems": 16, "items": _object(
            {"name": {"type": "string", "minLength": 1, "maxLength": 253,
                      "pattern": SUBDOMAIN}}, required=["name"])},
        "extraArgs": {"type": "array", "maxItems": 32,
                      "items": {"type": "string", "minLength": 1, "maxLength": 1024}},
        "extraEnv": {"type": "array", "maxItems": 32, "items": _object({
            # Any printable ASCII but "=" (Kubernetes' rule since 1.34).
            "name": {"type": "string", "minLength": 1, "maxLength": 256,
                     "pattern": r"^[!-<>-~]+$"},
            "value": {"type": "string", "maxLength": 32768},
            "valueFrom": {"type": "object"}}, required=["name"])},
        "podAnnotations": {"type": "object", "maxProperties": 32,
                           "propertyNames": {**LABEL_KEY, "maxLength": 317},
                           "additionalProperties": {"type": "string", "maxLength": 4096}},
        "podLabels": {"type": "object", "maxProperties": 16,
                      "propertyNames": LABEL_KEY,
                      "additionalProperties": LABEL_VALUE},
        **_scheduling(),
        "priorityClassName": {"type": "string", "maxLength": 253,
                              "pattern": f"^$|{SUBDOMAIN}"},
    }


def _described(node: dict[str, Any], path: str = "") -> dict[str, Any]:
    """``node`` with each value's comment (COMMENTS) as its description, for editors and
    ``helm show values``' readers; every value has one."""
    for key, child in node.get("properties", {}).items():
        dotted = f"{path}{key}"
        if dotted in COMMENTS:
            child["description"] = COMMENTS[dotted]
            _described(child, f"{dotted}.")
    return node


def schema() -> dict[str, Any]:
    """The values' JSON schema (draft 7, what Helm validates ``--set`` and files against)."""
    quantities = _object({name: {"type": ["string", "number"], "pattern": QUANTITY,
                                 "maxLength": 32} for name in RESOURCE_NAMES})
    return _described({
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "agentrun-operator values",
        **_object({
            "image": _image(tag_optional=True),
            **_operator_pod(),
            "replicas": {"type": "integer", "minimum": 1, "maximum": MAX_REPLICAS},
            "watchNamespaces": {"type": "array", "maxItems": MAX_NAMESPACES,
                                "uniqueItems": True,
                                "items": {"type": "string", "minLength": 1, "maxLength": 63,
                                          "pattern": r"^[a-z0-9*?]([-a-z0-9*?]*[a-z0-9*?])?$"}},
            "logLevel": {"type": "string", "enum": LOG_LEVELS},
            "resources": _object({"requests": quantities, "limits": quantities},
                                 required=["requests"]),
            "metrics": _object({
                "port": {"type": "integer", "minimum": 1, "maximum": 65535},
                "service": _object({"enabled": {"type": "boolean"}}, required=["enabled"]),
            }, required=["port", "service"]),
            "history": _object({"enabled": {"type": "boolean"}}, required=["enabled"]),
            "tracing": _object({"endpoint": _or_empty(telemetry.ENDPOINT_PATTERN,
                                                      telemetry.MAX_ENDPOINT_CHARS)},
                               required=["endpoint"]),
            "monitoring": _object({
                "serviceMonitor": _object({
                    "enabled": {"type": "boolean"},
                    # The ServiceMonitor CRD's own pattern of a Prometheus duration.
                    "interval": {"type": "string", "maxLength": 32, "pattern": (
                        r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?"
                        r"(([0-9]+)s)?(([0-9]+)ms)?)$")}},
                    required=["enabled", "interval"]),
                "prometheusRule": _object({"enabled": {"type": "boolean"}},
                                          required=["enabled"]),
                "dashboard": _object({"enabled": {"type": "boolean"}}, required=["enabled"]),
                "labels": {"type": "object", "maxProperties": 16,
                           "propertyNames": {"maxLength": 63,
                                             "pattern": r"^[A-Za-z0-9]([-A-Za-z0-9_./]*"
                                                        r"[A-Za-z0-9])?$"},
                           "additionalProperties": {"type": "string", "maxLength": 63}},
            }, required=["serviceMonitor", "prometheusRule", "dashboard", "labels"]),
            "networkPolicy": _object({
                "enabled": {"type": "boolean"},
                "metricsFrom": {"type": "array", "maxItems": 16, "items": _object({
                    kind: {"type": "object"} for kind in (
                        "podSelector", "namespaceSelector", "ipBlock")})},
            }, required=["enabled", "metricsFrom"]),
            "journal": _object({
                "endpoint": _or_empty(runs.JOURNAL_ENDPOINT_PATTERN, runs.JOURNAL_ENDPOINT_CHARS),
                "bucket": _or_empty(runs.JOURNAL_BUCKET_PATTERN, 63),
                "prefix": _or_empty(runs.JOURNAL_PREFIX_PATTERN, runs.JOURNAL_BASE_PREFIX_CHARS),
                "region": {"type": "string", "minLength": 1,
                           "maxLength": runs.JOURNAL_REGION_CHARS,
                           "pattern": runs.JOURNAL_REGION_PATTERN},
                "secretName": {"type": "string", "enum": ["", names.JOURNAL_SECRET]},
                "retentionSeconds": {"type": ["integer", "null"], "minimum": 0,
                                     "maximum": runs.JOURNAL_RETENTION_SECONDS},
            }, required=["endpoint", "bucket", "prefix", "region", "secretName"]),
            "store": _object({
                "enabled": {"type": "boolean"},
                "image": _image(),
                "storageClassName": {"type": "string", "maxLength": 253,
                                     "pattern": r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?)?$"},
                "size": {"type": "string", "pattern": QUANTITY, "maxLength": 32},
                **_scheduling(),
            }, required=["enabled", "image", "storageClassName", "size"]),
        }, required=["image", "imagePullSecrets", "replicas", "watchNamespaces", "logLevel",
                     "resources", "extraArgs", "extraEnv", "podAnnotations", "podLabels",
                     "nodeSelector", "tolerations", "priorityClassName", "metrics", "history",
                     "tracing", "monitoring", "networkPolicy", "journal", "store"]),
    })


def schema_json() -> str:
    return json.dumps(schema(), indent=2) + "\n"
