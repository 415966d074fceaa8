"""An attempt, as the operator sees it: its Pod and Lease, whether it has ended, its objects.

*Observations* (:mod:`.observations`) are what the operator read of an attempt's Pod and
Lease; *ending* (:mod:`.ending`) is the truth table that says when an attempt has ended
(its pod **and** its lease terminal), the predicate a replacement waits on; the builders
of an attempt's Lease and Pod (:mod:`.attemptobjects`); the effects a worker could not
settle (:mod:`.effectrecords`). Imports the state machine and the base, nothing that
decides a step.
"""
