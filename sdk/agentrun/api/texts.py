"""String field types that clip on parse: a model's free text, bounded by :mod:`bounds`.

Each declares ``maxLength`` in the CRD and clips with :func:`bounds.clip` before
validating, so a value an older operator stored oversize is trimmed on the next write
instead of failing reads. They are apart from :mod:`bounds` because they need pydantic:
the bounds are plain constants that what must start light (the ``agentrun-worker`` command,
its startup probe) reads without loading pydantic.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from agentrun.api import bounds, names


def _clipper(limit: int) -> BeforeValidator:
    return BeforeValidator(lambda v: bounds.clip(v, limit=limit) if isinstance(v, str) else v)


Message = Annotated[str, _clipper(bounds.MESSAGE_CHARS), Field(max_length=bounds.MESSAGE_CHARS)]
RecordMessage = Annotated[str, _clipper(bounds.RECORD_MESSAGE_CHARS),
                          Field(max_length=bounds.RECORD_MESSAGE_CHARS)]
Reason = Annotated[str, _clipper(bounds.REASON_BYTES), Field(max_length=bounds.REASON_BYTES)]
Actor = Annotated[str, _clipper(bounds.ACTOR_CHARS), Field(max_length=bounds.ACTOR_CHARS)]
ShortText = Annotated[str, _clipper(names.MAX_NAME), Field(max_length=names.MAX_NAME)]
LongName = Annotated[str, _clipper(253), Field(max_length=253)]
