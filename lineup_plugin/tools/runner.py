"""Running the agent's in-process tools: for the agent (after the user approves a high-risk one)
and for an App that calls them."""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ArgumentsError
from ..protocol.messages import ToolCall, ToolResult
from ..protocol.session import failure
from ..protocol.tools import HIGH_RISK
from .registry import RegisteredTool, Registry

log = logging.getLogger(__name__)

#: asks the user to confirm: ``confirm`` tool arguments in, its terminal result out
Confirm = Callable[[dict[str, Any]], Awaitable[ToolResult]]


async def run_in_process(registry: Registry, tool: RegisteredTool, request: ToolCall) -> ToolResult:
    """Run ``tool``'s function with the call's arguments; never raises.

    A tool that raises gives a ``failed`` result naming the error (the model reads it; the
    session goes on); a value that is not a JSON object is wrapped as ``{"value": ...}``.
    """
    try:
        value = registry.run_in_process(tool, request.arguments)
        if inspect.isawaitable(value):
            value = await value
    except ArgumentsError as exc:
        return failure(request.call_id, tool.name, "failed", str(exc), error="invalid_arguments")
    except Exception as exc:
        log.warning("in-process tool %s raised", tool.name, exc_info=True)
        return failure(request.call_id, tool.name, "failed", f"{type(exc).__name__}: {exc}", error="tool_error")
    result = value if isinstance(value, dict) else {"value": value}
    try:
        json.dumps(result)
    except (TypeError, ValueError):
        result = {"value": repr(value)}
    return ToolResult(call_id=request.call_id, name=tool.name, action=request.action, status="completed", result=result)


async def run_for_agent(
    registry: Registry, tool: RegisteredTool, request: ToolCall, confirm: Confirm, *, caller: str = "the agent"
) -> ToolResult:
    """Run an in-process tool ``caller`` (the agent, or an App) called; a high-risk one only after the user approves it.

    The approval is a ``confirm`` card (``confirm``); anything but an approval ends the call
    ``rejected`` with the approval's status.
    """
    risk = tool.definition.risk
    if risk in HIGH_RISK:
        approval = await confirm(
            {
                "message": f"Allow {caller} to run {tool.name}?",
                "details": json.dumps(request.arguments, ensure_ascii=False),
                "risk": risk,
            }
        )
        if approval.status != "completed" or not approval.result.get("approved"):
            message = f"the user did not approve {tool.name}"
            return failure(request.call_id, tool.name, "rejected", message, approval=approval.status)
    return await run_in_process(registry, tool, request)
