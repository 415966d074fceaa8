"""``make faults``: fault scenarios played against the operator, counted, not timed.

On a local control plane of its own WITH its node (``tests/support/localnode.running``:
the node's lock is held, so it waits for no other node but fails fast if one runs), with
agentrun installed as the tests install it, each scenario is played ``--count`` times, each
play in a fresh namespace with an operator process of its own, and its invariants checked
after it (the scenario's module says which). It prints a table scenario x count x
violations, the violations themselves, and each play's figures, and stops by itself:

    make faults                                     # --count 3 --slots 10
    .venv/bin/python bench/faults.py --count 1 --slots 4
    .venv/bin/python bench/faults.py --write docs/benchmarks.md   # also that file's section

Scenarios (issue 12, item 2; the others are still to come):
- ``paused-apiserver``: the API server (with its etcd) SIGSTOPped for ``--pause`` seconds,
  longer than the ``--lease``, then SIGCONTed, with ``--slots`` real SDK workers on the
  node (``tests/support/pausedserver.py``).

Nothing is written to the repository unless ``--write`` names a file; there the section
``## Faults`` is replaced (or appended), with the machine, the commit and the date. The exit
status is 1 when any play had a violation.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "support"))

import kubernetes  # noqa: E402
import pausedserver  # noqa: E402
from clusters import Cluster  # noqa: E402
from effectowner import EffectOwner  # noqa: E402
from faults import apiserver  # noqa: E402
from images import project_image  # noqa: E402
from localnode import running  # noqa: E402
from operators import OperatorProcess, install_for_tests  # noqa: E402
from provenance import machine_commit_date  # noqa: E402
from scenarios import Scenario  # noqa: E402
from waiting import wait_for, wait_for_default_service_account  # noqa: E402

from agentrun.api import names  # noqa: E402

SECTION = "## Faults"
NAMESPACE_GONE_SECONDS = 120.0
# Kubernetes 1.37's node-monitor grace period is 50 s: a longer pause would also have the
# node marked NotReady (another scenario); keep a margin for the kubelet's next report.
MAX_PAUSE_SECONDS = 40.0


@dataclass
class Tally:
    """One scenario's plays: their violations and figures."""

    scenario: str
    plays: list[pausedserver.Play] = field(default_factory=list)

    @property
    def violations(self) -> int:
        return sum(len(p.violations) for p in self.plays)


def figures(play: pausedserver.Play) -> str:
    def seconds(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} s"
    paused = seconds(play.pause.seconds if play.pause else None)
    return (f"paused {paused}; every lease renewed {seconds(play.renewed_after)} after the "
            f"resume; a run made after it claimed (Active) in {seconds(play.served_after)}; "
            f"every slot Succeeded {seconds(play.settled_after)} after the word to finish; "
            f"{play.lapsed} workers' keepers lapsed (effects paused) and resumed")


def table(tallies: list[Tally]) -> str:
    lines = ["| scenario | count | violations |", "| --- | ---: | ---: |"]
    lines += [f"| {t.scenario} | {len(t.plays)} | {t.violations} |" for t in tallies]
    lines.append("")
    for tally in tallies:
        for number, play in enumerate(tally.plays, 1):
            lines.append(f"- {tally.scenario} #{number}: {figures(play)}")
            lines += [f"  - violation: {v}" for v in play.violations]
    return "\n".join(lines)


def header(args: argparse.Namespace) -> str:
    return (f"{SECTION}\n\n{machine_commit_date()} Made by "
            f"`bench/faults.py --count {args.count} --slots {args.slots} --lease "
            f"{args.lease} --pause {args.pause:g}` (`make faults`) on a local control plane "
            f"with its node; the bounds are `tests/support/pausedserver.py`'s.\n")


def write_section(path: Path, text: str) -> None:
    """Replace the ``## Faults`` section of ``path`` (up to the next heading of that
    level or above), or append it."""
    old = path.read_text() if path.exists() else ""
    lines = old.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(SECTION)), None)
    if start is None:
        path.write_text(old.rstrip("\n") + ("\n\n" if old else "") + text + "\n")
        return
    end = next((i for i in range(start + 1, len(lines))
                if lines[i].startswith("## ") or lines[i].startswith("# ")), len(lines))
    path.write_text("\n".join([*lines[:start], *text.splitlines(), *lines[end:]]) + "\n")


def fresh_namespace(cluster: Cluster) -> str:
    core = kubernetes.client.CoreV1Api(cluster.client())
    name = f"faults-{uuid.uuid4().hex[:8]}"
    body: Any = {"metadata": {"name": name, "labels": {names.TENANT_LABEL: name}}}
    core.create_namespace(body)
    wait_for_default_service_account(cluster.client(), name)
    return name


def drop(cluster: Cluster, namespace: str) -> None:
    """Delete a play's namespace and wait until it is gone: the next play starts clean."""
    core = kubernetes.client.CoreV1Api(cluster.client())
    core.delete_namespace(namespace)

    def gone() -> bool:
        try:
            core.read_namespace(namespace)
        except kubernetes.client.ApiException as error:
            return bool(error.status == 404)
        return False
    wait_for(gone, timeout=NAMESPACE_GONE_SECONDS, message=f"namespace {namespace} gone",
             interval=0.5)


def paused_apiserver(cluster: Cluster, *, image: str, workdir: Path, number: int,
                     args: argparse.Namespace) -> pausedserver.Play:
    assert cluster.local is not None and cluster.local.node_ip
    namespace = fresh_namespace(cluster)
    owner = EffectOwner(host=cluster.local.node_ip).start()
    operator = OperatorProcess(cluster=cluster, namespace=namespace,
                               log=workdir / f"operator-{number}.log").start()
    try:
        return pausedserver.play(Scenario(cluster=cluster, namespace=namespace),
                                 apiserver=apiserver(cluster.local), image=image,
                                 owner=owner, slots=args.slots, lease_seconds=args.lease,
                                 pause_seconds=args.pause)
    finally:
        alive = operator.alive
        operator.stop()
        owner.stop()
        if not alive:
            print(f"the operator had exited:\n{operator.tail(40)}", file=sys.stderr)
        drop(cluster, namespace)


def bounded(low: int, high: int) -> Any:
    """An argparse type: an integer from ``low`` to ``high``, else a clear error."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{value} is not from {low} to {high}")
        return value
    return parse


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=bounded(1, 50), default=3,
                        help="plays of each scenario, 1 to 50 (default 3)")
    parser.add_argument("--slots", type=bounded(1, 40), default=10,
                        help="real worker pods per play, 1 to 40 (default 10)")
    parser.add_argument("--lease", type=bounded(5, 60), default=10,
                        help="the workers' lease, 5 to 60 seconds (default 10)")
    parser.add_argument("--pause", type=float, default=25.0,
                        help="seconds the API server stays stopped (default 25; more than "
                             "the lease, under the node-monitor grace period of 50 s)")
    parser.add_argument("--write", type=Path, default=None,
                        help="also replace (or append) the '## Faults' section of this file")
    args = parser.parse_args(argv)
    if not args.lease < args.pause <= MAX_PAUSE_SECONDS:
        parser.error(f"--pause must be more than --lease ({args.lease}) and at most "
                     f"{MAX_PAUSE_SECONDS:g} s (under the node-monitor grace period, 50 s)")
    started = time.monotonic()
    tally = Tally(scenario="paused-apiserver")
    with tempfile.TemporaryDirectory(prefix="agentrun-faults-") as folder:
        workdir = Path(folder)
        with running(workdir / "cluster") as (local, node):
            assert node is not None
            cluster = Cluster(kubeconfig=local.kubeconfig, kind="local", has_kubelet=True,
                              local=local, node=node)
            applied = cluster.kubectl("apply", "--server-side", "-f",
                                      str(REPO / "manifests" / "crds"))
            assert applied.returncode == 0, applied.stderr
            established = cluster.kubectl("wait", "--for=condition=Established",
                                          "--timeout=60s", "-f",
                                          str(REPO / "manifests" / "crds"))
            assert established.returncode == 0, established.stderr
            install_for_tests(cluster)
            archive = project_image()
            node.load_image(archive.path)
            for number in range(1, args.count + 1):
                tally.plays.append(paused_apiserver(cluster, image=archive.ref,
                                                    workdir=workdir, number=number, args=args))
                print(f"paused-apiserver #{number}: {len(tally.plays[-1].violations)} "
                      f"violations; {figures(tally.plays[-1])}", flush=True)
    text = header(args) + "\n" + table([tally]) + "\n"
    print(f"\n{text}\n({time.monotonic() - started:.0f} s in all)")
    if args.write is not None:
        write_section(args.write, text)
    return 1 if tally.violations else 0


if __name__ == "__main__":
    sys.exit(main())
