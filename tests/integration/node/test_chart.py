"""The Helm chart installed for real: its operator pod serves the seed's recovery trace.

On the suite's control plane and node, with the project image loaded into the node
(``pullPolicy: Never``) and ``watchNamespaces`` the test's namespace only. First the
install guard with the cluster's real lookups: a tenant's namespace (the test's own) is
refused and no release is recorded (Helm installs the chart's ``crds/`` before it renders
the templates: the guard cannot stop that; here the session's CRDs exist already). Then,
in ``agentrun-ops`` (not the default namespace: the chart installs in any namespace but a
tenant's, ``default`` or the control plane's), install with
every value an operator of a cluster sets on pods (``helm.EVERY_VALUE``: pull secrets,
scheduling, priority, labels, annotations, extra flags and environment, the
NetworkPolicies), two operator pods Running and Ready, through their readiness probe,
with those values, one holding the leader Lease; ``helm test`` passing; both serving the
history API with the one certificate its APIService trusts),
the recovery trace of ``tests/support/plays/recovery.py`` served by the leader, its
counters scraped through the chart's metrics Service (its ClusterIP, from a pod on the
node: the host is outside the node's network, and kube-proxy's rules serve pods), the
disruption budget (the standby evicted, the leader's eviction then refused),
``helm upgrade`` (a rolling update to two new Ready pods, the history still served), the
leader's process SIGSTOPped on the node (the standby takes over and serves; SIGCONTed,
the former leader exits 75 and stands by), and
``helm uninstall``, after which only the documented leftovers remain: the CRDs, the
users' runs and the stamping, leader and history certificate Secrets. While installed,
the cluster-wide objects name ``agentrun-ops`` (the operator's ClusterRoleBinding subject,
the fence's user), the fencing token and the stamping epoch are there, and a second release
in another namespace is refused, naming the first.

The session's ``installed`` fixture applied the RBAC, the local user's binding and the
stamping policy with kubectl, so the install takes those objects over
(``--take-ownership``) and, after the uninstall removed them, :class:`helm.Release`
re-applies them and waits for stamping in force (``operators.install_for_tests``), so the
tests after this one find the cluster as before. Serial: the chart's admission policies
are cluster-wide while it is installed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import signal
import ssl
import subprocess
import time
from collections.abc import Callable
from typing import Any

import kubernetes
import pytest
import yaml

from agentrun import manifests, workload
from agentrun.api import names
from agentrun.core.policies import fencing
from tests.integration.node.conftest import wait_phase
from tests.support import historyapi
from tests.support.actors.operators import install_for_tests
from tests.support.actors.workers import container_pid, kill_on_node
from tests.support.cluster import store
from tests.support.cluster.clusters import Cluster
from tests.support.cluster.helm import CHART, EVERY_VALUE, RELEASE, Release, helm_binary
from tests.support.cluster.localnode import LocalNode
from tests.support.plays.recovery import play_recovery_trace
from tests.support.plays.scenarios import Scenario
from tests.support.scrapes import Series, parse, value
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.kubelet, pytest.mark.serial]
GROUP, VERSION = names.GROUP, names.VERSION
NAMESPACE = "agentrun-ops"  # the release's: not the default agentrun-system
SECOND = "agentrun-ops-second"  # a second release's, refused


def refused_install(cluster: Cluster, *, release: str, namespace: str, image: str) -> str:
    """``helm install`` that must fail; its stderr. No release is left behind."""
    def helm(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(helm_binary()), "--kubeconfig", str(cluster.kubeconfig),
                               *args], capture_output=True, text=True, check=False,
                              timeout=300)
    result = helm("install", release, str(CHART), "--namespace", namespace,
                  "--create-namespace", "--set-string", f"image.repository={image}")
    assert result.returncode != 0, result.stdout
    listed = helm("list", "--all-namespaces", "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert release not in {r["name"] for r in json.loads(listed.stdout)}
    return result.stderr


def container(pod: dict[str, Any]) -> dict[str, Any]:
    (found,) = pod["spec"]["containers"]
    return dict(found)


def chart_objects(release: Release) -> list[tuple[str, str, str]]:
    """(kind, namespace, name) of every object the chart renders with the release's values
    (``helm test``'s pod included), but for the bundled store: the release has none (the
    local cluster runs its own, which outlives the release; ``helm.install_args``)."""
    result = release.helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE,
                          "--set", "store.enabled=false", "--set", "networkPolicy.enabled=true")
    assert result.returncode == 0, result.stderr
    return [(d["kind"], d["metadata"].get("namespace", ""), d["metadata"]["name"])
            for d in yaml.safe_load_all(result.stdout) if d]


def scraper(cluster: Cluster, namespace: str,
            run_pod: Callable[..., dict[str, Any]]) -> Callable[[str], Series]:
    """A function reading a ``/metrics`` address from an idle pod of the project's image
    (``kubectl exec``), once that pod runs."""
    run_pod("scraper", ["python3", "-c", "import time; time.sleep(600)"])
    wait_phase(cluster, namespace, "scraper", {"Running"})

    def scrape(url: str) -> Series:
        fetch = ("import sys, urllib.request; "
                 f"sys.stdout.write(urllib.request.urlopen({url!r}, timeout=5).read().decode())")
        result = cluster.kubectl("exec", "-n", namespace, "scraper", "--", "python3", "-c",
                                 fetch)
        assert result.returncode == 0, result.stderr
        return parse(result.stdout)
    return scrape


def existing(api: kubernetes.client.ApiClient, kind: str, namespace: str,
             name: str) -> bool:
    """Whether the object exists, through the dynamic client (any kind the chart has)."""
    dynamic = kubernetes.dynamic.DynamicClient(api)
    api_version = {"ClusterRole": "rbac.authorization.k8s.io/v1",
                   "ClusterRoleBinding": "rbac.authorization.k8s.io/v1",
                   "Role": "rbac.authorization.k8s.io/v1",
                   "RoleBinding": "rbac.authorization.k8s.io/v1",
                   "Deployment": "apps/v1", "ServiceAccount": "v1", "Service": "v1",
                   "Namespace": "v1",
                   "Pod": "v1", "NetworkPolicy": "networking.k8s.io/v1",
                   "PodDisruptionBudget": "policy/v1",
                   "APIService": "apiregistration.k8s.io/v1",
                   "MutatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
                   "MutatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1",
                   "ValidatingAdmissionPolicy": "admissionregistration.k8s.io/v1",
                   "ValidatingAdmissionPolicyBinding": "admissionregistration.k8s.io/v1"}[kind]
    resource = dynamic.resources.get(api_version=api_version, kind=kind)
    try:
        resource.get(name=name, namespace=namespace or None)
    except kubernetes.dynamic.exceptions.NotFoundError:
        return False
    return True


FROZEN_BOUND = 40.0  # seconds a leader stays frozen: under the liveness probe's ~55 s


def restarts(release: Release, pod: str) -> int:
    """The restarts of ``pod``'s container."""
    return sum(int(s.get("restartCount", 0)) for p in release.pods()
               if p["metadata"]["name"] == pod
               for s in p["status"].get("containerStatuses") or [])


def pod_named(pods: list[dict[str, Any]], *, other: str) -> str:
    """The name of the pod of ``pods`` not named ``other``."""
    (name,) = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] != other]
    return str(name)


def evict(core: kubernetes.client.CoreV1Api,
          pod: str) -> kubernetes.client.ApiException | None:
    """Evict ``pod`` (the API a drain uses); None when admitted, else the refusal."""
    body = kubernetes.client.V1Eviction(metadata=kubernetes.client.V1ObjectMeta(
        name=pod, namespace=NAMESPACE))
    try:
        core.create_namespaced_pod_eviction(pod, NAMESPACE, body)
    except kubernetes.client.ApiException as error:
        return error
    return None


def served_certificates(cluster: Cluster, namespace: str,
                        pods: list[dict[str, Any]]) -> set[bytes]:
    """The history API's certificate (DER) each of ``pods`` serves, read from the scraper
    pod on the node (the pods' addresses are the node's network)."""
    found = set()
    for pod in pods:
        read = ("import ssl, sys; sys.stdout.write(ssl.get_server_certificate("
                f"({pod['status']['podIP']!r}, {workload.HISTORY_PORT}), timeout=5))")
        result = cluster.kubectl("exec", "-n", namespace, "scraper", "--", "python3", "-c",
                                 read)
        assert result.returncode == 0, result.stderr
        found.add(ssl.PEM_cert_to_DER_cert(result.stdout))
    return found


def trusted(api: kubernetes.client.ApiClient) -> bytes:
    """The certificate (DER) the history API's APIService tells the API server to trust."""
    found = kubernetes.client.ApiregistrationV1Api(api).read_api_service(
        names.HISTORY_APISERVICE)
    return ssl.PEM_cert_to_DER_cert(base64.b64decode(found.spec.ca_bundle).decode())


def test_the_chart_installs_serves_the_trace_upgrades_and_uninstalls(
        cluster: Cluster, namespace: str, scenario: Scenario, worker_image: str,
        node: LocalNode, run_pod: Callable[..., dict[str, Any]]) -> None:
    api = cluster.client()
    scrape = scraper(cluster, namespace, run_pod)
    core = kubernetes.client.CoreV1Api(api)
    image = worker_image.rpartition(":")[0]
    said = refused_install(cluster, release="agentrun-in-a-tenant", namespace=namespace,
                           image=image)
    assert f"cannot be installed in the namespace {namespace}: it is a tenant's" in said, said
    release = Release(cluster.kubeconfig, image=worker_image, namespaces=[namespace],
                      take_ownership=True, values=EVERY_VALUE, namespace=NAMESPACE,
                      restore=lambda: install_for_tests(cluster))
    with contextlib.ExitStack() as cleanup:
        # Last: the namespace, once the release is gone and the session's install back
        # (even when the install itself failed).
        cleanup.callback(delete_namespace, core, NAMESPACE)
        cleanup.enter_context(release)
        pods = release.wait_ready()
        assert len(pods) == 2  # by default: one leads, one stands by
        for each in pods:  # every value reached the pods the API server admitted
            spec, metadata = each["spec"], each["metadata"]
            assert metadata["labels"]["example.com/team"] == "platform"
            assert metadata["labels"]["app.kubernetes.io/instance"] == RELEASE
            assert metadata["annotations"]["example.com/owner"] == "platform"
            assert spec["imagePullSecrets"] == EVERY_VALUE["imagePullSecrets"]
            assert spec["nodeSelector"] == EVERY_VALUE["nodeSelector"]
            assert spec["priorityClassName"] == EVERY_VALUE["priorityClassName"]
            assert spec["priority"] > 0  # resolved by the API server's Priority plugin
            assert EVERY_VALUE["tolerations"][0] in spec["tolerations"]  # type: ignore[index]
            assert set(spec["affinity"]) == {"nodeAffinity", "podAntiAffinity"}
            args = container(each)["args"]
            assert args[args.index("--qps"):][:4] == EVERY_VALUE["extraArgs"]
            assert {"name": "AGENTRUN_EXAMPLE", "value": "set by the chart"} in container(
                each)["env"]
        policies = kubernetes.client.NetworkingV1Api(api).list_namespaced_network_policy(
            NAMESPACE).items
        assert [p.metadata.name for p in policies] == [manifests.OPERATOR_ROLE]
        # helm test: its pod, restricted and without API credentials, finds an operator
        # Ready through the metrics Service, and is deleted once it passed.
        tested = release.helm("test", RELEASE, "--namespace", NAMESPACE, "--logs",
                              "--timeout", "180s")
        assert tested.returncode == 0, tested.stdout + tested.stderr
        assert "ok: http://" in tested.stdout and "/readyz 200" in tested.stdout, tested.stdout
        assert not existing(api, "Pod", NAMESPACE, f"{RELEASE}-test")
        leader = wait_for(release.leader, timeout=60, message="a replica leading")
        assert leader in {p["metadata"]["name"] for p in pods}
        (pod,) = [p for p in pods if p["metadata"]["name"] == leader]
        # The README's wait, as written: exit 0 once the epoch is minted and in force.
        stamped = cluster.kubectl("-n", NAMESPACE, "exec", "deploy/agentrun-operator", "--",
                                  "agentrun-operator", "stamping")
        assert stamped.returncode == 0, stamped.stdout + stamped.stderr
        # The fencing token there names the leader; the cluster-wide objects name the
        # release's namespace; a second release, elsewhere, is refused.
        token = core.api_client.sanitize_for_serialization(
            core.read_namespaced_secret(names.LEADER_SECRET, NAMESPACE))
        assert fencing.token_names(token)[0] == leader
        binding = kubernetes.client.RbacAuthorizationV1Api(api).read_cluster_role_binding(
            manifests.OPERATOR_ROLE)
        assert [(s.name, s.namespace) for s in binding.subjects or []] == [
            (names.OPERATOR_APP, NAMESPACE)]
        fence = cluster.kubectl("get", "validatingadmissionpolicy", names.FENCE_POLICY,
                                "-o", "json")
        assert fencing.operator_user(namespace=NAMESPACE) in fence.stdout, fence.stdout[:400]
        said = refused_install(cluster, release="agentrun-second", namespace=SECOND,
                               image=image)
        assert (f"already installed in this cluster by the release {RELEASE} in the "
                f"namespace {NAMESPACE}") in said, said
        assert not existing(api, "Namespace", "", SECOND)
        operator = container(pod)
        assert pod["spec"]["serviceAccountName"] == manifests.OPERATOR_ROLE
        assert operator["image"] == worker_image
        args = operator["args"]
        assert args[args.index("--namespace"):][:2] == ["--namespace", namespace]
        assert args[args.index("--journal-endpoint") + 1] == store.STORE_ENDPOINT
        assert operator["securityContext"]["readOnlyRootFilesystem"] is True
        assert {p["httpGet"]["path"] for p in (operator["livenessProbe"],
                                               operator["readinessProbe"])} == {
            "/healthz", "/readyz"}

        service = core.read_namespaced_service(workload.METRICS_SERVICE, NAMESPACE)
        assert service.spec.type == "ClusterIP"
        url = f"http://{service.spec.cluster_ip}:{workload.METRICS_PORT}/metrics"
        idle = wait_for(lambda: scrape(url), timeout=60,
                        message=f"{url} answering through the Service; {release.logs()}")
        assert value(idle, "agentrun_commands_total", kind="Claim", outcome="Accepted",
                     predicate="") == 0

        # The history API, served by both pods behind the chart's APIService and Service,
        # with the one certificate the APIService trusts (made by the leader).
        historyapi.wait_available(cluster)
        # (A standby that read no Secret yet serves a provisional one for a second.)
        wait_for(lambda: served_certificates(cluster, namespace, pods) == {trusted(api)},
                 timeout=30, message="both pods serving the trusted certificate")

        slot = play_recovery_trace(scenario)
        read = cluster.kubectl("get", "--raw", f"/apis/{names.HISTORY_GROUP}/"
                               f"{names.HISTORY_VERSION}/namespaces/{namespace}/"
                               f"{names.HISTORY_RESOURCE}/{slot}")
        assert read.returncode == 0, read.stderr
        history = json.loads(read.stdout)
        assert history["kind"] == names.HISTORY_KIND and len(history["attempts"]) == 2, history
        # Counted by the leader, which did the work; the standby did none.
        at = {p["metadata"]["name"]: f"http://{p['status']['podIP']}:{workload.METRICS_PORT}"
              f"/metrics" for p in pods}
        series = wait_for(lambda: (s := scrape(at[leader])) and value(
            s, "agentrun_claim_latency_seconds_count") == 2 and s, timeout=30,
            message="both claims counted")
        standby = scrape(at[pod_named(pods, other=leader)])
        assert value(standby, "agentrun_commands_total", kind="Claim", outcome="Accepted",
                     predicate="") == 0
        assert (value(series, "agentrun_leader"), value(standby, "agentrun_leader")) == (1, 0)
        assert value(series, "agentrun_commands_total", kind="Claim", outcome="Accepted",
                     predicate="") == 2
        # bob's and the blank reassignments were refused by the chart's validating
        # policies, before the operator saw them: not in the ledger, not counted.
        assert value(series, "agentrun_commands_total", kind="Reassign", outcome="Rejected",
                     predicate="NotOwner") == 0
        assert value(series, "agentrun_commands_total", kind="Reassign", outcome="Accepted",
                     predicate="") == 1
        assert value(series, "agentrun_transitions_total", kind="Slot", outcome="RetryWait") == 1

        # The disruption budget: one replica at a time. The standby's eviction is
        # admitted; the leader's, right after, refused while the standby is replaced.
        policy = kubernetes.client.PolicyV1Api(api)
        wait_for(lambda: policy.read_namespaced_pod_disruption_budget(
            manifests.OPERATOR_ROLE, NAMESPACE).status.disruptions_allowed == 1, timeout=60,
            message="the disruption budget allowing one")
        evicted = evict(core, pod_named(pods, other=leader))
        assert evicted is None, evicted
        refused = evict(core, leader)
        assert refused is not None and refused.status == 429, refused
        assert "disruption budget" in str(refused.body), refused.body
        assert release.leader() == leader
        pods = release.wait_ready()

        # helm upgrade: a rolling update to two new Ready pods, with the new values, that
        # serve; the history too, with the same certificate (its Secret outlives pods).
        before = {p["metadata"]["uid"] for p in pods}
        release.upgrade({"logLevel": "debug", "resources.requests.cpu": "60m"})
        upgraded = release.wait_ready()
        assert not before & {p["metadata"]["uid"] for p in upgraded}
        for new in upgraded:
            assert "--verbose" in container(new)["args"]
            assert container(new)["resources"]["requests"]["cpu"] == "60m"
        scenario.run("after-upgrade", user="alice", claim_policy="Manual")
        scenario.wait_state(scenario.slot_name_eventually("after-upgrade", "research"), "Ready")
        assert served_certificates(cluster, namespace, upgraded) == {trusted(api)}
        assert cluster.kubectl("get", "--raw", f"/apis/{names.HISTORY_GROUP}/"
                               f"{names.HISTORY_VERSION}/namespaces/{namespace}/"
                               f"{names.HISTORY_RESOURCE}/{slot}").returncode == 0

        # The leader's process frozen on the node (SIGSTOP: a paused or partitioned pod,
        # which no kubelet restarts at once): the standby takes the Lease once it has gone
        # unrenewed for its duration and serves a run made meanwhile; SIGCONTed, the
        # former leader finds it lost, exits 75, and its container restarts to stand by.
        # (A SIGKILLed one would be restarted in its pod at once and, the Lease naming that
        # pod, lead again before the standby: make failover SIGKILLs processes.)
        leader = wait_for(release.leader, timeout=60, message="a replica leading")
        (frozen,) = [p for p in release.pods() if p["metadata"]["name"] == leader]
        pid, uid = container_pid(node, frozen), frozen["metadata"]["uid"]
        restarted = restarts(release, leader)
        kill_on_node(pid, pod_uid=uid, sig=signal.SIGSTOP)
        # Within FROZEN_BOUND, before the liveness probe (6 misses 10 s apart) restarts it.
        frozen_until = time.monotonic() + FROZEN_BOUND
        try:
            scenario.run("after-failover", user="alice", claim_policy="Manual")
            survivor = pod_named(upgraded, other=leader)
            wait_for(lambda: release.leader() == survivor,
                     timeout=frozen_until - time.monotonic(),
                     message=f"{survivor} taking over from {leader}")
            scenario.wait_state(scenario.slot_name_eventually("after-failover", "research"),
                                "Ready", timeout=max(1.0, frozen_until - time.monotonic()))
            assert restarts(release, leader) == restarted, "liveness restarted it first"
        finally:
            with contextlib.suppress(OSError):  # (gone, if its container was restarted)
                kill_on_node(pid, pod_uid=uid, sig=signal.SIGCONT)
        wait_for(lambda: any(s.get("restartCount", 0) > restarted and (
            (s.get("lastState") or {}).get("terminated") or {}).get("exitCode") == 75
            for p in release.pods() if p["metadata"]["name"] == leader
            for s in p["status"].get("containerStatuses") or []), timeout=60,
            message=f"{leader} exiting 75 (lost the lead) and restarting")
        assert len(release.wait_ready()) == 2 and release.leader() == survivor

        release.uninstall()
        assert release.pods() == []
        # Gone: every object of the chart's templates.
        left = [o for o in chart_objects(release) if existing(api, *o)]
        assert left == [], left
        # Kept, as documented: the CRDs, the users' runs, the stamping, leader and history
        # certificate Secrets.
        extensions = kubernetes.client.ApiextensionsV1Api(api)
        kept = {c.metadata.name for c in extensions.list_custom_resource_definition().items}
        assert {f"{plural}.{GROUP}" for plural in ("agentruns", "slots", "launchspecs")} <= kept
        custom = kubernetes.client.CustomObjectsApi(api)
        runs = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "agentruns")
        assert sorted(r["metadata"]["name"] for r in runs["items"]) == [
            "after-failover", "after-upgrade", "study"]
        assert scenario.slot(slot)["status"]["attemptCount"] == 2
        secrets = [s.metadata.name for s in core.list_namespaced_secret(NAMESPACE).items]
        assert sorted(secrets) == sorted([names.STAMPING_SECRET, names.LEADER_SECRET,
                                          names.HISTORY_TLS_SECRET]), secrets
        accounts = [a.metadata.name for a in core.list_namespaced_service_account(NAMESPACE).items]
        assert accounts == ["default"], accounts
    # restored for the tests after this one: the objects `installed` applied, stamping in force
    assert existing(api, "ClusterRole", "", manifests.OPERATOR_ROLE)
    assert existing(api, "MutatingAdmissionPolicy", "", manifests.STAMP_POLICY)


def delete_namespace(core: kubernetes.client.CoreV1Api, name: str) -> None:
    """The release's namespace, once the release is gone (its Secrets are kept by design)."""
    try:
        core.delete_namespace(name)
    except kubernetes.client.ApiException as error:
        if error.status != 404:
            raise
