"""The forwarding protocol on its own: its lines, their codec, and the hand-over policy on a fake clock."""

from __future__ import annotations

import json

import pytest

from lineup_plugin.errors import ProtocolError
from lineup_plugin.protocol.forward import (
    FORWARDER,
    MAX_LINE,
    MAX_REASON,
    MAX_TOKEN,
    SERVER_DURING_CALL,
    SERVER_HELLO,
    SERVER_REQUEST,
    AnswerLine,
    CallLine,
    CancelLine,
    ConversationRef,
    HandOver,
    Hello,
    Interrupt,
    ResultLine,
    StatusLine,
    backoff,
    decode_line,
    encode_line,
)
from lineup_plugin.protocol.messages import Origin, ToolResult


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_every_line_survives_its_codec() -> None:
    lines = [
        (Hello(token="t", pid=42), SERVER_HELLO),
        (
            CallLine(
                call_id="c1",
                name="choice",
                arguments={"options": ["a"]},
                deadline=30,
                origin=Origin(kind="cli", label="hermes"),
                conversation=ConversationRef(id="cli-1", title="CLI"),
            ),
            SERVER_REQUEST,
        ),
        (StatusLine(state="thinking"), SERVER_REQUEST),
        (ResultLine(result=ToolResult(call_id="c1", status="completed", result={"selected": "a"})), FORWARDER),
        (Interrupt(reason="stopped by the user"), FORWARDER),
        (CancelLine(call_id="c1", reason="r" * MAX_REASON), SERVER_DURING_CALL),
        (AnswerLine(surface="mcp-host", result=ToolResult(call_id="c1", status="completed")), SERVER_DURING_CALL),
    ]
    for line, (expected, refusal) in lines:
        raw = encode_line(line)
        assert raw.endswith(b"\n") and raw.count(b"\n") == 1 and raw.isascii()
        assert decode_line(raw, expected, refusal) == line


@pytest.mark.parametrize(
    ("raw", "stage", "says"),
    [
        (b'{"op": "call"}\n', SERVER_HELLO, "say hello with the token first"),
        (b'{"op": "shout"}\n', SERVER_REQUEST, "expected a call, a status or a text"),
        (b"[1]\n", SERVER_REQUEST, "not a JSON object"),
        (b"\xff\n", SERVER_REQUEST, "not JSON"),
        (b'{"op": "call", "call_id": "c1"}', SERVER_REQUEST, "cut off"),
        (b'{"op": "call", "call_id": "", "name": "x"}\n', SERVER_REQUEST, "call_id"),
        (b'{"op": "call", "call_id": "c", "name": "x", "deadline": -1}\n', SERVER_REQUEST, "deadline"),
        (b'{"op": "call", "call_id": "c", "name": "x", "deadline": true}\n', SERVER_REQUEST, "deadline"),
        (b'{"op": "call", "call_id": "c", "name": "x", "arguments": {"q": "\\ud800"}}\n', SERVER_REQUEST, "surrogate"),
        (b'{"op": "status", "state": "idle", "detail": 5}\n', SERVER_REQUEST, "detail"),
        (b'{"op": "answer", "surface": "", "result": {}}\n', SERVER_DURING_CALL, "surface"),
        (b'{"op": "result", "result": {"status": "maybe"}}\n', FORWARDER, "result"),
        (b'{"op": "shout"}\n', SERVER_DURING_CALL, "expected a cancel or an answer"),
        (b'{"op": "call", "call_id": "c", "name": "x"}\n', SERVER_DURING_CALL, "expected a cancel or an answer"),
        (b'{"op": "cancel", "reason": 5}\n', SERVER_DURING_CALL, "reason: input should be a valid string"),
        (b'{"op": "cancel", "reason": {"a": 1}}\n', SERVER_DURING_CALL, "reason: input should be a valid string"),
        (b'{"op": "cancel", "call_id": ""}\n', SERVER_DURING_CALL, "call_id"),
        (b'{"op": "cancel", "reason": "\\ud800"}\n', SERVER_DURING_CALL, "surrogate"),
        (
            json.dumps({"op": "cancel", "reason": "x" * (MAX_REASON + 1)}).encode() + b"\n",
            SERVER_DURING_CALL,
            f"reason: string should have at most {MAX_REASON} characters",
        ),
        (
            json.dumps({"op": "status", "state": "idle", "detail": "x" * (MAX_REASON + 1)}).encode() + b"\n",
            SERVER_REQUEST,
            f"detail: string should have at most {MAX_REASON} characters",
        ),
        (b'{"op": "hello", "token": "' + b"t" * (MAX_TOKEN + 1) + b'"}\n', SERVER_HELLO, "token"),
        (b'{"op": "interrupt", "reason": "' + b"x" * (MAX_REASON + 1) + b'"}\n', FORWARDER, "reason"),
        (b'{"op": "error", "message": "' + b"x" * (MAX_REASON + 1) + b'"}\n', FORWARDER, "message"),
    ],
)
def test_a_bad_line_is_refused_naming_what_is_wrong(raw: bytes, stage: tuple[tuple[str, ...], str], says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        decode_line(raw, *stage)


def test_a_line_over_the_limit_is_refused() -> None:
    huge = json.dumps({"op": "text", "text": "x" * MAX_LINE}).encode() + b"\n"
    with pytest.raises(ProtocolError, match="longer than"):
        decode_line(huge, *SERVER_REQUEST)


def test_the_hand_over_retries_with_growing_pauses_then_gives_up_after_its_patience() -> None:
    clock = Clock()
    policy = HandOver(clock, ends=1100.0, patience=10.0)
    assert not policy.took_over and policy.left() == 100.0
    assert policy.failed() == 1000.0 + backoff(0) == 1000.05
    assert policy.took_over and policy.unreachable_since == 1000.0
    clock.now = 1005.0
    assert policy.failed() == 1005.0 + backoff(1)
    clock.now = 1010.0
    assert policy.failed() is not None  # exactly at the end of its patience: one more try
    clock.now = 1010.5
    assert policy.failed() is None


def test_the_hand_over_gives_up_at_the_calls_own_deadline() -> None:
    clock = Clock()
    policy = HandOver(clock, ends=1002.0, patience=10.0)
    assert policy.failed() is not None
    clock.now = 1002.0
    assert policy.failed() is None and policy.left() == 0.0


def test_backoff_doubles_from_50_ms_to_at_most_a_second() -> None:
    assert [backoff(n) for n in range(7)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
