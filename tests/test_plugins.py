"""Hook specifications, plugin loading, blocking, duplicate names and the example plugin."""

from __future__ import annotations

import importlib.metadata
import inspect
import re
from pathlib import Path
from typing import Any

import pluggy
import pytest

from lineup_plugin import hookimpl, hookspecs
from lineup_plugin.errors import DuplicateToolError, ToolError
from lineup_plugin.plugins import (
    BLOCK_ENV,
    ENTRY_POINT_GROUP,
    builtin_function_schemas,
    collect_tools,
    get_plugin_manager,
    load_registry,
    third_party_plugins,
)
from lineup_plugin.tools.registry import Register

HOOK_NAMES = sorted(name for name, fn in vars(hookspecs).items() if hasattr(fn, "lineup_spec"))


def test_every_hook_is_documented_under_its_signature() -> None:
    page = (Path(__file__).resolve().parent.parent / "docs" / "plugins.md").read_text()
    for name in HOOK_NAMES:
        spec = getattr(hookspecs, name)
        assert inspect.getdoc(spec), f"hook {name} has no docstring"
        signature = f"{name}{inspect.signature(spec)}".replace("'", "").replace(" -> None", "")
        assert signature in page, f"docs/plugins.md lacks the hook signature {signature}"


def test_every_hook_has_a_test() -> None:
    source = Path(__file__).read_text()
    for name in HOOK_NAMES:
        assert re.search(rf"def test_hook_{name}\b", source), f"no test_hook_{name}"


def test_hook_register_tools() -> None:
    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            def shout(text: str, times: int = 1) -> str:
                """Repeat text in capitals."""
                return (text.upper() + " ") * times

            register(shout)
            register({"name": "rate", "type": "action", "inputSchema": {"type": "object"}}, risk="display_only")

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Plugin(), name="shouter")
    registry = collect_tools(pm)
    shout = registry.get("shout")
    assert shout is not None and shout.in_process and shout.source == "shouter"
    assert shout.definition.description == "Repeat text in capitals."
    assert shout.definition.input_schema == {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "default": 1}},
        "required": ["text"],
    }
    rate = registry.get("rate")
    assert rate is not None and not rate.in_process and rate.definition.risk == "display_only"


def test_hook_implementation_may_take_fewer_arguments() -> None:
    called: list[bool] = []

    class Plugin:
        @hookimpl
        def register_tools(self) -> None:
            called.append(True)

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Plugin(), name="quiet")
    collect_tools(pm)
    assert called == [True]


def test_builtin_tools_come_through_the_same_hook() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    registry = collect_tools(pm)
    assert {t.name: t.source for t in registry} == {
        name: "lineup_plugin.builtin_tools" for name in ("choice", "confirm", "input", "calculator", "canvas")
    }
    assert {t.definition.type for t in registry} == {"action", "toolset", "app"}


def test_same_tool_name_from_two_plugins_names_both() -> None:
    class Other:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            register({"name": "choice", "type": "action"})

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Other(), name="copycat")
    with pytest.raises(
        DuplicateToolError, match="'choice' is registered by both 'lineup_plugin.builtin_tools' and 'copycat'"
    ):
        collect_tools(pm)


def test_block_env_keeps_a_plugin_out() -> None:
    pm = get_plugin_manager(load_entrypoints=True, environ={BLOCK_ENV: "weather, lineup_plugin.builtin_tools"})
    names = {t.name for t in collect_tools(pm)}
    assert "weather" not in names and "choice" not in names


def test_invalid_definition_is_a_clear_error() -> None:
    class Broken:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            register({"name": "bad name!", "type": "action"})

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Broken(), name="broken")
    with pytest.raises(ToolError, match=r"plugin 'broken': invalid tool definition: name: string should match pattern"):
        collect_tools(pm)


def test_invalid_input_schema_is_a_clear_error() -> None:
    class Broken:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            register({"name": "bad", "type": "action", "inputSchema": {"type": "object", "properties": 5}})

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Broken(), name="broken")
    with pytest.raises(ToolError, match="tool 'bad' action 'bad': invalid inputSchema"):
        collect_tools(pm)


def test_non_tool_is_refused() -> None:
    class Broken:
        @hookimpl
        def register_tools(self, register: Any) -> None:
            register(42)

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Broken(), name="broken")
    with pytest.raises(ToolError, match="cannot register 42"):
        collect_tools(pm)


def test_unknown_hook_in_a_plugin_is_caught() -> None:
    class Typo:
        @hookimpl
        def register_tool(self, register: Any) -> None: ...

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Typo(), name="typo")
    with pytest.raises(pluggy.PluginValidationError):
        pm.check_pending()


def test_installed_example_plugin_registers_its_tools() -> None:
    entry_points = {ep.name: ep.value for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}
    assert entry_points.get("weather") == "lineup_weather", "pip install ./examples/lineup-weather"
    registry = load_registry()
    weather = registry.get("weather")
    assert weather is not None and weather.source == "weather" and weather.in_process
    assert registry.get("rating") is not None


def test_builtin_function_schemas_are_the_registrys_without_loading_it() -> None:
    environ = {BLOCK_ENV: ",".join(ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))}
    schemas = builtin_function_schemas(environ)
    assert schemas is not None
    assert schemas == load_registry(load_entrypoints=False).function_schemas()


def test_builtin_function_schemas_leave_third_party_plugins_to_the_registry() -> None:
    installed = [ep.name for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)]
    if not installed:
        pytest.skip("no third-party LineUp plugin installed")
    assert third_party_plugins({}) == installed
    assert builtin_function_schemas({}) is None


def test_hook_register_renderers() -> None:
    from lineup_plugin.tools.renderers import RegisterRenderer

    module = Path(__file__).resolve().parent / "fixtures" / "renderers" / "throws.js"

    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            register({"name": "dial", "type": "action", "inputSchema": {"type": "object"}})

        @hookimpl
        def register_renderers(self, register: RegisterRenderer) -> None:
            register("dial", module)

    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(Plugin(), name="dials")
    renderer = collect_tools(pm).renderers.for_tool("dial")
    assert renderer is not None and renderer.source == "dials" and renderer.body == module.read_bytes()
