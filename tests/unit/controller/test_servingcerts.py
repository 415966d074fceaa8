"""``controller.servingcerts``: one history certificate for every replica, over an
in-memory API (no cluster).

The fake keeps the certificate's Secret and the APIService with resourceVersions (a POST
of an existing object, or a PUT under a stale resourceVersion, is a 409). Covers: what a
Secret must hold to be served (:func:`servingcerts.usable`, each way it can be wrong); a
standby with no Secret writes nothing and serves nothing (not Ready); the leader makes
the Secret and registers it on the APIService; the standby then serves the very same
certificate; an unusable Secret is replaced by the leader only, under its
resourceVersion; a create that loses a race is read next round; an API server that
fails keeps what is served; ``/readyz`` waits for the certificate.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from agentrun import rest
from agentrun.api import names
from agentrun.controller import metrics, servingcerts

NOW = datetime(2026, 12, 6, tzinfo=UTC)
NAMESPACE = "agentrun-ops"  # not the plain manifests' namespace: the chart's may be any
HOSTS = servingcerts.dns_names(namespace=NAMESPACE)
SECRET_PATH = servingcerts.secret_path(namespace=NAMESPACE)


class Api:
    """The Secret and the APIService, by path, with resourceVersions."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {
            servingcerts.APISERVICE_PATH: {"metadata": {"resourceVersion": "1"}, "spec": {}}}
        self.version = 1
        self.down = False
        self.writes: list[tuple[str, str]] = []

    def _error(self, status: int) -> rest.ApiError:
        return rest.ApiError(status, json.dumps({"message": f"status {status}"}))

    def get(self, path: str, **_: Any) -> dict[str, Any] | None:
        if self.down:
            raise self._error(503)
        found = self.objects.get(path)
        return copy.deepcopy(found) if found else None

    def request(self, method: str, path: str, *, body: dict[str, Any] | None = None,
                **_: Any) -> dict[str, Any]:
        if self.down:
            raise self._error(503)
        assert body is not None
        self.writes.append((method, path))
        self.version += 1
        if method == "POST":
            target = f"{path}/{body['metadata']['name']}"
            if target in self.objects:
                raise self._error(409)
            self.objects[target] = {**body, "metadata": {**body["metadata"],
                                                         "resourceVersion": str(self.version)}}
        elif method == "PUT":
            stored = self.objects[path]
            if body["metadata"].get("resourceVersion") != stored["metadata"]["resourceVersion"]:
                raise self._error(409)
            self.objects[path] = {**body, "metadata": {**body["metadata"],
                                                       "resourceVersion": str(self.version)}}
        else:
            assert method == "PATCH" and path == servingcerts.APISERVICE_PATH
            self.objects[path]["spec"].update(body["spec"])
        return copy.deepcopy(self.objects.get(path, {}))

    def bundle(self) -> bytes | None:
        found = self.objects[servingcerts.APISERVICE_PATH]["spec"].get("caBundle")
        return base64.b64decode(found) if found else None


def replica(api: Api, *, leads: bool) -> tuple[servingcerts.Registration, list[bytes]]:
    """A registration over ``api`` and the certificates it was told to serve, in order."""
    served: list[bytes] = []
    made = servingcerts.Registration(client=api, logger=logging.getLogger("test"),  # type: ignore[arg-type]
                                     use=lambda s: served.append(s.certificate),
                                     may_write=lambda: leads, clock=lambda: NOW,
                                     namespace=NAMESPACE)
    return made, served


def secret(serving: servingcerts.Serving, **data: str) -> dict[str, Any]:
    body = servingcerts.secret_body(serving, namespace=NAMESPACE)
    body["data"].update(data)
    return body


def test_a_usable_secret_is_pem_its_own_key_the_service_names_and_in_date() -> None:
    good = servingcerts.self_signed(hosts=HOSTS, now=NOW)
    assert servingcerts.usable(secret(good), hosts=HOSTS, now=NOW) == good
    assert servingcerts.usable(None, hosts=HOSTS, now=NOW) is None
    assert servingcerts.usable({"data": {}}, hosts=HOSTS, now=NOW) is None
    assert servingcerts.usable(secret(good, **{"tls.crt": "%%%"}), hosts=HOSTS,
                               now=NOW) is None  # not base64
    junk = base64.b64encode(b"not a certificate").decode()
    assert servingcerts.usable(secret(good, **{"tls.crt": junk}), hosts=HOSTS, now=NOW) is None
    assert servingcerts.usable(secret(good, **{"tls.key": junk}), hosts=HOSTS, now=NOW) is None
    other = servingcerts.self_signed(hosts=HOSTS, now=NOW)
    mismatched = secret(good, **{"tls.key": base64.b64encode(other.key).decode()})
    assert servingcerts.usable(mismatched, hosts=HOSTS, now=NOW) is None
    elsewhere = servingcerts.self_signed(hosts=["elsewhere.example"], now=NOW)
    assert servingcerts.usable(secret(elsewhere), hosts=HOSTS, now=NOW) is None
    near_end = NOW + servingcerts.VALID_FOR - servingcerts.MARGIN + timedelta(seconds=1)
    assert servingcerts.usable(secret(good), hosts=HOSTS, now=near_end) is None
    # A replica whose clock is behind the leader's serves it all the same.
    assert servingcerts.usable(secret(good), hosts=HOSTS, now=NOW - timedelta(days=1)) == good


def test_the_leader_makes_it_and_every_replica_serves_the_one_certificate() -> None:
    api = Api()
    standby, standby_served = replica(api, leads=False)
    assert not standby.looked
    standby.round()
    assert api.writes == [] and standby.serving is None and standby_served == []
    assert standby.looked  # Ready (a provisional certificate): waiting would deadlock a roll

    leader, leader_served = replica(api, leads=True)
    leader.round()
    stored = api.objects[SECRET_PATH]
    assert stored["type"] == "kubernetes.io/tls"
    assert leader.serving is not None and leader_served == [leader.serving.certificate]
    assert api.bundle() == leader.serving.certificate  # the APIService trusts it

    standby.round()
    assert standby_served == [leader.serving.certificate]  # the same one
    writes = list(api.writes)
    leader.round()
    standby.round()
    assert api.writes == writes and len(standby_served) == 1  # nothing changed: nothing done


def test_an_unusable_secret_is_replaced_by_the_leader_alone() -> None:
    api = Api()
    leader, served = replica(api, leads=True)
    leader.round()
    first = leader.serving
    api.objects[SECRET_PATH]["data"]["tls.key"] = "broken"
    standby, standby_served = replica(api, leads=False)
    standby.round()
    assert standby.serving is None and ("PUT", SECRET_PATH) not in api.writes
    leader.round()
    assert ("PUT", SECRET_PATH) in api.writes
    assert leader.serving is not None and leader.serving != first
    assert served == [first.certificate, leader.serving.certificate]  # type: ignore[union-attr]
    assert api.bundle() == leader.serving.certificate
    standby.round()
    assert standby_served == [leader.serving.certificate]


def test_a_lost_race_or_a_failing_api_server_keeps_what_is_served() -> None:
    api = Api()
    leader, served = replica(api, leads=True)
    rival = servingcerts.self_signed(hosts=HOSTS, now=NOW)
    original = api.get

    def racing_get(path: str, **kwargs: Any) -> dict[str, Any] | None:
        found = original(path, **kwargs)
        if path == SECRET_PATH and found is None:  # another leader writes now
            api.objects[path] = {**secret(rival), "metadata": {
                **secret(rival)["metadata"], "resourceVersion": "99"}}
        return found
    api.get = racing_get  # type: ignore[method-assign]
    leader.round()  # its create loses (409): nothing served yet, read again next round
    assert leader.serving is None and served == []
    api.get = original  # type: ignore[method-assign]
    leader.round()
    assert leader.serving == rival
    api.down = True
    leader.round()  # logged, not raised
    assert leader.serving == rival and served == [rival.certificate]


@pytest.mark.parametrize("loaded", [False, True])
def test_readiness_waits_for_the_certificate(loaded: bool) -> None:
    meters = metrics.Metrics()
    meters.ready.set()
    meters.require(lambda: None if loaded else "the history API's certificate is not read yet")
    assert meters.readiness() == (None if loaded else
                                  "the history API's certificate is not read yet")
    meters.unready("stopping")
    assert meters.readiness() == "stopping"


def test_the_secret_is_in_the_operator_namespace_by_its_one_name() -> None:
    path = SECRET_PATH
    assert path.endswith(f"/namespaces/{NAMESPACE}/secrets/{names.HISTORY_TLS_SECRET}")
    assert f"{names.HISTORY_SERVICE}.{NAMESPACE}.svc" in HOSTS
    assert path.startswith("/api/v1/")
