"""Running the agent's in-process tools: for the agent (after the user approves a high-risk one)
and for an App that calls them."""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import ArgumentsError
from ..protocol.live import failure
from ..protocol.messages import ToolCall, ToolResult
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


class AppRuns:
    """The agent's in-process tools an App calls, run as for the agent: approved if high-risk, then ``done``.

    A high-risk tool runs in a task of :attr:`tasks`: its approval is answered on the very link
    whose message is being handled, so it cannot be waited for there.
    """

    def __init__(
        self,
        registry: Registry,
        confirm: Confirm,
        done: Callable[[Any, ToolResult], None],
    ) -> None:
        self.registry = registry
        self.confirm = confirm
        #: called with the App's link and the outcome (record it, answer the App)
        self.done = done
        #: runs of high-risk tools waiting for the user's approval
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self, link: Any, request: ToolCall) -> None:
        """Run the in-process tool the App on ``link`` called (a high-risk one in a task)."""
        tool = self.registry.get(request.name)
        if tool is None or not tool.in_process:  # withdrawn meanwhile
            message = f"the agent has no tool {request.name!r} an App can call"
            self.done(link, failure(request.call_id, request.name, "unsupported", message))
        elif tool.definition.risk in HIGH_RISK:
            task = asyncio.create_task(self._run(link, tool, request))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)
        else:
            await self._run(link, tool, request)

    async def _run(self, link: Any, tool: RegisteredTool, request: ToolCall) -> None:
        self.done(link, await run_for_agent(self.registry, tool, request, self.confirm, caller="the App"))
