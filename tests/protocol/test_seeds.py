"""Every example message of the seed documents decodes."""

from __future__ import annotations

from typing import Any

import pytest

from lineup_plugin.errors import ProtocolError
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import EnvelopeHeader, ToolCall

from .seed_examples import ENVELOPE_001_4_2, EXAMPLES


def wrap(kind: str, payload: Any) -> dict[str, Any]:
    return {
        "v": 1,
        "id": "msg_seed",
        "type": f"lineup.v1.{kind}",
        "conversation_id": "conv_seed",
        "sender": {"kind": "agent", "id": "agent_hermes_main"},
        "target": {"kind": "device", "id": "device_phone_01"},
        "payload": payload,
    }


@pytest.mark.parametrize(("section", "kind", "example"), EXAMPLES, ids=[e[0] for e in EXAMPLES])
def test_seed_example_decodes(section: str, kind: str | None, example: Any) -> None:
    if example is ENVELOPE_001_4_2:
        # The envelope template of 001 §4.2 shows ``"payload": {}`` as a placeholder: its envelope
        # fields decode, and the empty tool.call payload is refused naming the missing fields.
        header = codec.validate(EnvelopeHeader, example)
        assert header.sender.id == "agent_hermes_main"
        with pytest.raises(ProtocolError, match="payload.call_id: field required"):
            codec.decode_object(example)
        return
    message = codec.decode_object(example if kind is None else wrap(kind, example))
    again = codec.decode(codec.encode(message))
    assert again.payload == message.payload


def test_seed_choice_call_keeps_chinese_options() -> None:
    example = next(e[2] for e in EXAMPLES if e[0] == "001 §5.2 tool.call")
    payload = codec.decode_object(example).payload
    assert isinstance(payload, ToolCall)
    assert payload.arguments["options"] == ["测试", "预发布", "生产"]
    assert '"预发布"' in codec.encode(codec.decode_object(example))


def test_seed_result_without_status_reads_as_completed() -> None:
    message = codec.decode_object(wrap("tool.result", {"call_id": "c1", "result": {"message": "预发布"}}))
    assert message.payload.status == "completed"  # type: ignore[union-attr]
