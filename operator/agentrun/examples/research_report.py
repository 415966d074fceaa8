"""The example research-report agent: gather sources → decide → write → publish.

Run as the worker pod's command (``python3 -m agentrun.examples.research_report``; the
SDK's keeper is its only lease renewer). Every stage is a step of the worker SDK
(:meth:`agentrun.worker.Worker.step`), so a successor attempt skips what an earlier
attempt committed and repeats only what was never externalized:

1. *gather*: one tool call per source topic, each its own step ``source-<n>`` (kind
   ``source-notes``). Topics: the pinned package's ``sources`` list (at most its
   ``constraints.maxSources``, and :data:`MAX_SOURCES`), else :data:`DEFAULT_TOPICS`.
2. *decide*: step ``decision`` (kind ``decision``) from :func:`stand_in_model`, a
   stand-in for a model whose output varies between attempts (operating-system
   randomness, seeded by nothing stable): the seed's point that a re-run is not a replay,
   so what was decided must be committed to be kept.
3. *write*: step ``report``, the report's text (kept under the inline record bound).
   With ``review: true`` in the pinned package, the agent then asks a person (question
   ``review``, :meth:`Worker.ask`) whether to publish it, naming its title, length and
   digest, answered as ``{"publish": true|false, "note": "..."}``: the attempt ends
   (``asked``), and the attempt after the answer publishes, or finishes without
   publishing (``declined``).
4. *publish*: the external effect ``publish`` (:meth:`Worker.effect`) at the owner whose
   URL the pinned bindings name (``publish: {url: ...}``), through
   :class:`publisher.Publisher`; fenced per ``<run uid>/<slot>``.

With a model service in the pinned bindings (``model: {url: ...}``,
:mod:`modelclient`), each source's note and the decision are model calls: before each, the
run's budget is checked (``worker.check_budget``: past it the attempt ends ``over-budget``,
exit 0, and the slot waits for a person to raise the budget); after each, its usage is
reported (``worker.usage``, priced by the bindings' ``prices``).

It prints one JSON line per event on stdout, for tests and the demo to read:
``started``; ``step`` (``status``: ``ran`` = done and committed now, ``skipped`` = an
earlier attempt's record reused, ``repeated`` = a record was found but could not be read
intact, so it ran again); ``effect-reconciled`` (the owner's answer), ``effect-sent`` (a
POST the owner answered); ``effect`` (``via``: ``call``, ``reconcile`` or ``recorded`` =
an earlier attempt's outcome); ``paused`` (the fault hook, :mod:`faults`); ``asked`` (the
review question is committed: the attempt ends, exit 0); ``declined``; ``finished``;
``model-call`` (its model and tokens); ``over-budget`` (exit 0: the run's budget is used
up); ``stopped`` (exit 3: an effect the worker cannot settle; exit 4: the lease was lost).
"""

from __future__ import annotations

import functools
import hashlib
import json
import random
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

import yaml

from agentrun.api import bounds, configs
from agentrun.examples import faults
from agentrun.examples.modelclient import ModelService
from agentrun.examples.publisher import Publisher, PublishError
from agentrun.worker import (
    BudgetExceeded,
    Call,
    Context,
    EffectStopped,
    Kind,
    LeaseLapsed,
    PinnedConfig,
    QuestionAsked,
    Reconcile,
    Reconciled,
    Steps,
    Worker,
    WorkerContextError,
    canonical,
)

DEFAULT_TOPICS = ("lease fencing for workers", "journaled step results",
                  "idempotent external effects")
MAX_SOURCES = 12
TOPIC_CHARS = 200
NOTE_CHARS = 200  # a note the model wrote, kept in the source's step
TITLE_CHARS = 80
# A committed report stays inline on the Lease (no payload store needed in the example).
REPORT_BYTES = bounds.INLINE_PAYLOAD_BYTES - 64
ANGLES = ("failure-first", "cost-first", "operator's view", "agent author's view")
EXIT_CONFIG, EXIT_EFFECT_STOPPED, EXIT_LEASE = 2, 3, 4
Emit = Callable[[dict[str, Any]], None]
REVIEW_SCHEMA = {"type": "object", "additionalProperties": False, "required": ["publish"],
                 "properties": {"publish": {"type": "boolean"},
                                "note": {"type": "string", "maxLength": 200}}}
T = TypeVar("T")  # a step's or the effect's result type


class ConfigError(ValueError):
    """The pinned configuration does not give the agent what it needs (message: what)."""


class AgentWorker(Protocol):
    """What the agent uses of :class:`agentrun.worker.Worker` (a fake in unit tests)."""

    @property
    def context(self) -> Context: ...

    @property
    def steps(self) -> Steps: ...

    def step(self, key: str, *, do: Callable[[], T], kind: Kind = Kind.STEP_RESULT,
             durable: bool = False) -> T: ...

    def effect(self, name: str, *, key: str, call: Call[T],
               reconcile: Reconcile | None = None,
               owner: str | None = None) -> T: ...

    def ask(self, key: str, question: str, *, schema: Mapping[str, Any] | None = None
            ) -> Any: ...

    def check_budget(self) -> None: ...

    def usage(self, model: str, *, input_tokens: int, output_tokens: int) -> Any: ...


@dataclass(frozen=True, kw_only=True)
class Brief:
    """What the pinned configuration asks of this agent."""

    outcome: str
    topics: tuple[str, ...]
    publish_url: str
    review: bool = False  # ask a person before publishing
    model_url: str | None = None  # a model service to call (each source's note, the decision)

    @classmethod
    def from_pinned(cls, pinned: Mapping[str, PinnedConfig]) -> Brief:
        return cls.from_texts({kind: config.text for kind, config in pinned.items()})

    @classmethod
    def from_texts(cls, texts: Mapping[str, str]) -> Brief:
        """From the pinned texts by kind (``package``, ``bindings``; others ignored)."""
        try:
            package = configs.parse_document("package", yaml.safe_load(texts["package"]))
            bindings = configs.parse_document("bindings", yaml.safe_load(texts["bindings"]))
        except (KeyError, ValueError, yaml.YAMLError) as error:
            raise ConfigError(f"the pinned package and bindings must parse: {error}") from None
        assert isinstance(package, configs.PackageDocument)
        assert isinstance(bindings, configs.BindingsDocument)
        if bindings.publish is None:
            raise ConfigError("the pinned bindings name no publishing service: add "
                              "`publish: {url: http://<owner>:<port>}` to bindings.yaml")
        extra = package.model_extra or {}
        topics = extra.get("sources") or list(DEFAULT_TOPICS)
        limit = (extra.get("constraints") or {}).get("maxSources", MAX_SOURCES)
        if not (isinstance(topics, list) and all(isinstance(t, str) and t for t in topics)
                and isinstance(limit, int) and limit >= 1):
            raise ConfigError("the package's `sources` must be a list of topics (text) and "
                              "`constraints.maxSources` a positive number")
        if len(topics) > min(limit, MAX_SOURCES):
            raise ConfigError(f"the package lists {len(topics)} sources; at most "
                              f"{min(limit, MAX_SOURCES)} (constraints.maxSources, and "
                              f"{MAX_SOURCES})")
        if not isinstance(extra.get("review", False), bool):
            raise ConfigError("the package's `review` must be true or false")
        return cls(outcome=package.outcome, review=extra.get("review", False),
                   topics=tuple(bounds.clip(t, limit=TOPIC_CHARS) for t in topics),
                   publish_url=bindings.publish.url,
                   model_url=None if bindings.model is None else bindings.model.url)


def search_tool(topic: str, number: int) -> dict[str, Any]:
    """The stand-in for a search tool: notes on one source about ``topic``."""
    return {"source": f"source-{number}", "topic": topic,
            "note": f"Source {number} on {topic}: what fails, and what a successor needs."}


def stand_in_model(notes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The stand-in for a model's decision: an angle and an order of the sources, drawn
    from the operating system's randomness, so two attempts rarely decide alike."""
    draw = random.SystemRandom()
    order = [str(n["source"]) for n in notes]
    draw.shuffle(order)
    return {"angle": draw.choice(ANGLES), "order": order, "draw": draw.getrandbits(32)}


def write_report(*, outcome: str, decision: Mapping[str, Any],
                 notes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The report: a title and a text, short enough to stay an inline record."""
    title = bounds.clip(outcome.strip().splitlines()[0] if outcome.strip() else "Report",
                        limit=TITLE_CHARS)
    by_source = {str(n["source"]): n for n in notes}
    lines = [f"# {title}", "", f"Angle: {decision['angle']}.", ""]
    lines += [f"- {by_source[s]['note']}" for s in decision["order"] if s in by_source]
    text = "\n".join(lines)
    while len(canonical({"title": title, "text": text})) > REPORT_BYTES:
        text = bounds.clip(text, limit=len(text) - 32)
    return {"title": title, "text": text}


@dataclass(kw_only=True)
class Agent:
    """One attempt of the agent over ``worker``; ``emit`` prints its event lines."""

    worker: AgentWorker
    brief: Brief
    pauses: faults.Pauses
    emit: Emit
    tool: Callable[[str, int], dict[str, Any]] = search_tool
    model: Callable[[Sequence[Mapping[str, Any]]], dict[str, Any]] = stand_in_model
    via: list[str] = field(default_factory=list)  # what the effect did, in order

    def _step(self, key: str, *, kind: Kind, do: Callable[[], T]) -> T:
        def run() -> T:
            result = do()
            self.pauses.at(f"before-commit:{key}")
            return result
        # Durable on return: each step is a model turn or a tool call (nothing to group),
        # and the story's kill points come after a step returned.
        result = self.worker.step(key, do=run, kind=kind, durable=True)
        steps = self.worker.steps
        status = ("skipped" if key in steps.done else
                  "repeated" if key in steps.repeated else "ran")
        self.emit({"event": "step", "key": key, "kind": str(kind), "status": status})
        self.pauses.at(f"after-step:{key}")
        return result

    def _reviewed(self, report: Mapping[str, Any], *, sha256: str) -> bool:
        """A person's review: True to publish; raises QuestionAsked until answered."""
        question = (f"Publish the report {str(report['title'])[:TITLE_CHARS]!r} "
                    f"({len(report['text'])} characters, sha256 {sha256[:16]})?")
        try:
            answer = self.worker.ask("review", question, schema=REVIEW_SCHEMA)
        except QuestionAsked as asked:
            self.emit({"event": "asked", "key": asked.key, "digest": asked.digest})
            self.pauses.at("after-ask:review")
            raise
        self.emit({"event": "reviewed", "answer": answer})
        if answer.get("publish") is True:
            return True
        self.emit({"event": "declined", "note": answer.get("note", "")})
        return False

    def _called(self, prompt: str) -> str:
        """One call of the model service (the run's budget checked first, its usage
        reported after), its content."""
        assert self.brief.model_url is not None
        self.worker.check_budget()  # past the budget: BudgetExceeded, the call never made
        done = ModelService(url=self.brief.model_url).complete(prompt)
        self.worker.usage(done.model, input_tokens=done.input_tokens,
                          output_tokens=done.output_tokens)
        self.emit({"event": "model-call", "model": done.model,
                   "tokens": done.input_tokens + done.output_tokens})
        return done.content

    def _source(self, topic: str, number: int) -> dict[str, Any]:
        notes = self.tool(topic, number)
        if self.brief.model_url is not None:  # the model writes the note
            notes["note"] = bounds.clip(self._called(f"Summarize: {notes['note']}"),
                                        limit=NOTE_CHARS)
        return notes

    def _decided(self, notes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        decision = self.model(notes)
        if self.brief.model_url is not None:
            decision["said"] = bounds.clip(self._called(
                f"Pick an angle for: {[n['topic'] for n in notes]}"), limit=NOTE_CHARS)
        return decision

    def run(self) -> dict[str, Any]:
        """Gather, decide, write, publish; the owner's result of the publication."""
        notes = [self._step(f"source-{n}", kind=Kind.SOURCE_NOTES,
                            do=functools.partial(self._source, topic, n))
                 for n, topic in enumerate(self.brief.topics, start=1)]
        decision = self._step("decision", kind=Kind.DECISION,
                              do=lambda: self._decided(notes))
        report = self._step("report", kind=Kind.STEP_RESULT, do=lambda: write_report(
            outcome=self.brief.outcome, decision=decision, notes=notes))
        sha256 = hashlib.sha256(str(report["text"]).encode()).hexdigest()
        if self.brief.review and not self._reviewed(report, sha256=sha256):
            return {"result": None, "report": sha256}
        context = self.worker.context
        owner = Publisher(url=self.brief.publish_url, fence=f"{context.run_uid}/{context.slot}")
        payload = {"title": report["title"], "sha256": sha256, "chars": len(report["text"])}

        def call(idempotency_key: str, token: int) -> Any:
            self.pauses.at("after-intent:publish")
            result = owner.call(idempotency_key, token, payload)
            self.via.append("call")
            self.emit({"event": "effect-sent", "effect": "publish",
                       "idempotencyKey": idempotency_key, "token": token})
            self.pauses.at("after-call:publish")
            return result

        def reconcile(idempotency_key: str) -> Reconciled:
            answer = owner.reconcile(idempotency_key)
            self.via.append("reconcile")
            self.emit({"event": "effect-reconciled", "effect": "publish",
                       "idempotencyKey": idempotency_key, "answer": str(answer.answer)})
            return answer

        result = self.worker.effect("publish", key="publish", call=call, reconcile=reconcile,
                                    owner="publisher")
        self.emit({"event": "effect", "effect": "publish",
                   "via": self.via[-1] if self.via else "recorded", "result": result})
        steps = self.worker.steps
        self.emit({"event": "finished", "report": sha256, "skipped": list(steps.done),
                   "repeated": list(steps.repeated)})
        return {"result": result, "report": sha256}


def print_event(event: dict[str, Any], *, attempt: int) -> None:
    print(json.dumps({**event, "attempt": attempt}, sort_keys=True), flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """The worker pod's entrypoint (no arguments); the exit code ends the attempt."""
    if argv:
        print(f"research_report takes no arguments (got {' '.join(argv)[:80]}); it reads "
              "its attempt from the environment the operator sets", file=sys.stderr)
        return EXIT_CONFIG
    try:
        worker = Worker.from_env()
        attempt = worker.context.attempt
        emit: Emit = lambda event: print_event(event, attempt=attempt)  # noqa: E731
        pauses = faults.Pauses.from_spec(
            faults.environ_spec(), attempt=attempt,
            announce=lambda point: emit({"event": "paused", "point": point}))
        brief = Brief.from_pinned(worker.context.pinned)
    except (WorkerContextError, faults.FaultSpecError, ConfigError) as error:
        print(f"research_report: {error}", file=sys.stderr)
        return EXIT_CONFIG
    worker.start()
    try:
        c = worker.context
        emit({"event": "started", "run": c.run, "slot": c.slot, "node": c.node,
              "token": c.fencing_token})
        pauses.at("start")
        Agent(worker=worker, brief=brief, pauses=pauses, emit=emit).run()
        return 0
    except QuestionAsked:
        return 0  # asking is not a failure: the operator ends the attempt Asked
    except BudgetExceeded as stopped:
        emit({"event": "over-budget", "why": stopped.reason})
        return 0  # nor is the budget: the operator ends it OverBudget, a person decides
    except EffectStopped as error:
        emit({"event": "stopped", "why": str(error), "idempotencyKey": error.idempotency_key})
        return EXIT_EFFECT_STOPPED
    except (LeaseLapsed, PublishError) as error:
        emit({"event": "stopped", "why": f"{type(error).__name__}: {error}"})
        return EXIT_LEASE if isinstance(error, LeaseLapsed) else 1
    finally:
        worker.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
