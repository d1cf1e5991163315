"""The plugin manager: loads built-in and third-party plugins and collects their tools.

Third-party plugins are found through the entry-point group ``lineup``. Set
``LINEUP_BLOCK_PLUGINS`` to a comma-separated list of plugin (entry-point) names to keep them from
loading.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .tools.agent_schema import function_schema

if TYPE_CHECKING:
    from .tools.registry import Registry

ENTRY_POINT_GROUP = "lineup"
BLOCK_ENV = "LINEUP_BLOCK_PLUGINS"
BUILTIN_PLUGINS = ("lineup_plugin.builtin_tools",)


def blocked_names(environ: dict[str, str] | None = None) -> set[str]:
    """The plugin names listed in ``LINEUP_BLOCK_PLUGINS``."""
    value = (os.environ if environ is None else environ).get(BLOCK_ENV, "")
    return {name.strip() for name in value.split(",") if name.strip()}


def get_plugin_manager(*, load_entrypoints: bool = True, environ: dict[str, str] | None = None) -> pluggy.PluginManager:
    """A plugin manager with the hook specs, the built-in tools and (optionally) installed plugins."""
    pm = pluggy.PluginManager("lineup")
    pm.add_hookspecs(hookspecs)
    for name in blocked_names(environ):
        pm.set_blocked(name)

    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(importlib.import_module(module_name), name=module_name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm


def collect_tools(pm: pluggy.PluginManager, registry: Registry | None = None) -> Registry:
    """Call every plugin's ``register_tools`` hook, each with a ``register`` bound to its name."""
    if registry is None:
        from .tools.registry import Registry

        registry = Registry()
    for impl in pm.hook.register_tools.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or impl.plugin_name
        kwargs: dict[str, Any] = {"register": registry.registrar(plugin_name)}
        impl.function(**{arg: kwargs[arg] for arg in impl.argnames})
    return registry


def load_registry(*, load_entrypoints: bool = True, environ: dict[str, str] | None = None) -> Registry:
    """The registry of every tool the built-in and installed (not blocked) plugins register."""
    return collect_tools(get_plugin_manager(load_entrypoints=load_entrypoints, environ=environ))


def third_party_plugins(environ: dict[str, str] | None = None) -> list[str]:
    """The names of the installed, not blocked plugins of the entry-point group ``lineup``.

    Reads the group only (a few ms); the plugin manager scans every distribution's entry points.
    """
    from importlib.metadata import entry_points

    blocked = blocked_names(environ)
    return [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in blocked]


def builtin_function_schemas(environ: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The function schemas of every tool, without the registry, pydantic or the plugin manager.

    Only when no third-party plugin is installed (its tools are known, and checked, only through
    the registry) and the built-in plugins register plain dicts; otherwise None. The built-in
    tools are constants the registry accepts (a test checks both give the same schemas).
    """
    if third_party_plugins(environ):
        return None
    blocked = blocked_names(environ)
    tools: list[Any] = []

    def record(tool: Any, **overrides: Any) -> None:
        tools.append(tool if isinstance(tool, dict) and not any(overrides.values()) else None)

    for module_name in BUILTIN_PLUGINS:
        if module_name not in blocked:
            importlib.import_module(module_name).register_tools(register=record)
    if not all(tools) or len({tool["name"] for tool in tools}) != len(tools):
        return None
    return [function_schema(tool) for tool in tools]
