"""The chart's templating: values-dependent fields as *sentinels*, replaced after dumping.

A builder (:mod:`agentrun.chart`) sets a field that depends on the release's values to a
sentinel (``__HELM_NAME__``, a string no manifest holds); after ``yaml.safe_dump`` a
*scalar* sentinel becomes an inline Helm expression (SCALARS) and a *block* sentinel, alone
on its line, becomes template lines at that line's indentation (BLOCKS: a key only when its
value is set, flags from the values, lists and maps as YAML). Any ``{{`` a manifest might
hold is escaped first, so Helm renders it literally. Every object is labelled with
Kubernetes' recommended labels (STANDARD_LABELS).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable
from typing import Any

import yaml

from agentrun import bundledstore, workload
from agentrun.api import names

SENTINEL = re.compile(r"__HELM_([A-Z_]+?)__")
# The operator's flags the chart sets or that must agree with what it renders (ports,
# probes, Services, the leader's identity): extraArgs may hold none of them.
CHART_FLAGS = ("--metrics-", "--history-", "--journal-", "--leader-", "--identity",
               "--namespace", "--operator-", "--context", "--otlp-", "--verbose", "--log-",
               "-n", "-v")
# The operator's pods' own variables (workload.POD_NAME_ENV, POD_NAMESPACE_ENV).
CHART_ENV = ("POD_NAME", "POD_NAMESPACE")
# Inline expressions, by sentinel name.
SCALARS = {
    "IMAGE": '{{ printf "%s:%s" .Values.image.repository (.Values.image.tag | default '
             '.Chart.AppVersion) | quote }}',
    "PULL_POLICY": "{{ .Values.image.pullPolicy }}",
    "PORT": "{{ .Values.metrics.port }}",
    "PORT_ARG": "{{ .Values.metrics.port | quote }}",
    "STORE_IMAGE": '{{ printf "%s:%s" .Values.store.image.repository .Values.store.image.tag'
                   ' | quote }}',
    "STORE_PULL_POLICY": "{{ .Values.store.image.pullPolicy }}",
    "STORE_SIZE": "{{ .Values.store.size | quote }}",
    "REPLICAS": "{{ .Values.replicas }}",
    # The release's namespace: every namespaced object's, and the one the admission
    # policies name (the operator's ServiceAccount, its Lease and Secrets).
    "NAMESPACE": "{{ .Release.Namespace }}",
    "MONITOR_INTERVAL": "{{ .Values.monitoring.serviceMonitor.interval | quote }}",
    # The standard labels' values (STANDARD_LABELS).
    "INSTANCE": "{{ .Release.Name | quote }}",
    "VERSION": "{{ .Chart.AppVersion | trunc 63 | quote }}",
    "MANAGED_BY": "{{ .Release.Service | quote }}",
    "CHART": '{{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 '
             '| quote }}',
}
# Kubernetes' recommended labels, on every object the chart makes (and its pods): which
# application, which release of it, which version, made by Helm from which chart. An
# object's own app.kubernetes.io/name (its selector's) wins over the chart's name.
STANDARD_LABELS = {
    "app.kubernetes.io/name": names.OPERATOR_APP,
    "app.kubernetes.io/instance": "__HELM_INSTANCE__",
    "app.kubernetes.io/version": "__HELM_VERSION__",
    "app.kubernetes.io/part-of": "agentrun",
    "app.kubernetes.io/managed-by": "__HELM_MANAGED_BY__",
    "helm.sh/chart": "__HELM_CHART__",
}
# Those that change with every version of the chart: objects' only, never pods'.
VERSIONED_LABELS = frozenset({"app.kubernetes.io/version", "helm.sh/chart"})


def _optional(value: str, *, scalar: bool = False) -> Callable[[str, str], list[str]]:
    """A block: the key only when ``value`` (a template expression) is set, with what it
    holds as YAML under the key (``scalar``: quoted after it)."""
    def block(indent: str, lead: str) -> list[str]:
        if scalar:
            return [f"{{{{- with {value} }}}}", f"{indent}{lead}{{{{ . | quote }}}}",
                    "{{- end }}"]
        return [f"{{{{- with {value} }}}}", f"{indent}{lead.rstrip()}",
                f"{{{{- toYaml . | nindent {len(indent) + 2} }}}}", "{{- end }}"]
    return block


def _refused(*, items: str, test: str, message: str) -> list[str]:
    """Lines that fail the render with ``message`` (``{{ . }}`` in it: the item; ``{{ .name }}``:
    a field of it) when an item of ``items`` passes ``test`` (a template condition on the
    item, ``.``): clearer than a schema's ``not``."""
    text = re.sub(r"\{\{ (\.[\w.]*) \}\}", r'" \1 "', json.dumps(message))
    return [f"{{{{- range {items} }}}}", f"{{{{- if {test} }}}}",
            f"{{{{- fail (print {text}) }}}}", "{{- end }}", "{{- end }}"]


def _refused_labels(*, labels: str, what: str) -> list[str]:
    """Fail the render when ``labels`` holds a key of the chart's own labels, or of the
    project's (``agentrun.dev/``: its admission policies refuse an operator pod bearing
    one, as they do any object that is not an attempt's)."""
    return [f"{{{{- range $key, $_ := {labels} }}}}",
            '{{- if or (hasPrefix "app.kubernetes.io/" $key) (hasPrefix "helm.sh/" $key) '
            '(hasPrefix "agentrun.dev/" $key) }}',
            f'{{{{- fail (printf "{what}: %s is one of the chart\'s or the project\'s own '
            'labels (app.kubernetes.io/, helm.sh/, agentrun.dev/); choose another key" '
            '$key) }}',
            "{{- end }}", "{{- end }}"]


def _retention(indent: str) -> list[str]:
    """``--journal-retention-seconds`` when ``journal.retentionSeconds`` is set (null: none;
    ``int64``: Helm holds numbers as floats, which print large ones in e-notation)."""
    return ['{{- if not (kindIs "invalid" .retentionSeconds) }}',
            f"{indent}- --journal-retention-seconds",
            f"{indent}- {{{{ int64 .retentionSeconds | quote }}}}",
            "{{- end }}"]


# Whole lines, by sentinel name: called with the sentinel line's indentation (spaces before
# the key or the list dash) and what stood before the sentinel (``key: `` or ``- ``).
BLOCKS: dict[str, Callable[[str, str], list[str]]] = {
    # `resources: __HELM_RESOURCES__` -> the values' resources, as YAML under the key.
    "RESOURCES": lambda indent, lead: [
        f"{indent}{lead.rstrip()}",
        f"{{{{- toYaml .Values.resources | nindent {len(indent) + 2} }}}}"],
    # `- __HELM_ARGS_EXTRA__` in the operator's args -> one --namespace per watched
    # namespace (none: every namespace), --verbose when logLevel is debug, --log-level when
    # it is warning or error, --otlp-endpoint when tracing.endpoint is set.
    # `- __HELM_ARGS_HISTORY__` -> the history API's port unless history.enabled is false.
    "ARGS_HISTORY": lambda indent, lead: [
        "{{- if .Values.history.enabled }}",
        f"{indent}- --history-port",
        f'{indent}- "{workload.HISTORY_PORT}"',
        "{{- end }}"],
    "ARGS_EXTRA": lambda indent, lead: [
        "{{- range .Values.watchNamespaces }}",
        f"{indent}- --namespace",
        f"{indent}- {{{{ . | quote }}}}",
        "{{- end }}",
        '{{- if eq .Values.logLevel "debug" }}',
        f"{indent}- --verbose",
        '{{- else if ne .Values.logLevel "info" }}',
        f"{indent}- --log-level",
        f"{indent}- {{{{ .Values.logLevel | quote }}}}",
        "{{- end }}",
        "{{- with .Values.tracing.endpoint }}",
        f"{indent}- --otlp-endpoint",
        f"{indent}- {{{{ . | quote }}}}",
        "{{- end }}"],
    # `- __HELM_ARGS_USER__`, last in the operator's args -> the values' extraArgs, none
    # of them a flag the chart sets or depends on (it would be passed twice, or break
    # the probes, the Services or leader election).
    "ARGS_USER": lambda indent, lead: [
        *_refused(items=".Values.extraArgs", test=" ".join(
            ["or", *(f'(hasPrefix "{flag}" .)' for flag in CHART_FLAGS)]),
            message="extraArgs: {{ . }} is a flag the chart sets or depends on (its metrics, "
                    "history, journal, leader election, namespaces, tracing, logging); set "
                    "it through the chart's own values"),
        "{{- range .Values.extraArgs }}",
        f"{indent}- {{{{ . | quote }}}}",
        "{{- end }}"],
    # `- __HELM_EXTRA_ENV__` in the operator's env -> the values' extraEnv, as list items.
    "EXTRA_ENV": lambda indent, lead: [
        *_refused(items=".Values.extraEnv", test=" ".join(
            ["or", *(f'(eq .name "{name}")' for name in CHART_ENV)]),
            message="extraEnv: {{ .name }} is the chart's own variable (the pod's name, for "
                    "leader election, or its namespace, where the operator keeps its Lease "
                    "and Secrets); name yours otherwise"),
        "{{- with .Values.extraEnv }}",
        f"{{{{- toYaml . | nindent {len(indent)} }}}}",
        "{{- end }}"],
    # `podLabels: __HELM_POD_LABELS__` inside the pod template's labels -> the values'
    # podLabels, as more keys of that mapping (the key itself never rendered).
    "POD_LABELS": lambda indent, lead: [
        *_refused_labels(labels=".Values.podLabels", what="podLabels"),
        "{{- with .Values.podLabels }}",
        f"{{{{- toYaml . | nindent {len(indent)} }}}}",
        "{{- end }}"],
    # The pods' optional settings: each key only when its value is set.
    "POD_ANNOTATIONS": _optional(".Values.podAnnotations"),
    "PULL_SECRETS": _optional(".Values.imagePullSecrets"),
    "NODE_SELECTOR": _optional(".Values.nodeSelector"),
    "TOLERATIONS": _optional(".Values.tolerations"),
    "AFFINITY": _optional(".Values.affinity"),
    # `affinity: __HELM_NODE_AFFINITY__` (`helm test`'s pod) -> where the operator's pods
    # may run, not its spread among them (a required anti-affinity would leave the test
    # pod no node when the replicas fill them).
    "NODE_AFFINITY": lambda indent, lead: [
        "{{- with .Values.affinity }}{{- with .nodeAffinity }}",
        f"{indent}{lead.rstrip()}",
        f"{indent}  nodeAffinity:",
        f"{{{{- toYaml . | nindent {len(indent) + 4} }}}}",
        "{{- end }}{{- end }}"],
    "PRIORITY_CLASS": _optional(".Values.priorityClassName", scalar=True),
    "STORE_NODE_SELECTOR": _optional(".Values.store.nodeSelector"),
    "STORE_TOLERATIONS": _optional(".Values.store.tolerations"),
    "STORE_AFFINITY": _optional(".Values.store.affinity"),
    "METRICS_FROM": _optional(".Values.networkPolicy.metricsFrom"),
    # `- __HELM_HISTORY_INGRESS__` in the operator's NetworkPolicy -> its history port,
    # from anywhere, while the history API is served.
    "HISTORY_INGRESS": lambda indent, lead: [
        "{{- if .Values.history.enabled }}",
        f"{indent}- ports:",
        f"{indent}  - port: {workload.HISTORY_PORT_NAME}",
        f"{indent}    protocol: TCP",
        "{{- end }}"],
    # `- __HELM_TEST_CHECKS__` in the test pod's args -> a check of each Service installed.
    "TEST_CHECKS": lambda indent, lead: [
        "{{- if .Values.metrics.service.enabled }}",
        f"{indent}- {workload.METRICS_SERVICE} {{{{ .Values.metrics.port }}}} /readyz",
        "{{- end }}",
        "{{- if .Values.store.enabled }}",
        f"{indent}- {bundledstore.STORE} {bundledstore.STORE_PORT} /",
        "{{- end }}"],
    # `- __HELM_ARGS_JOURNAL__` -> the --journal-* flags when journal.endpoint and bucket
    # are set; one without the other (or a secretName without both) fails the render.
    # Neither set and the bundled store enabled: the bundled store, by its Service's name.
    "ARGS_JOURNAL": lambda indent, lead: [
        "{{- with .Values.journal }}",
        "{{- if or .endpoint .bucket .secretName }}",
        "{{- if not (and .endpoint .bucket) }}",
        '{{- fail "journal.endpoint and journal.bucket go together: set both (the journal '
        'store) or neither (runs get no journal)" }}',
        "{{- end }}",
        *[line for flag, key in (("endpoint", "endpoint"), ("bucket", "bucket"),
                                 ("prefix", "prefix"), ("region", "region"))
          for line in (f"{indent}- --journal-{flag}", f"{indent}- {{{{ .{key} | quote }}}}")],
        "{{- if .secretName }}",
        f"{indent}- --journal-secret",
        f"{indent}- {{{{ .secretName | quote }}}}",
        "{{- end }}",
        *_retention(indent),
        "{{- else if $.Values.store.enabled }}",
        *[line for flag, value in (
            ("endpoint",
             f'"{bundledstore.store_endpoint(namespace="{{ $.Release.Namespace }}")}"'),
            ("bucket", f'"{bundledstore.STORE_BUCKET}"'),
            ("prefix", "{{ .prefix | quote }}"), ("region", "{{ .region | quote }}"))
          for line in (f"{indent}- --journal-{flag}", f"{indent}- {value}")],
        *_retention(indent),
        "{{- end }}",
        "{{- end }}"],
    # `labels: __HELM_MONITOR_LABELS__` -> the chart's own label and monitoring.labels.
    "MONITOR_LABELS": lambda indent, lead: [
        *_refused_labels(labels=".Values.monitoring.labels", what="monitoring.labels"),
        f"{indent}{lead.rstrip()}",
        *(f"{indent}  {key}: {SENTINEL.sub(lambda found: SCALARS[found[1]], value)}"
          for key, value in STANDARD_LABELS.items()),
        "{{- with .Values.monitoring.labels }}",
        f"{{{{- toYaml . | nindent {len(indent) + 2} }}}}",
        "{{- end }}"],
    # `storageClassName: __HELM_STORE_CLASS__` -> the key only when a class is named (none:
    # the cluster's default class).
    "STORE_CLASS": lambda indent, lead: [
        "{{- with .Values.store.storageClassName }}",
        f"{indent}{lead}{{{{ . | quote }}}}",
        "{{- end }}"],
}
BLOCK_LINE = re.compile(r"^(?P<indent> *)(?P<lead>- |[\w.-]+: )__HELM_(?P<name>[A-Z_]+?)__$")


def sentinel(name: str) -> str:
    """The placeholder of ``name`` (a key of SCALARS or BLOCKS)."""
    if name not in SCALARS and name not in BLOCKS:
        raise KeyError(name)
    return f"__HELM_{name}__"


def labelled(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with the standard labels on it, and on its pod template, if any, those
    that stay the same from one chart version to the next (a version on a pod template
    would restart its pods at every upgrade: the store's, which is Recreate, with a pause
    of the journals). Its own labels win; a selector is never touched (immutable in a
    Deployment)."""
    document = copy.deepcopy(document)
    metadata = document.get("metadata")
    if isinstance(metadata, dict) and not isinstance(metadata.get("labels"), str):
        metadata["labels"] = {**STANDARD_LABELS, **metadata.get("labels", {})}
    pod = document.get("spec", {}).get("template", {}).get("metadata")
    if isinstance(pod, dict):
        pod["labels"] = {**{key: value for key, value in STANDARD_LABELS.items()
                            if key not in VERSIONED_LABELS}, **pod.get("labels", {})}
    return document


def template(documents: list[dict[str, Any]]) -> str:
    """The documents as a Helm template, each labelled: dumped like ``manifests/``,
    sentinels replaced."""
    documents = [labelled(d) for d in documents]
    text = yaml.safe_dump_all(documents, sort_keys=False, width=100)
    text = text.replace("{{", '{{ "{{" }}')  # literal braces stay literal under Helm
    lines: list[str] = []
    for line in text.splitlines():
        block = BLOCK_LINE.match(line)
        if block and block["name"] in BLOCKS:
            lines.extend(BLOCKS[block["name"]](block["indent"], block["lead"]))
        else:
            lines.append(SENTINEL.sub(lambda found: SCALARS[found[1]], line))
    result = "\n".join(lines) + "\n"
    if "__HELM_" in result:
        raise ValueError(f"a sentinel was left unreplaced: {result[result.index('__HELM_'):][:60]}")
    return result
