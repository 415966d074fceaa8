"""The pure core: every decision the operator makes, with no I/O and no clock of its own.

Time is always an argument (``now``: the operator's clock), so the same inputs give the
same decision, and tests can move time freely. Nothing here imports a Kubernetes client.

The core is cut by idea into sub-packages, each importing only those below it (an
import-linter ``layers`` contract in ``pyproject.toml``), top to bottom:

- :mod:`~agentrun.core.runs`: a run's configuration resolved and pinned, its slots laid
  out, its status rolled up from them, and its next step;
- :mod:`~agentrun.core.slots`: a slot's world (what the operator read for it) and its next
  step: commands applied, attempts claimed, judged and fenced, names someone else took;
- :mod:`~agentrun.core.policies`: the admission policies the operator ships, built from
  the commands, and whether a stamped actor can be believed;
- :mod:`~agentrun.core.commands`: one module per command and their registry; commands
  read from annotations and decided by the guard;
- :mod:`~agentrun.core.launchspecs`: which LaunchSpec starts a worker, pinned by digest,
  and a LaunchSpec's own status;
- :mod:`~agentrun.core.attempts`: what the operator sees of an attempt's Pod and Lease,
  when an attempt has ended, its objects' builders, its unresolved effects;
- :mod:`~agentrun.core.machine`: the slot state machine and its retry policy;
- :mod:`~agentrun.core.base`: names, owner references, Events, conditions, and why the
  API server refused a Pod.

Modules are imported whole (``from agentrun.core.commands import guards``).
"""
