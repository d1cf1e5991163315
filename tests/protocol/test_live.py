"""The calls part on its own, on a fake clock: start, deadlines, the first end wins, recovery and hand-over."""

from __future__ import annotations

from collections.abc import Callable

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import Call, CallState, parse_timestamp
from lineup_plugin.protocol.devices import Devices
from lineup_plugin.protocol.history import DEFAULT_RETENTION
from lineup_plugin.protocol.live import ANSWERED_ELSEWHERE, EXPIRED, NO_APP, RESTARTED, LiveCalls, failure
from lineup_plugin.protocol.messages import CallOutcome, ToolAck, ToolCall, ToolCancel
from lineup_plugin.protocol.outputs import Audit, CardShown, CardWaiting, Outbox, SaveCall, Send
from lineup_plugin.protocol.reads import Kept
from lineup_plugin.protocol.timeline import Timeline


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def make(
    *links: str, handled_by: Callable[[str], frozenset[str] | None] | None = None
) -> tuple[Clock, Outbox[str], LiveCalls[str]]:
    clock = Clock()
    out: Outbox[str] = Outbox(clock)
    devices: Devices[str] = Devices(out, agent_id="agent", conversation_id="default")
    for link in links:
        devices.open(link, name=link, verify=None, max_text=None)
        devices.attach(link, link)
    timeline = Timeline(out, devices, retention=DEFAULT_RETENTION, kept=Kept("h"))
    out.take()
    return clock, out, LiveCalls(out, devices, timeline, handled_by=handled_by)


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


def test_the_first_end_wins_and_every_device_is_told_the_verdict() -> None:
    clock, out, calls = make("phone", "laptop")
    call = calls.start(request(), wait=30)
    out.take()
    clock.now = 1005.0
    answer = failure("c1", "choice", "completed", "done")
    assert calls.finish(call, answer, by="phone")
    assert not calls.end("c1", "cancelled", "too late")  # no longer live
    batch = out.take()
    sent = [(m.link, codec.decode(m.text).payload) for m in batch.messages if isinstance(m, Send)]
    assert [(link, getattr(p, "reason", None)) for link, p in sent] == [
        ("phone", ANSWERED_ELSEWHERE),
        ("laptop", ANSWERED_ELSEWHERE),
    ]
    verdict = CallOutcome(status="completed", result={"message": "done"}, device_id="phone")
    assert [getattr(p, "outcome", None) for _, p in sent] == [verdict, verdict]
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


def declared(by: dict[str, frozenset[str]]) -> Callable[[str], frozenset[str] | None]:
    """Which devices declared each App-declared tool (the others every App renders)."""
    return by.get


def sent_to(out: Outbox[str]) -> list[tuple[str, str]]:
    return [(m.link, codec.decode(m.text).kind) for m in out.take().messages if isinstance(m, Send)]


def test_an_app_declared_tool_goes_only_to_the_devices_that_declared_it() -> None:
    _, out, calls = make("phone", "laptop", handled_by=declared({"torch": frozenset({"phone"})}))
    calls.start(ToolCall(call_id="t1", name="torch", arguments={"on": True}), wait=30)
    assert sent_to(out) == [("phone", "tool.call")]
    calls.start(request("c1"), wait=30)  # a tool every App renders goes to every device
    assert sent_to(out) == [("phone", "tool.call"), ("laptop", "tool.call")]
    assert calls.for_device(calls.live("t1"), "phone") and not calls.for_device(calls.live("t1"), "laptop")  # type: ignore[arg-type]


def test_with_none_of_its_declarers_attached_a_call_goes_to_every_device_to_be_answered() -> None:
    _, out, calls = make("laptop", handled_by=declared({"torch": frozenset({"phone"})}))
    calls.start(ToolCall(call_id="t1", name="torch"), wait=30)
    assert sent_to(out) == [("laptop", "tool.call")]  # someone must answer it, if only unsupported
    call = calls.live("t1")
    assert call is not None and calls.unsupported(call, "laptop")  # and that answer settles it


def test_unsupported_settles_a_call_only_when_no_other_attached_device_can_handle_it() -> None:
    clock, out, calls = make("phone", "laptop", "tablet")
    call = calls.start(request("c1"), wait=30)
    out.take()
    clock.now = 1001.0
    assert not calls.unsupported(call, "laptop")  # the phone and the tablet may still answer
    assert not calls.unsupported(call, "laptop")  # said twice: still one device
    assert not calls.unsupported(call, "tablet")
    assert calls.unsupported(call, "phone")  # every device said so


# ------------------------------------------------------------------------- Web Push (events)


def test_a_call_that_starts_says_its_card_waits_and_every_device_showing_it_says_so() -> None:
    _, out, calls = make("phone", "laptop")
    call = calls.start(request(), wait=30)
    assert out.take().events == [CardWaiting(call)]
    calls.ack("phone", ToolAck(call_id="c1", stage="acknowledged"))  # arrived, not shown: nothing
    calls.ack("phone", ToolAck(call_id="c1", stage="waiting_user"))
    calls.ack("laptop", ToolAck(call_id="c1", stage="waiting_user"))  # not a new state, still a device showing it
    calls.ack("tablet", ToolAck(call_id="other", stage="waiting_user"))  # no such live call: nothing
    assert out.take().events == [CardShown("c1", "phone"), CardShown("c1", "laptop")]


def test_a_known_or_failed_call_says_nothing_of_a_waiting_card() -> None:
    _, out, calls = make()
    calls.start(request(), wait=30)  # no device: fails no_app
    assert out.take().events == []
    _, out, calls = make("phone")
    calls.start(request(), wait=30)
    out.take()
    calls.start(request(), wait=30)  # the same id again
    assert out.take().events == []


def test_with_a_device_reachable_by_push_a_call_waits_without_any_device_attached() -> None:
    clock, out, calls = make()
    calls.reachable_offline = True
    call = calls.start(request(), wait=30)
    batch = out.take()
    assert call.state == CallState.CREATED and calls.live("c1") is call
    assert batch.events == [CardWaiting(call)] and batch.messages == []  # nobody to send it to yet
    clock.now = 1030.0
    assert calls.tick() == 1 and call.state == CallState.EXPIRED
