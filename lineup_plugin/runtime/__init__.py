"""The runtime seam: what an adapter for an agent framework (Hermes Agent, an MCP server, nanobot...)
builds on, and the only names it needs.

An adapter does three things:

1. subclass :class:`AgentRuntime` — register and unregister native tools, say whether the run
   that called a tool was interrupted, keep a waiting tool alive (:meth:`~AgentRuntime.heartbeat`),
   deliver App text (and :class:`StoredFile` files) to the agent, interrupt and steer a run;
   optionally say which :class:`Conversation` and :class:`Origin` a call belongs to;
2. make one :class:`LineUpService` with it, the :class:`Settings` and a :class:`Registry` (each
   may be a function that makes it, so an agent's start pays for neither; :func:`load_settings`
   reads them from ``LINEUP_*`` variables and a config section, :func:`load_registry` gives every
   installed plugin's tools) — the service registers every LineUp tool with the
   runtime through a :class:`ToolBridge` (reading a :class:`ToolSource`; each handler runs a
   :class:`BlockingCall` that honours the run's interrupts), starts the server on first need
   (:meth:`LineUpService.ensure_started`) or forwards to the process that serves. An asyncio
   runtime awaits :meth:`LineUpService.call` instead: the blocking call on a thread of its own,
   withdrawn on every device when the awaiting task is cancelled; each such call is an
   :class:`AwaitedCall` (:meth:`LineUpService.awaited_calls`) its stop button can withdraw or cancel;
3. tell the service what the runtime does: :meth:`LineUpService.report_status` when a run starts
   and ends, :meth:`LineUpService.send_text` for the agent's replies, :meth:`LineUpService.stop`
   at exit.

A tool's handler (:data:`ToolHandler`) takes the model's flat arguments and returns JSON text:
:func:`result_json` of the call's :class:`ToolResult`, with a hint for every status but
``completed`` (:data:`STATUS_HINTS`). :func:`app_grace` is how long a process that just started
serving waits for an App before a call fails ``no_app``.

Importing this package loads no protocol model: the names of lower layers (settings, registry,
messages, files) load on first use, so a runtime's start stays cheap.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports
from .base import (
    STATUS_HINTS,
    AgentRuntime,
    BlockingCall,
    Conversation,
    ToolBridge,
    ToolHandler,
    ToolSource,
    result_json,
)
from .service import AwaitedCall, LineUpService, app_grace

if TYPE_CHECKING:
    from ..config.settings import Settings, load_settings
    from ..media import StoredFile
    from ..plugins import load_registry
    from ..protocol.messages import Origin, ToolResult
    from ..tools.registry import Registry

_LAZY = {
    "Settings": "..config.settings",
    "load_settings": "..config.settings",
    "StoredFile": "..media",
    "load_registry": "..plugins",
    "Origin": "..protocol.messages",
    "ToolResult": "..protocol.messages",
    "Registry": "..tools.registry",
}


__getattr__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "STATUS_HINTS",
    "AgentRuntime",
    "AwaitedCall",
    "BlockingCall",
    "Conversation",
    "LineUpService",
    "Origin",
    "Registry",
    "Settings",
    "StoredFile",
    "ToolBridge",
    "ToolHandler",
    "ToolResult",
    "ToolSource",
    "app_grace",
    "load_registry",
    "load_settings",
    "result_json",
]
