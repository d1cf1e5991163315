"""Encode envelopes to JSON text and decode JSON text to envelopes.

Decoding checks the major version first, so an envelope of an unknown version is refused before
anything else of it is read. Every failure raises :class:`~lineup_plugin.errors.ProtocolError`
(or its subclass :class:`~lineup_plugin.errors.VersionError`) with a message that names the field
path, e.g. ``payload.arguments: input should be a valid dictionary``.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
from datetime import UTC, datetime
from typing import Annotated, Any, Literal, NotRequired, Union

from pydantic import ConfigDict, Field, StrictInt, TypeAdapter
from pydantic_core import to_json
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from ..errors import ProtocolError, VersionError
from .base import validate
from .messages import (
    KIND_OF,
    KINDS,
    PROTOCOL_VERSION,
    TYPE_PREFIX,
    Actor,
    Envelope,
    EnvelopeHeader,
    Identifier,
    Payload,
    Seq,
    Timestamp,
)

#: the largest envelope text decode() accepts, in characters
MAX_MESSAGE_CHARS = 1_000_000
#: how deep JSON objects and arrays may nest in a message; deeper is refused (the store must write it)
MAX_DEPTH = 32
#: a number (a JSON value: after ``:``, ``,`` or ``[``, never the digits of an id) with a three-digit exponent
#: or of three hundred digits or more (one pattern: one pass over the text)
_BIG_NUMBER = re.compile(r"[:,\[]\s*-?[0-9](?:[0-9.]*[eE]\+?[0-9]{3}|[0-9]{299})")


def new_id(prefix: str = "msg") -> str:
    """A fresh unique id such as ``msg_5f0c...`` (128 random bits in hex)."""
    return f"{prefix}_{os.urandom(16).hex()}"


def now_iso() -> str:
    """The current time as an ISO 8601 UTC timestamp."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def envelope(
    payload: Payload,
    *,
    sender: Actor,
    target: Actor,
    conversation_id: str,
    id: str | None = None,
    timestamp: str | None = None,
) -> Envelope:
    """Wrap ``payload`` in an envelope of the matching kind, with a fresh id and ``timestamp`` (default: now)."""
    kind = KIND_OF[type(payload)]
    return Envelope.model_construct(
        v=PROTOCOL_VERSION,
        id=id or new_id(),
        type=TYPE_PREFIX + kind,
        conversation_id=conversation_id,
        sender=sender,
        target=target,
        timestamp=timestamp or now_iso(),
        payload=payload,
    )


def encode(message: Envelope) -> str:
    """The compact JSON text of an envelope (``None`` fields left out)."""
    return message.model_dump_json(exclude_none=True)


def encode_envelope(
    payload: Payload,
    *,
    sender: Actor,
    target: Actor,
    conversation_id: str,
    id: str | None = None,
    seq: int | None = None,
    timestamp: str | None = None,
) -> str:
    """``encode(envelope(payload, ...))`` in one step: the same text, without building the Envelope.

    ``seq`` numbers the history entry the message is the live form of (left out when None);
    ``timestamp`` is when it is sent (the session core passes its clock's; default: now).
    """
    return encode_headed(payload, envelope_head(sender, target, conversation_id), id=id, seq=seq, timestamp=timestamp)


def envelope_head(sender: Actor, target: Actor, conversation_id: str) -> str:
    """The part of an envelope's text that says where it goes, for :func:`encode_headed` (the same
    for every message of a conversation from ``sender`` to ``target``: it may be kept)."""
    ends = to_json({"sender": sender, "target": target}, by_alias=True, exclude_none=True).decode()
    return f'"conversation_id":{_string(conversation_id)},{ends[1:-1]}'


def encode_headed(
    payload: Payload, head: str, *, id: str | None = None, seq: int | None = None, timestamp: str | None = None
) -> str:
    """:func:`encode_envelope` with the :func:`envelope_head` of its conversation and ends written already.

    Only the payload goes through pydantic's serializer; the other strings are written as it
    writes them (:func:`_string`).
    """
    body = payload.__pydantic_serializer__.to_json(payload, by_alias=True, exclude_none=True).decode()
    named = _string(id) if id else f'"{new_id()}"'  # a new id is hex: nothing to escape
    numbered = "" if seq is None else f',"seq":{int(seq)}'
    return (
        f'{{"v":{PROTOCOL_VERSION},"id":{named},"type":"{TYPE_PREFIX}{KIND_OF[type(payload)]}",{head},'
        f'"timestamp":{_string(timestamp or now_iso())}{numbered},"payload":{body}}}'
    )


def _string(text: str) -> str:
    """``text`` as a JSON string, as pydantic-core writes it (printable ASCII with nothing to escape: as it is)."""
    if text.isascii() and text.isprintable() and '"' not in text and "\\" not in text:
        return f'"{text}"'
    return to_json(text).decode()


def decode_object(data: Any, *, checked: bool = False) -> Envelope:
    """Decode an already-parsed JSON value into an envelope (``checked``: :func:`check_storable` ran)."""
    if not checked:
        check_storable(data)
    if not isinstance(data, dict):
        raise ProtocolError(f"message: expected a JSON object, got {type(data).__name__}")
    if "v" not in data:
        raise ProtocolError("v: field required")
    version = data["v"]
    if type(version) is not int:
        raise ProtocolError(f"v: expected an integer, got {version!r}")
    if version != PROTOCOL_VERSION:
        raise VersionError(version)
    header: EnvelopeHeader = validate(EnvelopeHeader, data)
    if not header.type.startswith(TYPE_PREFIX):
        raise ProtocolError(f"type: expected 'lineup.v1.<kind>', got {header.type!r}")
    kind = header.type[len(TYPE_PREFIX) :]
    model = KINDS.get(kind)
    if model is None:
        raise ProtocolError(f"type: unknown kind {kind!r}")
    payload = validate(model, header.payload, path="payload")
    fields = header.__dict__.copy()  # the validated fields (dict(header) is several times slower)
    fields["payload"] = payload
    return _built(fields)


_set_attribute = object.__setattr__
#: the envelope's fields in the order the model declares them (the order its dump writes them in)
_FIELDS = tuple(Envelope.model_fields)


def _built(fields: dict[str, Any]) -> Envelope:
    """The Envelope of validated ``fields`` (the optional ones may be left out: None): what
    ``Envelope.model_construct`` makes of them, without its search of each field's aliases and
    default (and ``model_validate`` would check them all again: a second validator call, which
    costs as much as the first when the processor's caches are cold, as between an App's messages)."""
    message = Envelope.__new__(Envelope)
    _set_attribute(message, "__dict__", {name: fields.get(name) for name in _FIELDS})
    _set_attribute(message, "__pydantic_fields_set__", set(_FIELDS))
    _set_attribute(message, "__pydantic_extra__", None)  # extra fields are ignored, never kept
    _set_attribute(message, "__pydantic_private__", None)
    return message


@functools.cache  # built on first use: it takes ~0.1 s, which an import should not pay
def _fast_envelope() -> TypeAdapter[dict[str, Any]]:
    """One validator, in pydantic-core, from JSON text to the fields of an envelope of any kind.

    It accepts exactly what :func:`decode_object` accepts, and is used only to succeed fast: on any
    failure :func:`decode` reads the text again the step-by-step way, which names the error.
    """
    typed_dict: Any = TypedDict  # a TypedDict per kind, made at run time
    config = ConfigDict(strict=True, extra="ignore")
    members = []
    for kind, model in KINDS.items():
        fields = {
            "v": Annotated[StrictInt, Field(ge=PROTOCOL_VERSION, le=PROTOCOL_VERSION)],  # not true, not 1.0
            "id": Identifier,
            "type": Literal[TYPE_PREFIX + kind],
            "conversation_id": Identifier,
            "sender": Actor,
            "target": Actor,
            "timestamp": NotRequired[Timestamp | None],
            "seq": NotRequired[Seq | None],
            "payload": model,
        }
        member = typed_dict(f"Envelope_{kind}", fields)
        member.__pydantic_config__ = config
        members.append(member)
    # made at run time, so no static type form: typed Any (pydantic >= 2.14 wants a TypeForm[T])
    union: Any = Annotated[Union[tuple(members)], Field(discriminator="type")]  # noqa: UP007
    return TypeAdapter(union)


def _refuse_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON (and every other peer) does not
    raise ValueError(f"{name} is not valid JSON")


#: one decoder for every message (json.loads with options builds a new one per call)
_decoder = json.JSONDecoder(parse_constant=_refuse_constant)


def decode(text: str | bytes) -> Envelope:
    """Decode one envelope from JSON text; raises ProtocolError on anything that is not valid v1."""
    if len(text) > MAX_MESSAGE_CHARS:
        raise ProtocolError(f"message: {len(text)} characters is over the limit of {MAX_MESSAGE_CHARS}")
    if isinstance(text, str) and "NaN" not in text and "Infinity" not in text:  # pydantic-core's JSON takes those
        try:
            fields = _fast_envelope().validate_json(text)
        except ValueError:
            pass  # read again step by step, for the error that names the field
        else:
            if _suspect(text):
                check_storable(_parse(text))
            return _built(fields)
    return _decode_steps(text)


def _suspect(text: str) -> bool:
    """Whether ``text`` (valid JSON) may hold what the store cannot write (cheap checks at C speed)."""
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            return True
    if "\\u" in text:  # an escape: perhaps a lone surrogate
        return True
    # Without a backslash (a \" would hide a quote), every other piece between quotes is outside
    # the strings: the nesting, the numbers and true, false and null, nothing else.
    whole = "\\" in text
    outside = text if whole else "".join(text.split('"')[::2])
    if outside.count("[") + outside.count("{") > MAX_DEPTH:
        return True
    if whole or len(outside) >= 300:  # every character read, or room for a number of 300 digits
        return _BIG_NUMBER.search(outside) is not None
    # an exponent, of any size: an e or E that is not the one of true or false
    return "E" in outside or outside.count("e") > outside.count("true") + outside.count("false")


def check_storable(data: Any, path: str = "") -> None:
    """Refuse a JSON value the agent could not store or hand on faithfully.

    Raises ProtocolError naming the first place that holds a lone surrogate (text that is not
    valid Unicode), a number that is not finite (``1e999``) or nesting deeper than
    :data:`MAX_DEPTH`.
    """
    if not _storable(data):  # the common case told fast, without building a path for every value
        _refuse(data, path)


def _refuse(data: Any, path: str = "") -> None:
    """:func:`check_storable` the slow way: the walk that keeps every value's path, to name the place."""
    stack: list[tuple[Any, str, int]] = [(data, path, 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, str):
            _check_text(value, where)
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise ProtocolError(f"{where or 'message'}: number out of range (not finite)")
        elif isinstance(value, dict | list):
            if depth >= MAX_DEPTH:
                raise ProtocolError(f"{where or 'message'}: nested deeper than {MAX_DEPTH} levels")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for key, item in items:
                if isinstance(key, str):
                    _check_text(key, where)
                stack.append((item, f"{where}.{key}" if where else str(key), depth + 1))


def _storable(data: Any) -> bool:
    """Whether :func:`check_storable` finds nothing to refuse in ``data`` (the same walk, no paths kept)."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if not value.isascii() and not _valid_text(value):
                return False
        elif isinstance(value, float):
            if not math.isfinite(value):
                return False
        elif isinstance(value, dict):
            if depth >= MAX_DEPTH:
                return False
            for key, item in value.items():
                if isinstance(key, str) and not key.isascii() and not _valid_text(key):
                    return False
                stack.append((item, depth + 1))
        elif isinstance(value, list):
            if depth >= MAX_DEPTH:
                return False
            for item in value:
                stack.append((item, depth + 1))
    return True


def _valid_text(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{where or 'message'}: lone surrogate (text that is not valid Unicode)") from None


def _decode_steps(text: str | bytes) -> Envelope:
    """:func:`decode` the slow way: parse, check the version, the header, then the payload."""
    data = _parse(text)
    check_storable(data)
    return decode_object(data, checked=True)


def _parse(text: str | bytes) -> Any:
    """The JSON value of ``text``, or a ProtocolError."""
    try:
        if not isinstance(text, str):  # as json.loads does with bytes
            text = text.decode(json.detect_encoding(text), "surrogatepass")
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        data = _decoder.decode(text)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"message: malformed JSON ({exc})") from None
    except RecursionError:
        raise ProtocolError(f"message: nested deeper than {MAX_DEPTH} levels") from None
    return data
