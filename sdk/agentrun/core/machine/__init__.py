"""The slot state machine: the legal transitions of a SlotStatus and the retry policy.

A transition is a pure function SlotStatus to SlotStatus (:mod:`.transitions`); how many
attempt numbers a slot may consume and how long it waits between them is the effective
retry policy (:mod:`.retries`). Decides no step: the packages above choose which
transition to take. Imports only :mod:`agentrun.core.base` and the API models.
"""
