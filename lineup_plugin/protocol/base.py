"""The base class of every wire model, and validation into one."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from ..errors import ProtocolError


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


#: an error text names at most this many problems...
MAX_PROBLEMS = 5
#: ...and is at most this long (a hostile message must not make the agent write a long answer)
MAX_ERROR_CHARS = 1024


def bounded(text: str) -> str:
    """``text`` cut to :data:`MAX_ERROR_CHARS` (with an ellipsis when cut)."""
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"


def _describe(exc: ValidationError, prefix: str = "") -> str:
    parts = []
    for err in exc.errors(include_url=False)[:MAX_PROBLEMS]:
        path = ".".join(str(p) for p in (prefix, *err["loc"]) if p != "")
        msg = err["msg"][:1].lower() + err["msg"][1:]
        parts.append(f"{path or 'message'}: {msg[:200]}")
    more = exc.error_count() - len(parts)
    if more > 0:
        parts.append(f"and {more} more problem{'s' if more != 1 else ''}")
    return bounded("; ".join(parts))


def validate(model: type[WireModel], data: Any, *, path: str = "") -> Any:
    """Validate ``data`` as ``model``; failures become a ProtocolError naming the field path."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ProtocolError(_describe(exc, path)) from None
