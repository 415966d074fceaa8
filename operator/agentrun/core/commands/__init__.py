"""Commands: what a person asks of a slot with annotations, read and decided.

A *command* is a set of annotations on a Slot (``kubectl annotate`` or the plugin):
:mod:`.parsing` reads a pending one from the annotations, bounded where it is parsed;
:mod:`.guards` decides it (accepted, refused or rejected, with the ledger entry and the
Event) from the slot's status and the attempts' observations. Imports launch specs (a
reassignment pins one), attempts, the state machine and the base; never the policies
built from it, nor the slot's step.
"""
