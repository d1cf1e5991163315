"""The session's verdict on a call — the answer that won and the device that gave it — reaches every
device, on the session's own fake clock: live, for a late or replayed answer, after a reconnect,
through the history and across a restart of the store."""

from __future__ import annotations

from lineup_plugin.protocol.messages import CallOutcome, DeviceHello, History, ToolCancel

from .test_session import Rig, accept, cancels, errors, payloads, result


def hello(rig: Rig, link: str, name: str | None, *, open_calls: tuple[str, ...] = (), last_seq: int | None = None):  # type: ignore[no-untyped-def]
    rig.session.open(link, name=link, verify=accept)
    return rig.send(link, DeviceHello(device_id=link, name=name, open_calls=list(open_calls), last_seq=last_seq))


def test_two_devices_answer_at_once_and_both_get_the_same_verdict_naming_the_winner() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7 (Chrome)")
    hello(rig, "laptop", "Linux PC (Firefox)")
    rig.start("c1")

    first = rig.send("laptop", result("c1", "b"))
    second = rig.send("phone", result("c1", "a"))  # the same moment, one step later: too late

    verdict = CallOutcome(
        status="completed", result={"selected": "b"}, device_id="laptop", device_name="Linux PC (Firefox)"
    )
    assert [c.outcome for c in cancels(first, "phone")] == [c.outcome for c in cancels(first, "laptop")] == [verdict]
    assert [c.outcome for c in cancels(second, "phone")] == [verdict]  # the late answer is told how it ended, first
    assert [e.code for e in errors(second, "phone")] == ["call_closed"]
    assert "c1" not in errors(second, "phone")[0].message  # said to people: no call id


def test_an_answer_replayed_after_the_end_is_not_an_error_and_changes_nothing() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7")
    rig.start("c1")
    rig.send("phone", result("c1", "a"))

    again = rig.send("phone", result("c1", "a"))

    assert errors(again, "phone") == [] and cancels(again, "phone") == []


def test_a_device_that_was_away_is_told_the_verdict_of_its_open_cards_when_it_says_hello() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7")
    hello(rig, "laptop", "ThinkPad")
    rig.start("c1")
    rig.session.close("phone")  # the phone goes offline with the card open (maybe answered, unsent)
    rig.drain()
    rig.send("laptop", result("c1", "b"))
    rig.clock.advance(60)

    back = hello(rig, "phone", "Pixel 7", open_calls=("c1",))

    [notice] = cancels(back, "phone")
    assert notice.outcome == CallOutcome(
        status="completed", result={"selected": "b"}, device_id="laptop", device_name="ThinkPad"
    )


def test_the_history_keeps_the_winning_answer_and_the_device_name_for_a_new_device() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7")
    rig.start("c1")
    rig.send("phone", result("c1", "a"))

    fresh = hello(rig, "tablet", "iPad (Safari)", last_seq=0)

    [history] = payloads(fresh, "tablet", History)
    assert isinstance(history, History)
    [end] = [e for e in history.entries if e.event == "call.end"]
    assert (end.device_id, end.device_name) == ("phone", "Pixel 7")
    assert end.result is not None and end.result.result == {"selected": "a"}


def test_a_call_that_nobody_answered_has_a_verdict_without_a_device() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7")
    rig.start("c1", wait=30)
    rig.clock.advance(31)
    rig.session.tick()
    batch = rig.drain()

    [notice] = cancels(batch, "phone")
    assert notice.outcome is not None and notice.outcome.status == "expired"
    assert (notice.outcome.device_id, notice.outcome.device_name) == (None, None)


def test_an_answer_on_the_mcp_hosts_card_is_named_so_on_the_devices() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel 7")
    rig.start("c1")

    assert rig.session.answer_from("mcp-host", result("c1", "a")) is None
    batch = rig.drain()

    [notice] = cancels(batch, "phone")
    assert isinstance(notice, ToolCancel) and notice.outcome is not None
    assert (notice.outcome.device_id, notice.outcome.device_name) == ("mcp-host", "the MCP host's card")


def test_a_long_or_spaced_device_name_is_kept_short_and_on_one_line() -> None:
    rig = Rig()
    hello(rig, "phone", "Pixel\n7 " + "x" * 500)
    rig.start("c1")
    batch = rig.send("phone", result("c1", "a"))

    [notice] = cancels(batch, "phone")
    assert notice.outcome is not None and notice.outcome.device_name is not None
    name = notice.outcome.device_name
    assert name.startswith("Pixel 7 xx") and len(name) == 120 and "\n" not in name
