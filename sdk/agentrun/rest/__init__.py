"""The Kubernetes API server over plain REST, for the worker SDK and the operator alike.

Paths in, JSON dicts out (:class:`Rest`); where the server is and how to log in
(:class:`Connection`, :func:`connect`: a kubeconfig or the pod's service account); the
process's one rate limit (:mod:`agentrun.rest.throttle`) and its clocks
(:mod:`agentrun.rest.clocks`). Needs only urllib3 and PyYAML, so a worker image carries
neither the ``kubernetes`` package nor aiohttp.
"""

from agentrun.rest._client import (
    DEFAULT_CONNECTIONS,
    DEFAULT_TIMEOUT,
    JSON,
    MERGE_PATCH,
    SLOW_ANSWER,
    ApiError,
    Health,
    Object,
    Observe,
    Rest,
    Timeout,
    namespaced,
    unhealthy,
)
from agentrun.rest._connections import (
    ConfigError,
    Connection,
    NoContext,
    connect,
    from_kubeconfig,
    in_cluster,
    of,
)

__all__ = [
    "DEFAULT_CONNECTIONS",
    "DEFAULT_TIMEOUT",
    "JSON",
    "MERGE_PATCH",
    "SLOW_ANSWER",
    "ApiError",
    "ConfigError",
    "Connection",
    "Health",
    "NoContext",
    "Object",
    "Observe",
    "Rest",
    "Timeout",
    "connect",
    "from_kubeconfig",
    "in_cluster",
    "namespaced",
    "of",
    "unhealthy",
]
