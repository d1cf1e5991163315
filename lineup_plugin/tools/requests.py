"""A tool call as the agent asks for it, checked before anything of it is kept or sent."""

from __future__ import annotations

from typing import Any

from ..errors import ArgumentsError, ProtocolError
from ..protocol import codec
from ..protocol.live import failure
from ..protocol.messages import Origin, ToolCall, ToolResult
from .registry import RegisteredTool, Registry, call_risk


def prepare_call(
    registry: Registry,
    name: str,
    arguments: dict[str, Any],
    *,
    call_id: str,
    action: str | None = None,
    origin: Origin | None = None,
) -> tuple[RegisteredTool, ToolCall] | ToolResult:
    """The tool and the request of a call, or the ``failed`` result (``invalid_arguments``) saying
    why it cannot be made: arguments the store and the Apps could not take (a lone surrogate, a
    number out of range, nesting too deep), an unknown tool or action, arguments that break the
    inputSchema (naming the field and what was expected)."""
    try:
        codec.check_storable(arguments, "arguments")
        tool, spec = registry.resolve(name, action, arguments)
    except ProtocolError as exc:
        return failure(call_id, name, "failed", str(exc), error="invalid_arguments")
    except ArgumentsError as exc:
        return failure(
            call_id, name, "failed", str(exc), error="invalid_arguments", field=exc.path, expected=exc.expected
        )
    risk = call_risk(tool, spec, arguments)
    return tool, ToolCall(call_id=call_id, name=name, action=action, arguments=arguments, risk=risk, origin=origin)
