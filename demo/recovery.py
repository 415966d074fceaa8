"""``make demo``: the seed's recovery trace with real worker pods, told step by step.

A person claims attempt 1 of a Manual run (``alice``), its worker saves source notes in
its journal (the cluster's bundled object store) and is killed on the node; the lease
expires, the slot waits to retry; two bad reassignments are rejected (a blank reason;
``bob``, who is not the owner), alice's to ``gpu`` reopens the slot; her claim starts
attempt 2, which resumes from the saved notes, publishes the report once at the effect
owner, and the run succeeds. Each line is printed only once the object it reports says
so (never after a sleep).

- ``python -m demo.recovery`` (or ``--up``): start the control plane and its node
  (``tests/support/cluster/localnode.py``), play, tear everything down (Ctrl-C too);
- ``python -m demo.recovery --kubeconfig PATH --image REF``: play against a running
  local cluster with its node (the test's), removing what the demo created.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes

from agentrun.api import records
from agentrun.plugin.views import parse_time
from agentrun.worker import _journal as journals
from agentrun.worker import idempotency_key
from demo import stage
from tests.support.actors.effectowner import EffectOwner
from tests.support.actors.workers import agent_events, kill_when_paused, wait_pod_phase
from tests.support.cluster import helm
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.localcluster import NODE_NAME, LocalCluster
from tests.support.cluster.localnode import SOCKET, containerd_dir, running
from tests.support.cluster.nodehost import NodeUnavailable
from tests.support.plays.scenarios import Scenario, condition
from tests.support.waiting import wait_for

STEP_TIMEOUT = 150.0  # one step on a busy 2-core machine (a cold pod start included)


class Teller:
    """Prints one line per step, with the seconds since the demo started."""

    def __init__(self) -> None:
        self.started = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"{time.monotonic() - self.started:6.1f}s  {text}", flush=True)


class NodeTasks:
    """The node's containerd on this machine: what killing a container needs of
    :class:`localnode.LocalNode` (``ctr``) when the demo did not start the node."""

    def ctr(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(containerd_dir() / "ctr"), "--address", str(SOCKET),
                               "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=False, timeout=120)


ADMISSION = re.compile(r"ValidatingAdmissionPolicy '([^']+)'.*?denied request: (.*)", re.S)
LEDGER = re.compile(r"^\w+ [0-9a-f]+: (.*)$", re.S)


def said(result: subprocess.CompletedProcess[str]) -> str:
    """The plugin's answer in one line (its stdout, else its stderr), shortened to who
    decided and their words: admission's policy, or the operator's ledger entry."""
    text = " ".join((result.stdout.strip() or result.stderr.strip()).split())
    if found := ADMISSION.search(text):
        return f"admission (policy {found[1]}) says: {found[2]}"[:400]
    if found := LEDGER.match(text):
        return f"the ledger says: {found[1]}"[:400]
    return text[:400]


def plugin_ok(cluster: Cluster, *args: str, user: str, expect: int = 0) -> str:
    result = stage.plugin(cluster, *args, user=user)
    if result.returncode != expect:
        raise RuntimeError(f"kubectl agentrun {' '.join(args)} as {user}: exit "
                           f"{result.returncode}, expected {expect}: {said(result)}")
    return said(result)


def lease_expired(scenario: Scenario, name: str) -> tuple[datetime, int] | None:
    """(last renewal, duration) once ``name``'s lease has run out, else None."""
    lease = scenario.lease(name)
    if lease is None:
        return None
    spec = lease["spec"]
    renewed = parse_time(spec.get("renewTime") or spec.get("acquireTime"))
    duration = int(spec.get("leaseDurationSeconds") or 0)
    if renewed is None or datetime.now(UTC) < renewed + timedelta(seconds=duration):
        return None
    return renewed, duration


def steps_of(events: list[dict[str, Any]]) -> dict[str, str]:
    return {e["key"]: e["status"] for e in events if e["event"] == "step"}


def trace(cluster: Cluster, node: Any, owner: EffectOwner | None, owner_url: str,
          tell: Teller) -> str:
    """The recovery trace, step by step; the run's slot."""
    scenario = Scenario(cluster=cluster, namespace=stage.NAMESPACE)
    slot = scenario.slot_name_eventually(stage.RUN, stage.NODE, timeout=STEP_TIMEOUT)
    scenario.wait_state(slot, "Ready", timeout=STEP_TIMEOUT)
    tell(f"alice's run {stage.RUN} is pinned; slot {slot} is Ready and waits for a claim "
         "(claimPolicy Manual)")

    plugin_ok(cluster, "claim", slot, user=stage.OWNER)
    first, second = f"{slot}-1", f"{slot}-2"
    active = scenario.wait_slot(slot, lambda s: s.get("status", {}).get("activeWorker") == first,
                                message=f"{first} active", timeout=STEP_TIMEOUT)["status"]
    pod = wait_pod_phase(scenario, first, {"Running"}, timeout=STEP_TIMEOUT)
    tell(f"attempt 1 claimed by {active['attempts'][-1].get('ownerActor')}: pod {first} "
         f"running on {pod['spec']['nodeName']} ({active['launchSpec']['name']})")

    pinned = scenario.agentrun(stage.RUN)["status"]["pinned"]["journal"]
    journal = stage.journal(pinned, slot=slot)

    def saved() -> tuple[journals.Head, dict[str, records.Record]] | None:
        lease = scenario.lease(first)
        head = journals.Head.on_lease(lease) if lease else None
        found = journal.chain(attempt=1, head=head)[0] if head else {}
        return (head, found) if head and set(stage.SAVED) <= set(found) else None
    head, notes = wait_for(saved, timeout=STEP_TIMEOUT,
                           message=f"source notes in the journal of {first}")
    tell(f"the worker saved its source notes in its journal: {', '.join(sorted(notes))} "
         f"({notes[stage.SAVED[0]].kind}; {head.seq} commits in bucket {pinned['bucket']} "
         f"under {pinned['prefix']}, its head on Lease {first})")

    ended = kill_when_paused(scenario, node, first, point=stage.PAUSE_POINT,
                             timeout=STEP_TIMEOUT)
    (status,) = ended["status"]["containerStatuses"]
    tell(f"the worker died: its container was killed on the node (pod {first} "
         f"{ended['status']['phase']}, exit {status['state']['terminated']['exitCode']})")

    renewed, duration = wait_for(lambda: lease_expired(scenario, first), timeout=STEP_TIMEOUT,
                                 message=f"lease {first} expired")
    tell(f"lease {first} expired: last renewed {renewed:%H:%M:%S}, {duration} s lease, "
         "no worker renews it")

    waiting = scenario.wait_state(slot, "RetryWait", timeout=STEP_TIMEOUT)["status"]
    last = waiting["attempts"][-1]
    tell(f"slot RetryWait: attempt 1 {last['outcome']} (exit {last.get('exitCode')}), "
         f"prior worker {waiting.get('priorWorker')}")

    blank = plugin_ok(cluster, "reassign", slot, "--class", "gpu", "--reason", " ",
                      user=stage.OWNER, expect=1)
    tell(f"alice's reassignment with a blank reason is rejected: {blank}")
    bob = plugin_ok(cluster, "reassign", slot, "--class", "gpu", "--reason",
                    "I can take this one", user=stage.OTHER, expect=1)
    tell(f"bob's reassignment is rejected (he is not the owner): {bob}")
    accepted = plugin_ok(cluster, "reassign", slot, "--class", "gpu", "--reason",
                         "the cpu worker died mid-research; retry on gpu", user=stage.OWNER)
    tell(f"alice reassigns the slot to gpu: {accepted}")

    reopened = scenario.wait_slot(slot, lambda s: condition(s.get("status", {}),
                                                             "Reopened") == "True",
                                  message="slot Reopened", timeout=STEP_TIMEOUT)["status"]
    pods = scenario.pods()
    if second in pods or "activeWorker" in reopened:
        raise RuntimeError(f"a worker started before any claim: pods {pods}")
    tell(f"slot reopened on {reopened['launchSpec']['name']} ({reopened['state']}), no "
         f"worker yet: pods {', '.join(pods)}")

    plugin_ok(cluster, "claim", slot, user=stage.OWNER)
    pod2 = wait_pod_phase(scenario, second, {"Running", "Succeeded"}, timeout=STEP_TIMEOUT)
    tell(f"alice claims again: attempt 2, pod {second} on {pod2['spec']['nodeName']} "
         f"({scenario.slot(slot)['status']['launchSpec']['name']})")

    def finished() -> list[dict[str, Any]] | None:
        events = agent_events(scenario, second)
        return events if events and events[-1]["event"] == "finished" else None
    events = wait_for(finished, timeout=STEP_TIMEOUT, message=f"attempt 2 ({second}) finished")
    steps = steps_of(events)
    skipped = [k for k, v in steps.items() if v == "skipped"]
    ran = [k for k, v in steps.items() if v != "skipped"]
    tell(f"attempt 2 started from the saved notes: skipped {', '.join(skipped) or 'nothing'}; "
         f"ran {', '.join(ran)}")

    run = scenario.agentrun(stage.RUN)
    key = idempotency_key(run_uid=run["metadata"]["uid"], slot=slot, key="publish")
    if owner is not None:
        wait_for(lambda: owner.applied.get(key), timeout=STEP_TIMEOUT,
                 message=f"the owner applied {key}")
        sent = ", ".join(f"{r.method} token {r.token}" for r in owner.posts(key=key))
        tell(f"the report is published once: the owner applied it {owner.applied[key]} "
             f"time(s) ({sent}; key {key[:16]}...)")
    else:
        tell(f"the report is published (key {key[:16]}...) at the owner {owner_url}")

    done = wait_for(lambda: condition((r := scenario.agentrun(stage.RUN)).get("status", {}),
                                      "Succeeded") == "True" and r, timeout=STEP_TIMEOUT,
                    message=f"run {stage.RUN} Succeeded")
    outcomes = [a["outcome"] for a in scenario.slot(slot)["status"]["attempts"]]
    tell(f"the run Succeeded (uid {done['metadata']['uid'][:8]}); attempts: "
         f"{', '.join(outcomes)}")
    return slot


def play(cluster: Cluster, node: Any, *, image: str, owner_url: str | None,
         node_ip: str, keep_cluster_objects: bool, take_ownership: bool) -> int:
    """Stage, play, show the tree and the history, clean up the namespace."""
    tell = Teller()
    for change in stage.CHANGES:
        print(f"demo: {change}")
    owner = None if owner_url else EffectOwner(host=node_ip).start()
    url = owner_url or (owner.url if owner else "")
    print(f"demo: publish to the demo's effect owner at {url} (the bindings' publish.url)")
    print(f"demo: worker and operator image {image}", flush=True)
    try:
        with stage.install_operator(cluster, image=image,
                                    take_ownership=take_ownership) as release:
            pods = [p["metadata"]["name"] for p in release.wait_ready()]
            leader = wait_for(release.leader, timeout=60, message="a replica leading")
            tell(f"operator installed with the Helm chart (release {helm.RELEASE}): pods "
                 + " and ".join(f"{helm.NAMESPACE}/{name} ("
                                f"{'leading' if name == leader else 'standing by'})"
                                for name in pods)
                 + f" Ready, serving {stage.NAMESPACE}")
            try:
                stage.stage(cluster, image=image, owner_url=url)
                slot = trace(cluster, node, owner, url, tell)
                print("\n$ kubectl agentrun status " + stage.RUN)
                print(stage.plugin(cluster, "status", stage.RUN, user=stage.OWNER).stdout)
                print(f"$ kubectl agentrun history {slot}")
                print(stage.plugin(cluster, "history", slot, user=stage.OWNER).stdout,
                      flush=True)
            finally:
                if not keep_cluster_objects:
                    stage.remove_namespace(cluster)
    finally:
        if owner is not None:
            owner.stop()
    tell("demo: done")
    return 0


def up(workdir: Path, *, started: float) -> int:
    """``--up``: the control plane and its node (and the object store on it, where the
    journals will live) in ``workdir`` for the demo's length."""
    with running(workdir, with_store=True) as (local, node):
        assert node is not None
        image = node.load_project_image()
        cluster = Cluster(kubeconfig=local.kubeconfig, kind="local", has_kubelet=True,
                          local=local, node=node)
        print(f"demo: cluster and node ready in {time.monotonic() - started:.1f}s", flush=True)
        return play(cluster, node, image=image, owner_url=None, node_ip=node.network.node_ip,
                    keep_cluster_objects=True, take_ownership=False)


def node_ip_of(api: kubernetes.client.ApiClient) -> str:
    node = kubernetes.client.CoreV1Api(api).read_node(NODE_NAME)
    (address,) = [a.address for a in node.status.addresses if a.type == "InternalIP"]
    return str(address)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--up", action="store_true",
                      help="start the control plane and node, play, tear down (default)")
    mode.add_argument("--kubeconfig", type=Path,
                      help="a running local cluster's kubeconfig (its folder holds bin/kubectl)")
    parser.add_argument("--image", help="with --kubeconfig: the project image loaded on the node")
    parser.add_argument("--owner-url", help="with --kubeconfig: an effect owner to publish to "
                        "(default: the demo's own, on the node bridge)")
    args = parser.parse_args(argv)
    if args.kubeconfig and not args.image:
        parser.error("--kubeconfig needs --image (the project image the node has loaded)")

    def stop(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # the same cleanup as Ctrl-C

    signal.signal(signal.SIGTERM, stop)
    # Ctrl-C cleans up even where SIGINT came in ignored (a shell's background job)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.monotonic()
    try:
        if args.kubeconfig:
            kubeconfig = args.kubeconfig.resolve()
            local = LocalCluster(workdir=kubeconfig.parent, binary=Path(sys.executable))
            cluster = Cluster(kubeconfig=kubeconfig, kind="local", has_kubelet=True, local=local)
            local.node_ip = node_ip_of(cluster.client())
            code = play(cluster, NodeTasks(), image=args.image, owner_url=args.owner_url,
                        node_ip=local.node_ip, keep_cluster_objects=False,
                        take_ownership=True)
        else:
            workdir = Path(tempfile.mkdtemp(prefix="agentrun-demo-"))
            print("demo: starting the local control plane and its node "
                  f"(in {workdir}; removed at the end)", flush=True)
            try:
                code = up(workdir, started=started)
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    except KeyboardInterrupt:
        print("demo: interrupted; cleaned up", file=sys.stderr)
        return 130
    except NodeUnavailable as why:  # e.g. another node on this machine (one per machine)
        print(f"demo: cannot start the local node: {why}", file=sys.stderr)
        return 1
    print(f"demo: wall time {time.monotonic() - started:.1f}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
