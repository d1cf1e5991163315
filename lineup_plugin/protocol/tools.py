"""Tool definitions as they travel in ``tool.list``: the three types app / toolset / action.

An ``action`` tool has one ``inputSchema``; ``app`` and ``toolset`` tools have ``actions``, each
with its own ``inputSchema``. Schemas are JSON Schema (as in MCP); they are checked to be valid
JSON Schema objects when a tool is registered (see :mod:`lineup_plugin.tools.registry`).
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import Field, model_validator

from .base import WireModel

ToolType = Literal["app", "toolset", "action"]
Risk = Literal["display_only", "user_confirmation", "system_permission", "restricted"]

#: every risk level, lowest first
RISKS: tuple[str, ...] = get_args(Risk)

#: the risk levels that need an explicit approval by the user before anything runs
HIGH_RISK: frozenset[str] = frozenset({"system_permission", "restricted"})


class ActionDefinition(WireModel):
    """One callable action of an ``app`` or ``toolset`` tool."""

    name: str = Field(min_length=1)
    description: str = ""
    input_schema: dict[str, Any] = Field(default_factory=lambda: {"type": "object"}, alias="inputSchema")
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")


class ToolDefinition(WireModel):
    """A LineUp tool: ``{name, type, description, actions[] | inputSchema, version?, outputSchema?, risk?}``."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_\-]+$")
    type: ToolType
    description: str = ""
    actions: list[ActionDefinition] | None = None
    input_schema: dict[str, Any] | None = Field(default=None, alias="inputSchema")
    version: str | None = None
    output_schema: dict[str, Any] | None = Field(default=None, alias="outputSchema")
    risk: Risk | None = None

    @model_validator(mode="after")
    def _shape_matches_type(self) -> ToolDefinition:
        if self.type == "action":
            if self.actions:
                raise ValueError("an action tool has an inputSchema, not actions")
            if self.input_schema is None:
                self.input_schema = {"type": "object"}
        else:
            if self.input_schema is not None:
                raise ValueError(f"an {self.type} tool has actions, not an inputSchema")
            if self.actions is None:
                raise ValueError(f"an {self.type} tool needs actions")
            names = [a.name for a in self.actions]
            if len(set(names)) != len(names):
                raise ValueError(f"duplicate action names in {names}")
        return self

    def action(self, name: str | None) -> ActionDefinition:
        """The action a call addresses; an action tool answers for any (or no) action name.

        Raises :class:`KeyError` when an app/toolset tool has no action of that name.
        """
        if self.type == "action":
            assert self.input_schema is not None
            return ActionDefinition(
                name=name or self.name,
                description=self.description,
                inputSchema=self.input_schema,
                outputSchema=self.output_schema,
            )
        for action in self.actions or ():
            if action.name == name:
                return action
        raise KeyError(name)

    def action_names(self) -> list[str]:
        """The names of the actions (empty for an action tool)."""
        return [a.name for a in self.actions or ()]
