"""A run: its configuration resolved and pinned, its slots laid out, its status rolled up.

:mod:`.resolution` resolves which ConfigMap revisions a run pins and whether they are
valid; :mod:`.runobjects` builds the snapshots and the slots a launch lays out;
:mod:`.rollup` derives the run's status from its slots; :mod:`.runsteps` decides the
run's next step from its world. The top of the core: it may use the slot's step
vocabulary and names, and nothing in the core imports it.
"""
