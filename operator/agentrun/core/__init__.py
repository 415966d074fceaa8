"""The pure core: every decision the operator makes, with no I/O and no clock of its own.

Modules are imported whole (``from agentrun.core import guards``). Time is always an
argument (``now``: the operator's clock), so the same inputs give the same decision,
and tests can move time freely. Nothing here imports a Kubernetes client.
"""
