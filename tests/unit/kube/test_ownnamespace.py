"""``kube.ownnamespace``: where the running operator learns the namespace it is installed
in (no cluster): the flag, then the pod's ``POD_NAMESPACE``, then its service account's
namespace file, then the plain manifests' namespace; a name that is no namespace's is
refused with its source."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentrun.api import names
from agentrun.kube import ownnamespace


@pytest.fixture
def account(tmp_path: Path) -> Path:
    found = tmp_path / "namespace"
    found.write_text("from-the-file\n")  # as the kubelet mounts it (no newline matters)
    return found


def test_the_flag_wins_then_the_pod_then_its_account_file(account: Path) -> None:
    pod = {ownnamespace.ENV: "from-the-pod"}
    assert ownnamespace.operator_namespace(flag="agentrun-ops", environ=pod,
                                           account_file=account) == "agentrun-ops"
    assert ownnamespace.operator_namespace(environ=pod, account_file=account) == "from-the-pod"
    assert ownnamespace.operator_namespace(environ={}, account_file=account) == "from-the-file"


def test_outside_a_pod_it_is_the_plain_manifests_namespace(tmp_path: Path) -> None:
    assert ownnamespace.operator_namespace(
        environ={ownnamespace.ENV: ""}, account_file=tmp_path / "missing") \
        == names.OPERATOR_NAMESPACE == "agentrun-system"


@pytest.mark.parametrize(("flag", "environ", "says"), [
    ("Agentrun_Ops", {}, "--operator-namespace must be a namespace name"),
    (None, {ownnamespace.ENV: "a" * 64}, "$POD_NAMESPACE must be a namespace name"),
])
def test_a_name_that_is_no_namespace_is_refused_with_its_source(
        flag: str | None, environ: dict[str, str], says: str, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=says.replace("$", r"\$")):
        ownnamespace.operator_namespace(flag=flag, environ=environ,
                                        account_file=tmp_path / "missing")
