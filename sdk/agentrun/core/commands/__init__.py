"""Commands: what a person asks of a slot with annotations, declared once and decided.

A *command* is a set of annotations on a Slot (``kubectl annotate`` or the plugin). Each
kind is one module in :mod:`.kinds` whose spec (:mod:`.spec`) declares its annotations,
their bounds, its check and apply, and its admission fragments; :mod:`.registry` lists
them, and everything else iterates the registry: :mod:`.parsing` reads a pending one from
the annotations, bounded where it is parsed; :mod:`.guards` decides it (accepted, refused
or rejected, with the ledger entry and the Event, :mod:`.ledger`) from the slot's status
and the attempts' observations. Imports launch specs (a reassignment pins one), attempts,
the state machine and the base; never the policies built from it, nor the slot's step.
"""
