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
  ``subscriptions/listen`` streams on 2026-07-28 ones;
- MCP Apps (SEP-1865), advertised in every protocol era: every tool links its card page
  (``_meta.ui.resourceUri``), a
  ``text/html;profile=mcp-app`` resource (``resources/list``, ``resources/read``) that a host
  shows inline; the page finds and answers its call through two tools listed only to such hosts
  (:mod:`.apps`, :mod:`.view`). Other clients see the same tools and results as before.

The same process serves the App (the direct server on :9527 or the relay, as the settings say),
under the data directory's server lock; if another process (a Hermes gateway, say) serves it,
every call is forwarded to that process (:mod:`lineup_plugin.runtime.forward`), so Hermes and
MCP clients share one App, and this process takes over serving if that one goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import signal
import socket
import sys
from collections import deque
from collections.abc import Iterator
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread
import mcp_types as types
import uvicorn
from mcp.server import NotificationOptions, Server, ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.server.models import InitializationOptions
from mcp.server.session import ServerSession
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError

from ...errors import ToolError, TransportError
from ...protocol.messages import ToolResult
from ..base import result_json
from .apps import ANSWER_TOOL, APP_TOOLS, CARD_TOOL, HostCards
from .runtime import McpRuntime, Waiting
from .view import APP_MIME_TYPE, card_page, card_uri, tool_of

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
#: seconds ``lineup mcp --http`` waits for open requests (a call waiting for the App) once told to stop
GRACEFUL_SHUTDOWN = 5
#: the MCP Apps extension (SEP-1865) as negotiated in the capabilities
APPS_EXTENSION = "io.modelcontextprotocol/ui"


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


def supports_apps(ctx: ServerRequestContext[Any, Any]) -> bool:
    """Whether the client negotiated MCP Apps (the extension, with the ``text/html;profile=mcp-app`` type)."""
    capabilities = ctx.session.client_capabilities
    settings = (capabilities.extensions or {}).get(APPS_EXTENSION) if capabilities is not None else None
    mime_types = settings.get("mimeTypes") if isinstance(settings, dict) else None
    return isinstance(mime_types, list) and APP_MIME_TYPE in mime_types


def advertise_apps(result: HandlerResult) -> HandlerResult:
    """An ``initialize`` result (as sent) with the MCP Apps extension in its capabilities.

    The SDK sends ``capabilities.extensions`` on the 2026-07-28 protocol only: the handshake
    eras' schema (2024-11-05 to 2025-11-25) has no such field, so it is dropped there, while hosts
    of those eras (the MCP Apps hosts today) read it in the same place. Written back here.
    """
    if not isinstance(result, dict) or not isinstance(result.get("capabilities"), dict):
        return result
    capabilities = dict(result["capabilities"])
    extensions = capabilities.get("extensions")
    capabilities["extensions"] = {**(extensions if isinstance(extensions, dict) else {}), APPS_EXTENSION: {}}
    return {**result, "capabilities": capabilities}


def ui_meta(uri: str) -> dict[str, Any]:
    """A tool's ``_meta`` linking its card page: ``ui.resourceUri``, and the flat ``ui/resourceUri``
    key of the earlier MCP Apps drafts, which hosts written against them still read."""
    return {"ui": {"resourceUri": uri}, "ui/resourceUri": uri}


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
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscriptions_listen=ListenHandler(self.bus),
        )
        self.server.middleware.append(self._remember_session)
        self.server.extensions[APPS_EXTENSION] = {}  # MCP Apps: the card pages (see the module docstring)
        self._sessions: deque[ServerSession] = deque(maxlen=MAX_SESSIONS)
        #: the card pages of MCP Apps hosts: which call each shows, and their answers
        self.cards = HostCards(runtime.service)
        self._pages: dict[tuple[str, str, str], str] = {}
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
        """Middleware: keep each handshake-era connection (its ``initialize``) for list_changed, and
        advertise MCP Apps in its capabilities (see :func:`advertise_apps`)."""
        result = await call_next(ctx)
        if ctx.method == "initialize":
            self._sessions.append(ctx.session)
            result = advertise_apps(result)
        return result

    def tools(self, *, apps: bool = False) -> list[types.Tool]:
        """Every tool as MCP lists it, each linked to its card page; with ``apps`` (the client
        negotiated MCP Apps) also the two tools of the card page, for the page only."""
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
                    _meta=ui_meta(card_uri(schema["name"])),
                )
            )
        if apps:
            for name, (description, schema) in APP_TOOLS.items():
                meta = {"ui": {"visibility": ["app"]}}
                listed.append(types.Tool(name=name, description=description, input_schema=schema, _meta=meta))
        return listed

    async def _list_tools(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=self.tools(apps=supports_apps(ctx)))

    def card_resources(self) -> list[types.Resource]:
        """The card page of every tool (``ui://lineup/card/<tool>``)."""
        return [
            types.Resource(
                uri=card_uri(schema["name"]),
                name=f"lineup-card-{schema['name']}",
                title=f"LineUp card: {schema['name']}",
                description=f"The LineUp App's card for {schema['name']}, answered here or on the phone.",
                mime_type=APP_MIME_TYPE,
            )
            for schema in self.runtime.schemas()
        ]

    def card_page(self, uri: str) -> str | None:
        """The HTML of the card page at ``uri``, or None when no tool has one there (built once per renderer)."""
        name = tool_of(uri)
        if name is None or not self.runtime.has_tool(name):
            return None
        registry = self.runtime.service.registry
        tool = registry.get(name)
        renderer = registry.renderers.for_tool(name)
        key = (name, renderer.digest if renderer is not None else "", tool.source if tool is not None else "")
        page = self._pages.get(key)
        if page is None:
            page = self._pages[key] = card_page(name, label=name.replace("_", " ").capitalize(), renderer=renderer)
        return page

    async def _list_resources(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=self.card_resources())

    async def _read_resource(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        uri = str(params.uri)
        page = await anyio.to_thread.run_sync(self.card_page, uri)
        if page is None:
            raise MCPError(types.INVALID_PARAMS, f"no LineUp card page at {uri[:200]}")
        meta = {"ui": {"prefersBorder": True}}
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=uri, mime_type=APP_MIME_TYPE, text=page, _meta=meta)]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[dict[str, Any], Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        name = params.name
        if name in APP_TOOLS and supports_apps(ctx):
            return await self._card_tool(name, dict(params.arguments or {}), ctx.session)
        session = ctx.session
        token = anyio.lowlevel.current_token()
        total = self.runtime.service.deadline_for(name)

        def report(elapsed: float, label: str) -> None:  # on the worker thread
            with contextlib.suppress(Exception):  # the request or the loop is gone: nobody to tell
                anyio.from_thread.run(session.report_progress, round(elapsed, 1), total, label, token=token)

        arguments = dict(params.arguments or {})
        shown = self.cards.started(name, arguments, request_id=ctx.request_id, session=ctx.session)
        waiting = Waiting(report, on_beat=lambda: self.cards.beat(shown), on_call=lambda id: self.cards.bind(shown, id))
        try:
            result = await anyio.to_thread.run_sync(
                self.runtime.run_call,
                name,
                arguments,
                waiting,
                abandon_on_cancel=True,
                limiter=self._threads,
            )
        except anyio.get_cancelled_exc_class():
            waiting.cancelled.set()  # the worker cancels the card on every device within a poll
            raise
        finally:
            self.cards.finished(shown)
        log.debug("lineup mcp: %s ended %s", name, result.status)
        return call_result(result)

    async def _card_tool(self, name: str, arguments: dict[str, Any], session: object) -> types.CallToolResult:
        """``lineup_card`` / ``lineup_answer``, the tools of the card page (see :mod:`.apps`), asked on ``session``."""
        try:
            if name == CARD_TOOL:
                tool, args, request_id = arguments.get("tool"), arguments.get("arguments"), arguments.get("request_id")
                if (
                    not isinstance(tool, str)
                    or not isinstance(args, dict)
                    or not isinstance(request_id, str | int | None)
                    or isinstance(request_id, bool)
                ):
                    raise ToolError("lineup_card takes {tool: string, arguments: object, request_id?: string|integer}")
                call = await self.cards.find(tool, args, request_id=request_id, session=session)
                return types.CallToolResult(content=[_text(json.dumps(call))], structured_content={"call": call})
            assert name == ANSWER_TOOL
            call_id = arguments.get("call_id")
            if not isinstance(call_id, str):
                raise ToolError("lineup_answer takes {call_id: string, status: string, result: object}")
            await self.cards.answer(call_id, str(arguments.get("status")), arguments.get("result"))
        except ToolError as exc:
            return types.CallToolResult(content=[_text(str(exc))], is_error=True)
        return types.CallToolResult(content=[_text("the answer was applied")], structured_content={"applied": True})

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


def _text(text: str) -> types.TextContent:
    return types.TextContent(type="text", text=text)


def _version() -> str:
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

    Whatever the address, requests for other hosts and from other web pages are refused
    (:class:`~.guard.HostOriginGuard`, against DNS rebinding). There is no authentication: any
    process that reaches the port may ask the user's phone.
    """
    from mcp.server.transport_security import TransportSecuritySettings

    from .guard import HostOriginGuard

    mcp = LineUpMcpServer(runtime)
    await mcp.start_async()
    settings = runtime.service.settings
    app = HostOriginGuard(
        # the SDK's own check (127.0.0.1, localhost and ::1 only) would ignore allowed_hosts
        mcp.server.streamable_http_app(
            host=host, transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False)
        ),
        allowed_hosts=settings.allowed_hosts,
        allowed_origins=settings.allowed_origins,
    )
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        sock = socket.create_server((host, port), family=family)  # listening before it is announced
    except OSError as exc:
        raise TransportError(f"cannot serve MCP on {host}:{port}: {exc.strerror or exc}") from exc
    config = uvicorn.Config(app, log_level="warning", lifespan="on", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN)
    server = _Uvicorn(config)
    if not _loopback(host):
        print(f"lineup mcp: warning: {host} is not a loopback address; MCP has no authentication", file=sys.stderr)
    where = f"http://{_url_host(host)}:{sock.getsockname()[1]}/mcp"
    print(f"lineup mcp: MCP over streamable HTTP at {where}", file=sys.stderr, flush=True)
    with sock:
        await server.serve(sockets=[sock])


class _Uvicorn(uvicorn.Server):
    """uvicorn's server, stopped by SIGINT/SIGTERM through the event loop.

    uvicorn's own handlers (``signal.signal``) sit beside the loop's SIGTERM handler of
    ``lineup mcp`` (which cancels the main task): both fired, and the task was cancelled in the
    middle of uvicorn's graceful shutdown, which printed a traceback; then uvicorn raised the signal
    again. Here the loop's handlers ask uvicorn to exit (a second SIGINT forces it), and nothing is
    raised again: ``lineup mcp --http`` ends as cleanly as at the end of a stdio client's input.
    Once stopping, the streams still open (a client's standing SSE stream) are ended without
    uvicorn's "ASGI callable returned without completing response" error.
    """

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        logging.getLogger("uvicorn.error").addFilter(self._quiet_when_stopping)

    def _quiet_when_stopping(self, record: logging.LogRecord) -> bool:
        return not (self.should_exit and record.getMessage().startswith("ASGI callable returned without completing"))

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Stop on SIGINT/SIGTERM through the running loop (uvicorn's own way where it has none)."""
        if sys.platform == "win32":  # no loop signal handlers there
            with super().capture_signals():
                yield
            return
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            loop.remove_signal_handler(signal.SIGINT)  # Ctrl+C is KeyboardInterrupt again
            self._captured_signals.clear()  # handled: never raised again


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
