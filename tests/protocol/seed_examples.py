"""Every example message of the two seed documents, copied verbatim (the Chinese text included).

``KIND`` says which kind a bare payload is decoded as; ``None`` marks a whole envelope.
Sources: the product's original design documents — the agents v1 design (seed 000) §4.2,
§4.4–§4.6, §5.1, §5.2 and the IM platform plan (seed 001) §4.2, §5.1, §5.2 — whose examples are
all copied here, so nothing outside this repository is needed.
"""

from __future__ import annotations

from typing import Any

_INSTANCE = {"instance_id": {"type": "string", "description": "画板实例 ID"}}
_AB = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}

CANVAS_DEFINITION = {
    "name": "canvas",
    "type": "app",
    "description": "画板应用，支持绘制、撤销、清空等操作",
    "actions": [
        {
            "name": "open",
            "description": "创建画板实例，返回 instance_id",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "width": {"type": "integer", "description": "画板宽度"},
                    "height": {"type": "integer", "description": "画板高度"},
                },
                "required": ["width", "height"],
            },
        },
        {
            "name": "draw",
            "description": "在画板上绘制路径",
            "inputSchema": {
                "type": "object",
                "properties": {
                    **_INSTANCE,
                    "path": {"type": "string", "description": "SVG 路径数据"},
                    "color": {"type": "string", "description": "线条颜色"},
                    "width": {"type": "integer", "description": "线条粗细"},
                },
                "required": ["instance_id", "path"],
            },
        },
        {
            "name": "undo",
            "description": "撤销上一步操作",
            "inputSchema": {"type": "object", "properties": _INSTANCE, "required": ["instance_id"]},
        },
        {
            "name": "clear",
            "description": "清空画板内容",
            "inputSchema": {"type": "object", "properties": _INSTANCE, "required": ["instance_id"]},
        },
        {
            "name": "close",
            "description": "关闭画板释放资源",
            "inputSchema": {"type": "object", "properties": _INSTANCE, "required": ["instance_id"]},
        },
    ],
}

CALCULATOR_DEFINITION = {
    "name": "calculator",
    "type": "toolset",
    "description": "基础计算器，无状态，每次调用独立",
    "actions": [
        {"name": "add", "description": "两个数相加", "inputSchema": _AB},
        {"name": "subtract", "description": "两个数相减", "inputSchema": _AB},
        {"name": "multiply", "description": "两个数相乘", "inputSchema": _AB},
        {"name": "divide", "description": "两个数相除", "inputSchema": _AB},
    ],
}

CHOICE_DEFINITION = {
    "name": "choice",
    "type": "action",
    "description": "向用户提供一组选项让其选择",
    "inputSchema": {
        "type": "object",
        "properties": {
            "question": {"type": "string", "description": "问题描述"},
            "options": {"type": "array", "items": {"type": "string"}, "description": "可选列表"},
        },
        "required": ["question", "options"],
    },
}

ENVELOPE_001_4_2 = {
    "v": 1,
    "id": "msg_01J...",
    "type": "lineup.v1.tool.call",
    "conversation_id": "conv_01J...",
    "sender": {"kind": "agent", "id": "agent_hermes_main"},
    "target": {"kind": "device", "id": "device_phone_01"},
    "timestamp": "2026-07-30T14:00:00+08:00",
    "payload": {},
}

# (section, kind or None for a whole envelope, example)
EXAMPLES: list[tuple[str, str | None, Any]] = [
    ("000 §4.2 app", "tool.list", {"tools": [CANVAS_DEFINITION]}),
    ("000 §4.2 toolset", "tool.list", {"tools": [CALCULATOR_DEFINITION]}),
    ("000 §4.2 action", "tool.list", {"tools": [CHOICE_DEFINITION]}),
    (
        "000 §4.4 tool.call",
        "tool.call",
        {"call_id": "c1", "name": "canvas", "action": "open", "arguments": {"width": 800, "height": 600}},
    ),
    (
        "000 §4.5 tool.result",
        "tool.result",
        {"call_id": "c1", "name": "canvas", "action": "open", "result": {"message": "instance_id: inst_001"}},
    ),
    (
        "000 §4.6 tool.list",
        "tool.list",
        {
            "tools": [
                {"name": "choice", "type": "action", "description": "...", "inputSchema": {}},
                {"name": "calculator", "type": "toolset", "description": "...", "actions": []},
                {"name": "canvas", "type": "app", "description": "...", "actions": []},
            ]
        },
    ),
    (
        "000 §5.1 choice call",
        "tool.call",
        {
            "call_id": "c1",
            "name": "choice",
            "action": "select",
            "arguments": {"question": "部署到哪个环境？", "options": ["测试", "预发布", "生产"]},
        },
    ),
    (
        "000 §5.1 choice result",
        "tool.result",
        {"call_id": "c1", "name": "choice", "action": "select", "result": {"message": "预发布"}},
    ),
    (
        "000 §5.2 canvas open",
        "tool.call",
        {"call_id": "c1", "name": "canvas", "action": "open", "arguments": {"width": 800, "height": 600}},
    ),
    (
        "000 §5.2 canvas open result",
        "tool.result",
        {"call_id": "c1", "name": "canvas", "action": "open", "result": {"message": "instance_id: inst_001"}},
    ),
    (
        "000 §5.2 canvas draw",
        "tool.call",
        {
            "call_id": "c2",
            "name": "canvas",
            "action": "draw",
            "arguments": {"instance_id": "inst_001", "path": "M10 10 L50 50", "color": "red"},
        },
    ),
    (
        "000 §5.2 canvas close",
        "tool.call",
        {"call_id": "c3", "name": "canvas", "action": "close", "arguments": {"instance_id": "inst_001"}},
    ),
    ("001 §4.2 envelope", None, ENVELOPE_001_4_2),
    (
        "001 §5.1 tool registration",
        "tool.list",
        {
            "tools": [
                {
                    "name": "choice",
                    "version": "1.0",
                    "type": "action",
                    "description": "展示选项并返回用户选择",
                    "inputSchema": {},
                    "outputSchema": {},
                    "risk": "user_confirmation",
                }
            ]
        },
    ),
    (
        "001 §5.2 tool.call",
        None,
        {
            "v": 1,
            "id": "msg_01J_call",
            "type": "lineup.v1.tool.call",
            "conversation_id": "conv_01J",
            "sender": {"kind": "agent", "id": "agent_hermes_main"},
            "target": {"kind": "device", "id": "device_phone_01"},
            "payload": {
                "call_id": "call_01J",
                "name": "choice",
                "action": "select",
                "expires_at": "2026-07-30T14:10:00+08:00",
                "arguments": {"question": "部署到哪个环境？", "options": ["测试", "预发布", "生产"]},
            },
        },
    ),
    (
        "001 §5.2 tool.result",
        None,
        {
            "v": 1,
            "id": "msg_01J_result",
            "type": "lineup.v1.tool.result",
            "conversation_id": "conv_01J",
            "sender": {"kind": "human", "id": "user_01"},
            "target": {"kind": "agent", "id": "agent_hermes_main"},
            "payload": {"call_id": "call_01J", "status": "completed", "result": {"selected": "预发布"}},
        },
    ),
]
