"""The call state machine: forward steps, first terminal result wins, expiry, invalid transitions."""

from __future__ import annotations

import pytest

from lineup_plugin.errors import CallStateError
from lineup_plugin.protocol.calls import TERMINAL, Call, CallState, format_timestamp, parse_timestamp
from lineup_plugin.protocol.messages import ToolCall, ToolResult


def make_call(expires_at: str | None = None) -> Call:
    return Call(request=ToolCall(call_id="c1", name="choice", expires_at=expires_at), conversation_id="conv")


def test_walks_every_live_state_in_order() -> None:
    call = make_call()
    for state in (CallState.DELIVERED, CallState.ACKNOWLEDGED, CallState.WAITING_USER):
        assert call.advance(state)
    assert call.finish(ToolResult(call_id="c1", result={"selected": "a", "index": 0}))
    assert [s for s, _ in call.history] == [
        CallState.CREATED,
        CallState.DELIVERED,
        CallState.ACKNOWLEDGED,
        CallState.WAITING_USER,
        CallState.COMPLETED,
    ]


def test_steps_may_be_skipped() -> None:
    call = make_call()
    assert call.advance(CallState.WAITING_USER)
    assert call.state is CallState.WAITING_USER


def test_repeated_state_is_a_no_op() -> None:
    call = make_call()
    call.advance(CallState.DELIVERED)
    assert not call.advance(CallState.DELIVERED)
    assert len(call.history) == 2


def test_step_backwards_is_refused() -> None:
    call = make_call()
    call.advance(CallState.WAITING_USER)
    with pytest.raises(CallStateError, match="cannot go back from waiting_user to acknowledged"):
        call.advance(CallState.ACKNOWLEDGED)


def test_live_state_after_the_end_is_refused() -> None:
    call = make_call()
    call.end("cancelled", "stop")
    with pytest.raises(CallStateError, match="already ended as cancelled"):
        call.advance(CallState.DELIVERED)


def test_terminal_states_go_through_finish() -> None:
    with pytest.raises(CallStateError, match="use finish"):
        make_call().advance(CallState.COMPLETED)


def test_first_terminal_result_wins() -> None:
    call = make_call()
    assert call.finish(ToolResult(call_id="c1", result={"selected": "a", "index": 0}))
    assert not call.finish(ToolResult(call_id="c1", result={"selected": "b", "index": 1}))
    assert not call.finish(ToolResult(call_id="c1", status="rejected"))
    assert call.state is CallState.COMPLETED
    assert call.result is not None and call.result.result == {"selected": "a", "index": 0}


def test_result_gets_the_call_name_and_action() -> None:
    call = Call(request=ToolCall(call_id="c1", name="canvas", action="open"), conversation_id="c")
    call.finish(ToolResult(call_id="c1", result={"instance_id": "i"}))
    assert call.result is not None and (call.result.name, call.result.action) == ("canvas", "open")


def test_result_for_another_call_is_refused() -> None:
    with pytest.raises(CallStateError, match="result for call c2 given to call c1"):
        make_call().finish(ToolResult(call_id="c2"))


@pytest.mark.parametrize("status", sorted(s.value for s in TERMINAL))
def test_every_terminal_status_ends_the_call(status: str) -> None:
    call = make_call()
    call.finish(ToolResult.model_validate({"call_id": "c1", "status": status}))
    assert call.done and call.state == status


def test_expiry_comes_from_expires_at() -> None:
    call = make_call(expires_at="2030-01-01T00:00:00+00:00")
    deadline = parse_timestamp("2030-01-01T00:00:00+00:00")
    assert call.expires_at == deadline
    assert not call.expire_if_due(now=deadline - 1)
    assert call.expire_if_due(now=deadline)
    assert call.state is CallState.EXPIRED
    assert call.result is not None and call.result.status == "expired"


def test_expired_is_not_rejected_and_later_answer_is_ignored() -> None:
    call = make_call(expires_at=format_timestamp(1000.0))
    call.expire_if_due(now=2000.0)
    assert not call.finish(ToolResult(call_id="c1", result={"selected": "late", "index": 0}))
    assert call.state is CallState.EXPIRED


def test_call_without_deadline_never_expires_by_itself() -> None:
    call = make_call()
    assert not call.is_expired(now=1e12)


def test_naive_timestamps_are_read_as_utc() -> None:
    assert parse_timestamp("2030-01-01T00:00:00") == parse_timestamp("2030-01-01T00:00:00+00:00")
