"""The agent-facing view: function schemas, flat arguments and validation before sending."""

from __future__ import annotations

from typing import Any

import pytest

from lineup_plugin.errors import ArgumentsError
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.tools.registry import Registry, function_schema, split_arguments


@pytest.fixture
def registry() -> Registry:
    return collect_tools(get_plugin_manager(load_entrypoints=False))


def test_each_tool_is_one_bare_function_schema(registry: Registry) -> None:
    schemas = {s["name"]: s for s in registry.function_schemas()}
    assert set(schemas) == {"choice", "confirm", "input", "calculator", "canvas"}
    for schema in schemas.values():
        assert set(schema) == {"name", "description", "parameters"}
        assert schema["parameters"]["type"] == "object"


def test_action_tool_parameters_are_its_input_schema(registry: Registry) -> None:
    choice = registry.get("choice")
    assert choice is not None
    assert function_schema(choice.definition)["parameters"] == choice.definition.input_schema


def test_app_tool_takes_an_action_argument(registry: Registry) -> None:
    canvas = registry.get("canvas")
    assert canvas is not None
    params = function_schema(canvas.definition)["parameters"]
    assert params["required"] == ["action"]
    assert params["properties"]["action"]["enum"] == ["open", "draw", "undo", "clear", "close"]
    assert {"width", "height", "instance_id", "path", "color"} <= set(params["properties"])
    assert "draw(instance_id, path, color?, width?)" in function_schema(canvas.definition)["description"]


def test_conflicting_property_types_are_left_open() -> None:
    definition = ToolDefinition.model_validate(
        {
            "name": "t",
            "type": "toolset",
            "actions": [
                {"name": "a", "inputSchema": {"type": "object", "properties": {"x": {"type": "string"}}}},
                {"name": "b", "inputSchema": {"type": "object", "properties": {"x": {"type": "integer"}}}},
            ],
        }
    )
    assert "type" not in function_schema(definition)["parameters"]["properties"]["x"]


def test_flat_arguments_split_into_action_and_arguments(registry: Registry) -> None:
    canvas = registry.get("canvas")
    choice = registry.get("choice")
    assert canvas is not None and choice is not None
    assert split_arguments(canvas.definition, {"action": "open", "width": 8, "height": 6}) == (
        "open",
        {"width": 8, "height": 6},
    )
    assert split_arguments(choice.definition, {"question": "q", "options": ["a"]}) == (
        None,
        {"question": "q", "options": ["a"]},
    )


@pytest.mark.parametrize(
    ("name", "action", "arguments", "path", "message"),
    [
        ("choice", None, {"question": "q"}, "options", "'options' is a required property"),
        ("choice", None, {"question": "q", "options": "a,b"}, "options", "'a,b' is not of type 'array'"),
        ("choice", None, {"question": "q", "options": [1]}, "options.0", "1 is not of type 'string'"),
        ("calculator", None, {"a": 1, "b": 2}, "action", "needs an 'action'"),
        ("calculator", "power", {"a": 1, "b": 2}, "action", "has no action 'power'"),
        ("calculator", "add", {"a": "1", "b": 2}, "a", "'1' is not of type 'number'"),
        ("canvas", "open", {"width": 0, "height": 5}, "width", "0 is less than the minimum of 1"),
        ("nope", None, {}, "name", "unknown tool 'nope'"),
    ],
)
def test_bad_arguments_name_the_field(
    registry: Registry, name: str, action: str | None, arguments: dict[str, Any], path: str, message: str
) -> None:
    with pytest.raises(ArgumentsError, match=message) as info:
        registry.resolve(name, action, arguments)
    assert info.value.path == path


def test_good_arguments_resolve_to_the_action(registry: Registry) -> None:
    tool, action = registry.resolve("calculator", "divide", {"a": 1, "b": 2})
    assert tool.name == "calculator" and action.name == "divide"


def test_app_declared_tools_are_replaced_and_removed(registry: Registry) -> None:
    mine = ToolDefinition.model_validate({"name": "torch", "type": "action"})
    clash = ToolDefinition.model_validate({"name": "choice", "type": "action"})
    assert registry.replace_source("app:phone", [mine, clash]) == ["choice"]
    torch = registry.get("torch")
    assert torch is not None and torch.source == "app:phone"
    assert registry.remove_source("app:phone") == ["torch"]
    assert "torch" not in registry
