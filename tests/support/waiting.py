"""Waiting on a condition with a timeout: the only way tests synchronise.

A test never sleeps for a fixed time hoping the world has moved; it names the
condition it needs and polls it until it holds or the timeout says what was missing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class ConditionTimeout(AssertionError):
    """The condition did not hold in time; the message says what was awaited and last seen."""


def wait_for(
    predicate: Callable[[], T | bool | None],
    *,
    timeout: float,
    message: str,
    interval: float = 0.1,
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that value.

    Exceptions from the predicate count as "not yet" (an object not created yet is a
    404), and the last one is reported if time runs out.
    """
    deadline = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            result = predicate()
            if result:
                return result  # type: ignore[return-value]
            last = result
        except Exception as error:
            last = error
        if time.monotonic() >= deadline:
            raise ConditionTimeout(
                f"timed out after {timeout}s waiting for {message}; last: {last!r}")
        time.sleep(interval)  # poll interval of this wait


def wait_for_default_service_account(api_client: object, namespace: str, *,
                                     timeout: float = 60) -> None:
    """A Pod is rejected until its namespace's ``default`` ServiceAccount exists."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api_client)
    wait_for(lambda: core.read_namespaced_service_account("default", namespace),
             timeout=timeout, message=f"ServiceAccount default in {namespace}")


def delete_namespace(api_client: object, name: str, *, timeout: float = 120) -> None:
    """Delete namespace ``name`` (absent is fine) and wait until it is gone, its objects
    with it: what a test or the demo needs before the name may be used again."""
    import kubernetes

    core = kubernetes.client.CoreV1Api(api_client)
    try:
        core.delete_namespace(name)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
    wait_for(lambda: namespace_gone(api_client, name), timeout=timeout,
             message=f"namespace {name} deleted")


def namespace_gone(api_client: object, name: str) -> bool:
    import kubernetes

    try:
        kubernetes.client.CoreV1Api(api_client).read_namespace(name)
    except kubernetes.client.ApiException as error:
        if error.status == 404:
            return True
        raise
    return False
