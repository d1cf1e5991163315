"""The agent-facing function schema of a tool, from its definition in wire form.

It works on plain dicts (``{"name", "type", "description", "inputSchema" | "actions"}``), so the
Hermes plugin can register the built-in tools at start-up without loading pydantic or the
protocol models; the registry passes a :class:`~lineup_plugin.protocol.ToolDefinition`, read
through the same function.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..protocol.tools import ToolDefinition


def _input(spec: Mapping[str, Any]) -> dict[str, Any]:
    schema = spec.get("inputSchema")
    return {"type": "object"} if schema is None else dict(schema)


def _wire(definition: ToolDefinition | Mapping[str, Any]) -> Mapping[str, Any]:
    if isinstance(definition, Mapping):
        return definition
    return {
        "name": definition.name,
        "type": definition.type,
        "description": definition.description,
        "inputSchema": definition.input_schema,
        "actions": [
            {"name": a.name, "description": a.description, "inputSchema": a.input_schema}
            for a in definition.actions or ()
        ],
    }


def function_schema(definition: ToolDefinition | Mapping[str, Any]) -> dict[str, Any]:
    """The agent-facing function schema ``{name, description, parameters}`` of one tool.

    ``definition`` is a ToolDefinition or the same in wire form (a dict). An action tool's
    parameters are its inputSchema. An app or toolset tool gets an ``action`` enum plus the
    union of its actions' properties; the description lists each action with its required fields.
    """
    tool = _wire(definition)
    description = tool.get("description") or ""
    if tool["type"] == "action":
        return {"name": tool["name"], "description": description, "parameters": _input(tool)}
    actions = tool.get("actions") or []
    properties: dict[str, Any] = {
        "action": {"type": "string", "enum": [a["name"] for a in actions], "description": "which action to run"}
    }
    lines = [description, "Actions:"]
    for action in actions:
        schema = _input(action)
        props = schema.get("properties", {})
        required = schema.get("required", [])
        fields = ", ".join(f"{p}{'' if p in required else '?'}" for p in props)
        lines.append(f"- {action['name']}({fields}): {action.get('description') or ''}")
        for prop, sub in props.items():
            if prop not in properties:
                properties[prop] = dict(sub)
            elif properties[prop].get("type") != sub.get("type"):
                properties[prop] = {"description": f"see the action's fields ({prop})"}
            elif sub.get("description") and sub.get("description") != properties[prop].get("description"):
                merged = dict(properties[prop])
                merged["description"] = f"{merged.get('description', '')}; {action['name']}: {sub['description']}"
                properties[prop] = merged
    return {
        "name": tool["name"],
        "description": "\n".join(line for line in lines if line),
        "parameters": {"type": "object", "properties": properties, "required": ["action"]},
    }
