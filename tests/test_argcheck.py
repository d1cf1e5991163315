"""The fast argument check gives up on what it does not know, and passes nothing but JSON's own types.

That it agrees with jsonschema is tested with the other fast paths, in tests/test_fast_paths.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from lineup_plugin.plugins import load_registry
from lineup_plugin.tools.argcheck import compile_schema


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
