"""The MCP server of ``lineup mcp``: LineUp's tools for any MCP client, answered on the App.

Built on the official ``mcp`` SDK's low-level :class:`~mcp.server.lowlevel.Server` (the tools'
JSON Schemas are LineUp's, not derived from Python signatures):

- ``tools/list``: every tool the Hermes runtime would see — built-ins, plugin tools,
  App-declared tools — as its agent-facing function schema
  (:func:`~lineup_plugin.tools.agent_schema.function_schema`), with the tool's ``outputSchema``
  where an action tool declares one;
- ``tools/call``: runs on a worker thread through the service's
  :class:`~lineup_plugin.runtime.base.ToolBridge` and :class:`~lineup_plugin.runtime.loop.Runner`
  (exactly as a Hermes tool does), and waits for the App. While it waits the client gets
  ``notifications/progress`` (if it sent a progress token): at once, then every
  :data:`~.runtime.PROGRESS_EVERY` seconds. A cancelled request (``notifications/cancelled``, or
  the HTTP stream closed) cancels the card on every device;
- the result (:func:`call_result`): ``completed`` gives the App's answer as structured content;
  every other status is ``isError`` with the status, the message and a hint the model can act on
  (:func:`~lineup_plugin.runtime.base.result_json`, :data:`~lineup_plugin.runtime.base.STATUS_HINTS`);
- tool list changes (an App connects with its own tools, or leaves) are announced: with
  ``notifications/tools/list_changed`` on handshake-era connections, and on
  ``subscriptions/listen`` streams on 2026-07-28 ones.

The same process serves the App (the direct server on :9527 or the relay, as the settings say),
under the data directory's server lock; if another process (a Hermes gateway, say) serves it,
every call is forwarded to that process (:mod:`lineup_plugin.runtime.forward`), so Hermes and
MCP clients share one App, and this process takes over serving if that one goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import sys
from collections import deque
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types

from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged

from ...errors import TransportError
from ...protocol.messages import ToolResult
from ..base import result_json
from .runtime import McpRuntime, Waiting

log = logging.getLogger(__name__)

#: what the client is told about the server (shown to the model by some clients)
INSTRUCTIONS = (
    "LineUp tools run on the user's phone: each call shows a card in the LineUp App and waits for the "
    "user's answer. A result that is not completed says why (declined, expired, no App connected...) "
    "and what to do next."
)
#: how many handshake-era connections are remembered for list_changed notifications
MAX_SESSIONS = 256
#: how many calls may wait for the App at once (each waits on a worker thread); more queue for a thread
MAX_WAITING_CALLS = 256


def call_result(result: ToolResult) -> types.CallToolResult:
    """The MCP result of a LineUp call: ``completed`` → structured content, anything else → ``isError``.

    The text content is :func:`~lineup_plugin.runtime.base.result_json` in every case (status,
    tool, call id, the App's answer or the failure's details, and a hint for any status but
    ``completed``), so a client that reads only text loses nothing.
    """
    content: list[types.ContentBlock] = [types.TextContent(type="text", text=result_json(result))]
    if result.status == "completed":
        return types.CallToolResult(content=content, structured_content=dict(result.result))
    return types.CallToolResult(content=content, is_error=True)


class _Server(Server[dict[str, Any]]):
    """The SDK's low-level server, announcing ``tools.listChanged`` on every transport."""

    def create_initialization_options(
        self,
        notification_options: NotificationOptions | None = None,
        experimental_capabilities: dict[str, dict[str, Any]] | None = None,
        extensions: dict[str, dict[str, Any]] | None = None,
    ) -> InitializationOptions:
        """The SDK's options, with tool list changes announced unless told otherwise."""
        return super().create_initialization_options(
            notification_options or NotificationOptions(tools_changed=True), experimental_capabilities, extensions
        )


class LineUpMcpServer:
    """The MCP server around an :class:`McpRuntime` (see the module docstring).

    Call :meth:`start` (blocking; from a worker thread inside an async server) before serving
    :attr:`server`, and ``runtime.service.stop()`` when done.
    """

    def __init__(self, runtime: McpRuntime, *, name: str = "lineup") -> None:
        self.runtime = runtime
        self.bus = InMemorySubscriptionBus()
        self.server: Server[dict[str, Any]] = _Server(
            name,
            version=_version(),
            title="LineUp",
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_subscriptions_listen=ListenHandler(self.bus),
        )
        self.server.middleware.append(self._remember_session)
        self._sessions: deque[ServerSession] = deque(maxlen=MAX_SESSIONS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads: anyio.CapacityLimiter | None = None

    # start -----------------------------------------------------------------------------

    async def start_async(self) -> None:
        """:meth:`start` on a worker thread; list changes are then announced on the running loop."""
        self._loop = asyncio.get_running_loop()
        self._threads = anyio.CapacityLimiter(MAX_WAITING_CALLS)
        self.runtime.on_tools_changed = self._tools_changed_threadsafe
        await anyio.to_thread.run_sync(self.start)

    def start(self) -> None:
        """Serve the App here unless another process does, register the tools, say where on stderr."""
        service = self.runtime.service
        service.ensure_started("lineup mcp")
        service.bridge.sync()
        if not service.serving:
            line = service.status_line(show_link=False)
            print(f"lineup mcp: {line} Calls are forwarded to it.", file=sys.stderr, flush=True)
        elif not sys.stderr.isatty():  # on a terminal the service drew the link as a QR code already
            print(f"lineup mcp: {service.status_line(show_link=True)}", file=sys.stderr, flush=True)

    # handlers --------------------------------------------------------------------------

    async def _remember_session(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        """Middleware: keep each handshake-era connection (its ``initialize``) for list_changed."""
        result = await call_next(ctx)
        if ctx.method == "initialize":
            self._sessions.append(ctx.session)
        return result

    def tools(self) -> list[types.Tool]:
        """Every tool as MCP lists it."""
        registry = self.runtime.service.registry
        listed: list[types.Tool] = []
        for schema in self.runtime.schemas():
            tool = registry.get(schema["name"])
            output = tool.definition.output_schema if tool is not None and tool.definition.type == "action" else None
            listed.append(
                types.Tool(
                    name=schema["name"],
                    description=schema.get("description") or None,
                    input_schema=schema.get("parameters") or {"type": "object"},
                    output_schema=output if output is not None and output.get("type") == "object" else None,
                )
            )
        return listed

    async def _list_tools(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools())

    async def _call_tool(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        session = ctx.session
        token = anyio.lowlevel.current_token()
        total = self.runtime.service.deadline_for(name)

        def report(elapsed: float, label: str) -> None:  # on the worker thread
            with contextlib.suppress(Exception):  # the request or the loop is gone: nobody to tell
                anyio.from_thread.run(session.report_progress, round(elapsed, 1), total, label, token=token)

        waiting = Waiting(report)
        try:
            result = await anyio.to_thread.run_sync(
                self.runtime.run_call,
                name,
                dict(params.arguments or {}),
                waiting,
                abandon_on_cancel=True,
                limiter=self._threads,
            )
        except anyio.get_cancelled_exc_class():
            waiting.cancelled.set()  # the worker cancels the card on every device within a poll
            raise
        log.debug("lineup mcp: %s ended %s", name, result.status)
        return call_result(result)

    # list changes ------------------------------------------------------------------------

    def _tools_changed_threadsafe(self) -> None:
        loop = self._loop
        if loop is not None and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self.announce_tools_changed(), loop)

    async def announce_tools_changed(self) -> None:
        """Tell every client the tool list changed (listen streams, and handshake-era connections)."""
        await self.bus.publish(ToolsListChanged())
        for session in list(self._sessions):
            try:
                await session.send_tool_list_changed()
            except Exception:
                log.debug("lineup mcp: a connection is gone", exc_info=True)
                with contextlib.suppress(ValueError):
                    self._sessions.remove(session)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lineup-plugin")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "0"


async def serve_stdio(runtime: McpRuntime) -> None:
    """Serve MCP over stdin/stdout until the client closes stdin (the SDK points fd 1 at stderr meanwhile)."""
    from mcp.server.stdio import stdio_server

    mcp = LineUpMcpServer(runtime)
    async with stdio_server() as (read, write):
        await mcp.start_async()
        await mcp.server.run(read, write, mcp.server.create_initialization_options())


async def serve_http(runtime: McpRuntime, host: str, port: int) -> None:
    """Serve MCP over streamable HTTP at ``http://host:port/mcp`` (uvicorn) until SIGINT/SIGTERM.

    Port 0 picks a free port; the address is printed on stderr once the socket listens.

    On a loopback host the SDK refuses other Host and Origin headers (DNS rebinding). There is no
    authentication: any process that reaches the port may ask the user's phone.
    """
    import uvicorn

    mcp = LineUpMcpServer(runtime)
    await mcp.start_async()
    app = mcp.server.streamable_http_app(host=host)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)  # listening before it is announced
    except OSError as exc:
        raise TransportError(f"cannot serve MCP on {host}:{port}: {exc.strerror or exc}") from exc
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    if not _loopback(host):
        print(f"lineup mcp: warning: {host} is not a loopback address; MCP has no authentication", file=sys.stderr)
    where = f"http://{_url_host(host)}:{sock.getsockname()[1]}/mcp"
    print(f"lineup mcp: MCP over streamable HTTP at {where}", file=sys.stderr, flush=True)
    with sock:
        await server.serve(sockets=[sock])


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
