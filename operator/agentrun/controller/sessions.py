"""Kopf's HTTP session: the one it uses for all it sends, built as Kopf builds its own, on
our client's identity and rate limit."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import aiohttp
import kopf
import kubernetes

from agentrun.kube import clients
from agentrun.rest import throttle


def login(*, context: str | None, bucket: throttle.Bucket | None) -> kopf.AiohttpSession:
    """Kopf's HTTP session, as Kopf builds its own, plus the rate limit's hook.

    Kopf uses the session a login handler returns (``kopf.AiohttpSession``) for all it
    sends: lists, watches, and anything else. Built from the same kubeconfig context as our
    client, so both act with one identity, and with :func:`trace_config`, so both
    draw on one bucket. Called from Kopf's (async) login handler: a session belongs to the
    running event loop.
    """
    clients.configure(context=context)
    config = kubernetes.client.Configuration.get_default_copy()
    header = (config.get_api_key_with_prefix("BearerToken")
              or config.get_api_key_with_prefix("authorization") or "")
    scheme, _, token = header.partition(" ")
    info = kopf.ConnectionInfo(
        server=config.host, ca_path=config.ssl_ca_cert, insecure=not config.verify_ssl,
        scheme=scheme if token else None, token=token or scheme or None,
        certificate_path=config.cert_file, private_key_path=config.key_file)
    session = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ssl=info.as_ssl_context()),
        headers=info.as_http_headers(),
        trace_configs=[trace_config(bucket)] if bucket is not None else None)
    return kopf.AiohttpSession(server=info.server, aiohttp_session=session)


def trace_config(bucket: throttle.Bucket) -> aiohttp.TraceConfig:
    """An aiohttp hook that takes a token before each request of the session it is in."""

    async def on_request_start(session: aiohttp.ClientSession, context: SimpleNamespace,
                               params: Any) -> None:
        await bucket.wait()

    config = aiohttp.TraceConfig()
    config.on_request_start.append(on_request_start)
    return config
