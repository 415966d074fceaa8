"""Who is asking the history API: the person the API server's front proxy vouches for.

An aggregated API is reached only through the API server, which authenticates the person
and forwards the request with their identity in headers, over a connection whose client
certificate is the *front proxy*'s: issued by the request-header CA and, when the API
server lists names, named one of them. Both come from the ConfigMap
``kube-system/extension-apiserver-authentication``, as for every aggregated API server.
The headers are believed only on such a connection (the server checks the certificate
first), and only as the API server writes them: the configured header names, tried in
their configured order, each bounded.

Terms: a *person* is the user, groups and extra attributes the headers name; *may read*
is the API server's own answer to a SubjectAccessReview for ``get`` on the slot.
"""

from __future__ import annotations

import json
import urllib.parse
from dataclasses import dataclass
from typing import Any

from agentrun import rest
from agentrun.api import names

AUTHENTICATION = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"
HEADER_CHARS = 1024  # a user name, group or extra value (the API server's own are short)
# Groups or extra values one request may carry. The API server sends one header per group,
# and the server reads at most 100 headers (Python's http.server): a person in more groups
# than this is refused with a message saying so, never authorized on a part of them.
HEADER_VALUES = 64


class Unidentified(Exception):
    """The headers name nobody this server can authorize (the message says why)."""


@dataclass(frozen=True)
class Person:
    """Who the API server says is asking (its user, groups and extra attributes)."""

    user: str
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True, kw_only=True)
class FrontProxy:
    """What the API server's front proxy is, from ``extension-apiserver-authentication``:
    the CA its client certificate chains to, the names it may have (empty: any), and the
    headers it puts the person in (each list in the order the API server tries them)."""

    ca: str
    allowed: tuple[str, ...] = ()
    users: tuple[str, ...] = ("X-Remote-User",)
    groups: tuple[str, ...] = ("X-Remote-Group",)
    extras: tuple[str, ...] = ("X-Remote-Extra-",)

    @classmethod
    def from_configmap(cls, data: dict[str, str]) -> FrontProxy | None:
        """None when the API server names no request-header CA (no front proxy: nobody
        can be authenticated here)."""
        ca = data.get("requestheader-client-ca-file", "").strip()
        if not ca:
            return None

        def listed(key: str, default: tuple[str, ...]) -> tuple[str, ...]:
            try:
                found = json.loads(data.get(key) or "null")
            except ValueError:
                return default
            return tuple(str(v) for v in found) if isinstance(found, list) else default

        return cls(ca=ca, allowed=listed("requestheader-allowed-names", ()),
                   users=listed("requestheader-username-headers", cls.users),
                   groups=listed("requestheader-group-headers", cls.groups),
                   extras=listed("requestheader-extra-headers-prefix", cls.extras))

    def admits(self, peer: dict[str, Any] | None) -> bool:
        """Whether a verified client certificate (``ssl.getpeercert()``) is the proxy's."""
        if not peer:
            return False
        if not self.allowed:
            return True
        common = [value for rdn in peer.get("subject", ()) for key, value in rdn
                  if key == "commonName"]
        return any(name in self.allowed for name in common)

    def person(self, headers: list[tuple[str, str]]) -> Person:
        """The person the headers name. The user is the first configured user header
        present, in the configured order (as the API server reads them); groups and extra
        from every configured name. :class:`Unidentified` when there is no user, or any of
        those values is over its bound: never trusted in part."""
        lowered = [(k.lower(), v) for k, v in headers]
        groups = {h.lower() for h in self.groups}
        extras = tuple(p.lower() for p in self.extras)
        user = next((v for name in self.users for k, v in lowered if k == name.lower()), "")
        if not user:
            raise Unidentified("the request names no user")
        found_groups = tuple(v for k, v in lowered if k in groups)
        extra: dict[str, list[str]] = {}
        for key, value in lowered:
            prefix = next((p for p in extras if key.startswith(p)), None)
            if prefix is not None:
                extra.setdefault(urllib.parse.unquote(key[len(prefix):]), []).append(value)
        values = [user, *found_groups, *(v for vs in extra.values() for v in vs)]
        if any(len(v) > HEADER_CHARS for v in values):
            raise Unidentified(f"a user, group or extra value over {HEADER_CHARS} characters")
        if len(found_groups) > HEADER_VALUES or len(extra) > HEADER_VALUES:
            raise Unidentified(f"more than {HEADER_VALUES} groups or extra attributes: the "
                               "history API cannot check rights on a part of them")
        return Person(user=user, groups=found_groups,
                      extra=tuple((k, tuple(v)) for k, v in sorted(extra.items())))


def read(client: rest.Rest) -> FrontProxy | None:
    """The API server's front proxy, or None when it names none."""
    found = client.get(AUTHENTICATION) or {}
    return FrontProxy.from_configmap(found.get("data") or {})


def may_read(client: rest.Rest, person: Person, *, namespace: str, slot: str,
             verb: str = "get") -> bool:
    """Whether ``person`` may ``get`` the slot (or ``verb`` on it), by the API server's own
    answer."""
    review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
              "spec": {"user": person.user, "groups": list(person.groups),
                       "extra": {k: list(v) for k, v in person.extra},
                       "resourceAttributes": {"namespace": namespace, "verb": verb,
                                              "group": names.GROUP, "version": names.VERSION,
                                              "resource": "slots", "name": slot}}}
    answer = client.request("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                            body=review)
    return bool((answer.get("status") or {}).get("allowed"))
