"""``Reader.stamping`` reads the stamping epoch Secret in the operator's own namespace, the
one it was given (no default: an operator outside agentrun-system that read there would
find another install's epoch, or none, and trust commands wrongly or never), and so does
its :meth:`~agentrun.kube.reads.Reader.fresh` copy, which the reconcilers use for the
reads no cache may answer."""

from __future__ import annotations

from typing import Any

import pytest

from agentrun.api import names
from agentrun.kube import reads

SECRET = f"/api/v1/namespaces/agentrun-ops/secrets/{names.STAMPING_SECRET}"


class Recording:
    """A client that answers every GET with nothing, and remembers the paths asked."""

    def __init__(self) -> None:
        self.paths: list[str] = []

    def get(self, path: str) -> dict[str, Any] | None:
        self.paths.append(path)
        return None


@pytest.mark.parametrize("fresh", [False, True], ids=["reader", "fresh"])
def test_the_stamping_secret_is_read_in_the_operators_namespace(fresh: bool) -> None:
    client = Recording()
    reader = reads.Reader(client, operator_namespace="agentrun-ops")  # type: ignore[arg-type]
    asked = reader.fresh() if fresh else reader
    found = asked.stamping()
    secrets = [p for p in client.paths if "/secrets/" in p]
    assert secrets == [SECRET]
    assert names.OPERATOR_NAMESPACE not in " ".join(client.paths)
    assert found.epoch is None  # nothing there: not in force
