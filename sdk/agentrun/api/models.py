"""The base model every API document derives from.

Field names are snake_case in Python and camelCase on the wire, as Kubernetes
conventions ask; unknown fields are rejected so that a typo in a manifest is an
error, not a silently ignored setting.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        validate_default=True,
    )

    def wire(self) -> dict[str, object]:
        """The JSON-ready form as the API server stores it: camelCase, no nulls."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)
