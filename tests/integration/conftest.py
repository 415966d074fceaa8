"""Integration fixtures of agentrun itself: its CRDs installed on the session's cluster.

The cluster, the admin client and fresh namespaces come from ``tests/conftest.py``.
"""

from __future__ import annotations

import kubernetes
import pytest

from tests.support.cluster.clusters import Cluster
from tests.support.cluster.crds import apply_crds


@pytest.fixture(scope="session")
def crds(api_client: kubernetes.client.ApiClient, cluster: Cluster) -> list[str]:
    """Apply ``crds/agentrun.dev_*.yaml`` (not the folder's kustomization.yaml); wait until
    each is Established and served; names. Attached to make test's cluster, the driver
    applied them before its workers started: a worker only waits (concurrent replaces of
    one CRD would conflict)."""
    return apply_crds(api_client, write=not cluster.prepared)
