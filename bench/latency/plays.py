"""The latency benchmark's plays: the kubelet's and the worker's part, and the floor.

:class:`Plays` sets up, in one control plane, the operator's namespace (runs of
``nodes`` nodes, ``retry.maxAttempts`` 2 with no backoff, a LaunchSpec with the minimum
lease and a start deadline past the bench), an Indexed Job's namespace and the floor's,
then plays the phases one after the other, each staggered: first failures, last failures,
reassignments, the floor, recoveries. Figures are seconds, from the watches' receipt times.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import kubernetes

from agentrun.api import names
from bench.latency.support import (
    Feed,
    attempt_outcome,
    indexes,
    ledger_outcome,
    pod_phase,
    wait_first,
)
from bench.loop.support import IMAGE, Bench, workflow_configs
from tests.support.cluster import audit

GROUP, VERSION = "agentrun.dev", "v1alpha1"
LEASE_SECONDS = 5  # the CRD's minimum
INDEX = "batch.kubernetes.io/job-completion-index"
Object = dict[str, Any]


def run_body(index: int) -> Object:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "AgentRun",
            "metadata": {"name": f"run-{index:04d}"},
            "spec": {"package": {"name": "bench"}, "workflow": {"name": "bench"},
                     "bindings": {"name": "bench"}, "claimPolicy": "Automatic",
                     "retry": {"maxAttempts": 2, "backoff": {"initialSeconds": 0}}}}


def launch_spec_body() -> Object:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "LaunchSpec",
            "metadata": {"name": "bench-workers"},
            "spec": {"claim": {"workerClasses": ["cpu"]},
                     "lease": {"durationSeconds": LEASE_SECONDS},
                     "startDeadlineSeconds": 86400,
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "worker", "image": IMAGE}]}}}}


def job_body(*, units: int) -> Object:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "bench"},
            "spec": {"completionMode": "Indexed", "completions": units, "parallelism": units,
                     "backoffLimitPerIndex": 1, "podReplacementPolicy": "Failed",
                     "template": {"spec": {"restartPolicy": "Never", "containers": [
                         {"name": "worker", "image": IMAGE}]}}}}


def failed_status() -> Object:
    """What a kubelet writes when the container exits 1: the phase, the container's
    terminated state with its finish time (the Job controller's backoff counts from it)."""
    at = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"status": {"phase": "Failed", "containerStatuses": [{
        "name": "worker", "ready": False, "restartCount": 0, "image": IMAGE, "imageID": "",
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "startedAt": at,
                                 "finishedAt": at}}}]}}


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def scrubbed(obj: Object, *, namespace: str, name: str | None = None) -> Object:
    """A copy to create elsewhere: no server fields, no owners (they live in another
    namespace)."""
    body = copy.deepcopy(obj)
    meta = body["metadata"]
    kept = {k: meta[k] for k in ("labels", "annotations") if k in meta}
    body["metadata"] = {"name": name or meta["name"], "namespace": namespace, **kept}
    body.pop("status", None)
    return body


class Plays:
    def __init__(self, *, bench: Bench, count: int, nodes: int, every: float,
                 alone_every: float, flags: list[str]) -> None:
        self.alone_every = alone_every
        self.bench, self.count, self.nodes, self.every = bench, count, nodes, every
        self.flags = flags  # the operator's flags: [] for its documented defaults
        self.figures: dict[str, list[float]] = {k: [] for k in (
            "op_detect_1", "op_detect_2", "job_detect", "op_replace", "job_replace",
            "reassign_ledger", "reassign_pod", "floor_pod", "recovery")}
        self.lost: Counter[str] = Counter()
        self.reassign_writes: dict[str, float] = {}
        self.floor_sequence: list[str] = []
        self.reassign_reads = 0.0
        self.feeds: list[Feed] = []
        self.process: Any = None
        self.coordination = kubernetes.client.CoordinationV1Api(bench.api)

    # --- set-up ---------------------------------------------------------------------
    def feed(self, call: Any, *args: Any) -> Feed:
        feed = Feed(call=call, args=args)
        feed.start()
        self.feeds.append(feed)
        return feed

    def stop(self) -> None:
        for feed in self.feeds:
            feed.stop()
        if self.process is not None:
            self.bench.stop(self.process)

    def set_up(self) -> None:
        b = self.bench
        self.op, self.job, self.floor = (b.namespace("lat-op"), b.namespace("lat-job"),
                                         b.namespace("lat-floor"))
        self.op_pods = self.feed(b.core.list_namespaced_pod, self.op)
        self.slots = self.feed(b.custom.list_namespaced_custom_object, GROUP, VERSION,
                               self.op, "slots")
        self.leases = self.feed(self.coordination.list_namespaced_lease, self.op)
        self.job_pods = self.feed(b.core.list_namespaced_pod, self.job)
        self.jobs = self.feed(b.batch.list_namespaced_job, self.job)
        self.floor_pods = self.feed(b.core.list_namespaced_pod, self.floor)
        for body in workflow_configs(nodes=self.nodes):
            b.core.create_namespaced_config_map(self.op, body)
        b.custom.create_namespaced_custom_object(GROUP, VERSION, self.op, "launchspecs",
                                                 launch_spec_body())
        self.process = b.operator(self.op, flags=self.flags)
        b.wait_operator_up(self.process, self.op)
        for index in range(self.count // self.nodes):
            b.custom.create_namespaced_custom_object(GROUP, VERSION, self.op, "agentruns",
                                                     run_body(index))
        b.batch.create_namespaced_job(self.job, job_body(units=self.count))
        b.wait_pods(self.op, self.count, timeout=max(180.0, self.count * 1.0))
        b.wait_active(self.op, self.count, timeout=max(120.0, self.count * 0.5))
        b.wait_pods(self.job, self.count, timeout=max(120.0, self.count * 0.5))
        self.slot_names = sorted(n for n in self.slots.names())[:self.count]
        self.job_first = self.job_pod_by_index()

    def job_pod_by_index(self, *, exclude: frozenset[str] = frozenset()) -> dict[int, str]:
        found: dict[int, str] = {}
        for name in self.job_pods.names():
            events = self.job_pods.events(name)
            labels = events[0].obj["metadata"].get("labels") or {}
            if name not in exclude and INDEX in labels:
                found[int(labels[INDEX])] = name
        return found

    # --- the kubelet's and the worker's part ----------------------------------------
    def fail_pod(self, namespace: str, pod: str) -> None:
        self.bench.core.patch_namespaced_pod_status(pod, namespace, failed_status())

    def release(self, lease: str) -> None:
        """The worker's exit: its Lease released before the pod ends, as the SDK's worker
        releases it (``agentrun.dev/released``, its last write)."""
        self.coordination.patch_namespaced_lease(lease, self.op, {
            "metadata": {"annotations": {names.RELEASED_ANNOTATION: now_text()}}})

    def pace(self, started: float, step: int, *, every: float | None = None) -> None:
        """Hold the stagger: event ``step`` at ``started + step * every``."""
        delay = started + step * (every or self.every) - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # the benchmark's pacing, not synchronisation

    # --- the phases -----------------------------------------------------------------
    def run(self) -> None:
        self.set_up()
        self.failures(number=1)
        self.failures(number=2)
        self.reassignments()
        self.floor_play()
        self.recoveries()

    def failures(self, *, number: int) -> None:
        """Fail attempt ``number`` of every slot and the Job's current pod of every index,
        interleaved (each system gets one failure every ``every`` seconds)."""
        job_pods = self.job_first if number == 1 else self.job_second
        started = time.monotonic()
        for step, slot in enumerate(self.slot_names):
            pod = f"{slot}-{number}"
            self.release(pod)
            self.fail_pod(self.op, pod)
            self.pace(started, 2 * step + 1)
            self.fail_pod(self.job, job_pods[step])
            self.pace(started, 2 * step + 2)
        timeout = 120.0 + self.count * self.every
        for step, slot in enumerate(self.slot_names):
            pod = f"{slot}-{number}"
            failed = self.first_or_lost(self.op_pods, pod, "op pod failed",
                                        lambda o: pod_phase(o) == "Failed", 0.0, timeout)
            if failed is None:
                continue
            self.record(f"op_detect_{number}", failed, self.slots, slot,
                        lambda o, n=number: attempt_outcome(o, n) is not None, timeout)
            if number == 1:
                self.record("op_replace", failed, self.op_pods, f"{slot}-2",
                            lambda _o: True, timeout)
            jpod = job_pods[step]
            jfailed = self.first_or_lost(self.job_pods, jpod, "job pod failed",
                                         lambda o: pod_phase(o) == "Failed", 0.0, timeout)
            if jfailed is None:
                continue
            if number == 2:
                self.record("job_detect", jfailed, self.jobs, "bench", lambda o, i=step:
                            i in indexes((o.get("status") or {}).get("failedIndexes")),
                            timeout)
        if number == 1:
            self.job_second = self.wait_job_replacements(timeout)
            for step in range(self.count):
                jfailed = self.job_pods.first(self.job_first[step],
                                              lambda o: pod_phase(o) == "Failed")
                second = self.job_second.get(step)
                added = self.job_pods.first(second, lambda _o: True) if second else None
                if jfailed is None or added is None:
                    self.lost["job replacement"] += 1
                else:
                    self.figures["job_replace"].append(added - jfailed)

    def wait_job_replacements(self, timeout: float) -> dict[int, str]:
        deadline = time.monotonic() + timeout
        first = frozenset(self.job_first.values())
        while time.monotonic() < deadline:
            second = self.job_pod_by_index(exclude=first)
            if len(second) >= self.count:
                return second
            time.sleep(0.2)  # polling this process's watch memory
        return self.job_pod_by_index(exclude=first)

    def first_or_lost(self, feed: Feed, name: str, what: str, predicate: Any, after: float,
                      timeout: float) -> float | None:
        try:
            return wait_first(feed, name, predicate, after=after, timeout=timeout,
                              message=f"{what} {name}")
        except TimeoutError:
            self.lost[what] += 1
            return None

    def record(self, figure: str, since: float, feed: Feed, name: str, predicate: Any,
               timeout: float) -> None:
        at = self.first_or_lost(feed, name, figure, predicate, since, timeout)
        if at is not None:
            self.figures[figure].append(at - since)

    def reassign_patch(self, slot: str, request_id: str) -> Object:
        run = slot.rsplit("-", 1)[0]
        return {"metadata": {"annotations": {
            "agentrun.dev/reassign-id": request_id, "agentrun.dev/reassign-run": run,
            "agentrun.dev/reassign-worker-class": "cpu",
            "agentrun.dev/reassign-reason": "latency benchmark"}}}

    def reassignments(self) -> None:
        """Each exhausted slot reassigned by admin (as a person would with kubectl
        annotate: the same merge patch, through the client)."""
        since = datetime.now(UTC)
        sent: list[tuple[str, str, float]] = []
        started = time.monotonic()
        for step, slot in enumerate(self.slot_names):
            request_id = uuid.uuid4().hex[:16]
            at = time.monotonic()
            self.bench.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.op, "slots", slot, self.reassign_patch(slot, request_id))
            sent.append((slot, request_id, at))
            self.pace(started, step + 1, every=self.alone_every)
        timeout = 120.0 + self.count * self.alone_every
        for slot, request_id, at in sent:
            self.record("reassign_ledger", at, self.slots, slot,
                        lambda o, r=request_id: ledger_outcome(o, r) == "Accepted", timeout)
            self.record("reassign_pod", at, self.op_pods, f"{slot}-3", lambda _o: True,
                        timeout)
        self.bench.settle()
        until = datetime.now(UTC)
        writes = [w for w in audit.writes(self.bench.cluster.audit_log, namespace=self.op,
                                          since=since)
                  if w.user == "operator" and w.code < 400]
        self.reassign_writes = {k: n / self.count for k, n in Counter(
            f"{w.verb} {w.resource}" + (f"/{w.subresource}" if w.subresource else "")
            for w in writes).items()}
        self.reassign_reads = self.bench.audited_reads(user="operator", since=since,
                                                       until=until) / self.count

    def floor_play(self) -> None:
        """A bare client doing a reassignment's writes in order, as fast as it can: the
        person's annotation, the ledger (slot status), the annotations removed (slot), the
        claim (slot status), the Lease, the Pod; each on a copy of an operator slot."""
        b = self.bench
        self.floor_sequence = ["patch slots (the annotation)", "patch slots/status (ledger)",
                               "patch slots (annotations removed)",
                               "patch slots/status (claim)", "create leases", "create pods"]
        copies = []
        for slot in self.slot_names:
            obj = b.custom.get_namespaced_custom_object(GROUP, VERSION, self.op, "slots", slot)
            body = scrubbed(obj, namespace=self.floor)
            created = b.custom.create_namespaced_custom_object(GROUP, VERSION, self.floor,
                                                               "slots", body)
            status = copy.deepcopy(obj.get("status") or {})
            b.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.floor, "slots", slot, {"status": status})
            pod = self.op_pods.events(f"{slot}-3")[-1].obj
            lease = self.leases.events(f"{slot}-3")[-1].obj
            copies.append((slot, status, created, pod, lease))
        started = time.monotonic()
        sent: list[tuple[str, float]] = []
        for step, (slot, status, _created, pod, lease) in enumerate(copies):
            request_id = uuid.uuid4().hex[:16]
            at = time.monotonic()
            b.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.floor, "slots", slot, self.reassign_patch(slot, request_id))
            b.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.floor, "slots", slot, {"status": {"commands": (
                    status.get("commands") or [])}})
            b.custom.patch_namespaced_custom_object(
                GROUP, VERSION, self.floor, "slots", slot, {"metadata": {"annotations": {
                    k: None for k in self.reassign_patch(slot, "")["metadata"]["annotations"]
                }}})
            b.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, self.floor, "slots", slot, {"status": {
                    "attempts": status.get("attempts") or [], "state": status.get("state")}})
            self.coordination.create_namespaced_lease(
                self.floor, scrubbed(lease, namespace=self.floor))
            b.core.create_namespaced_pod(self.floor, scrubbed(pod, namespace=self.floor))
            sent.append((f"{slot}-3", at))
            self.pace(started, step + 1, every=self.alone_every)
        for name, at in sent:
            self.record("floor_pod", at, self.floor_pods, name, lambda _o: True, 60.0)

    def recoveries(self) -> None:
        """Attempt 3 of every slot: its lease renewed once (the worker's first renewal),
        then its pod Failed with the lease still held, left to expire."""
        started = time.monotonic()
        renewed: list[tuple[str, str]] = []
        for step, slot in enumerate(self.slot_names):
            pod = f"{slot}-3"
            stamp = now_text()
            self.coordination.patch_namespaced_lease(pod, self.op,
                                                     {"spec": {"renewTime": stamp}})
            self.fail_pod(self.op, pod)
            renewed.append((slot, stamp))
            self.pace(started, step + 1, every=self.alone_every)
        timeout = 60.0 + LEASE_SECONDS + self.count * self.alone_every
        for slot, stamp in renewed:
            pod = f"{slot}-3"
            seen = self.first_or_lost(self.leases, pod, "lease renewal", lambda o, s=stamp:
                                      renew_time(o) == s, 0.0, timeout)
            if seen is None:
                continue
            expiry = seen + LEASE_SECONDS
            self.record("recovery", expiry, self.slots, slot,
                        lambda o: attempt_outcome(o, 3) is not None, timeout)
            # recorded before the expiry would be a negative overhead: kept as measured
            early = self.slots.first(slot, lambda o: attempt_outcome(o, 3) is not None,
                                     after=seen)
            if early is not None and early < expiry:
                self.lost["recorded before the lease expired (an error)"] += 1


def renew_time(obj: Object) -> str | None:
    value: str | None = (obj.get("spec") or {}).get("renewTime")
    return value

