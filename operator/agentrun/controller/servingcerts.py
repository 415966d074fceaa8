"""The history API's TLS: a serving certificate of the operator's own, and the API server
told to trust it.

The API server reaches an aggregated API over TLS and verifies it against the
APIService's ``caBundle``. The operator makes a self-signed certificate at each start
(an ECDSA P-256 key that never leaves the process) for the Service's DNS names and puts
it in its own APIService's ``caBundle``, then keeps it there (an upgrade that re-applies
the APIService may clear it). Why not a certificate from the chart or cert-manager: the
default install must work with nothing else in the cluster, and a key made in memory is
never stored in a Secret anyone could read. The cost: one replica serves the history (the
one whose certificate is in the bundle), which is what the operator runs today.
"""

from __future__ import annotations

import base64
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from agentrun.api import names
from agentrun.kube import rest

APISERVICE_PATH = f"/apis/apiregistration.k8s.io/v1/apiservices/{names.HISTORY_APISERVICE}"
VALID_FOR = timedelta(days=3650)  # the key dies with the process; the date only must not
KEEP_SECONDS = 30.0  # how often the APIService's caBundle is checked (and restored)


def dns_names(*, service: str = names.HISTORY_SERVICE,
              namespace: str = names.OPERATOR_NAMESPACE) -> list[str]:
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


@dataclass(kw_only=True)
class Registration:
    """Keeps the APIService's ``caBundle`` naming ``serving`` (see the module)."""

    client: rest.Rest
    serving: Serving
    logger: logging.Logger
    also: Callable[[], None] | None = None  # done each round too (the front proxy read)
    stopping: threading.Event = field(default_factory=threading.Event)

    def ensure(self) -> bool:
        """Put the certificate in the APIService's bundle if it is not; False (logged)
        when the APIService is missing or cannot be read or patched."""
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
        self.logger.info("the APIService %s trusts this process's certificate",
                         names.HISTORY_APISERVICE)
        return True

    def keep(self) -> None:
        """:attr:`also`, then :meth:`ensure`, now and every :data:`KEEP_SECONDS` until
        :meth:`stop` (the first round before this returns: serving starts ready)."""
        def round_() -> None:
            try:
                if self.also is not None:
                    self.also()
                self.ensure()
            except Exception:  # an unreachable API server: the next round tries again
                self.logger.exception("checking the APIService %s failed",
                                      names.HISTORY_APISERVICE)

        def loop() -> None:
            while not self.stopping.wait(KEEP_SECONDS):
                round_()

        round_()
        threading.Thread(target=loop, name="history-registration", daemon=True).start()

    def stop(self) -> None:
        self.stopping.set()
