"""Kopf configured for this operator (docs/design/caches-and-queue.md).

- Our own finalizer and progress/diff-base prefix, so none of Kopf's default
  annotations is ever written to a user's object (and with event handlers only, nothing
  is written at all: the applier makes every write).
- Server-side label selectors for Pods, Leases and ConfigMaps: only ours cross the wire
  (Leases: only attempts' Leases, never a node's or a controller's).
- Every delay explicit and short: no 60 s default backoff, no 5 s consistency wait.
- Kopf posts no Events at all: ours go through our own client (``kube.events``), folded
  and rate limited; JSON logs are set up by the CLI.
- A timeout on every request Kopf makes too (it has none by default but a 300 s total):
  5 s to connect, 30 s for a list or a patch, and a watch's stream cut by the server at
  270 s and by us at 300 s, or after 70 s without a byte (Kopf's inactivity timeout), so
  a half-open connection is noticed and the watch re-established.
- Peering off: replicas elect a leader on a Lease and the others stand by
  (controller.leadership), rather than freezing each other as Kopf peers do; two
  reconciling at once would still stay correct through preconditions.
"""

from __future__ import annotations

import kopf

from agentrun.api import names

PREFIX = names.GROUP


def configure(settings: kopf.OperatorSettings) -> None:
    settings.persistence.finalizer = f"{PREFIX}/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=PREFIX, key="last-handled-configuration")
    settings.persistence.consistency_timeout = 0.0
    settings.execution.default_backoff = 1.0
    settings.posting.enabled = False
    settings.watching.label_selectors["v1", "pods"] = names.SLOT_LABEL
    settings.watching.label_selectors["v1", "configmaps"] = names.CONFIG_KIND_LABEL
    settings.watching.label_selectors["coordination.k8s.io", "v1", "leases"] = names.SLOT_LABEL
    settings.networking.connect_timeout = 5.0
    settings.networking.request_timeout = 30.0
    settings.watching.connect_timeout = 5.0
    settings.watching.server_timeout = 270
    settings.watching.client_timeout = 300
    settings.watching.reconnect_backoff = 0.5
    settings.peering.standalone = True
    settings.scanning.disabled = False
