"""The built-in App tools, registered through the same ``register_tools`` hook as any plugin.

``choice``, ``confirm`` and ``input`` are action tools, ``calculator`` a toolset and ``canvas`` an
app (schemas from the tool protocol of seed document 000 §4.2). All of them are rendered and
answered by the App. Each action declares the ``outputSchema`` of its completed result: an answer
that does not satisfy it is refused to the App (``invalid_result``) and never reaches the model.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..hookspecs import hookimpl

if TYPE_CHECKING:
    from ..tools.registry import Register


def complete_choice(arguments: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """A ``choice`` answer in the seed documents' shape, ``{"selected": "…"}`` without ``index``, with
    the index of that option filled in; any other answer as it is."""
    options, selected = arguments.get("options"), result.get("selected")
    if "index" in result or not isinstance(selected, str) or not isinstance(options, list) or selected not in options:
        return result
    return {**result, "index": options.index(selected)}


#: how answers of a built-in tool are completed before they are checked (answers in the seeds' shapes)
COMPLETERS: dict[str, Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]]] = {"choice": complete_choice}


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


_INSTANCE = {"instance_id": {"type": "string", "description": "canvas instance id, from open"}}
_OPERANDS = _obj({"a": {"type": "number"}, "b": {"type": "number"}}, ["a", "b"])
_VALUE = _obj({"value": {"type": "number"}}, ["value"])
#: what every canvas action answers (``open`` must give the instance id)
_CANVAS_OUT = {
    "instance_id": {"type": "string"},
    "strokes": {"type": "integer", "minimum": 0},
    "message": {"type": "string"},
}

CHOICE: dict[str, Any] = {
    "name": "choice",
    "type": "action",
    "version": "1.0",
    "description": "Ask the user to pick one of a list of options. Returns {selected, index}.",
    "inputSchema": _obj(
        {
            "question": {"type": "string", "description": "the question to ask"},
            "options": {
                "type": "array",
                "items": {"type": "string"},
                "minItems": 1,
                "description": "the options to choose from",
            },
        },
        ["question", "options"],
    ),
    "outputSchema": _obj({"selected": {"type": "string"}, "index": {"type": "integer"}}, ["selected", "index"]),
    "risk": "display_only",
}

CONFIRM: dict[str, Any] = {
    "name": "confirm",
    "type": "action",
    "version": "1.0",
    "description": (
        "Ask the user to approve or reject something before you do it. "
        "Status 'completed' with {approved: true} means approved; 'rejected' means the user said no. "
        "With 'choices' the user picks one of them instead (e.g. allow once, for this session, always, "
        "deny): the result names it in 'choice', and 'approved' is that choice's 'approves'."
    ),
    "inputSchema": _obj(
        {
            "message": {"type": "string", "description": "what the user is asked to approve"},
            "details": {"type": "string", "description": "optional details, e.g. the exact command"},
            "risk": {
                "type": "string",
                "enum": ["display_only", "user_confirmation", "system_permission", "restricted"],
                "description": "how risky the action is; shown to the user",
            },
            "choices": {
                "type": "array",
                "minItems": 2,
                "maxItems": 6,
                "description": "optional answers to offer instead of Approve and Reject, in this order",
                "items": {
                    "type": "object",
                    "properties": {
                        "value": {"type": "string", "minLength": 1, "maxLength": 32},
                        "label": {"type": "string", "minLength": 1, "maxLength": 60},
                        "approves": {"type": "boolean"},
                    },
                    "required": ["value", "label", "approves"],
                    "additionalProperties": False,
                },
            },
        },
        ["message"],
    ),
    "outputSchema": _obj(
        {"approved": {"type": "boolean"}, "choice": {"type": "string", "minLength": 1, "maxLength": 32}},
        ["approved"],
    ),
    "risk": "user_confirmation",
}

INPUT: dict[str, Any] = {
    "name": "input",
    "type": "action",
    "version": "1.0",
    "description": (
        "Ask the user to fill in a form. 'fields' is a JSON Schema object whose properties become "
        "the form's fields; without it the user types one text answer. Returns {values}."
    ),
    "inputSchema": _obj(
        {
            "prompt": {"type": "string", "description": "what to ask for"},
            "fields": {"type": "object", "description": "JSON Schema (type object) of the form"},
        },
        ["prompt"],
    ),
    "outputSchema": _obj({"values": {"type": "object"}}, ["values"]),
    "risk": "display_only",
}

CALCULATOR: dict[str, Any] = {
    "name": "calculator",
    "type": "toolset",
    "version": "1.0",
    "description": "A basic calculator on the user's App; stateless, every call stands alone. Returns {value}.",
    "actions": [
        {"name": "add", "description": "a + b", "inputSchema": _OPERANDS, "outputSchema": _VALUE},
        {"name": "subtract", "description": "a - b", "inputSchema": _OPERANDS, "outputSchema": _VALUE},
        {"name": "multiply", "description": "a * b", "inputSchema": _OPERANDS, "outputSchema": _VALUE},
        {"name": "divide", "description": "a / b", "inputSchema": _OPERANDS, "outputSchema": _VALUE},
    ],
    "risk": "display_only",
}

CANVAS: dict[str, Any] = {
    "name": "canvas",
    "type": "app",
    "version": "1.0",
    "description": "A drawing canvas on the user's App: open it, draw SVG paths, undo, clear, close.",
    "actions": [
        {
            "name": "open",
            "description": "create a canvas; returns {instance_id}",
            "inputSchema": _obj(
                {
                    "width": {"type": "integer", "minimum": 1, "description": "canvas width"},
                    "height": {"type": "integer", "minimum": 1, "description": "canvas height"},
                },
                ["width", "height"],
            ),
            "outputSchema": _obj(_CANVAS_OUT, ["instance_id"]),
        },
        {
            "name": "draw",
            "description": "draw an SVG path on the canvas",
            "inputSchema": _obj(
                {
                    **_INSTANCE,
                    "path": {"type": "string", "description": "SVG path data, e.g. 'M10 10 L50 50'"},
                    "color": {"type": "string", "description": "stroke colour"},
                    "width": {"type": "integer", "description": "stroke width"},
                },
                ["instance_id", "path"],
            ),
            "outputSchema": _obj(_CANVAS_OUT, []),
        },
        {
            "name": "undo",
            "description": "undo the last drawing step",
            "inputSchema": _obj(_INSTANCE, ["instance_id"]),
            "outputSchema": _obj(_CANVAS_OUT, []),
        },
        {
            "name": "clear",
            "description": "clear the canvas",
            "inputSchema": _obj(_INSTANCE, ["instance_id"]),
            "outputSchema": _obj(_CANVAS_OUT, []),
        },
        {
            "name": "close",
            "description": "close the canvas",
            "inputSchema": _obj(_INSTANCE, ["instance_id"]),
            "outputSchema": _obj(_CANVAS_OUT, []),
        },
    ],
    "risk": "display_only",
}

BUILTIN_TOOLS: tuple[dict[str, Any], ...] = (CHOICE, CONFIRM, INPUT, CALCULATOR, CANVAS)


@hookimpl
def register_tools(register: Register) -> None:
    """Register choice, confirm, input, calculator and canvas."""
    for tool in BUILTIN_TOOLS:
        register(tool)
