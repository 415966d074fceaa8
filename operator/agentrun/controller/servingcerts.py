"""The history API's TLS: one serving certificate for every replica, and the API server
told to trust it.

The API server reaches an aggregated API over TLS through its Service, which spreads the
connections over every Ready replica, and verifies each against the APIService's
``caBundle``: so every replica must serve the same certificate. It is a self-signed one
(an ECDSA P-256 key) for the Service's DNS names, kept in the Secret
``agentrun-operator-history-tls`` (``kubernetes.io/tls``) in the operator's namespace (the
Service's too, so its DNS names hold the namespace the operator learnt at start:
:mod:`agentrun.kube.ownnamespace`). Only the leader
writes (the fence refuses anyone else's writes): it makes the Secret when it is missing or
unusable (not PEM, a key that is not the certificate's, names or dates that do not fit),
and keeps the certificate in its APIService's ``caBundle`` (an upgrade that re-applies
the APIService may clear it). Every replica reads the Secret at start and every
:data:`KEEP_SECONDS` (every :data:`WAIT_SECONDS` until it has one) and serves what it
holds. A replica is not Ready (``/readyz``) until it has read the Secret once; one that
found none (a standby on a first install, or while the leader runs a version that makes
none: an upgrade) is Ready all the same, serving a provisional certificate no API server
trusts until the leader's appears, a second later: a readiness that waited for the
leader's certificate would deadlock a rolling update that waits for Ready pods.

Why not a certificate from the chart or cert-manager: the default install must work with
nothing else in the cluster. The cost: the key is in a Secret, readable by whoever may
read Secrets in the operator's namespace (who can act as the operator anyway); it stays
after an uninstall, with the stamping and leader Secrets.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentrun import rest
from agentrun.api import names

APISERVICE_PATH = f"/apis/apiregistration.k8s.io/v1/apiservices/{names.HISTORY_APISERVICE}"
VALID_FOR = timedelta(days=3650)  # the leader replaces it MARGIN before its end
KEEP_SECONDS = 30.0  # how often the Secret and the APIService's caBundle are checked
WAIT_SECONDS = 1.0  # how often while this replica has no certificate to serve yet
MARGIN = timedelta(days=30)  # a certificate this close to its end is replaced


def secrets_path(*, namespace: str) -> str:
    return rest.namespaced(group="", version="v1", plural="secrets", namespace=namespace)


def secret_path(*, namespace: str) -> str:
    return f"{secrets_path(namespace=namespace)}/{names.HISTORY_TLS_SECRET}"


def dns_names(*, namespace: str, service: str = names.HISTORY_SERVICE) -> list[str]:
    """The names the API server may dial the Service by (it uses ``<name>.<ns>.svc``)."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


@dataclass(frozen=True)
class Serving:
    """A certificate and its key, both PEM."""

    certificate: bytes
    key: bytes = field(repr=False)


def self_signed(*, hosts: list[str], now: datetime) -> Serving:
    """A self-signed serving certificate for ``hosts`` (DNS names), valid from an hour
    before ``now`` (clocks differ) for :data:`VALID_FOR`."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])])
    certificate = (
        x509.CertificateBuilder()
        .subject_name(subject).issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + VALID_FOR)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(h) for h in hosts]),
                       critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )
    return Serving(
        certificate=certificate.public_bytes(serialization.Encoding.PEM),
        key=key.private_bytes(serialization.Encoding.PEM,
                              serialization.PrivateFormat.PKCS8,
                              serialization.NoEncryption()))


def usable(secret: rest.Object | None, *, hosts: list[str], now: datetime) -> Serving | None:
    """The certificate and key of ``secret`` when a replica can serve them: both PEM, the
    key the certificate's, the certificate naming every one of ``hosts`` and valid
    :data:`MARGIN` past ``now``. None otherwise (or when there is no Secret). Its start is
    not checked: a replica whose clock is behind the leader's serves it all the same (the
    API server is the one that verifies it)."""
    data = (secret or {}).get("data") or {}
    try:
        certificate = base64.b64decode(data.get("tls.crt") or "", validate=True)
        key = base64.b64decode(data.get("tls.key") or "", validate=True)
        found = x509.load_pem_x509_certificate(certificate)
        private = serialization.load_pem_private_key(key, password=None)
        sans = found.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return None
    public = serialization.PublicFormat.SubjectPublicKeyInfo
    if (private.public_key().public_bytes(serialization.Encoding.DER, public)
            != found.public_key().public_bytes(serialization.Encoding.DER, public)
            or not set(hosts) <= set(sans.get_values_for_type(x509.DNSName))
            or now >= found.not_valid_after_utc - MARGIN):
        return None
    return Serving(certificate=certificate, key=key)


def secret_body(serving: Serving, *, namespace: str) -> rest.Object:
    """The Secret that holds ``serving`` for every replica, in the operator's
    ``namespace``."""
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": names.HISTORY_TLS_SECRET, "namespace": namespace,
                         "labels": {"app.kubernetes.io/name": names.OPERATOR_APP}},
            "data": {"tls.crt": base64.b64encode(serving.certificate).decode(),
                     "tls.key": base64.b64encode(serving.key).decode()}}


@dataclass(kw_only=True)
class Registration:
    """Keeps this replica serving the shared certificate and, while it may write (it
    leads), the Secret usable and the APIService trusting it (see the module)."""

    client: rest.Rest
    logger: logging.Logger
    use: Callable[[Serving], None]  # serve this certificate from now on
    namespace: str  # the operator's, its Secret's and Service's (required: no install's guess)
    may_write: Callable[[], bool] = lambda: True  # does this replica lead (or run alone)?
    also: Callable[[], None] | None = None  # done each round too (the front proxy read)
    clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    serving: Serving | None = None  # what this replica serves (None: a provisional one)
    looked: bool = False  # has a round read the Secret yet (readiness waits for that)
    stopping: threading.Event = field(default_factory=threading.Event)

    def load(self) -> Serving | None:
        """The Secret's certificate; the leader makes (or replaces) it when it is missing
        or unusable. None while there is none to serve (a standby waits for the leader)."""
        hosts = dns_names(namespace=self.namespace)
        found = self.client.get(secret_path(namespace=self.namespace))
        serving = usable(found, hosts=hosts, now=self.clock())
        if serving is not None or not self.may_write():
            return serving
        made = self_signed(hosts=hosts, now=self.clock())
        body = secret_body(made, namespace=self.namespace)
        try:
            if found is None:
                self.client.request("POST", secrets_path(namespace=self.namespace),
                                    body=body)
            else:  # unusable: replaced, if nobody changed it since it was read
                body["metadata"]["resourceVersion"] = found["metadata"]["resourceVersion"]
                self.client.request("PUT", secret_path(namespace=self.namespace),
                                    body=body)
        except rest.ApiError as error:
            if error.status == 409:  # another writer first: read it next round
                return None
            raise
        self.logger.info("made the history API's certificate (%s %s/%s)",
                         "replacing an unusable one in" if found else "in the new Secret",
                         self.namespace, names.HISTORY_TLS_SECRET)
        return made

    def ensure(self) -> bool:
        """Put the served certificate in the APIService's bundle if it is not; False
        (logged) when the APIService is missing or cannot be read or patched."""
        assert self.serving is not None
        bundle = base64.b64encode(self.serving.certificate).decode()
        try:
            found = self.client.get(APISERVICE_PATH)
            if found is None:
                self.logger.warning("the APIService %s is not installed: people cannot read "
                                    "journals through the API server (kubectl agentrun "
                                    "history)", names.HISTORY_APISERVICE)
                return False
            if (found.get("spec") or {}).get("caBundle") == bundle:
                return True
            self.client.request("PATCH", APISERVICE_PATH,
                                body={"spec": {"caBundle": bundle}},
                                content_type="application/merge-patch+json")
        except rest.ApiError as error:
            self.logger.warning("cannot register the history API's certificate on the "
                                "APIService %s: %s", names.HISTORY_APISERVICE, error)
            return False
        self.logger.info("the APIService %s trusts the history API's certificate",
                         names.HISTORY_APISERVICE)
        return True

    def round(self) -> None:
        """One pass: :attr:`also`, the Secret read (made by a leader), served if it
        changed, and registered by a leader. A failure is logged; the next round retries."""
        try:
            if self.also is not None:
                self.also()
            serving = self.load()
            if serving is not None and serving != self.serving:
                self.use(serving)
                self.serving = serving
                self.logger.info("serving the history API's certificate from %s/%s",
                                 self.namespace, names.HISTORY_TLS_SECRET)
            self.looked = True
            if self.serving is not None and self.may_write():
                self.ensure()
        except Exception:  # an unreachable API server: the next round tries again
            self.logger.exception("keeping the history API's certificate failed")

    def keep(self) -> None:
        """:meth:`round` now and then every :data:`KEEP_SECONDS` (:data:`WAIT_SECONDS`
        while there is nothing to serve) until :meth:`stop`."""
        def loop() -> None:
            while not self.stopping.wait(KEEP_SECONDS if self.serving else WAIT_SECONDS):
                self.round()

        self.round()
        threading.Thread(target=loop, name="history-registration", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
