"""LineUp's nanobot tools, found by nanobot through the entry-point group ``nanobot.tools``.

One tool per built-in card (``choice``, ``confirm``, ``input``, ``canvas``, ``calculator``), named
and described as in Hermes, and the dispatcher ``lineup`` for every other LineUp tool: those of
installed LineUp plugins and those the App declares once connected (nanobot's tool list is fixed
at its start). Each call waits for the user (see :mod:`.runtime`) and returns the result's JSON.
"""

from __future__ import annotations

import json
from typing import Any

from .compat import Tool
from .runtime import installed

BUILTIN = ("choice", "confirm", "input", "canvas", "calculator")
DISPATCHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "tool": {"type": "string", "description": "the LineUp tool's name; empty: list the tools available now"},
        "arguments": {"type": "object", "description": "the tool's arguments, as its parameters say"},
    },
    "required": ["tool"],
}


class LineUpTool(Tool):  # type: ignore[misc]  # nanobot is not typed here
    """A LineUp tool in nanobot (abstract: :func:`card_tool` makes the concrete ones)."""

    _plugin_discoverable = False
    _scopes = {"core", "subagent"}  # noqa: RUF012 - nanobot's own declaration
    tool_name = ""

    def __init__(self, sessions: Any = None) -> None:
        self.sessions = sessions

    @classmethod
    def enabled(cls, ctx: Any) -> bool:
        """Whether LineUp has the tool (a built-in one may be blocked); a bad setting raises, naming it."""
        return cls.tool_name in installed().schemas()

    @classmethod
    def create(cls, ctx: Any) -> LineUpTool:
        """The tool for nanobot's agent (its session manager keeps what a stopped call answered)."""
        return cls(getattr(ctx, "sessions", None))

    @property
    def name(self) -> str:
        return self.tool_name

    @property
    def description(self) -> str:
        return str(installed().schemas().get(self.tool_name, {}).get("description", ""))

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(installed().schemas().get(self.tool_name, {}).get("parameters") or {"type": "object"})

    async def execute(self, **kwargs: Any) -> str:
        """Show the card and wait for its end: JSON with ``status``, ``result`` and a ``hint``."""
        return await installed().call(self.tool_name, kwargs, self.sessions)


def card_tool(name: str) -> type[LineUpTool]:
    """The nanobot tool class of built-in LineUp tool ``name``."""
    return type(f"{name.title()}Tool", (LineUpTool,), {"tool_name": name, "_plugin_discoverable": True})


ChoiceTool, ConfirmTool, InputTool, CanvasTool, CalculatorTool = (card_tool(name) for name in BUILTIN)


class DispatcherTool(LineUpTool):
    """``lineup``: any LineUp tool by name, for the tools nanobot's fixed list could not include."""

    _plugin_discoverable = True
    tool_name = "lineup"

    @classmethod
    def enabled(cls, ctx: Any) -> bool:
        """Always, once LineUp's settings and tools loaded (a bad setting raises, naming it)."""
        return bool(installed())

    @property
    def description(self) -> str:
        others = "".join(
            f"\n- {n}: {s.get('description', '')}" for n, s in installed().schemas().items() if n not in BUILTIN
        )
        return (
            "Use a tool on the user's phone (LineUp App) that has no tool of its own here: one a LineUp plugin "
            "or the App declares. Give its name and arguments; you get JSON with its status and result. "
            "Call with an empty `tool` to list the tools available now, with their parameters." + others
        )

    @property
    def parameters(self) -> dict[str, Any]:
        return DISPATCHER_PARAMETERS

    async def execute(self, **kwargs: Any) -> str:
        """Call tool ``kwargs['tool']`` with ``kwargs['arguments']``, or list the tools when it is empty."""
        name = str(kwargs.get("tool") or "").strip()
        if not name:
            return json.dumps({"tools": list(installed().schemas().values())}, ensure_ascii=False)
        return await installed().call(name, dict(kwargs.get("arguments") or {}), self.sessions)
