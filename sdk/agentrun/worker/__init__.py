"""The worker SDK: what an agent author uses in a worker pod (docs/worker-sdk.md).

Public, the names in ``__all__`` (import them from here: ``from agentrun.worker import
Worker``):

- :class:`Worker` (``Worker.from_env()``, ``with``, ``step``, ``effect``, ``ask``,
  ``artifact``, ``flush``) and what it hands out: :class:`Context` (``worker.context``) with its
  :class:`PinnedConfig` snapshots, :class:`Steps` (``worker.steps``: what was skipped,
  what ran again) and :class:`Artifact` (``worker.artifact``: a stream stored in the
  journal, read back as one);
- model usage: ``worker.usage`` (each model call's tokens and cost, journaled with its
  step) returns a :class:`ModelUsage` and refuses a report with :class:`UsageError`;
  ``worker.check_budget()`` (before a model call; effects check by themselves) raises
  :class:`BudgetExceeded` once the run's usage (all its slots') reached its budget: end
  the attempt, as after a question;
- the errors an author catches: :class:`WorkerContextError` (not in a pod the operator
  claimed); :class:`LeaseLapsed` (wait and retry) and :class:`LeaseLost` (exit: a
  successor may be running); :class:`EffectStopped` (stop the attempt) and its kinds
  :class:`AmbiguousEffect` and :class:`EffectStillInProgress`; :class:`QuestionAsked`
  (``ask`` asked a person: end the attempt) and :class:`QuestionError` (a question out of
  its bounds); :class:`ApprovalRequested` (an effect waits for people's approval of its
  payload: end the attempt; a ``QuestionAsked``), :class:`EffectDenied` (they denied it:
  never sent) and :class:`ApprovalError` (an effect that needs approval called without
  its payload); :func:`payload_digest` (what an approval is bound to); :class:`RecordError` and
  its kinds :class:`ResultNotStored`, :class:`RecordLimit`, :class:`RecordRefused` and
  :class:`RecordConflict`;
- the types ``step`` and ``effect`` take: :data:`Call` and :data:`Reconcile` (the effect's
  owner, called and asked), :class:`Reconciled` and :class:`Answer` (the owner's answer),
  :class:`Kind` (a record's kind), :data:`JSON`; the payload store for results too large
  to keep inline (:class:`PayloadStore`, :class:`FsspecStore`), and :func:`canonical`,
  the bytes a payload is measured by;
- :func:`idempotency_key`: the key an effect's owner deduplicates by (the same in every
  attempt of a slot), for an owner or a check that must compute it too.

Everything else is in private modules: the context's checks (``_context``), the lease
keeper (``_keeper``, its pure decisions ``_renewals``, one renewal's reads and writes
``_renewer``), the recoverable prefix (``_prefix``), the records on the Lease
(``_records``), the effect ledger (``_effects``), the ``Worker`` that puts them together
(``_sdk``), the questions (``_questions``), model usage (``_usage``), the journal
(``_journal``, its group commit
``_journalcommits``, its artifacts ``_artifacts``) and the sidecar (``_sidecar``,
``_sidecarsessions``, ``_sidecarstreams``, ``_sidecarserver``). Why:
they are how the guarantees are kept, and they change with the operator (what a record
looks like, how a renewal is timed); a name exported here is one the project keeps for
agents, a private one is not. The public submodules are :mod:`agentrun.worker.cli`, the
``agentrun-worker`` command the operator's pods run (``run``, ``sidecar``, ``ready``), and
:mod:`agentrun.worker.langgraph`, LangGraph's checkpointer on the journal (the
``langgraph`` extra: only it imports LangGraph).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentrun.worker._approvals import (
        ApprovalError,
        ApprovalRequested,
        EffectDenied,
        payload_digest,
    )
    from agentrun.worker._artifacts import Artifact
    from agentrun.worker._context import Context, PinnedConfig, WorkerContextError
    from agentrun.worker._effects import (
        AmbiguousEffect,
        Answer,
        Call,
        EffectStillInProgress,
        EffectStopped,
        Reconcile,
        Reconciled,
        ResultNotStored,
        idempotency_key,
    )
    from agentrun.worker._keeper import LeaseLapsed, LeaseLost
    from agentrun.worker._prefix import Steps
    from agentrun.worker._questions import QuestionAsked, QuestionError
    from agentrun.worker._records import (
        JSON,
        FsspecStore,
        Kind,
        PayloadStore,
        RecordConflict,
        RecordError,
        RecordLimit,
        RecordRefused,
        canonical,
    )
    from agentrun.worker._sdk import Worker
    from agentrun.worker._usage import BudgetExceeded, ModelUsage, UsageError

# Each public name, by the private module that holds it: loaded when first used (PEP 562),
# so that ``import agentrun.worker.cli`` (the ``agentrun-worker`` command, the sidecar's
# startup probe) does not load the SDK, pydantic and urllib3.
_HOLDERS = {
    "ApprovalError": "_approvals",
    "ApprovalRequested": "_approvals",
    "EffectDenied": "_approvals",
    "payload_digest": "_approvals",
    "Artifact": "_artifacts",
    "Context": "_context",
    "PinnedConfig": "_context",
    "WorkerContextError": "_context",
    "AmbiguousEffect": "_effects",
    "Answer": "_effects",
    "Call": "_effects",
    "EffectStillInProgress": "_effects",
    "EffectStopped": "_effects",
    "Reconcile": "_effects",
    "Reconciled": "_effects",
    "ResultNotStored": "_effects",
    "idempotency_key": "_effects",
    "LeaseLapsed": "_keeper",
    "LeaseLost": "_keeper",
    "Steps": "_prefix",
    "QuestionAsked": "_questions",
    "QuestionError": "_questions",
    "FsspecStore": "_records",
    "JSON": "_records",
    "Kind": "_records",
    "PayloadStore": "_records",
    "RecordConflict": "_records",
    "RecordError": "_records",
    "RecordLimit": "_records",
    "RecordRefused": "_records",
    "canonical": "_records",
    "Worker": "_sdk",
    "BudgetExceeded": "_usage",
    "ModelUsage": "_usage",
    "UsageError": "_usage",
}


if not TYPE_CHECKING:  # for mypy the names are the imports above: a typo stays an error

    def __getattr__(name: str) -> Any:
        holder = _HOLDERS.get(name)
        if holder is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{__name__}.{holder}"), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "JSON",
    "AmbiguousEffect",
    "Answer",
    "ApprovalError",
    "ApprovalRequested",
    "Artifact",
    "BudgetExceeded",
    "Call",
    "Context",
    "EffectDenied",
    "EffectStillInProgress",
    "EffectStopped",
    "FsspecStore",
    "Kind",
    "LeaseLapsed",
    "LeaseLost",
    "ModelUsage",
    "PayloadStore",
    "PinnedConfig",
    "QuestionAsked",
    "QuestionError",
    "Reconcile",
    "Reconciled",
    "RecordConflict",
    "RecordError",
    "RecordLimit",
    "RecordRefused",
    "ResultNotStored",
    "Steps",
    "UsageError",
    "Worker",
    "WorkerContextError",
    "canonical",
    "idempotency_key",
    "payload_digest",
]
