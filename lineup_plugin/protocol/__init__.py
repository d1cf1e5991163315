"""The LineUp wire protocol v1: sans-I/O models, codec and call state machine.

Nothing in this package does I/O or imports websockets, anyio or any agent runtime.
"""

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
