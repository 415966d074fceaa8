"""``agentrun-worker ready``: the sidecar's startup probe, and the one address it serves on.

The kubelet runs the probe as an exec in the sidecar's container, every second until the
first renewal, and its CPU comes out of the sidecar's own limit while the sidecar is
starting. So it loads only the standard library's HTTP client: not the SDK, pydantic or
urllib3 (the ``agentrun-worker`` command imports those per subcommand, and
``agentrun.worker`` loads its names when first used).
"""

from __future__ import annotations

import http.client

HOST = "127.0.0.1"  # never the pod's IP: other pods must not speak for this attempt
TIMEOUT_SECONDS = 3.0  # under the probe's timeoutSeconds (5)


def ready(*, port: int) -> int:
    """0 once the sidecar on ``port`` says its first renewal succeeded, else 1."""
    connection = http.client.HTTPConnection(HOST, port, timeout=TIMEOUT_SECONDS)
    try:
        connection.request("GET", "/v1/ready")
        return 0 if connection.getresponse().status == 200 else 1
    except (OSError, http.client.HTTPException):
        return 1
    finally:
        connection.close()
