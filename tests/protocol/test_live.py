"""The calls part on its own, on a fake clock: start, deadlines, the first end wins, recovery and hand-over."""

from __future__ import annotations

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import Call, CallState, parse_timestamp
from lineup_plugin.protocol.devices import Devices
from lineup_plugin.protocol.history import DEFAULT_RETENTION
from lineup_plugin.protocol.live import ANSWERED_ELSEWHERE, EXPIRED, NO_APP, RESTARTED, LiveCalls, failure
from lineup_plugin.protocol.messages import ToolCall, ToolCancel
from lineup_plugin.protocol.outputs import Audit, Outbox, SaveCall, Send
from lineup_plugin.protocol.reads import Kept
from lineup_plugin.protocol.timeline import Timeline


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(*links: str) -> tuple[Clock, Outbox[str], LiveCalls[str]]:
    clock = Clock()
    out: Outbox[str] = Outbox(clock)
    devices: Devices[str] = Devices(out, agent_id="agent", conversation_id="default")
    for link in links:
        devices.open(link, name=link, verify=None, max_text=None)
        devices.attach(link, link)
    timeline = Timeline(out, devices, retention=DEFAULT_RETENTION, kept=Kept("h"))
    out.take()
    return clock, out, LiveCalls(out, devices, timeline)


def request(call_id: str = "c1") -> ToolCall:
    return ToolCall(call_id=call_id, name="choice", arguments={"options": ["a", "b"]})


def test_a_call_with_no_device_fails_no_app_at_once_stamped_now() -> None:
    _, out, calls = make()
    call = calls.start(request(), wait=30)
    assert call.state == CallState.FAILED and call.result is not None and call.result.result["message"] == NO_APP
    assert call.created_at == 1000.0 and out.take().ended == [call]


def test_a_call_expires_at_the_clock_plus_its_wait_and_tick_ends_it_then() -> None:
    clock, out, calls = make("phone")
    call = calls.start(request(), wait=30)
    batch = out.take()
    assert parse_timestamp(call.request.expires_at or "") == 1030.0 and calls.next_deadline() == 1030.0
    assert [codec.decode(m.text).kind for m in batch.messages if isinstance(m, Send)] == ["tool.call"]
    clock.now = 1029.9
    assert calls.tick() == 0
    clock.now = 1030.0
    assert calls.tick() == 1
    batch = out.take()
    assert call.state == CallState.EXPIRED and call.history[-1] == (CallState.EXPIRED, 1030.0)
    [notice] = [codec.decode(m.text).payload for m in batch.messages if isinstance(m, Send)]
    assert isinstance(notice, ToolCancel) and notice.reason == f"expired: {EXPIRED}"
    assert calls.next_deadline() is None


def test_the_first_end_wins_and_the_other_devices_are_told_it_was_answered_elsewhere() -> None:
    clock, out, calls = make("phone", "laptop")
    call = calls.start(request(), wait=30)
    out.take()
    clock.now = 1005.0
    answer = failure("c1", "choice", "completed", "done")
    assert calls.finish(call, answer, by="phone")
    assert not calls.end("c1", "cancelled", "too late")  # no longer live
    batch = out.take()
    sent = [(m.link, codec.decode(m.text).payload) for m in batch.messages if isinstance(m, Send)]
    assert [(link, getattr(p, "reason", None)) for link, p in sent] == [("laptop", ANSWERED_ELSEWHERE)]
    assert [(a.event, a.device_id, a.at) for a in batch.changes if isinstance(a, Audit)] == [
        ("call.completed", "phone", 1005.0)
    ]


def test_a_known_id_is_not_started_again() -> None:
    _, out, calls = make("phone")
    known = Call(request=request(), conversation_id="default", created_at=900.0)
    known.end("completed", "done", now=950.0)
    assert calls.start(request(), wait=30, known=known) is known
    assert not out.take()


def test_recover_closes_what_was_left_and_keeps_a_forwarded_call_for_its_claim_until_the_grace_ends() -> None:
    clock, out, calls = make("phone")
    left = Call(request=request("left"), conversation_id="default", created_at=900.0, expires_at=2000.0)
    forwarded = Call(
        request=request("fwd"), conversation_id="default", created_at=900.0, expires_at=2000.0, forwarded=True
    )
    closed = calls.recover([left, forwarded], reclaim=10.0)
    assert closed == [left] and left.state == CallState.CANCELLED and left.history[-1] == (CallState.CANCELLED, 1000.0)
    assert calls.live("fwd") is forwarded and calls.next_deadline() == 1010.0
    assert calls.recover([left]) == []  # once per session
    out.take()
    clock.now = 1010.0
    assert calls.tick() == 1
    assert forwarded.result is not None and forwarded.result.result["message"] == RESTARTED


def test_a_claimed_call_lives_to_its_deadline_and_a_released_one_is_let_go_without_a_word() -> None:
    clock, out, calls = make("phone")
    forwarded = Call(
        request=request("fwd"), conversation_id="default", created_at=900.0, expires_at=2000.0, forwarded=True
    )
    calls.recover([forwarded], reclaim=10.0)
    assert calls.claim("fwd") and not calls.claim("fwd")
    clock.now = 1500.0
    assert calls.tick() == 0 and calls.live("fwd") is forwarded
    out.take()
    assert calls.release("fwd") is forwarded and calls.live("fwd") is None
    assert not out.take()  # nothing written, nobody told
    assert not any(isinstance(c, SaveCall) for c in out.take().changes)
