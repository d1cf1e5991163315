"""The fast argument check agrees with jsonschema exactly, and gives up on what it does not know."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineup_plugin.plugins import load_registry
from lineup_plugin.tools.argcheck import compile_schema

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
    *[
        action.input_schema
        for tool in load_registry(load_entrypoints=False)
        for action in (tool.definition.actions or [tool.definition.action(None)])
    ],
]

KEYS = st.sampled_from(["n", "x", "s", "e", "b", "l", "any", "o", "k", "a", "m", "question", "options", "action", "zz"])
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


def near(schema: Any) -> st.SearchStrategy[Any]:
    """Instances shaped by ``schema`` (often valid, often just over a bound), or any JSON value."""
    if not isinstance(schema, dict):
        return JSON
    shaped: list[st.SearchStrategy[Any]] = []
    if "enum" in schema:
        shaped.append(st.sampled_from(schema["enum"]))
    types = schema.get("type", [])
    for kind in [types] if isinstance(types, str) else types:
        if kind == "object" or "properties" in schema:
            props = schema.get("properties", {})
            required = {name: near(props.get(name)) for name in schema.get("required", [])}
            optional = {name: near(sub) for name, sub in props.items() if name not in required}
            fields = st.fixed_dictionaries(required, optional=optional)
            shaped.append(
                fields.flatmap(lambda d: st.dictionaries(KEYS, JSON, max_size=1).map(lambda extra: {**extra, **d}))
                | fields
            )
        elif kind == "array":
            shaped.append(st.lists(near(schema.get("items", True)), max_size=3))
        elif kind == "string":
            shaped.append(st.sampled_from(["", "a", "ab", "abc"]) | st.text(max_size=4))
        elif kind in ("integer", "number"):
            shaped.append(st.integers(-3, 4) | st.sampled_from([-1.5, 0.0, 2.0, 2.5, 3.0, 3.5]))
        elif kind == "boolean":
            shaped.append(st.booleans())
        elif kind == "null":
            shaped.append(st.none())
    return st.one_of(*shaped, JSON) if shaped else JSON


@pytest.mark.parametrize("schema", SCHEMAS, ids=[f"schema-{i}" for i in range(len(SCHEMAS))])
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fast_check_agrees_with_jsonschema(schema: dict[str, Any], data: st.DataObject) -> None:
    instance = data.draw(near(schema))
    check = compile_schema(schema)
    assert check is not None
    assert check(instance) == jsonschema.Draft202012Validator(schema).is_valid(instance)


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}, "$defs": {"x": {}}},
        {"oneOf": [{"type": "string"}]},
        {"anyOf": []},
        {"type": "object", "patternProperties": {"^a": {}}},
        {"type": "string", "pattern": "^a"},
        {"type": "array", "prefixItems": [{}]},
        {"enum": [1, "a"]},
        {"type": "decimal"},
        {"minItems": -1},
        False,
    ],
)
def test_unknown_keywords_and_odd_values_leave_it_to_jsonschema(schema: Any) -> None:
    assert compile_schema(schema) is None


@pytest.mark.parametrize("instance", [{"n": Decimal(1)}, {"n": (1, 2)}, {"n": {1: "a"}}, {"n": 2**80 * 1j}])
def test_values_of_non_json_types_are_never_passed(instance: dict[str, Any]) -> None:
    check = compile_schema({"type": "object", "properties": {"n": {"minimum": 5}}})
    assert check is not None
    assert check(instance) is False


def test_registry_still_words_errors_through_jsonschema() -> None:
    registry = load_registry(load_entrypoints=False)
    registry.resolve("choice", None, {"question": "q", "options": ["a"]})
    with pytest.raises(Exception, match=r"choice: field 'options': \[\] should be non-empty"):
        registry.resolve("choice", None, {"question": "q", "options": []})


ANY_VALUE = st.none() | st.booleans() | st.integers(-2, 3) | st.floats(-2, 3, allow_nan=False) | st.text(max_size=3)
TYPE_NAMES = st.sampled_from(["string", "integer", "number", "object", "array", "boolean", "null"])


def mostly(valid: st.SearchStrategy[Any], invalid: st.SearchStrategy[Any] = ANY_VALUE) -> st.SearchStrategy[Any]:
    """Usually a valid keyword value, sometimes anything (often not valid)."""
    return st.integers(0, 9).flatmap(lambda n: invalid if n == 0 else valid)


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


@settings(max_examples=300, deadline=None)
@given(schema=schemas())
def test_a_schema_the_fast_check_compiles_is_valid_json_schema(schema: Any) -> None:
    if compile_schema(schema) is not None:
        jsonschema.Draft202012Validator.check_schema(schema)
