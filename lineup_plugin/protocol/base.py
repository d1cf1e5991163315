"""The base class of every wire model."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class WireModel(BaseModel):
    """A model that travels on the wire.

    Unknown fields are ignored (a newer peer of the same major version may add some); field names
    follow the wire spelling through aliases and can be given by Python name too. Validation is
    strict: ``"5"`` is not an integer.
    """

    model_config = ConfigDict(
        extra="ignore",
        populate_by_name=True,
        strict=True,
        frozen=False,
        serialize_by_alias=True,
    )
