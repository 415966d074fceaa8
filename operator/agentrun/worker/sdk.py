"""``Worker``: the SDK's entry point in a worker pod: its context and its lease keeper.

    with Worker.from_env() as worker:      # reads and verifies; renews once; keeps renewing
        worker.keeper.ensure_live()        # before starting an effect (the ledger does it)
        package = worker.context.pinned["package"].text

Leaving the ``with`` block (or :meth:`Worker.stop`) stops renewing; the operator then sees
the attempt end by the pod's exit. A :class:`keeper.LeaseLost` means exit now: a
successor may be running. A :class:`keeper.LeaseLapsed` means wait
(:meth:`keeper.Keeper.wait_live`) and retry the effect; renewal goes on meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import kubernetes

from agentrun.kube import clients, rest
from agentrun.worker import keeper, renewer
from agentrun.worker.context import Context
from agentrun.worker.renewals import Verdict

# Every connection and read of the keeper's requests times out after this (urllib3's own
# retries are off): a hung request must not keep the keeper from renewing again for long.
REQUEST_TIMEOUT_SECONDS = 5.0
START_TIMEOUT_SECONDS = 60.0


def pod_api() -> rest.Rest:
    """The API as this pod: ``$KUBECONFIG`` if set, else its service account (in-cluster)."""
    configuration = clients.configure().configuration
    configuration.retries = False  # the keeper retries on its own schedule, not urllib3's
    return rest.Rest(kubernetes.client.ApiClient(configuration), timeout=rest.Timeout(
        connect=REQUEST_TIMEOUT_SECONDS, read=REQUEST_TIMEOUT_SECONDS))


@dataclass(kw_only=True)
class Worker:
    context: Context
    keeper: keeper.Keeper

    @classmethod
    def from_env(cls, *, api: rest.Rest | None = None) -> Worker:
        """The worker of this pod (raises :class:`context.WorkerContextError` outside one).
        Nothing is written until :meth:`start`."""
        context = Context.from_env()
        return cls(context=context, keeper=keeper.Keeper(renewer=renewer.Renewer(
            api=api or pod_api(), namespace=context.namespace, lease=context.lease,
            identity=context.identity)))

    def start(self, *, timeout: float = START_TIMEOUT_SECONDS,
              on_lapse: Callable[[str], None] | None = None,
              on_resume: Callable[[str], None] | None = None,
              on_lost: Callable[[str], None] | None = None) -> None:
        """Renew once (telling the operator the worker started), then in the background.
        Raises :class:`keeper.LeaseLost` if the lease is not this pod's, or
        :class:`keeper.LeaseLapsed` if no renewal succeeded within ``timeout`` seconds."""
        decision = self.keeper.first_renewal(timeout=timeout)
        if decision.verdict is Verdict.STOP:
            raise keeper.LeaseLost(decision.reason)
        if decision.verdict is Verdict.RETRY:
            raise keeper.LeaseLapsed(f"no renewal within {timeout:.0f}s: {decision.reason}")
        self.keeper.start(on_lapse=on_lapse, on_resume=on_resume, on_lost=on_lost)

    def stop(self) -> None:
        self.keeper.stop()

    def __enter__(self) -> Worker:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.stop()
