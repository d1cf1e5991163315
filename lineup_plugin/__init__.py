"""lineup-plugin: let an AI agent use tools that live on the user's phone or browser.

Public API::

    from lineup_plugin import hookimpl, ToolDefinition

    @hookimpl
    def register_tools(register):
        register(my_function)          # an in-process tool: signature -> JSON Schema
        register({"name": "rate", "type": "action", "inputSchema": {...}})   # an App tool
"""

from .errors import (
    ArgumentsError,
    AuthError,
    CallStateError,
    ConfigError,
    DuplicateToolError,
    LineUpError,
    ProtocolError,
    RelayError,
    StoreBusyError,
    StoreError,
    ToolError,
    TransportError,
    VersionError,
)
from .hookspecs import hookimpl, hookspec
from .hub import Hub
from .plugins import load_registry
from .protocol import ActionDefinition, Call, CallState, Envelope, ToolCall, ToolDefinition, ToolResult
from .registry import Registry

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
    "Hub",
    "LineUpError",
    "ProtocolError",
    "Registry",
    "RelayError",
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
