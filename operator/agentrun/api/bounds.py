"""The documented bound of every value a person writes in a command (one place).

Admission rejects a command over any of these at request time
(:mod:`agentrun.core.validating`); the operator's parsing bounds the same values. Lengths
are in characters unless the name says bytes.
"""

from typing import Final

from agentrun.api import names

MAX_REQUEST_ID: Final = 253
MAX_REASON_BYTES: Final = names.MAX_REASON_BYTES  # 1 KiB
MAX_WORKER_CLASS: Final = 63
MAX_RUN_NAME: Final = names.MAX_RUN_NAME  # 49
MAX_TENANT: Final = 63
