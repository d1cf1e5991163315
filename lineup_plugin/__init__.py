"""lineup-plugin: let an AI agent use tools that live on the user's phone or browser.

Public API::

    from lineup_plugin import hookimpl, ToolDefinition

    @hookimpl
    def register_tools(register):
        register(my_function)          # an in-process tool: signature -> JSON Schema
        register({"name": "rate", "type": "action", "inputSchema": {...}})   # an App tool
"""

import importlib
from typing import TYPE_CHECKING, Any

from .errors import (
    ArgumentsError,
    AuthError,
    CallStateError,
    ConfigError,
    DuplicateToolError,
    HandedOverError,
    LineUpError,
    MediaError,
    ProtocolError,
    PushError,
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

if TYPE_CHECKING:
    from .hub import Hub
    from .plugins import load_registry
    from .protocol import ActionDefinition, Call, CallState, Envelope, ToolCall, ToolDefinition, ToolResult
    from .tools.registry import Registry

# Loaded on first use, so that importing the package (``from lineup_plugin import hookimpl``, or the
# Hermes entry point) loads neither pydantic nor the protocol models.
_LAZY = {
    "Hub": "hub",
    "load_registry": "plugins",
    "Registry": "tools.registry",
    **dict.fromkeys(
        ("ActionDefinition", "Call", "CallState", "Envelope", "ToolCall", "ToolDefinition", "ToolResult"), "protocol"
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'lineup_plugin' has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)


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
    "ProtocolError",
    "PushError",
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
