""":class:`McpRuntime`: the :class:`~lineup_plugin.runtime.base.AgentRuntime` of an MCP server.

An MCP server has no agent run of its own: the model lives in the client (Claude Desktop,
Claude Code, Cursor...). So the runtime keeps the registered tools for ``tools/list``, a call
is interrupted when the client cancels its request, the heartbeat of a waiting call becomes MCP
progress, and App text and the stop button reach no run (the App is told the agent takes no
messages; stop still closes every open card, and the waiting calls end ``cancelled``).

The per-call state (the client's cancellation, how progress is reported) is :class:`Waiting`,
bound to the worker thread that runs the blocking call (:meth:`McpRuntime.run_call`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import AgentRuntime, ToolHandler
from ..service import LineUpService

if TYPE_CHECKING:
    from ...config.settings import Settings
    from ...protocol.messages import ToolResult
    from ...tools.registry import Registry

#: seconds between two progress notifications of one waiting call (the first is sent at once)
PROGRESS_EVERY = 5.0


class Waiting:
    """One MCP tool call waiting on a worker thread: its cancellation and its progress reports.

    ``report(elapsed, label)`` is called on the worker thread (the first heartbeat, then every
    :data:`PROGRESS_EVERY` seconds) and must return quickly; it is not called once cancelled.
    """

    def __init__(
        self,
        report: Callable[[float, str], None] | None = None,
        on_beat: Callable[[], None] | None = None,
        on_call: Callable[[str], None] | None = None,
    ) -> None:
        self.cancelled = threading.Event()
        self._report = report
        #: called on every heartbeat (the call is being waited for: an MCP Apps card page may look for it)
        self.on_beat = on_beat
        #: called with the LineUp call id the request makes, before any App is sent the call
        self.on_call = on_call
        self._last: float | None = None

    def beat(self, label: str, started: float) -> None:
        """A heartbeat of the blocking call: report progress when one is due."""
        if self.on_beat is not None:
            self.on_beat()
        if self._report is None or self.cancelled.is_set():
            return
        now = time.monotonic()
        if self._last is not None and now - self._last < PROGRESS_EVERY:
            return
        self._last = now
        self._report(now - started, label)


class McpRuntime(AgentRuntime):
    """:class:`AgentRuntime` of an MCP server, with its :class:`LineUpService` (role ``mcp``).

    ``on_tools_changed`` (set by the server) is called, on whatever thread, when the tools
    registered with the runtime changed.
    """

    name = "mcp"
    label = "LineUp"

    def __init__(
        self, settings: Settings | Callable[[], Settings], registry: Registry | Callable[[], Registry]
    ) -> None:
        self._schemas: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._local = threading.local()
        self.on_tools_changed: Callable[[], None] | None = None
        self.service = LineUpService(self, settings, registry, role="mcp")

    # tools -----------------------------------------------------------------------------

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Keep ``schema`` for ``tools/list`` (calls go through :meth:`run_call`, not ``handler``)."""
        with self._lock:
            self._schemas[schema["name"]] = schema

    def unregister_tool(self, name: str) -> None:
        """Drop ``name`` from ``tools/list``."""
        with self._lock:
            self._schemas.pop(name, None)

    def tools_changed(self) -> None:
        """Tell the server, which announces ``notifications/tools/list_changed``."""
        if self.on_tools_changed is not None:
            self.on_tools_changed()

    def schemas(self) -> list[dict[str, Any]]:
        """The registered function schemas ``{name, description, parameters}``, in registration order."""
        with self._lock:
            return list(self._schemas.values())

    def has_tool(self, name: str) -> bool:
        """Whether ``name`` is registered."""
        with self._lock:
            return name in self._schemas

    # one call ----------------------------------------------------------------------------

    def run_call(self, name: str, arguments: dict[str, Any], waiting: Waiting) -> ToolResult:
        """Call tool ``name`` and block until its end (on a worker thread), as ``waiting`` says.

        Through the service's :class:`~lineup_plugin.runtime.base.ToolBridge`: the tool's deadline,
        the server started if nobody serves, the App's status. Once ``waiting.cancelled`` is set
        the call is cancelled on every device and ends ``cancelled``.
        """
        self._local.waiting = waiting
        try:
            return self.service.bridge.call_tool(name, arguments)
        finally:
            self._local.waiting = None

    def _waiting(self) -> Waiting | None:
        waiting: Waiting | None = getattr(self._local, "waiting", None)
        return waiting

    def is_interrupted(self) -> bool:
        """Whether the MCP client cancelled the call that runs on this thread."""
        waiting = self._waiting()
        return waiting is not None and waiting.cancelled.is_set()

    def call_started(self, call_id: str) -> None:
        """The request on this thread makes LineUp call ``call_id``: its card page is bound to that call."""
        waiting = self._waiting()
        if waiting is not None and waiting.on_call is not None:
            waiting.on_call(call_id)

    def heartbeat(self, label: str, started: float) -> None:
        """Progress for the client, if it asked for it (see :class:`Waiting`)."""
        waiting = self._waiting()
        if waiting is not None:
            waiting.beat(label, started)

    # messages and runs: an MCP server has no run of its own -------------------------------

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """False: MCP gives a server no way to hand the model a user message."""
        return False

    def interrupt(self, message: str | None = None) -> bool:
        """False: there is no run to stop (the service then closes every open card)."""
        return False

    def steer(self, text: str) -> bool:
        """False: there is no run to steer."""
        return False
