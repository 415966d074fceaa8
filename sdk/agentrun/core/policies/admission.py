"""The admission policies the operator ships, built from the commands' specs (one source).

:func:`stamp_policy` is the MutatingAdmissionPolicy that stamps every command's actor,
epoch and override, and its binding. They live in the core, not only in the manifest
generator, because the operator compares the live objects with them
(:mod:`agentrun.core.policies.stamping`): a policy edited in any way is not the shipped one.

Every field the API server would default is written out, so that the shipped spec is
exactly what a read returns and "as shipped" is plain equality.

Stamping: whenever a request creates or changes any of a command's annotations (its id,
its fields, or a stamped annotation itself), the policy sets ``<command>-actor`` to the
authenticated user, ``<command>-epoch`` to the current epoch (the params Secret's
``data.epoch``, verbatim), and, where an owner check applies, ``<command>-override`` to
whether the writer holds the verb ``override`` on that slot (decided by the API server's
authorizer, which knows the requester's groups). A typed value is always overwritten; an
untouched pending command keeps what was stamped when it was written.
"""

from __future__ import annotations

from typing import Any

from agentrun.api import names
from agentrun.core.commands import registry
from agentrun.core.commands.spec import CommandSpec, RunCommandKeys

Object = dict[str, Any]
ADMISSION_API = "admissionregistration.k8s.io/v1"
EPOCH_KEY = "epoch"


def escaped(annotation: str) -> str:
    """An annotation key as a JSON Pointer segment (RFC 6901)."""
    return annotation.replace("~", "~0").replace("/", "~1")


def _add(annotation: str, value: str) -> str:
    return (f"JSONPatch{{op: 'add', path: '/metadata/annotations/{escaped(annotation)}', "
            f"value: {value}}}")


def overrides(*, namespace: str = "object.metadata.namespace",
              name: str = "object.metadata.name", verb: str = names.OVERRIDE_VERB,
              resource: str = "slots") -> str:
    """CEL: does the requester hold ``verb`` (``override``) on this slot (or run: its
    ``resource``), its groups included?"""
    return (f"authorizer.group('{names.GROUP}').resource('{resource}').namespace({namespace})"
            f".name({name}).check('{verb}').allowed()")


def stamp_expression(shape: CommandSpec) -> str:
    return stamping_of(id_=shape.id, keys=shape.keys, actor=shape.actor, epoch=shape.epoch,
                       granted={**({names.OVERRIDE_VERB: shape.override} if shape.override
                                   else {}), **shape.granted})


def stamping_of(*, id_: str, keys: tuple[str, ...], actor: str, epoch: str,
                granted: dict[str, str], resource: str = "slots") -> str:
    """CEL: a command's stamping (its id ``id_``, all its ``keys``): the actor, the epoch,
    and for each verb of ``granted`` whether the writer holds it on the ``resource``."""
    patches = [_add(actor, "request.userInfo.username"),
               _add(epoch, f"params.data['{EPOCH_KEY}']")]
    patches += [_add(annotation, f"{overrides(verb=verb, resource=resource)} ? 'true' : 'false'")
                for verb, annotation in granted.items()]
    return f"{touched(id_=id_, keys=keys)} ? [{', '.join(patches)}] : []"


def touched(*, id_: str, keys: tuple[str, ...]) -> str:
    """CEL: this request writes the command (its id ``id_`` present, one of its ``keys``
    set, changed or removed): what triggers its stamping and its checks."""
    listed = ", ".join(f"'{key}'" for key in keys)
    return (f"('{id_}' in variables.new) && [{listed}].exists(k, "
            "(k in variables.new) != (k in variables.old) || "
            "((k in variables.new) && variables.new[k] != variables.old[k]))")


def runs_only(expression: str) -> str:
    """A run command's stamping, for AgentRuns only."""
    return f"request.resource.resource != 'agentruns' ? [] : ({expression})"


def slots_only(expression: str) -> str:
    """A slot command's stamping, for slots only (the policy matches AgentRuns too)."""
    return f"request.resource.resource != 'slots' ? [] : ({expression})"


def creator_expression() -> str:
    """CEL: an AgentRun's creator and epoch stamped at CREATE, restored at UPDATE.

    At CREATE whatever was typed is overwritten (the annotations map is made first if the
    run has none); at UPDATE each is put back as the old object had it, or removed when it
    had none, so nobody can change who created a run."""
    creator, epoch = names.CREATOR_ANNOTATION, names.CREATOR_EPOCH_ANNOTATION
    made = ("(has(object.metadata.annotations) ? [] : [JSONPatch{op: 'add', "
            "path: '/metadata/annotations', value: {}}])")
    remade = (f"(('{creator}' in variables.old || '{epoch}' in variables.old) ? {made} : [])")
    stamped = (f"[{_add(creator, 'request.userInfo.username')}, "
               f"{_add(epoch, f'params.data[{chr(39)}{EPOCH_KEY}{chr(39)}]')}]")

    def kept(key: str) -> str:
        path = f"/metadata/annotations/{escaped(key)}"
        return (f"(('{key}' in variables.old) ? [JSONPatch{{op: 'add', path: '{path}', "
                f"value: variables.old['{key}']}}] : (('{key}' in variables.new) ? "
                f"[JSONPatch{{op: 'remove', path: '{path}'}}] : []))")
    return (f"request.resource.resource != 'agentruns' ? [] : "
            f"request.operation == 'CREATE' ? {made} + {stamped} : "
            f"{remade} + {kept(creator)} + {kept(epoch)}")


def run_stamping(keys: RunCommandKeys) -> str:
    """CEL: a run command's stamping (``core.runs.runcommands``): its actor, its epoch and
    whether the writer holds ``override`` on the run."""
    return stamping_of(id_=keys.id, keys=keys.keys, actor=keys.actor, epoch=keys.epoch,
                       granted={names.OVERRIDE_VERB: keys.override}, resource="agentruns")


def _everything() -> Object:
    return {}


def stamp_policy_spec() -> Object:
    return {
        "paramKind": {"apiVersion": "v1", "kind": "Secret"},
        "matchConstraints": {
            "namespaceSelector": _everything(),
            "objectSelector": _everything(),
            "resourceRules": [{
                "apiGroups": [names.GROUP], "apiVersions": [names.VERSION],
                "operations": ["CREATE", "UPDATE"], "resources": ["slots", "agentruns"],
                "scope": "*"}],
            "matchPolicy": "Equivalent"},
        "variables": [
            {"name": "new", "expression": "has(object.metadata.annotations) ? "
                                          "object.metadata.annotations : {}"},
            {"name": "old", "expression": "oldObject != null && "
                                          "has(oldObject.metadata.annotations) ? "
                                          "oldObject.metadata.annotations : {}"},
        ],
        "mutations": [*({"patchType": "JSONPatch",
                         "jsonPatch": {"expression": slots_only(stamp_expression(shape))}}
                        for shape in registry.COMMANDS),
                      {"patchType": "JSONPatch",
                       "jsonPatch": {"expression": creator_expression()}},
                      *({"patchType": "JSONPatch",
                         "jsonPatch": {"expression": runs_only(run_stamping(keys))}}
                        for keys in registry.RUN_COMMANDS)],
        "failurePolicy": "Fail",
        "reinvocationPolicy": "Never",
    }


def stamp_binding_spec(*, namespace: str) -> Object:
    """The binding's spec: the stamping Secret in the operator's ``namespace`` is the
    policy's params (what :func:`agentrun.core.policies.stamping.assess` compares with)."""
    return {
        "policyName": names.STAMP_POLICY,
        "paramRef": {"name": names.STAMPING_SECRET, "namespace": namespace,
                     "parameterNotFoundAction": "Deny"},
    }


def stamp_policy(*, namespace: str) -> list[Object]:
    """The actor-stamping MutatingAdmissionPolicy and its binding (same name), for the
    operator installed in ``namespace``."""
    return [
        {"apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicy",
         "metadata": {"name": names.STAMP_POLICY}, "spec": stamp_policy_spec()},
        {"apiVersion": ADMISSION_API, "kind": "MutatingAdmissionPolicyBinding",
         "metadata": {"name": names.STAMP_POLICY}, "spec": stamp_binding_spec(namespace=namespace)},
    ]
