"""lineup-plugin: let an AI agent use tools that live on the user's phone or browser.

Public API::

    from lineup_plugin import hookimpl, ToolDefinition

    @hookimpl
    def register_tools(register):
        register(my_function)          # an in-process tool: signature -> JSON Schema
        register({"name": "rate", "type": "action", "inputSchema": {...}})   # an App tool
"""

from typing import TYPE_CHECKING

from .errors import (
    ArgumentsError,
    AuthError,
    CallStateError,
    ConfigError,
    DuplicateToolError,
    HandedOverError,
    LineUpError,
    MediaError,
    OwnerUnreachable,
    ProtocolError,
    PushError,
    PushServiceNotAllowed,
    RelayAuthError,
    RelayError,
    RelayProtocolError,
    RelayTimeoutError,
    RendererError,
    StoreBusyError,
    StoreError,
    ToolError,
    TransportError,
    VersionError,
)
from .hookspecs import hookimpl, hookspec
from .lazy import lazy_exports

if TYPE_CHECKING:
    from .hub import Hub
    from .plugins import load_registry
    from .protocol import ActionDefinition, Call, CallState, Envelope, ToolCall, ToolDefinition, ToolResult
    from .tools.registry import Registry

# Loaded on first use, so that importing the package (``from lineup_plugin import hookimpl``, or the
# Hermes entry point) loads neither pydantic nor the protocol models.
_LAZY = {
    "Hub": ".hub",
    "load_registry": ".plugins",
    "Registry": ".tools.registry",
    **dict.fromkeys(
        ("ActionDefinition", "Call", "CallState", "Envelope", "ToolCall", "ToolDefinition", "ToolResult"), ".protocol"
    ),
}


__getattr__ = lazy_exports(__name__, _LAZY, globals())


__version__ = "0.1.0"

__all__ = [
    "ActionDefinition",
    "ArgumentsError",
    "AuthError",
    "Call",
    "CallState",
    "CallStateError",
    "ConfigError",
    "DuplicateToolError",
    "Envelope",
    "HandedOverError",
    "Hub",
    "LineUpError",
    "MediaError",
    "OwnerUnreachable",
    "ProtocolError",
    "PushError",
    "PushServiceNotAllowed",
    "Registry",
    "RelayAuthError",
    "RelayError",
    "RelayProtocolError",
    "RelayTimeoutError",
    "RendererError",
    "StoreBusyError",
    "StoreError",
    "ToolCall",
    "ToolDefinition",
    "ToolError",
    "ToolResult",
    "TransportError",
    "VersionError",
    "__version__",
    "hookimpl",
    "hookspec",
    "load_registry",
]
