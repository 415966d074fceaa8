"""Example agents built on the worker SDK (:mod:`agentrun.worker`), run in worker pods.

:mod:`research_report` is the research-report agent of ``manifests/examples``:
gather sources, decide, write the report, publish it through an external effect.
:mod:`faults` is its fault hook for tests and the demo; :mod:`publisher` its client of
the effect's owner, in the protocol of the owner's kit (:mod:`agentrun.owner`).
"""
