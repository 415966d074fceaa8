"""A worker process holding an attempt's pod-bound token, with no pod around it.

:data:`PRELUDE` is the head of a ``python -c`` script: it reads :func:`given`'s JSON from
``argv[1]`` and makes ``worker``, the SDK's ``Worker`` of that attempt with a journal, as
``Worker.from_env`` would in the attempt's pod (which has the environment and the mounts a
test or a benchmark process has not). The script's own lines follow it. Why a process:
what is measured or killed (SIGTERM, peak RSS) must be the worker's alone.
"""

from __future__ import annotations

import json
from typing import Any

PRELUDE = """
import hashlib, json, sys, threading
from pathlib import Path
import kubernetes
from agentrun import rest
from agentrun.worker import _journal as journal, _keeper as keeper, _renewer as renewer
from agentrun.worker._context import Context
from agentrun.worker._sdk import Worker
given = json.loads(sys.argv[1])
configuration = kubernetes.client.Configuration()
configuration.host, configuration.ssl_ca_cert = given["host"], given["ca"]
configuration.api_key = {"authorization": "Bearer " + given["token"]}
api = rest.Rest(kubernetes.client.ApiClient(configuration))
context = Context(namespace=given["namespace"], run=given["run"], run_uid="uid-1",
                  slot=given["slot"], node="n", attempt=given.get("attempt", 1),
                  fencing_token=given.get("attempt", 1),
                  lease=given["lease"], config_dir=Path("/nonexistent"), pinned={})
worker = Worker(context=context, api=api, commit_delay=given["delay"],
                journal=journal.Location(**given["location"]),
                keeper=keeper.Keeper(renewer=renewer.Renewer(
                    api=api, namespace=given["namespace"], lease=given["lease"],
                    identity=given["lease"])))
"""


def given(*, host: str, ca: str, token: str, namespace: str, run: str, slot: str, lease: str,
          endpoint: str, bucket: str, prefix: str, delay: float = 0.25,
          **extra: Any) -> str:
    """The JSON :data:`PRELUDE` reads (``extra``: the script's own, as ``given[...]``)."""
    return json.dumps({"host": host, "ca": ca, "token": token, "namespace": namespace,
                       "run": run, "slot": slot, "lease": lease, "delay": delay,
                       "location": {"endpoint": endpoint, "bucket": bucket, "prefix": prefix},
                       **extra})
