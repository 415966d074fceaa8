"""The fields commands carry, each with its bound, its admission check and its plugin flag.

Several commands share a field (a reason is given to a reassignment, a hold, a give-up and
a resolve-effect): each is declared here once, so its bound, its admission check and its
flag cannot drift apart between the commands. A command with a field of its own declares
it in its own module the same way. The bounds are :mod:`agentrun.api.bounds`'s; admission
checks the same bounds and patterns, so what admission lets through the operator does not
reject as Malformed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentrun.api import bounds, names
from agentrun.core.commands.spec import (
    Bound,
    Field,
    Object,
    dynamic_validation,
    matches,
    validation,
)

NEW = "variables.new"


def static(*, required: bool, valid: str, message: str) -> Callable[[str, str], Object]:
    """An admission check: ``valid`` (CEL over ``{value}``) whenever the annotation is
    written, which must be (``required``) or may be; ``message`` is about ``{key}``."""
    def check(key: str, when: str) -> Object:
        value = f"{NEW}['{key}']"
        present = f"('{key}' in {NEW} && " if required else f"(!('{key}' in {NEW}) || "
        return validation(f"{when}{present}{valid.format(value=value)})", message.format(key=key))
    return check


def _tenant_check(key: str, when: str) -> Object:
    """The tenant's message names the namespace's tenant: a message expression."""
    value = f"{NEW}['{key}']"
    return dynamic_validation(
        f"{when}!('{key}' in {NEW}) || ({value}.size() <= {bounds.TENANT_CHARS} && "
        f"{matches(value, bounds.TENANT_PATTERN)} && {value} == "
        f"namespaceObject.metadata.?labels.orValue({{}})[?'{names.TENANT_LABEL}']"
        ".orValue(''))",
        f"'{key} must be the namespace\\'s tenant (its label {names.TENANT_LABEL}'"
        f" + ', here ' + namespaceObject.metadata.?labels.orValue({{}})"
        f"[?'{names.TENANT_LABEL}'].orValue('none') + ')'")


REASON = Field(
    name="reason", suffix="reason", label="--reason", flag="--reason", required=True,
    help="why (recorded)", bound=Bound(chars=bounds.REASON_BYTES, in_bytes=True),
    admission=static(required=True, valid=f"bytes({{value}}).size() <= {bounds.REASON_BYTES}"
                     " && {value}.trim().size() > 0",
                     message=f"{{key}} is required: say why, non-blank, in at most "
                             f"{bounds.REASON_BYTES} bytes"))
WORKER_CLASS = Field(
    name="worker_class", suffix="worker-class", label="--class", flag="--class",
    help="the worker class of the next attempt (default: the slot's)",
    bound=Bound(chars=bounds.WORKER_CLASS_CHARS, pattern=bounds.WORKER_CLASS_PATTERN),
    admission=static(required=False, valid=f"{{value}}.size() <= {bounds.WORKER_CLASS_CHARS}"
                     f" && {matches('{value}', bounds.WORKER_CLASS_PATTERN)}",
                     message="{key} must be a worker class name (lower-case letters, digits, "
                             "'-' and '.', at most "
                             f"{bounds.WORKER_CLASS_CHARS} characters)"))
RUN = Field(  # no flag: the plugin fills in the slot's own run
    name="run", suffix="run", label="the slot's run",
    bound=Bound(chars=bounds.RUN_CHARS, pattern=bounds.RUN_PATTERN),
    admission=static(required=True, valid=f"{{value}}.size() <= {bounds.RUN_CHARS} && "
                     f"{matches('{value}', bounds.RUN_PATTERN)} && {{value}} == object.spec.run",
                     message="{key} is required and must name the slot's run (its spec.run): "
                             "set {key}=<run> to the run you mean"))
TENANT = Field(
    name="tenant", suffix="tenant", label="--tenant", flag="--tenant",
    help="assert the slot's tenant (rejected if it is another's)",
    bound=Bound(chars=bounds.TENANT_CHARS, pattern=bounds.TENANT_PATTERN),
    admission=_tenant_check)
STEP_KEY_BOUND = Bound(chars=bounds.STEP_KEY_CHARS, pattern=bounds.STEP_KEY_PATTERN)
STEP_KEY_VALID = (f"{{value}}.size() <= {bounds.STEP_KEY_CHARS} "
                  f"&& {matches('{value}', bounds.STEP_KEY_PATTERN)}")


def _step_key(name: str, *, what: str, where: str) -> Field:
    """The ``--key`` of a command about one record key (an effect's, a question's)."""
    return Field(
        name=name, suffix="key", label="--key", flag="--key", required=True, metavar="KEY",
        help=f"the {what}'s key", bound=STEP_KEY_BOUND,
        admission=static(required=True, valid=STEP_KEY_VALID,
                         message=f"{{key}} is required: the {what}'s key as {where} shows it "
                                 "(lower-case letters, digits and '-', at most "
                                 f"{bounds.STEP_KEY_CHARS})"))


EFFECT_KEY = _step_key("effect_key", what="effect", where="status.effects")
OUTCOME = Field(
    name="outcome", suffix="outcome", label="--outcome", flag="--outcome", required=True,
    choices=("applied", "not-applied"),
    bound=Bound(chars=bounds.RESOLVE_OUTCOME_CHARS, pattern=bounds.RESOLVE_OUTCOME_PATTERN),
    admission=static(required=True, valid=matches('{value}', bounds.RESOLVE_OUTCOME_PATTERN),
                     message="{key} is required: applied or not-applied (the effect owner's "
                             "answer)"))
RESULT = Field(
    name="result", suffix="result", label="--result", flag="--result",
    help="the owner's result: JSON or text",
    bound=Bound(chars=bounds.RESOLVE_RESULT_BYTES, in_bytes=True),
    admission=static(required=False,
                     valid=f"bytes({{value}}).size() <= {bounds.RESOLVE_RESULT_BYTES}",
                     message=f"{{key}} must be at most {bounds.RESOLVE_RESULT_BYTES} bytes "
                             "(JSON, or text)"))
QUESTION_KEY = _step_key("question_key", what="question", where="status.questions")
VALUE = Field(
    name="value", suffix="value", label="--value", flag="--value", required=True,
    file_flag="--file", metavar="JSON", help="the answer, as JSON (or --file F: read it from F)",
    bound=Bound(chars=bounds.ANSWER_VALUE_BYTES, in_bytes=True, json=True),
    by_reference=Bound(chars=bounds.ANSWER_FILE_BYTES, in_bytes=True, json=True),
    admission=static(required=False,
                     valid=f"bytes({{value}}).size() <= {bounds.ANSWER_VALUE_BYTES}",
                     message=f"{{key}} must be the answer as JSON text, at most "
                             f"{bounds.ANSWER_VALUE_BYTES} bytes (a larger one: "
                             "-value-from)"))
VALUE_FROM = Field(  # no flag: the plugin sends a --file larger than -value holds this way
    name="value_from", suffix="value-from", label="the answer's ConfigMap",
    bound=Bound(chars=bounds.VALUE_FROM_CHARS, pattern=bounds.VALUE_FROM_PATTERN),
    admission=static(required=False, valid=f"{{value}}.size() <= {bounds.VALUE_FROM_CHARS} "
                     f"&& {matches('{value}', bounds.VALUE_FROM_PATTERN)}",
                     message="{key} must be <configmap>/<key>@sha256:<64 hex digits>: the "
                             "ConfigMap in the slot's namespace that holds the answer, and "
                             "the sha256 of the value"))
def _shown_digest(slot: Mapping[str, Any], given: Mapping[str, str]) -> str | None:
    """The digest of the Pending question under the given key in the slot read."""
    entries = (slot.get("status") or {}).get("questions") or []
    return next((str(q.get("digest")) for q in reversed(entries)
                 if q.get("key") == given.get("question_key") and q.get("state") == "Pending"),
                None)


def _digest(name: str, *, of: str, required: bool, help_: str,
            fill: Callable[[Mapping[str, Any], Mapping[str, str]], str | None] | None = None,
            ) -> Field:
    """The ``--digest`` of a command bound to what the person read: the sha256 ``of``
    something status.questions shows (a question, an effect's payload)."""
    said = "is required:" if required else "must be"
    return Field(
        name=name, suffix="digest", label="--digest", flag="--digest", required=required,
        metavar="SHA256", help=help_, fill=fill,
        bound=Bound(chars=bounds.DIGEST_CHARS, pattern=bounds.DIGEST_PATTERN),
        admission=static(required=required, valid=f"{{value}}.size() <= {bounds.DIGEST_CHARS}"
                         f" && {matches('{value}', bounds.DIGEST_PATTERN)}",
                         message=f"{{key}} {said} the sha256 digest of {of} (lower-case hex "
                                 f"digits, {bounds.DIGEST_CHARS} of them), as "
                                 "status.questions shows it"))


DIGEST = _digest(
    "digest", of="the question", required=False, fill=_shown_digest,
    help_="the digest of the question you answer (status.questions; the plugin fills in the "
          "one it read): refused if the question waiting is another")
APPROVAL_KEY = _step_key("approval_key", what="effect", where="status.questions (an approval)")
PAYLOAD_DIGEST = _digest(
    "payload_digest", of="the effect's payload", required=True,
    help_="the sha256 of the exact payload you approve (status.questions shows it; check it "
          "against the bytes: kubectl agentrun history --record <key>.payload)")
