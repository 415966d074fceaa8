"""Connecting to the API server: a kubeconfig context, or the pod's service account."""

from __future__ import annotations

import kubernetes


def configure(*, context: str | None = None) -> kubernetes.client.ApiClient:
    """An API client for ``context`` of $KUBECONFIG (or ~/.kube/config), else in-cluster.

    The same configuration becomes the kubernetes library's default, which Kopf's
    ``login_via_client`` then uses, so the operator's watches and writes share one identity.
    """
    configuration = kubernetes.client.Configuration()
    try:
        kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
            context=context, client_configuration=configuration)
    except kubernetes.config.ConfigException:
        if context is not None:
            raise
        kubernetes.config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=configuration)
    kubernetes.client.Configuration.set_default(configuration)
    return kubernetes.client.ApiClient(configuration)
