"""Each fast path agrees with the slow reference it stands in for, on generated inputs valid and invalid.

==========================================  ========================================  ==============================
fast path                                   slow reference                            what must agree
==========================================  ========================================  ==============================
argument check: the predicate of            ``jsonschema.Draft202012Validator``;      valid or not; the registry's
``tools.argcheck.compile_schema``, as the   ``tools.registry.check_arguments``        ArgumentsError (message, path,
registry's ``ActionCheck`` uses it                                                    expected)
schema check: ``compile_schema`` compiles   ``Draft202012Validator.check_schema``     a schema it compiles is valid
it (the registry then skips the slow one)                                             JSON Schema
settings check:                             the ``Settings`` model                    True only if the model accepts;
``config.check.surely_valid``               (``config.settings.validated_settings``)  False where it accepts only
                                                                                      for a lax form (``lax_forms``)
decoding: ``protocol.codec.decode`` (one    ``codec._decode_steps``                   the same Envelope (fields set
pydantic-core validator first)                                                        too), or the same
                                                                                      ProtocolError naming the same
                                                                                      field path
encoding: ``codec.encode_envelope``         ``codec.encode(codec.envelope(...))``     the same text, with the
                                            (the model dump)                          clock's timestamp or now
history entry: ``history.Record.json`` and  ``HistoryEntry`` validated from the       the same text, the same entry
``Record.entry`` (model_construct)          record's fields, then dumped
storable check: ``codec._storable``         ``codec._refuse`` (the walk that keeps    storable or not (the walk then
(``check_storable`` without a path per      every value's path)                       names the place)
value)
timestamp: ``calls.format_timestamp`` (the  ``calls._format_slowly`` (``datetime``)    the same text, or the same
second's text written once per second)                                                error (outside 1970–9999)
seen check: ``SQLiteStore.was_seen`` (the   ``SELECT 1 FROM seen`` on the store's     seen or not, through inserts,
ids it keeps in memory)                     file                                      repeats, pruning, failed
                                                                                      commits and reopening
==========================================  ========================================  ==============================
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import uuid
from datetime import UTC, timedelta, timezone
from pathlib import Path
from typing import Any, get_args
from unittest import mock

import jsonschema
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from lineup_plugin.config.check import given_settings, surely_valid
from lineup_plugin.config.schema import SCHEMA as SETTINGS_SCHEMA
from lineup_plugin.config.settings import DEFAULT_PUSH_CONTACT, validated_settings
from lineup_plugin.errors import ArgumentsError, ConfigError, ProtocolError, StoreError
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.history import Record
from lineup_plugin.protocol.messages import (
    KINDS,
    MAX_SEQ,
    Actor,
    ActorKind,
    AgentState,
    AgentStatus,
    AgentStop,
    Attachment,
    CallStatus,
    ConversationUpdate,
    DeviceHello,
    DeviceWelcome,
    Envelope,
    Error,
    FileBegin,
    FileChunk,
    FileStored,
    History,
    HistoryEntry,
    HistoryOlder,
    MessageDelta,
    Payload,
    PushKeys,
    PushSubscribe,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
    WebPushSubscription,
)
from lineup_plugin.protocol.outputs import Audit, SeenEnvelope
from lineup_plugin.protocol.tools import ActionDefinition
from lineup_plugin.store import SQLiteStore
from lineup_plugin.tools.argcheck import compile_schema
from lineup_plugin.tools.registry import ActionCheck, check_arguments

from .protocol.test_encode_envelope import ODD, WIDE
from .protocol.test_fuzz import VALID, json_values, near_valid
from .store_helpers import FailingCommits

EXAMPLES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
BUILTIN = load_registry(load_entrypoints=False)

# ------------------------------------------------------------------------------ argument check

SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "object",
        "properties": {
            "n": {"type": "integer", "minimum": 0, "maximum": 3},
            "x": {"type": ["number", "null"], "minimum": -1.5},
            "s": {"type": "string", "minLength": 1, "maxLength": 2, "format": "email"},
            "e": {"enum": ["a", "b"]},
            "b": {"type": "boolean"},
            "l": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2},
            "any": True,
            "o": {"type": "object", "properties": {"k": {"type": "integer"}}, "additionalProperties": False},
        },
        "required": ["n"],
        "additionalProperties": {"type": ["string", "integer"]},
    },
    {"type": "object", "additionalProperties": False, "properties": {"a": {}}},
    {"type": "object", "properties": {"l": {"items": True}, "m": {"maxItems": 0}}},
    {
        "type": "object",
        "properties": {
            "s": {"anyOf": [{"type": "string", "minLength": 2}, {"type": "null"}]},
            "x": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 3},
        },
    },
    SETTINGS_SCHEMA,
    *[
        action.input_schema
        for tool in BUILTIN
        for action in (tool.definition.actions or [tool.definition.action(None)])
    ],
]

KEYS = st.sampled_from(["n", "x", "s", "e", "b", "l", "any", "o", "k", "a", "m", "question", "options", "port", "zz"])
LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(-5, 5)
    | st.floats(-5, 5, allow_nan=False)
    | st.sampled_from([0.0, 1.0, 2.0, 3.0, -1.5, 2.5])
    | st.sampled_from(["", "a", "b", "ab", "abc", "é"])
)
JSON = st.recursive(
    LEAVES, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(KEYS, inner, max_size=4), max_leaves=12
)
KINDS_OF_JSON = ("null", "boolean", "integer", "number", "string", "array", "object")
#: the strategies of valid() and edge() by the id of their (sub)schema, made once
_valid: dict[int, st.SearchStrategy[Any]] = {}
_edge: dict[int, st.SearchStrategy[Any]] = {}


@st.composite
def near(draw: st.DrawFn, schema: Any, *, anything: bool = True) -> Any:
    """An instance of ``schema``: valid, or valid but for one value on or just over a bound of its
    own schema (or of another type), or (with ``anything``) any JSON value.

    Knows the keywords the fast check knows; a schema without ``type`` admits every type.
    """
    choice = draw(st.integers(0 if anything else 1, 9))
    if choice == 0:
        return draw(JSON)
    value = draw(valid(schema))
    if choice < 5:
        return value
    path, sub = draw(st.sampled_from(spots(value, schema)))
    return replaced(value, path, draw(edge(sub)))


def spots(value: Any, schema: Any, path: tuple[Any, ...] = ()) -> list[tuple[tuple[Any, ...], Any]]:
    """Each place in ``value`` (the whole, its properties, its items) with the schema it answers to."""
    found = [(path, schema)]
    if isinstance(schema, dict) and "anyOf" not in schema:
        if isinstance(value, dict):
            props, extra = schema.get("properties", {}), schema.get("additionalProperties", True)
            for key, item in value.items():
                found += spots(item, props.get(key, extra), (*path, key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                found += spots(item, schema.get("items", True), (*path, index))
    return found


def replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    """``value`` with what is at ``path`` replaced by ``new`` (``value`` itself is left as it is)."""
    if not path:
        return new
    head, *rest = path
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[head] = replaced(value[head], tuple(rest), new)
    return copy


def types_of(schema: dict[str, Any]) -> list[str]:
    kinds = schema.get("type", KINDS_OF_JSON)
    return [kinds] if isinstance(kinds, str) else list(kinds)


def number_range(schema: dict[str, Any]) -> tuple[float, float]:
    """The bounds of a number (the stricter of inclusive and exclusive ones), or a range around 0."""
    low = schema.get("minimum", schema.get("exclusiveMinimum"))
    high = schema.get("maximum", schema.get("exclusiveMaximum"))
    low = (6 if high is None else high) - 12 if low is None else low
    return low, low + 12 if high is None else high


def integer_range(schema: dict[str, Any]) -> tuple[int, int]:
    low, high = number_range(schema)
    low = math.floor(low) + 1 if "exclusiveMinimum" in schema and "minimum" not in schema else math.ceil(low)
    high = math.ceil(high) - 1 if "exclusiveMaximum" in schema and "maximum" not in schema else math.floor(high)
    return low, high


def valid(schema: Any) -> st.SearchStrategy[Any]:
    """Instances valid under ``schema`` (made once per schema)."""
    if id(schema) not in _valid:
        if not isinstance(schema, dict):
            return JSON  # True
        if "anyOf" in schema:
            strategy = st.one_of(*(valid(sub) for sub in schema["anyOf"]))
        elif "enum" in schema:
            strategy = st.sampled_from(schema["enum"])
        else:
            strategy = st.one_of(*(valid_of_kind(schema)[kind] for kind in types_of(schema)))
        _valid[id(schema)] = strategy
    return _valid[id(schema)]


def valid_of_kind(schema: dict[str, Any]) -> dict[str, st.SearchStrategy[Any]]:
    """Instances of each JSON type valid under ``schema``'s keywords for that type."""
    props = {name: valid(sub) for name, sub in schema.get("properties", {}).items()}
    required = [name for name in schema.get("required", []) if name in props]
    optional = sorted(props.keys() - set(required))
    extra = schema.get("additionalProperties", True)
    unknown = st.dictionaries(KEYS.filter(lambda key: key not in props), valid(extra), max_size=2)
    some = st.integers(0, min(4, len(optional))).flatmap(
        lambda n: st.lists(st.sampled_from(optional), min_size=n, max_size=n, unique=True) if n else st.just([])
    )
    known = some.flatmap(lambda names: st.fixed_dictionaries({name: props[name] for name in [*required, *names]}))
    by_kind: dict[str, st.SearchStrategy[Any]] = {
        "object": known
        if extra is False
        else st.tuples(st.integers(0, 3).flatmap(lambda n: st.just({}) if n else unknown), known).map(
            lambda pair: {**pair[0], **pair[1]}
        ),
        "array": st.lists(
            valid(schema.get("items", True)),
            min_size=schema.get("minItems", 0),
            max_size=schema.get("maxItems", schema.get("minItems", 0) + 3),
        ),
        "string": st.text(
            min_size=schema.get("minLength", 0), max_size=schema.get("maxLength", schema.get("minLength", 0) + 4)
        ),
        "integer": st.integers(*integer_range(schema)).flatmap(lambda n: st.sampled_from([n, float(n)])),
        "number": st.floats(
            *number_range(schema),
            exclude_min="exclusiveMinimum" in schema and "minimum" not in schema,
            exclude_max="exclusiveMaximum" in schema and "maximum" not in schema,
        ),
        "boolean": st.booleans(),
        "null": st.none(),
    }
    return by_kind


def edge(schema: Any) -> st.SearchStrategy[Any]:
    """Values on or just over a bound of ``schema`` (about half of them valid), or of another type."""
    if id(schema) in _edge or not isinstance(schema, dict):
        return _edge.get(id(schema), LEAVES)
    edges: list[st.SearchStrategy[Any]] = [LEAVES]
    edges += [edge(sub) for sub in schema.get("anyOf", [])]
    kinds = types_of(schema)
    if "boolean" in kinds:
        edges.append(st.sampled_from([0, 1, 0.0, "true"]))
    if "integer" in kinds or "number" in kinds:
        edges.append(st.sampled_from([True, False, "1", 1e20, -0.0, 2**64]))
        keys = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
        edges += [
            st.sampled_from([b - 1, b - 0.5, b, b + 0.5, b + 1]) for b in (schema[k] for k in keys if k in schema)
        ]
    if "string" in kinds:
        lengths = {schema[key] + step for key in ("minLength", "maxLength") if key in schema for step in (-1, 0, 1)}
        edges.append(st.sampled_from(sorted(n for n in lengths if n >= 0) or [0]).map(lambda n: "é" * n))
    if "array" in kinds:
        sizes = {schema[key] + step for key in ("minItems", "maxItems") if key in schema for step in (-1, 0, 1)}
        item = valid(schema.get("items", True))
        edges.append(
            st.sampled_from(sorted(n for n in sizes if n >= 0) or [4]).flatmap(
                lambda n: st.lists(item, min_size=n, max_size=n)
            )
        )
    if "enum" in schema:
        edges.append(st.sampled_from(["zz", "", *[value.upper() for value in schema["enum"]]]))
    if "object" in kinds:
        required = schema.get("required", [])
        drop = st.sampled_from(required) if required else st.just(None)
        edges.append(
            st.tuples(valid_of_kind(schema)["object"], drop, KEYS, JSON).map(
                lambda parts: {**{k: v for k, v in parts[0].items() if k != parts[1]}, parts[2]: parts[3]}
            )
        )
    return _edge.setdefault(id(schema), st.one_of(*edges))


def refusal(check: Any, *args: Any) -> tuple[str, str, str] | None:
    """None if ``check(*args)`` passes, else its ArgumentsError's message, path and expected."""
    try:
        check(*args)
    except ArgumentsError as exc:
        return str(exc), exc.path, exc.expected
    return None


#: each schema with its compiled predicate, jsonschema validator, the registry's check and instances near it
ARGUMENT_CASES = [
    (
        schema,
        compile_schema(schema),
        jsonschema.Draft202012Validator(schema),
        ActionCheck.of(ActionDefinition(name="a", inputSchema=schema)),
        near(schema),
    )
    for schema in SCHEMAS
]


#: (the index of a case, an instance near its schema)
ARGUMENTS = st.one_of(*(st.tuples(st.just(i), case[4]) for i, case in enumerate(ARGUMENT_CASES)))


@settings(EXAMPLES, max_examples=700)
@given(case_and_instance=ARGUMENTS)
@example(case_and_instance=(0, {"n": 0, "b": 0}))  # 0 is no boolean
@example(case_and_instance=(0, {"n": True}))  # nor True an integer
@example(case_and_instance=(0, {"n": 3.0, "s": "éé", "l": ["a", "b"]}))  # every bound met exactly
def test_argument_check_agrees_with_jsonschema(case_and_instance: tuple[int, Any]) -> None:
    case, instance = case_and_instance
    schema, predicate, validator, action_check, _ = ARGUMENT_CASES[case]
    assert predicate is not None, "the fast check compiles every schema here"
    assert predicate(instance) == validator.is_valid(instance)
    assert refusal(action_check.check, instance, "t") == refusal(check_arguments, schema, instance, "t")


ANY_VALUE = st.none() | st.booleans() | st.integers(-2, 3) | st.floats(-2, 3, allow_nan=False) | st.text(max_size=3)
TYPE_NAMES = st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null"])


def mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any] = ANY_VALUE) -> st.SearchStrategy[Any]:
    """Usually a valid keyword value, sometimes anything (often not valid)."""
    return st.integers(0, 9).flatmap(lambda n: odd if n == 0 else usual)


KEYWORD_VALUES = {
    "type": mostly(TYPE_NAMES | st.lists(TYPE_NAMES, min_size=1, max_size=3), st.sampled_from(["float", []])),
    "required": mostly(st.lists(st.sampled_from(["a", "b", "c"]), max_size=3, unique=True), st.just(["a", "a"])),
    "enum": mostly(st.lists(st.sampled_from(["a", "b"]), max_size=3)),
    "minItems": mostly(st.integers(0, 3), st.just(-1) | st.just(1.5)),
    "maxLength": mostly(st.integers(0, 3)),
    "minimum": mostly(st.integers(-2, 2) | st.floats(-2, 2, allow_nan=False)),
    "exclusiveMaximum": mostly(st.integers(-2, 2) | st.floats(-2, 2, allow_nan=False)),
    "title": mostly(st.text(max_size=3)),
    "description": mostly(st.text(max_size=3)),
    "format": mostly(st.sampled_from(["email", "date"])),
    "examples": mostly(st.lists(ANY_VALUE, max_size=2)),
    "deprecated": mostly(st.booleans()),
    "default": ANY_VALUE,
}


def schemas(depth: int = 2) -> st.SearchStrategy[Any]:
    """Schema objects over the fast check's keywords, their values usually valid."""
    inner = st.booleans() | (schemas(depth - 1) if depth else st.fixed_dictionaries({}, optional=KEYWORD_VALUES))
    nested = {
        "properties": mostly(st.dictionaries(st.sampled_from(["a", "b", "c"]), inner, max_size=3)),
        "items": inner,
        "additionalProperties": inner,
        "anyOf": mostly(st.lists(inner, max_size=2)),
    }
    return st.fixed_dictionaries({}, optional={**KEYWORD_VALUES, **nested})


@settings(EXAMPLES, max_examples=150)
@given(schema=schemas())
def test_a_schema_the_fast_check_compiles_is_valid_json_schema(schema: Any) -> None:
    if compile_schema(schema) is not None:
        jsonschema.Draft202012Validator.check_schema(schema)


# ------------------------------------------------------------------------------ settings check


def _type_of(spec: dict[str, Any]) -> Any:
    """A setting's JSON type; for an optional one (``anyOf`` with null), the type beside null."""
    kinds = [option.get("type") for option in spec.get("anyOf", [])] if "anyOf" in spec else [spec.get("type")]
    return next((kind for kind in kinds if kind != "null"), None)


TYPE_OF = {name: _type_of(spec) for name, spec in SETTINGS_SCHEMA["properties"].items()}
NUMBERS = {name for name, kind in TYPE_OF.items() if kind in ("integer", "number")}
BOOLEANS = {name for name, kind in TYPE_OF.items() if kind == "boolean"}
#: numbers as text, as LINEUP_* variables hold them: plain ones, and ones the model reads but the cheap check leaves
NUMERALS = ["0", "9", "9600", "9600.0", "70000", "-1", "0.5", "1.5", "09", " 9", "9_000", "+1", "1e3", "0x10", "http"]
WUKONGIM = {
    "LINEUP_WUKONGIM_UID": "agent",
    "LINEUP_WUKONGIM_API_URL": "http://im:5001",
    "LINEUP_WUKONGIM_APP_UID": "me",
}
ENVIRONMENT = st.tuples(
    st.dictionaries(
        st.sampled_from([f"LINEUP_{name.upper()}" for name in ("port", "heartbeat", "max_queue", "deadline", "token")]),
        st.sampled_from(NUMERALS) | st.text(st.characters(exclude_characters="[{"), min_size=15, max_size=17),
        max_size=1,
    ),
    st.fixed_dictionaries(
        {},
        optional={
            "LINEUP_DEADLINES": st.sampled_from(['{"choice": 5}', '{"choice": -1}', '{"a": NaN}', '{"a": true}', "[]"]),
            "LINEUP_ALLOWED_ORIGINS": st.sampled_from(["http://a, http://b", '["http://a"]', "[1]"]),
        },
    ),
    st.sampled_from([{}, {}, WUKONGIM, {"LINEUP_WUKONGIM_UID": "agent"}]),
).map(lambda dicts: {key: value for part in dicts for key, value in part.items()})


def lax_forms(data: dict[str, Any]) -> list[str]:
    """The values of ``data`` the model reads in lax mode and the cheap check leaves to it.

    A bool or text where a number belongs (``LINEUP_PORT=09`` is port 9 to the model), a number or
    text where a bool belongs (``LINEUP_PUSH=false``), a float
    beyond 2**53 where an integer belongs, a bool or NaN among the deadlines, WuKongIM and TLS settings
    (the cheap check's schema admits only null there) and a push contact of one's own.
    """
    found = [name for name in NUMBERS if type(data.get(name)) in (bool, str)]
    found += [name for name in BOOLEANS if name in data and type(data[name]) is not bool]  # 0, 1, "false"...
    found += [
        name
        for name in NUMBERS
        if TYPE_OF[name] == "integer" and type(data.get(name)) is float and not abs(data[name]) < 2**53
    ]
    deadlines = data.get("deadlines")
    if isinstance(deadlines, dict):
        found += [
            f"deadlines.{key}"
            for key, value in deadlines.items()
            if type(value) in (bool, str) or (isinstance(value, float) and math.isnan(value))
        ]
    found += [name for name in ("wukongim", "tls_cert", "tls_key") if data.get(name) is not None]
    if "push_contact" in data and data["push_contact"] != DEFAULT_PUSH_CONTACT:
        found.append("push_contact")
    return found


def accepted(data: dict[str, Any]) -> bool:
    try:
        validated_settings(data)
    except ConfigError:
        return False
    return True


@settings(EXAMPLES, max_examples=200)
@given(section=near(SETTINGS_SCHEMA, anything=False), environ=ENVIRONMENT)
@example(section={}, environ={})
@example(section={"port": 9600, "token": "abcdefghijklmnopq", "data_dir": "/tmp/x"}, environ={"LINEUP_PORT": "0"})
@example(section={"deadline": 30, "deadlines": {"choice": 2.5}, "allowed_origins": "https://a, https://b"}, environ={})
@example(section={"store": "memory", "fsync": "full"}, environ={"LINEUP_HEARTBEAT": "0.5", "LINEUP_MAX_QUEUE": "9"})
@example(section={"wukongim": {"api_url": "http://im:5001", "uid": "a", "app_uid": "me"}}, environ={})
@example(section={"max_connections": 1e20}, environ={})  # an integer to JSON Schema, too big for the model
def test_settings_check_agrees_with_the_model(section: Any, environ: dict[str, str]) -> None:
    assume(isinstance(section, dict))  # a config section is a mapping (near() may bend the whole)
    data = given_settings(section, environ)
    fast, slow = surely_valid(data), accepted(data)
    if fast:
        assert slow, f"the cheap check passed settings the model refuses: {data!r}"
    else:
        assert not slow or lax_forms(data), f"the cheap check left plain settings to the model: {data!r}"


# ------------------------------------------------------------------------------------ decoding


def decoded(decode: Any, text: str) -> Any:
    """The Envelope ``decode`` makes of ``text`` with the fields set in it and its payload, or its error."""
    try:
        message = decode(text)
    except ProtocolError as exc:
        return type(exc), str(exc)
    # built from validated fields without the model: the model itself makes the same of them
    assert message == Envelope.model_validate(dict(message.__dict__)), "not what Envelope makes of its fields"
    assert message.model_dump_json() == Envelope.model_validate(dict(message.__dict__)).model_dump_json()
    return message, message.model_fields_set, message.payload.model_fields_set


#: raw JSON values the two decoders could read differently
ODD_VALUES = st.sampled_from(
    [
        "true",
        "1.0",
        '"\\ud800"',  # a lone surrogate: Python's json reads it
        "[" * 900 + "]" * 900,  # deeper than pydantic-core reads
        "1e400",
        "1" + "0" * 400 + ".5",  # out of range with no exponent
        "1" + "0" * 400,  # an integer of 400 digits: exact
        "2.5E-7",
        '["a\\"b", 1e400]',  # an escaped quote before a number out of range
        '"1e999 [[[["',  # a number out of range and brackets in a string: text
        "-0",
        "NaN",  # Python's json and pydantic-core read these; JSON has no such value
        "-Infinity",
    ]
)


IDENTIFIER = {"type": "string", "minLength": 1, "maxLength": 200}
ACTOR = {
    "type": "object",
    "properties": {"kind": {"enum": list(get_args(ActorKind))}, "id": IDENTIFIER},
    "required": ["kind", "id"],
}
#: the envelope's fields but ``v``, ``type`` and ``payload`` as a schema for :func:`near` (timestamps: ISO or any text)
HEADER = {
    "type": "object",
    "properties": {
        "id": IDENTIFIER,
        "conversation_id": IDENTIFIER,
        "sender": ACTOR,
        "target": ACTOR,
        "timestamp": {
            "anyOf": [{"enum": ["2026-01-02T03:04:05.678+00:00", "2026-01-02"]}, {"type": ["string", "null"]}]
        },
    },
    "required": ["id", "conversation_id", "sender", "target"],
    "additionalProperties": False,
}
#: a valid envelope with a header near :data:`HEADER`
HEADERS_NEAR = st.tuples(st.sampled_from(VALID), near(HEADER, anything=False)).map(
    lambda parts: (
        {**{k: v for k, v in parts[0].items() if k not in HEADER["properties"]}, **parts[1]}
        if isinstance(parts[1], dict)
        else parts[1]
    )  # near() bent the whole header: a message that is no object
)


@st.composite
def wire_texts(draw: st.DrawFn) -> str:
    """A valid envelope of some kind, or one with fields dropped, replaced or added, its header
    near its bounds, its version or type bent, or an odd raw value put in its payload, as JSON text."""
    message = draw(st.sampled_from(VALID) | near_valid() | HEADERS_NEAR)
    how = draw(st.sampled_from(["as is", "bent", "odd value"]))
    if how == "bent" and isinstance(message, dict):
        version = draw(st.integers() | st.text(max_size=5) | st.none() | st.floats(allow_nan=False) | st.booleans())
        message = {**message, "v": version, "type": f"lineup.v1.{draw(st.text(max_size=30))}"}
    text = json.dumps(message, ensure_ascii=draw(st.booleans()))
    if how == "odd value":
        key = json.dumps(draw(st.sampled_from(["odd", *sorted({k for m in VALID for k in m["payload"]})])))
        text = text.replace('"payload": {', f'"payload": {{{key}: {draw(ODD_VALUES)}, ', 1)
    return text


@settings(EXAMPLES, max_examples=300)
@given(text=wire_texts())
def test_decoding_agrees_with_decoding_step_by_step(text: str) -> None:
    assert decoded(codec.decode, text) == decoded(codec._decode_steps, text)


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(VALID[0]).replace('"v": 1', '"v": true'),
        json.dumps(VALID[0]).replace('"v": 1', '"v": 1.0'),
        json.dumps({**VALID[3], "type": "lineup.v1.tool.ack"}).replace('"type"', '"type": "x", "type"'),  # twice
        "\ufeff" + json.dumps(VALID[3]),
        json.dumps(VALID[3]) + " x",
        json.dumps({key: value for key, value in VALID[3].items() if key != "timestamp"}),
        json.dumps({**VALID[3], "timestamp": "yesterday"}),
        json.dumps({**VALID[3], "conversation_id": ""}),
        json.dumps({**VALID[3], "id": "é" * 201}),
        json.dumps({**VALID[3], "sender": {"kind": "robot", "id": "a"}}),
        *(  # what the store cannot write, outside strings or not, with a backslash in the text or not
            json.dumps(VALID[3]).replace('"payload": {', f'"payload": {{"odd": {value}, ', 1)
            for value in (
                "1e400",
                "[true, false, 1E400]",
                "1" + "0" * 400 + ".5",
                '["a\\"b", 1e400]',
                '"1e400"',
                "[" * 40 + "]" * 40,
                '"' + "[" * 40 + '"',
                '"\\\\", ' + "[" * 40 + "]" * 40,
            )
        ),
        # last, after an escaped quote: read with the quotes paired wrongly, the number is in a string
        json.dumps(VALID[3])[:-2] + ', "odd": ["\\"", 1e400]}}',
    ],
)
def test_decoding_agrees_with_decoding_step_by_step_on_edge_cases(text: str) -> None:
    assert decoded(codec.decode, text) == decoded(codec._decode_steps, text)


def test_a_plain_answer_is_read_once() -> None:
    """The fast path holds for what most messages are: no second reading of the text for the store's sake."""
    answer = {**VALID[3], "type": "lineup.v1.tool.result"}
    answer["payload"] = {"call_id": "c1", "status": "completed", "result": {"ok": True, "n": -1.5, "tags": ["é"]}}
    with mock.patch.object(codec, "_parse", side_effect=AssertionError("read twice")):
        assert codec.decode(json.dumps(answer, ensure_ascii=False)).payload == ToolResult.model_validate(
            answer["payload"]
        )


# ------------------------------------------------------------------------------------ encoding

IDS = st.text(min_size=1, max_size=12)
MAYBE = st.none() | st.text(max_size=12)
OBJECTS = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
ACTORS = st.builds(Actor, kind=st.sampled_from(get_args(ActorKind)), id=IDS)
ZONES = st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=11))])
TIMESTAMPS = st.none() | st.datetimes(timezones=ZONES).map(lambda moment: moment.isoformat())
SHAS = st.text("0123456789abcdef", min_size=64, max_size=64)
MIMES = st.sampled_from(["image/png", "application/pdf", "text/plain"])
FILES = st.builds(
    Attachment, id=SHAS, name=IDS, mime=MIMES, size=st.integers(0, 2**40), url=MAYBE, data=st.none() | st.just("AAEC")
)
#: payloads of every kind, with odd text, big numbers, nested JSON and optional fields set or not
PAYLOAD_OF: dict[type[Any], st.SearchStrategy[Any]] = {
    DeviceHello: st.builds(
        DeviceHello, device_id=IDS, app_version=MAYBE, token=MAYBE, name=MAYBE, open_calls=st.lists(IDS, max_size=2)
    ),
    DeviceWelcome: st.builds(DeviceWelcome, device_id=IDS, agent=ACTORS, pending=st.integers(0, 2**70)),
    ToolList: st.builds(
        ToolList, tools=st.lists(st.sampled_from(BUILTIN.definitions()), max_size=2), request=st.booleans()
    ),
    ToolCall: st.builds(
        ToolCall, call_id=IDS, name=IDS, action=MAYBE, arguments=OBJECTS, expires_at=TIMESTAMPS, risk=MAYBE
    ),
    ToolAck: st.builds(ToolAck, call_id=IDS, stage=st.sampled_from(["acknowledged", "waiting_user"])),
    ToolResult: st.builds(
        ToolResult, call_id=IDS, name=MAYBE, action=MAYBE, status=st.sampled_from(get_args(CallStatus)), result=OBJECTS
    ),
    ToolCancel: st.builds(ToolCancel, call_id=IDS, reason=MAYBE),
    AgentStatus: st.builds(AgentStatus, state=st.sampled_from(get_args(AgentState)), detail=MAYBE),
    AgentStop: st.builds(AgentStop, reason=MAYBE),
    Text: st.builds(
        Text,
        text=st.text(max_size=30),
        reply_to=MAYBE,
        message_id=st.none() | IDS,
        attachments=st.lists(FILES, max_size=2),
        interrupted=st.booleans(),
    ),
    MessageDelta: st.builds(MessageDelta, message_id=IDS, seq=st.integers(0, 2**40), text=st.text(max_size=30)),
    FileBegin: st.builds(
        FileBegin, upload_id=IDS, name=IDS, mime=MIMES, size=st.integers(0, 2**40), sha256=st.none() | SHAS
    ),
    FileChunk: st.builds(FileChunk, upload_id=IDS, seq=st.integers(0, 9), data=st.text("AZaz09+/=", max_size=16)),
    FileStored: st.builds(FileStored, upload_id=IDS, file=FILES),
    Error: st.builds(
        Error, code=st.text(max_size=5), message=st.text(max_size=12), ref=MAYBE, call_id=MAYBE, upload_id=MAYBE
    ),
    ConversationUpdate: st.one_of(
        st.builds(
            ConversationUpdate,
            title=st.text(min_size=1, max_size=20).filter(str.strip),
            closed=st.none() | st.booleans(),
        ),
        st.builds(ConversationUpdate, closed=st.booleans()),
    ),
    History: st.builds(
        History,
        history_id=IDS,
        head=st.integers(0, 2**53 - 1),
        entries=st.lists(
            st.builds(
                HistoryEntry,
                seq=st.integers(0, 2**53 - 1),
                at=st.datetimes(timezones=ZONES).map(lambda moment: moment.isoformat()),
                conversation_id=IDS,
                event=st.sampled_from(["text.in", "text.out", "status"]),
                text=MAYBE,
                device_id=MAYBE,
                attachments=st.none() | st.lists(FILES, max_size=1),
            ),
            max_size=2,
        ),
        reset=st.booleans(),
    ),
    HistoryOlder: st.builds(HistoryOlder, before=st.integers(1, 2**53 - 1), history_id=st.none() | IDS),
    PushSubscribe: st.builds(
        PushSubscribe,
        subscription=st.none()
        | st.builds(
            WebPushSubscription,
            endpoint=st.text(min_size=1, max_size=40),
            expirationTime=st.none() | st.floats(allow_nan=False, allow_infinity=False),
            keys=st.builds(PushKeys, p256dh=st.text(max_size=20), auth=st.text(max_size=10)),
        ),
    ),
}
PAYLOADS: st.SearchStrategy[Payload] = st.one_of(*PAYLOAD_OF.values())


def test_payloads_of_every_kind_are_encoded() -> None:
    assert set(PAYLOAD_OF) == set(KINDS.values())


@settings(EXAMPLES, max_examples=200)
@given(
    payload=PAYLOADS,
    sender=ACTORS,
    target=ACTORS,
    conversation_id=IDS,
    message_id=IDS,
    seq=st.none() | st.integers(0, MAX_SEQ),
)
@example(
    payload=WIDE, sender=Actor(kind="agent", id="a"), target=ODD, conversation_id="c\u00e9\n", message_id="m1", seq=None
)
@example(payload=WIDE, sender=ODD, target=ODD, conversation_id='"\\\x7f', message_id="\x00 \u2028", seq=MAX_SEQ)
def test_encode_envelope_agrees_with_encoding_the_envelope(
    payload: Payload, sender: Actor, target: Actor, conversation_id: str, message_id: str, seq: int | None
) -> None:
    with mock.patch.object(codec, "now_iso", return_value="2026-01-02T03:04:05.678+00:00"):
        options: dict[str, Any] = {"sender": sender, "target": target, "conversation_id": conversation_id}
        slow = codec.encode(codec.envelope(payload, id=message_id, **options).model_copy(update={"seq": seq}))
        assert codec.encode_envelope(payload, id=message_id, seq=seq, **options) == slow


@settings(EXAMPLES, max_examples=100)
@given(payload=PAYLOADS, sender=ACTORS, target=ACTORS, conversation_id=IDS, stamp=TIMESTAMPS.filter(bool))
def test_encode_envelope_with_the_clocks_timestamp_agrees_with_encoding_the_envelope(
    payload: Payload, sender: Actor, target: Actor, conversation_id: str, stamp: str
) -> None:
    options: dict[str, Any] = {"sender": sender, "target": target, "conversation_id": conversation_id}
    slow = codec.encode(codec.envelope(payload, id="m1", timestamp=stamp, **options))
    assert codec.encode_envelope(payload, id="m1", timestamp=stamp, **options) == slow


@settings(EXAMPLES, max_examples=100)
@given(
    seq=st.integers(1, 2**53 - 1),
    at=st.floats(0, 4e9),
    conversation_id=IDS,
    text=MAYBE,
    call=st.none() | PAYLOAD_OF[ToolCall],
    result=st.none() | PAYLOAD_OF[ToolResult],
)
def test_a_history_record_is_written_as_its_validated_entry(
    seq: int, at: float, conversation_id: str, text: str | None, call: ToolCall | None, result: ToolResult | None
) -> None:
    record = Record(seq, at, conversation_id, "call.end", {"text": text, "call": call, "result": result}, "c1")
    slow = HistoryEntry.model_validate(json.loads(record.entry().model_dump_json(exclude_none=True)))
    assert HistoryEntry.model_validate_json(record.json()) == slow
    assert record.json() == slow.model_dump_json(exclude_none=True)


UNSTORABLE = st.sampled_from(["\ud800", "ok\udfff", float("inf"), float("-inf"), float("nan")])
STORABLE_OR_NOT = st.recursive(
    json_values | UNSTORABLE,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=10) | st.sampled_from(["\ud800"]), inner, max_size=4)
    ),
    max_leaves=12,
)


def _nested(depth: int, leaf: Any) -> Any:
    value = leaf
    for index in range(depth):
        value = [value] if index % 2 else {"k": value}
    return value


@EXAMPLES
@given(value=STORABLE_OR_NOT | st.builds(_nested, st.integers(25, 40), json_values | UNSTORABLE))
def test_the_storable_check_agrees_with_the_walk_that_names_the_place(value: Any) -> None:
    try:
        codec._refuse(value, "arguments")
    except ProtocolError as exc:
        refused: str | None = str(exc)
    else:
        refused = None
    assert codec._storable(value) is (refused is None)
    with pytest.raises(ProtocolError) if refused else contextlib.nullcontext():
        codec.check_storable(value, "arguments")
    if refused:
        with pytest.raises(ProtocolError, match=re.escape(refused)):
            codec.check_storable(value, "arguments")


IDS_SEEN = [f"msg_{n}" for n in range(8)]
SEEN_STEPS = st.lists(
    st.tuples(st.sampled_from(["batch", "failed", "reopen"]), st.lists(st.sampled_from(IDS_SEEN), max_size=6)),
    max_size=12,
)


def _written(format: Any, seconds: float) -> str:
    try:
        text: str = format(seconds)
    except (ValueError, OverflowError, OSError) as exc:
        return type(exc).__name__
    return text


@settings(EXAMPLES, max_examples=500)
@given(
    seconds=st.floats(-1e10, 3e11, allow_nan=False)
    | st.integers(0, 2**35).map(lambda whole: whole + 0.9995)  # a millisecond's rounding edge
    | st.integers(0, 2**35).map(lambda whole: math.nextafter(whole + 1.0, 0.0))  # just under the next second
)
@example(seconds=0.0)
@example(seconds=-0.0005)
@example(seconds=1796180538.9999995)
@example(seconds=253402300799.9994)
@example(seconds=253402300799.9999996)  # rounds into year 10000
def test_the_timestamp_agrees_with_datetime(seconds: float) -> None:
    from lineup_plugin.protocol.calls import _format_slowly, format_timestamp

    assert _written(format_timestamp, seconds) == _written(_format_slowly, seconds)
    assert _written(format_timestamp, seconds) == _written(_format_slowly, seconds)  # from its cache too
    later = seconds + 600.25  # a call's deadline, written between its timestamps
    for moment in (later, seconds, later, seconds):
        assert _written(format_timestamp, moment) == _written(_format_slowly, moment)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=SEEN_STEPS, limit=st.integers(1, 6))
def test_the_seen_check_agrees_with_the_seen_table(
    tmp_path: Path, steps: list[tuple[str, list[str]]], limit: int
) -> None:
    path = tmp_path / f"seen-{uuid.uuid4().hex}.sqlite3"
    store = SQLiteStore(path, seen_limit=limit)
    try:
        for step, ids in steps:
            changes = [SeenEnvelope(envelope_id) for envelope_id in ids]
            if step == "reopen":
                store.close()
                store = SQLiteStore(path, seen_limit=limit)
                store.apply(changes)
            elif step == "failed":  # the batch is rolled back: nothing of it is seen
                real = store._db
                store._db = FailingCommits(real)  # type: ignore[assignment]
                with pytest.raises(StoreError):
                    store.apply([*changes, Audit("text.in")])
                store._db = real
            else:
                store.apply(changes)
            for envelope_id in IDS_SEEN:
                in_table = bool(
                    store._db.execute("SELECT 1 FROM seen WHERE envelope_id = ?", (envelope_id,)).fetchall()
                )
                assert store.was_seen(envelope_id) is in_table, envelope_id
    finally:
        store.close()
