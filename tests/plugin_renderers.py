"""Registries with plugin renderers for the tests: the example plugin's ``rating`` and a plugin of broken ones."""

from __future__ import annotations

from pathlib import Path

import lineup_weather

from lineup_plugin import hookimpl
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.tools.registry import Register, Registry
from lineup_plugin.tools.renderers import RegisterRenderer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "renderers"
#: App tools of the Gadgets plugin and the renderer file each ships (None: no renderer)
GADGETS = {
    "no_render": "no_render.js",
    "syntax_error": "syntax_error.js",
    "throws": "throws.js",
    "rejects": "rejects.js",
}
PLAIN = "plain_gadget"  # an App tool whose plugin ships no renderer


class Gadgets:
    """A plugin whose App tools have malformed, broken or throwing renderers, and one without any."""

    @hookimpl
    def register_tools(self, register: Register) -> None:
        for name in [*GADGETS, PLAIN]:
            register({"name": name, "type": "action", "inputSchema": {"type": "object"}})

    @hookimpl
    def register_renderers(self, register: RegisterRenderer) -> None:
        for name, file in GADGETS.items():
            register(name, FIXTURES / file)


def renderer_registry() -> Registry:
    """The built-in tools, the example plugin ``weather`` (with its ``rating`` renderer) and :class:`Gadgets`."""
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(lineup_weather, name="weather")
    pm.register(Gadgets(), name="gadgets")
    return collect_tools(pm)
