"""``make bench-renewals``: lease renewals of N real workers on the node, and what they cost.

On a local control plane of its own WITH its node (``tests/support/cluster/localnode.running``,
as ``bench/faults`` makes it), agentrun installed as the tests install it and an
operator serving a fresh namespace, ``--workers`` real workers (``agentrun-worker run``
renewing a ``--lease`` Lease around a script that idles until told to finish) are started;
once every attempt is Active and renewing, ``--window`` seconds are measured: renewTime
changes seen by a watch, the workers' audited requests (``update``/``patch`` leases and any
verb), the API server's CPU-seconds (utime+stime from /proc; it embeds etcd) and the
operator's CPU-seconds and audited requests (reads too). Each per renewal, beside the
expected rate ``workers / interval(lease)`` and the ratio measured/expected. It prints a
table and replaces (or appends) the ``## Renewals`` section of ``--write``
(default docs/benchmarks.md; ``--write -``: none), then tells the workers to exit:

    .venv/bin/python -m bench.renewals --workers 4 --window 15 --write -
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from agentrun.worker._renewals import interval
from bench.common.provenance import machine_commit_date
from bench.common.report import BENCHMARKS, write_section
from bench.faults.support import bounded

SECTION = "## Renewals"


@dataclass(frozen=True)
class Figures:
    """A window's figures, derived (pure) from its counts."""

    workers: int
    lease: int
    seconds: float
    renew_changes: int
    lease_writes: int
    worker_requests: int
    apiserver_cpu: float
    operator_cpu: float
    operator_requests: int

    @property
    def expected_rate(self) -> float:
        return self.workers / interval(duration_seconds=self.lease)

    @property
    def rate(self) -> float:
        return self.renew_changes / self.seconds if self.seconds > 0 else 0.0

    @property
    def ratio(self) -> float:
        return self.rate / self.expected_rate

    def per_renewal(self, value: float) -> float | None:
        return value / self.renew_changes if self.renew_changes else None


def number(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(f: Figures) -> str:
    rows = [
        ("renewTime changes (watch)", str(f.renew_changes)),
        ("renewals per second, measured", number(f.rate, 2)),
        (f"expected: {f.workers} / {interval(duration_seconds=f.lease):.2f} s", number(
            f.expected_rate, 2)),
        ("ratio measured / expected", number(f.ratio, 2)),
        ("workers' update/patch leases (audit)", str(f.lease_writes)),
        ("workers' requests, any audited verb, per renewal",
         number(f.per_renewal(f.worker_requests), 2)),
        ("API-server CPU-seconds per renewal (etcd inside)",
         number(f.per_renewal(f.apiserver_cpu), 4)),
        ("operator CPU-seconds in the window", number(f.operator_cpu, 2)),
        ("operator CPU-seconds per renewal", number(f.per_renewal(f.operator_cpu), 4)),
        ("operator audited requests (reads too) per renewal",
         number(f.per_renewal(f.operator_requests), 3)),
    ]
    return "\n".join(["| figure | value |", "| --- | ---: |",
                      *(f"| {a} | {b} |" for a, b in rows)])


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=bounded(1, 100), default=40,
                        help="real workers on the node, 1 to 100 (default 40)")
    parser.add_argument("--lease", type=bounded(5, 60), default=15,
                        help="the workers' lease, 5 to 60 s (default 15)")
    parser.add_argument("--window", type=bounded(5, 600), default=60,
                        help="seconds measured once all renew, 5 to 600 (default 60)")
    parser.add_argument("--write", default=str(BENCHMARKS),
                        help="the file whose '## Renewals' section is replaced ('-': none)")
    return parser.parse_args(argv)


def said(requests: dict[str, int]) -> str:
    """Audited requests by verb and resource, most first: ``get secrets 30, ...``."""
    return ", ".join(f"{k} {n}" for k, n in sorted(requests.items(), key=lambda i: (-i[1], i[0]))
                     ) or "none"


def section(args: argparse.Namespace, figures: Figures, *, pod_limit: str,
            workers: dict[str, int], operator: dict[str, int]) -> str:
    return (f"{SECTION}\n\n{machine_commit_date()} Made by `python -m bench.renewals --workers "
            f"{args.workers} --lease {args.lease} --window {args.window}` (`make "
            f"bench-renewals`) on a local control plane with its node (pod limit "
            f"{pod_limit}): {args.workers} real workers (`agentrun-worker run` renewing "
            f"around an idle script), measured over {figures.seconds:.1f} s once every "
            f"attempt was Active and renewing.\n\n{table(figures)}\n\nIn the window the "
            f"workers' audited requests were: {said(workers)}; the operator's (reads "
            f"included; periodic, not per renewal): {said(operator)}.\n")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import kubernetes

    from bench.faults.__main__ import install
    from bench.faults.support import Context, served
    from bench.renewals import support
    from tests.support.actors.workers import LOCAL_OPERATOR_USER, worker_user
    from tests.support.cluster.clusters import Cluster
    from tests.support.cluster.images import project_image
    from tests.support.cluster.localnode import running
    from tests.support.faults.processfaults import apiserver
    from tests.support.waiting import wait_for

    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentrun-renewals-") as folder:
        workdir = Path(folder)
        with running(workdir / "cluster", node=True) as (local, node):
            cluster = Cluster(kubeconfig=local.kubeconfig, kind="local", has_kubelet=True,
                              local=local, node=node)
            install(cluster)
            core = kubernetes.client.CoreV1Api(cluster.client())
            pod_limit = ",".join(str((n.status.allocatable or {}).get("pods"))
                                 for n in core.list_node().items)
            archive = project_image()
            node.load_image(archive.path)
            context = Context(cluster=cluster, image=archive.ref, workdir=workdir, args=args)
            with served(context, log="renewals-operator.log") as on:
                attempts = support.start_workers(on.scenario, image=archive.ref,
                                                 owner=on.owner, workers=args.workers,
                                                 lease=args.lease)
                watch = support.RenewWatch(on.scenario)
                watch.thread.start()
                leases = set(attempts)
                wait_for(lambda: leases <= set(watch.seen), timeout=60,
                                               message="the watch saw every lease")
                assert on.operator.process is not None
                window = support.measure(
                    on.scenario, apiserver_pid=apiserver(local).pid,
                    operator_pgid=on.operator.process.pid,
                    user=worker_user(on.scenario.namespace), operator_user=LOCAL_OPERATOR_USER,
                    seconds=args.window, watch=watch)
                watch.stopped.set()
                support.finish(on.scenario, owner=on.owner, attempts=attempts)
    figures = Figures(workers=args.workers, lease=args.lease, seconds=window.seconds,
                      renew_changes=window.renew_changes, lease_writes=window.lease_writes,
                      worker_requests=window.worker_requests,
                      apiserver_cpu=window.apiserver_cpu, operator_cpu=window.operator_cpu,
                      operator_requests=window.operator_requests)
    text = section(args, figures, pod_limit=pod_limit, workers=window.by_verb,
                   operator=window.operator_by_verb)
    print(f"\n{text}\n({time.monotonic() - started:.0f} s in all)")
    if args.write != "-":
        write_section(Path(args.write), heading=SECTION, text=text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
