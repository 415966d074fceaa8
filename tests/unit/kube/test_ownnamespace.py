"""``kube.ownnamespace``: where the running operator learns the namespace it is installed
in (no cluster): the flag, then the pod's ``POD_NAMESPACE``, then its service account's
namespace file, then the plain manifests' namespace; a name that is no namespace's, or one
the operator must never keep its Secrets in (``default``, the control plane's), is refused
with its source."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest

from agentrun.api import names
from agentrun.core.policies import fencing
from agentrun.kube import ownnamespace


@pytest.fixture
def account(tmp_path: Path) -> Path:
    found = tmp_path / "namespace"
    found.write_text("from-the-file\n")  # as the kubelet mounts it (no newline matters)
    return found


def test_the_flag_wins_then_the_pod_then_its_account_file(account: Path) -> None:
    pod = {ownnamespace.ENV: "from-the-pod"}
    assert ownnamespace.resolve(flag="agentrun-ops", environ=pod, account_file=account) \
        == ownnamespace.Found(name="agentrun-ops", source="--operator-namespace")
    assert ownnamespace.resolve(environ=pod, account_file=account) == ownnamespace.Found(
        name="from-the-pod", source="$POD_NAMESPACE")
    assert ownnamespace.resolve(environ={}, account_file=account) == ownnamespace.Found(
        name="from-the-file", source=str(account))


def test_outside_a_pod_it_is_the_plain_manifests_namespace(tmp_path: Path) -> None:
    found = ownnamespace.resolve(environ={ownnamespace.ENV: ""},
                                 account_file=tmp_path / "missing")
    assert found.name == names.OPERATOR_NAMESPACE == "agentrun-system"
    assert found.source == ownnamespace.DEFAULT_SOURCE


@pytest.mark.parametrize(("flag", "environ", "says"), [
    ("Agentrun_Ops", {}, "--operator-namespace must be a namespace name"),
    ("", {ownnamespace.ENV: "from-the-pod"},  # given empty: refused, never skipped
     "--operator-namespace must be a namespace name (a DNS label: lower-case letters, "
     "digits and '-', at most 63), not ''"),
    (" ", {}, "--operator-namespace must be a namespace name"),
    (None, {ownnamespace.ENV: "a" * 64}, "$POD_NAMESPACE must be a namespace name"),
])
def test_a_name_that_is_no_namespace_is_refused_with_its_source(
        flag: str | None, environ: dict[str, str], says: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        ownnamespace.resolve(flag=flag, environ=environ, account_file=tmp_path / "missing")


def test_the_refused_names_are_default_and_every_one_the_fence_spares() -> None:
    """The fence never applies in ``fencing.SPARED``: were the operator there, its leader
    would pass the dry-run check before admission saw its token."""
    assert set(ownnamespace.REFUSED) == {"default", *fencing.SPARED} == {
        "default", "kube-system", "kube-public", "kube-node-lease"}
    assert names.OPERATOR_NAMESPACE not in ownnamespace.REFUSED


@pytest.mark.parametrize("name", ownnamespace.REFUSED)
def test_default_and_the_control_planes_namespaces_are_refused_from_every_source(
        name: str, tmp_path: Path) -> None:
    account, missing = tmp_path / "namespace", tmp_path / "missing"
    account.write_text(name)
    for flag, environ, found, source in [
            (name, {}, missing, "--operator-namespace"),
            (None, {ownnamespace.ENV: name}, missing, "$POD_NAMESPACE"),
            (None, {}, account, str(account))]:
        with pytest.raises(ValueError, match=f"^{re.escape(source)} names {name},") as refused:
            ownnamespace.resolve(flag=flag, environ=environ, account_file=found)
        says = str(refused.value)
        assert says.startswith(f"{source} names {name}, which cannot be the operator's "
                               "namespace: it is ")
        assert "only cluster admins may read or write Secrets" in says
        assert f"such as {names.OPERATOR_NAMESPACE}" in says
    fenced = "the operator's fencing policy never applies"
    assert (fenced in says) == (name in fencing.SPARED)


def test_a_service_account_file_that_is_not_text_is_an_error_naming_it(
        tmp_path: Path) -> None:
    account = tmp_path / "namespace"
    account.write_bytes(b"agentrun-\xff\xfe")
    with pytest.raises(ValueError, match=f"^{re.escape(str(account))} is not UTF-8 text") \
            as refused:
        ownnamespace.resolve(environ={}, account_file=account)
    assert "--operator-namespace" in str(refused.value)


def test_the_namespace_and_its_source_are_said_at_start(
        caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="agentrun"):
        ownnamespace.announce(ownnamespace.Found(name="agentrun-ops", source="$POD_NAMESPACE"),
                              logger=logging.getLogger("agentrun"))
    assert caplog.messages == ["the operator's namespace is agentrun-ops "
                               "(from $POD_NAMESPACE)"]
