"""Benchmark: the operator's hot path through the sync client (in threads) vs kubernetes_asyncio.

The hot path is "read a slot, write its status under the resourceVersion read": what every
reconcile step does. Both variants do the same requests against the same cluster, with
the same concurrency, from inside one asyncio event loop (as the operator runs). Prints a
table of requests per second and latency percentiles. A benchmark, never a test:

    make cluster   # in another terminal
    .venv/bin/pip install -e ".[bench]"
    KUBECONFIG=.cluster/kubeconfig .venv/bin/python -m bench.client [--rounds 300]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import kubernetes

from agentrun import rest
from agentrun.kube import clients

GROUP, VERSION, PLURAL = "agentrun.dev", "v1alpha1", "slots"


def slot_body(name: str) -> dict[str, object]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Slot", "metadata": {"name": name},
            "spec": {"run": "bench", "node": name[-8:], "workerClass": "cpu"}}


async def measure(label: str, op: Callable[[int], Awaitable[None]], *, rounds: int,
                  concurrency: int) -> None:
    """``concurrency`` objects, each reconciled by one step at a time (as the operator does)."""
    latencies: list[float] = []
    locks = [asyncio.Lock() for _ in range(concurrency)]

    async def one(i: int) -> None:
        async with locks[i % concurrency]:
            start = time.perf_counter()
            await op(i)
            latencies.append(time.perf_counter() - start)

    begin = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(rounds)))
    total = time.perf_counter() - begin
    q = statistics.quantiles(latencies, n=100)
    print(f"| {label:<34} | {rounds / total:8.1f} | {q[49] * 1000:7.1f} | {q[94] * 1000:7.1f} |")


async def main(rounds: int, concurrency: int, namespace: str) -> None:
    import kubernetes_asyncio  # an optional dependency of the benchmark only

    api = clients.configure()
    client = rest.Rest(api)
    core = kubernetes.client.CoreV1Api(api)
    core.create_namespace({"metadata": {"name": namespace}})
    names = [f"bench-{i:08d}" for i in range(concurrency)]
    base = f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"
    for name in names:
        client.request("POST", base, body=slot_body(name))

    def sync_step(i: int) -> None:
        name = names[i % len(names)]
        found = client.request("GET", f"{base}/{name}")
        found["status"] = {"state": "Pending", "attemptCount": i}
        client.request("PUT", f"{base}/{name}/status", body=found)

    async def threaded(i: int) -> None:
        await asyncio.to_thread(sync_step, i)

    await kubernetes_asyncio.config.load_kube_config()
    async with kubernetes_asyncio.client.ApiClient() as aapi:
        custom = kubernetes_asyncio.client.CustomObjectsApi(aapi)

        async def native(i: int) -> None:
            name = names[i % len(names)]
            found = await custom.get_namespaced_custom_object(GROUP, VERSION, namespace,
                                                              PLURAL, name)
            found["status"] = {"state": "Pending", "attemptCount": i}
            await custom.replace_namespaced_custom_object_status(GROUP, VERSION, namespace,
                                                                 PLURAL, name, found)

        print(f"{rounds} read+status-write steps, concurrency {concurrency}")
        print("| client | steps/s | p50 ms | p95 ms |\n| --- | --- | --- | --- |")
        for _ in range(2):  # the second pass is the one to read: connections are warm
            await measure("sync kubernetes + asyncio.to_thread", threaded, rounds=rounds,
                          concurrency=concurrency)
            await measure("kubernetes_asyncio", native, rounds=rounds, concurrency=concurrency)
    core.delete_namespace(namespace)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    asyncio.run(main(args.rounds, args.concurrency, f"bench-{uuid.uuid4().hex[:6]}"))
