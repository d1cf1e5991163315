"""Encoding and decoding envelopes: versions, unknown fields, and clear errors."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lineup_plugin.errors import ProtocolError, VersionError
from lineup_plugin.protocol import KINDS, codec
from lineup_plugin.protocol.messages import (
    Actor,
    AgentStatus,
    AgentStop,
    Attachment,
    ConversationUpdate,
    DeviceHello,
    DeviceWelcome,
    Error,
    FileBegin,
    FileChunk,
    FileStored,
    History,
    HistoryOlder,
    MessageDelta,
    PushSubscribe,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)

AGENT = Actor(kind="agent", id="agent")
DEVICE = Actor(kind="device", id="phone")
SHA = "ab" * 32

SAMPLES = [
    DeviceHello(device_id="phone", app_version="1.0", token="secret-token-123456"),
    DeviceWelcome(device_id="phone", agent=AGENT, pending=2),
    ToolList(tools=[{"name": "x", "type": "action", "inputSchema": {"type": "object"}}], request=True),  # type: ignore[list-item]
    ToolCall(call_id="c1", name="choice", arguments={"question": "q", "options": ["a"]}),
    ToolAck(call_id="c1", stage="waiting_user"),
    ToolResult(call_id="c1", status="rejected", result={"approved": False}),
    ToolCancel(call_id="c1", reason="expired"),
    AgentStatus(state="thinking", detail="reading"),
    AgentStop(reason="user"),
    Text(text="你好"),
    Text(text="look", message_id="m1", attachments=[Attachment(id=SHA, name="a.png", mime="image/png", size=3)]),
    MessageDelta(message_id="m1", seq=0, text="Hel"),
    FileBegin(upload_id="u1", name="a.png", mime="image/png", size=3, sha256=SHA),
    FileChunk(upload_id="u1", seq=0, data="AAEC"),
    FileStored(upload_id="u1", file=Attachment(id=SHA, name="a.png", mime="image/png", size=3, url="/media/x")),
    Error(code="bad", message="no"),
    ConversationUpdate(title="Offsite"),
    ConversationUpdate(closed=True),
    History.model_validate(
        {
            "history_id": "h1",
            "head": 2,
            "entries": [
                {"seq": 1, "at": "2026-11-30T09:00:00+00:00", "conversation_id": "c", "event": "text.in", "text": "hi"},
                {
                    "seq": 2,
                    "at": "2026-11-30T09:00:01+00:00",
                    "conversation_id": "c",
                    "event": "call.end",
                    "result": {"call_id": "c1", "status": "completed", "result": {"selected": "a"}},
                    "device_id": "phone",
                },
            ],
            "conversations": [{"conversation_id": "c", "title": "Deploy", "last_seq": 2}],
        }
    ),
    PushSubscribe.model_validate(
        {"subscription": {"endpoint": "https://fcm.googleapis.com/fcm/send/x", "keys": {"p256dh": "BP", "auth": "A"}}}
    ),
    PushSubscribe(subscription=None),
    HistoryOlder(before=120, history_id="h1"),
    DeviceWelcome(device_id="phone", agent=AGENT, push_key="BNcR-key"),
]


def raw(kind: str = "tool.call", **overrides: Any) -> dict[str, Any]:
    message: dict[str, Any] = {
        "v": 1,
        "id": "m1",
        "type": f"lineup.v1.{kind}",
        "conversation_id": "conv",
        "sender": {"kind": "agent", "id": "a"},
        "target": {"kind": "device", "id": "d"},
        "payload": {"call_id": "c1", "name": "choice", "arguments": {}},
    }
    message.update(overrides)
    return message


def test_every_kind_has_a_sample() -> None:
    assert {codec.KIND_OF[type(sample)] for sample in SAMPLES} == set(KINDS)


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_encode_then_decode_round_trips(payload: Any) -> None:
    message = codec.envelope(payload, sender=AGENT, target=DEVICE, conversation_id="conv")
    decoded = codec.decode(codec.encode(message))
    assert decoded.payload == payload
    assert decoded.id == message.id and decoded.type == message.type


def test_unknown_major_version_is_refused_before_anything_else() -> None:
    with pytest.raises(VersionError, match="unsupported protocol version 2"):
        codec.decode(json.dumps(raw(v=2, type="lineup.v2.format_disk", payload="not even an object")))


@pytest.mark.parametrize("version", ["1", True, 1.0, None])
def test_version_must_be_an_integer(version: Any) -> None:
    with pytest.raises(ProtocolError, match="v: expected an integer"):
        codec.decode(json.dumps(raw(v=version)))


def test_missing_version_is_named() -> None:
    message = raw()
    del message["v"]
    with pytest.raises(ProtocolError, match="v: field required"):
        codec.decode(json.dumps(message))


def test_unknown_fields_inside_v1_are_ignored() -> None:
    message = raw(future_field={"x": 1})
    message["payload"]["priority"] = "high"
    message["sender"]["avatar"] = "a.png"
    decoded = codec.decode(json.dumps(message))
    assert isinstance(decoded.payload, ToolCall)
    assert "priority" not in codec.encode(decoded)


def test_malformed_json_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="malformed JSON"):
        codec.decode('{"v": 1,')


def test_invalid_utf8_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="malformed JSON"):
        codec.decode(b'{"v": 1, "id": "\xff"}')


def test_non_object_message_is_refused() -> None:
    with pytest.raises(ProtocolError, match="expected a JSON object, got list"):
        codec.decode("[1, 2]")


def test_wrong_type_names_the_field_path() -> None:
    message = raw()
    message["payload"]["arguments"] = ["not", "an", "object"]
    with pytest.raises(ProtocolError, match=r"payload\.arguments: input should be a valid dictionary"):
        codec.decode(json.dumps(message))


def test_strings_are_not_coerced_to_numbers() -> None:
    message = raw("device.welcome", payload={"device_id": "d", "agent": {"kind": "agent", "id": "a"}, "pending": "3"})
    with pytest.raises(ProtocolError, match=r"payload\.pending: input should be a valid integer"):
        codec.decode(json.dumps(message))


def test_nested_path_is_named() -> None:
    message = raw("tool.list", payload={"tools": [{"name": "ok", "type": "action"}, {"name": "bad", "type": "widget"}]})
    with pytest.raises(ProtocolError, match=r"payload\.tools\.1\.type"):
        codec.decode(json.dumps(message))


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ProtocolError, match="type: unknown kind 'tool.explode'"):
        codec.decode(json.dumps(raw("tool.explode")))


def test_foreign_type_namespace_is_refused() -> None:
    with pytest.raises(ProtocolError, match="type: expected 'lineup.v1.<kind>'"):
        codec.decode(json.dumps(raw(type="im.text")))


def test_bad_status_is_refused() -> None:
    message = raw("tool.result", payload={"call_id": "c1", "status": "maybe"})
    with pytest.raises(ProtocolError, match=r"payload\.status"):
        codec.decode(json.dumps(message))


def test_bad_timestamp_is_refused() -> None:
    with pytest.raises(ProtocolError, match="timestamp: value error, not an ISO 8601 timestamp"):
        codec.decode(json.dumps(raw(timestamp="yesterday")))


def test_oversized_message_is_refused() -> None:
    with pytest.raises(ProtocolError, match="over the limit"):
        codec.decode(" " * (codec.MAX_MESSAGE_CHARS + 1))


def test_deeply_nested_json_is_refused_cleanly() -> None:
    with pytest.raises(ProtocolError):
        codec.decode("[" * 100_000 + "]" * 100_000)


def test_token_is_not_in_repr() -> None:
    hello = DeviceHello(device_id="phone", token="secret-token-123456")
    assert "secret-token" not in repr(hello)
    assert "secret-token" not in str(codec.envelope(hello, sender=DEVICE, target=AGENT, conversation_id="c"))


def test_tool_definition_shape_is_checked() -> None:
    bad = raw("tool.list", payload={"tools": [{"name": "t", "type": "app", "inputSchema": {}}]})
    with pytest.raises(ProtocolError, match="an app tool has actions, not an inputSchema"):
        codec.decode(json.dumps(bad))
