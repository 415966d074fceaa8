"""The ValidatingAdmissionPolicies that reject bad writes synchronously.

Built from the commands' specs (:data:`agentrun.core.commands.registry.COMMANDS`: each
command's fields, states, further checks and owner) and the bounds of
:mod:`agentrun.api.bounds`, so that ``kubectl annotate`` fails at once with a message a
person can act on. The operator still decides every command itself: these policies only
refuse earlier what it would refuse anyway.

Who is exempt, and how it is told without knowing any name: the *controller* of a
namespace is whoever may ``update slots/status`` there. That is the operator, the garbage
collector (its role covers every resource) and cluster admins, never a person holding the
editor role. Command checks need no exemption at all: they apply only when a request sets
or changes a command's annotations, and the operator only ever removes them.
"""

from __future__ import annotations

from typing import Any

from agentrun.api import bounds, modelusage, names
from agentrun.core.commands import parsing, registry, spec
from agentrun.core.commands.spec import CommandSpec, RunCommandKeys, matches
from agentrun.core.policies import admission

Object = dict[str, Any]
# One validation, written where a command's field can use it too (below the policies).
validation = spec.validation
dynamic_validation = spec.dynamic_validation
SLOT_COMMANDS = "agentrun-slot-commands"
SLOT_CHANGES = "agentrun-slot-changes"
ACCEPTED_CONFIG = "agentrun-accepted-configuration"
OPERATOR_OBJECTS = "agentrun-operator-objects"
OPERATOR_LABELS = (names.RUN_LABEL, names.NODE_LABEL, names.SLOT_LABEL, names.ATTEMPT_LABEL,
                   names.SNAPSHOT_LABEL)
ACCEPT_VERB, CONFIGURATIONS = "accept", "configurations"
NAMESPACE_TENANT = "agentrun-namespace-tenant"
TENANT_VALUES = "agentrun-tenant-values"
ASSIGN_VERB, TENANTS = "assign", "tenants"


def controller(namespace: str = "request.namespace") -> str:
    """CEL: the requester may update slots/status in the namespace (see the docstring)."""
    return (f"authorizer.group('{names.GROUP}').resource('slots').subresource('status')"
            f".namespace({namespace}).check('update').allowed()")


def accepter() -> str:
    """CEL: the requester is the GitOps/admin identity that may accept configuration."""
    return (f"authorizer.group('{names.GROUP}').resource('{CONFIGURATIONS}')"
            f".namespace(request.namespace).check('{ACCEPT_VERB}').allowed()")


def _strings(values: tuple[str, ...]) -> str:
    return "[" + ", ".join(f"'{v}'" for v in values) + "]"


def match_rule(group: str, version: str, resources: list[str], operations: list[str]) -> Object:
    return {"apiGroups": [group], "apiVersions": [version], "operations": operations,
            "resources": resources, "scope": "*"}


def policy_pair(name: str, *, rules: list[Object], validations: list[Object],
            variables: list[Object] | None = None,
            conditions: list[Object] | None = None,
            namespaces: Object | None = None) -> list[Object]:
    """The policy and its Deny binding; ``namespaces`` selects namespaces (default: all)."""
    spec: Object = {
        "failurePolicy": "Fail",
        "matchConstraints": {"namespaceSelector": namespaces or {}, "objectSelector": {},
                             "resourceRules": rules, "matchPolicy": "Equivalent"},
        "validations": validations,
    }
    if variables:
        spec["variables"] = variables
    if conditions:
        spec["matchConditions"] = conditions
    return [
        {"apiVersion": admission.ADMISSION_API, "kind": "ValidatingAdmissionPolicy",
         "metadata": {"name": name}, "spec": spec},
        {"apiVersion": admission.ADMISSION_API, "kind": "ValidatingAdmissionPolicyBinding",
         "metadata": {"name": name},
         "spec": {"policyName": name, "validationActions": ["Deny"]}},
    ]


ANNOTATIONS = [
    {"name": "new", "expression": "object.metadata.?annotations.orValue({})"},
    {"name": "old", "expression": "oldObject == null ? {} : "
                                  "oldObject.metadata.?annotations.orValue({})"},
]
STATUS = [
    {"name": "state", "expression": "oldObject == null ? 'Pending' : "
                                    "oldObject.?status.?state.orValue('Pending')"},
    {"name": "held", "expression": "oldObject != null && oldObject.?status.?conditions"
                                   ".orValue([]).exists(c, c.type == 'Held' && "
                                   "c.status == 'True')"},
    {"name": "unresolved", "expression": "oldObject != null && oldObject.?status.?conditions"
                                         ".orValue([]).exists(c, c.type == "
                                         f"'{names.EFFECT_UNRESOLVED_CONDITION}' && "
                                         "c.status == 'True')"},
    {"name": "attempts", "expression": "oldObject == null ? [] : "
                                       "oldObject.?status.?attempts.orValue([])"},
    {"name": "priorOwner", "expression": "variables.attempts.filter(a, a.pod == "
     "oldObject.?status.?priorWorker.orValue('')).map(a, a.?ownerActor.orValue(''))"},
    {"name": "liveOwner", "expression": "oldObject != null && "
     "has(oldObject.status) && has(oldObject.status.pendingWorker) ? "
     "[oldObject.status.?nextOwnerActor.orValue('')] : variables.attempts.filter(a, a.pod == "
     "oldObject.?status.?activeWorker.orValue(oldObject.?status.?priorWorker.orValue('')))"
     ".map(a, a.?ownerActor.orValue(''))"},
    {"name": "override", "expression": admission.overrides()},
]


def _variable(shape: CommandSpec) -> str:
    return shape.kind.lower().replace("giveup", "give_up")


def touched(shape: CommandSpec | RunCommandKeys) -> str:
    return admission.touched(id_=shape.id, keys=shape.keys)


def _owned(owners: str) -> str:
    """No attempt (an empty list): nothing to own. An attempt no one owns ('': automatic,
    in a run without a verified creator) needs ``override`` like another person's."""
    return f"{owners}.all(o, o == request.userInfo.username) || variables.override"


def request_id_checks(shape: CommandSpec | RunCommandKeys, *, kind: str,
                      when: str) -> list[Object]:
    """A command's other keys need its request id, and the id is within its bounds."""
    new = "variables.new"
    others = _strings(tuple(k for k in shape.keys if k != shape.id))
    request = f"{new}['{shape.id}']"
    article = "an" if kind[0] in "AEIOU" else "a"
    return [validation(
        f"('{shape.id}' in {new}) || {others}.all(k, !(k in {new}) || "
        f"(k in variables.old && variables.old[k] == {new}[k]))",
        f"{article} {kind} command needs its request id: set {shape.id}=<a new id> in "
        "the same request"), validation(
        f"{when}({request}.size() <= {bounds.REQUEST_ID_CHARS} && "
        f"{matches(request, bounds.REQUEST_ID_PATTERN)})",
        f"{shape.id} must be a request id of at most {bounds.REQUEST_ID_CHARS} characters: "
        "letters and digits, inside also any of . _ : @ / + = - (no spaces)")]


def command_checks(shape: CommandSpec) -> list[Object]:
    """Every check of one command kind, each guarded by "this request writes it": its
    request id, each field's own check, the states that may accept it, its further
    checks, and whose attempt it acts on, all as its spec declares them."""
    when = f"!variables.{_variable(shape)} || "
    checks = request_id_checks(shape, kind=str(shape.kind), when=when)
    checks.extend(field.admission(spec.key(shape.word, field.suffix), when)
                  for field in shape.takes if field.admission is not None)
    if shape.state is not None:
        state, why = shape.state
        checks.append(dynamic_validation(f"{when}oldObject == null || ({state})",
                                         f"'{shape.id}: the slot is ' + variables.state + "
                                         f"(variables.held ? ' and held' : '') + ': {why}'"))
    checks.extend(validation(f"{when}{expression}", message)
                  for expression, message in shape.admission)
    if shape.owner is not None:
        owners = f"variables.{shape.owner}Owner"
        checks.append(dynamic_validation(
            f"{when}oldObject == null || {_owned(owners)}",
            f"'{shape.id}: the attempt is owned by ' + ({owners}.exists(o, o == '') ? "
            "'no one (its run has no verified creator)' : "
            f"{owners}.join(', ')) + ', not ' + "
            "request.userInfo.username + '; only the owner, or someone granted the verb "
            "\\'override\\' on slots, may do this'"))
    return checks


def slot_commands() -> list[Object]:
    variables = [*ANNOTATIONS, *STATUS, *({"name": _variable(shape),
                                            "expression": touched(shape)}
                                           for shape in registry.COMMANDS)]
    checks = [check for shape in registry.COMMANDS for check in command_checks(shape)]
    return policy_pair(SLOT_COMMANDS, variables=variables, validations=checks,
                   rules=[match_rule(names.GROUP, names.VERSION, ["slots"], ["CREATE", "UPDATE"])])


RUN_COMMANDS = "agentrun-run-commands"
TOKENS_PATTERN = r"^[1-9][0-9]{0,14}$"  # a raise's tokens: 1 .. 10^15 - 1


def run_commands() -> list[Object]:
    """A run's budget raise (``core.runs.runcommands``) within its bounds, as the operator
    parses it: its request id, its amounts (at least one) and its reason."""
    keys = spec.BUDGET
    add, add_cost, reason = (spec.key(keys.word, s) for s in keys.suffixes)
    when = "!variables.budget || "
    new = "variables.new"

    def optional(key: str, pattern: str, message: str) -> Object:
        return validation(f"{when}!('{key}' in {new}) || ({new}['{key}'].size() <= 16 && "
                          f"{matches(f'{new}[{chr(39)}{key}{chr(39)}]', pattern)})", message)

    return policy_pair(RUN_COMMANDS, variables=[*ANNOTATIONS, {"name": "budget",
                                                               "expression": touched(keys)}],
                       rules=[match_rule(names.GROUP, names.VERSION, ["agentruns"],
                                         ["CREATE", "UPDATE"])],
                       validations=[
        *request_id_checks(keys, kind="Budget", when=when),
        validation(f"{when}'{add}' in {new} || '{add_cost}' in {new}",
                   f"a Budget command raises tokens ({add}), a cost ({add_cost}) or both"),
        optional(add, TOKENS_PATTERN, f"{add} is a whole number of tokens, 1 to "
                 f"{modelusage.MAX_TOKENS - 1}"),
        optional(add_cost, modelusage.BUDGET_COST_PATTERN, f"{add_cost} is a decimal amount "
                 "of the run's currency, at most 9 digits and 6 places (e.g. 12.50)"),
        validation(f"{when}'{reason}' in {new} && bytes({new}['{reason}']).size() <= "
                   f"{bounds.REASON_BYTES} && {new}['{reason}'].trim().size() > 0",
                   f"{reason} is required: say why, non-blank, in at most "
                   f"{bounds.REASON_BYTES} bytes"),
    ])


def slot_changes() -> list[Object]:
    """People (anyone but the controller) change only command annotations of a Slot."""
    ours = (f"variables.{{side}}.filter(k, k.startsWith('{names.GROUP}/') && "
            f"!(k in {_strings(tuple(sorted(parsing.ALL_KEYS)))}))")
    mine, theirs = ours.format(side="new"), ours.format(side="old")
    kept = "kept by the operator: people may change only a slot's command annotations"
    return policy_pair(
        SLOT_CHANGES, variables=ANNOTATIONS,
        conditions=[{"name": "not-the-controller", "expression": f"!{controller()}"}],
        rules=[match_rule(names.GROUP, names.VERSION, ["slots"], ["UPDATE"])],
        validations=[
            validation("object.metadata.?labels.orValue({}) == "
                   "oldObject.metadata.?labels.orValue({})",
                   f"a Slot's labels are {kept} (agentrun.dev/<command>-*)"),
            validation("object.metadata.?ownerReferences.orValue([]) == "
                   "oldObject.metadata.?ownerReferences.orValue([]) && "
                   "object.metadata.?finalizers.orValue([]) == "
                   "oldObject.metadata.?finalizers.orValue([])",
                   f"a Slot's owner references and finalizers are {kept}"),
            validation("object.spec == oldObject.spec", f"a Slot's spec is {kept}"),
            validation(f"{mine}.all(k, k in variables.old && variables.old[k] == variables.new[k])"
                   f" && {theirs}.all(k, k in variables.new)",
                   f"a Slot's {names.GROUP}/ annotations other than commands are {kept}"),
        ])


def accepted_configuration() -> list[Object]:
    """Only the GitOps/admin identity sets, keeps or removes ``accepted``, or edits such data."""
    label = f"'{names.ACCEPTED_LABEL}'"
    carries = (f"object.metadata.?labels.orValue({{}}).exists(k, k == {label}) || "
               f"(oldObject != null && oldObject.metadata.?labels.orValue({{}})"
               f".exists(k, k == {label}))")
    return policy_pair(
        ACCEPTED_CONFIG,
        conditions=[{"name": "accepted", "expression": carries},
                    {"name": "not-an-accepter", "expression": f"!{accepter()}"}],
        rules=[match_rule("", "v1", ["configmaps"], ["CREATE", "UPDATE"])],
        validations=[validation("false", (
            f"{names.ACCEPTED_LABEL} marks configuration accepted by the GitOps/admin identity "
            f"(the verb '{ACCEPT_VERB}' on {CONFIGURATIONS}.{names.GROUP}, e.g. the "
            "agentrun-launchspec-admin role): only it may set, keep or remove the label or "
            "change an accepted ConfigMap; publish a new revision without it instead"))])


def ours(side: str) -> str:
    return (f"{side}.metadata.?labels.orValue({{}}).exists(k, k in "
            f"{_strings(OPERATOR_LABELS)}) || {side}.metadata.?ownerReferences.orValue([])"
            f".exists(r, r.apiVersion.startsWith('{names.GROUP}/'))")


def operator_objects() -> list[Object]:
    """Pods and ConfigMaps with the operator's labels or an agentrun.dev owner: its alone.

    An ephemeral container (``pods/ephemeralcontainers``, an UPDATE of the Pod) would run
    in an attempt pod as that pod, its token in reach: it is a change like any other.
    """
    return policy_pair(
        OPERATOR_OBJECTS,
        conditions=[{"name": "the-operators", "expression":
                     f"{ours('object')} || (oldObject != null && ({ours('oldObject')}))"},
                    {"name": "not-the-controller", "expression": f"!{controller()}"}],
        rules=[match_rule("", "v1", ["pods", "pods/ephemeralcontainers", "configmaps"],
                          ["CREATE", "UPDATE"])],
        validations=[dynamic_validation("false", (
            "object.kind + ' ' + object.metadata.name + ' carries the agentrun operator\\'s "
            "labels or an agentrun.dev owner: only the operator creates or changes it; "
            "use other labels and no agentrun.dev owner for your own objects'"))])


def tenant_of(side: str) -> str:
    return f"{side}.metadata.?labels.orValue({{}})[?'{names.TENANT_LABEL}']"


def default_budget_of(side: str) -> str:
    return (f"{side}.metadata.?annotations.orValue({{}})"
            f"[?'{names.DEFAULT_BUDGET_ANNOTATION}']")


def namespace_tenant() -> list[Object]:
    """A namespace's tenant label, and its runs' default budget, are set, changed or
    removed only by a tenant admin (a cluster admin: ``assign`` on tenants)."""
    changed = (f"oldObject == null ? ({tenant_of('object')}.hasValue() || "
               f"{default_budget_of('object')}.hasValue()) : "
               f"({tenant_of('object')} != {tenant_of('oldObject')} || "
               f"{default_budget_of('object')} != {default_budget_of('oldObject')})")
    assigner = (f"authorizer.group('{names.GROUP}').resource('{TENANTS}')"
                f".check('{ASSIGN_VERB}').allowed()")
    return policy_pair(
        NAMESPACE_TENANT,
        conditions=[{"name": "tenant-label-or-default-budget-changed", "expression": changed},
                    {"name": "not-a-tenant-admin", "expression": f"!{assigner}"}],
        rules=[match_rule("", "v1", ["namespaces"], ["CREATE", "UPDATE"])],
        validations=[validation("false", (
            f"{names.TENANT_LABEL} names the namespace's tenant, and "
            f"{names.DEFAULT_BUDGET_ANNOTATION} its runs' default budget; both are set by a "
            f"cluster admin (the verb '{ASSIGN_VERB}' on {TENANTS}.{names.GROUP}); ask one "
            "to set or change them"))])


def tenant_values() -> list[Object]:
    """An AgentRun's ``spec.tenant``, where given, is its namespace's tenant."""
    return policy_pair(
        TENANT_VALUES,
        rules=[match_rule(names.GROUP, names.VERSION, ["agentruns"], ["CREATE", "UPDATE"])],
        validations=[dynamic_validation(
            f"!has(object.spec.tenant) || {tenant_of('namespaceObject')}"
            ".orValue('') == object.spec.tenant",
            "'spec.tenant must be the namespace\\'s tenant (its label "
            f"{names.TENANT_LABEL}, here ' + {tenant_of('namespaceObject')}.orValue('none') "
            "+ '), or left out'")])


def validating_policies() -> list[Object]:
    """Every policy but the attempt Leases' (``core.policies.leasepolicy``: builds on these)."""
    return [*slot_commands(), *slot_changes(), *accepted_configuration(), *operator_objects(),
            *namespace_tenant(), *tenant_values(), *run_commands()]
