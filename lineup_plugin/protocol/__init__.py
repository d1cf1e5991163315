"""The LineUp wire protocol v1: sans-I/O models, codec and call state machine.

Nothing in this package does I/O or imports websockets, anyio or any agent runtime.

The names below load their module on first use: importing a submodule (say
``lineup_plugin.protocol.tools``) runs this file first, and building the message models takes
~100 ms that a process which never speaks the protocol (a Hermes start) should not pay.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .calls import TERMINAL, Call, CallState
    from .codec import decode, decode_object, encode, envelope, new_id, now_iso
    from .messages import (
        KINDS,
        PROTOCOL_VERSION,
        Actor,
        AgentStatus,
        AgentStop,
        DeviceHello,
        DeviceWelcome,
        Envelope,
        Error,
        Payload,
        Text,
        ToolAck,
        ToolCall,
        ToolCancel,
        ToolList,
        ToolResult,
    )
    from .tools import HIGH_RISK, ActionDefinition, ToolDefinition

_MODULES = {
    "calls": ("TERMINAL", "Call", "CallState"),
    "codec": ("decode", "decode_object", "encode", "envelope", "new_id", "now_iso"),
    "messages": (
        "KINDS",
        "PROTOCOL_VERSION",
        "Actor",
        "AgentStatus",
        "AgentStop",
        "DeviceHello",
        "DeviceWelcome",
        "Envelope",
        "Error",
        "Payload",
        "Text",
        "ToolAck",
        "ToolCall",
        "ToolCancel",
        "ToolList",
        "ToolResult",
    ),
    "tools": ("HIGH_RISK", "ActionDefinition", "ToolDefinition"),
}
_LAZY = {name: f".{module}" for module, names in _MODULES.items() for name in names}


__getattr__ = lazy_exports(__name__, _LAZY, globals())


__all__ = [
    "HIGH_RISK",
    "KINDS",
    "PROTOCOL_VERSION",
    "TERMINAL",
    "ActionDefinition",
    "Actor",
    "AgentStatus",
    "AgentStop",
    "Call",
    "CallState",
    "DeviceHello",
    "DeviceWelcome",
    "Envelope",
    "Error",
    "Payload",
    "Text",
    "ToolAck",
    "ToolCall",
    "ToolCancel",
    "ToolDefinition",
    "ToolList",
    "ToolResult",
    "decode",
    "decode_object",
    "encode",
    "envelope",
    "new_id",
    "now_iso",
]
