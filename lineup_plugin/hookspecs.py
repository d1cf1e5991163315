"""Hook specifications: what a LineUp plugin can implement.

A plugin is a module or object with functions marked ``@lineup_plugin.hookimpl``, found through
the entry-point group ``lineup`` (or registered directly on the plugin manager). An
implementation may accept fewer arguments than its spec, so specs can grow without breaking
plugins.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from .tools.registry import Register
    from .tools.renderers import RegisterRenderer

hookspec = pluggy.HookspecMarker("lineup")
hookimpl = pluggy.HookimplMarker("lineup")


@hookspec
def register_tools(register: Register) -> None:
    """Register tools by calling ``register(tool)`` once per tool; return nothing.

    ``tool`` is one of:

    - a :class:`~lineup_plugin.protocol.ToolDefinition` (or the same as a ``dict`` in wire form),
      a tool that lives on the App — the App renders and answers it;
    - a typed Python function, a tool that runs in the agent's process: its signature becomes
      the JSON Schema of its arguments and its docstring the description. It may be ``async``.
      Whatever it returns (JSON-serialisable) is the result; if it raises, the model gets a
      ``failed`` result with the error message.

    ``register(tool, name=..., description=..., risk=...)`` overrides the derived name,
    description or risk. Registering a name another plugin already registered raises
    :class:`~lineup_plugin.errors.DuplicateToolError` naming both plugins.
    """


@hookspec
def register_renderers(register: RegisterRenderer) -> None:
    """Ship App renderers for this plugin's App tools: call ``register(tool_name, module_path)``.

    Called once per plugin after every plugin's ``register_tools``. ``module_path`` is an ES
    module file (``.js`` or ``.mjs``, UTF-8, at most 256 KiB), usually next to the plugin's own
    code (``Path(__file__).parent / "rating.js"``). It is read once, then served by the direct
    server from the App's own origin at an address made from its SHA-256 (so it is cached until
    it changes), under the App's Content-Security-Policy: it can load nothing from elsewhere.
    The App loads it the first time the agent calls the tool; what it must export and how it
    answers is in docs/plugins.md (*Renderers for plugin tools*). A tool without a renderer is
    answered ``unsupported`` by the App, as before.

    ``register`` raises :class:`~lineup_plugin.errors.RendererError` when the file cannot be read
    or is too large, or when the tool is not an App tool this plugin registered, or already has
    a renderer.
    """
