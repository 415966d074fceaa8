"""The core's base: what every decision uses and none decides.

Deterministic names (:mod:`.naming`), owner references (:mod:`.owners`), the Event a
decision asks to emit (:mod:`.events`), a slot condition set (:mod:`.slotconditions`), and why
the API server refused a Pod (:mod:`.refusals`). Imports only :mod:`agentrun.api`.
"""
