"""The core's base: what every decision uses and none decides.

Deterministic names (:mod:`.naming`), owner references (:mod:`.owners`), the Event a
decision asks to emit (:mod:`.events`), a slot condition set (:mod:`.slotconditions`), why
the API server refused a Pod (:mod:`.refusals`), and the one vocabulary of steps every
decision returns and the applier performs (:mod:`.actions`: slots', runs', a LaunchSpec's
status, the stamping epoch). Imports only :mod:`agentrun.api`.
"""
