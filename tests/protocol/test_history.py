"""The session core's history: numbering, catch-up after a ``last_seq``, retention, conversations.

Driven like ``test_session.py``: a fake clock, fake records (history kept as the memory store
keeps it), batches drained and committed as the hub does before sending.
"""

from __future__ import annotations

import json

import pytest

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import Call, CallState
from lineup_plugin.protocol.history import Record, Retention, SaveConversation
from lineup_plugin.protocol.messages import (
    MAX_SEQ,
    Actor,
    ConversationUpdate,
    DeviceHello,
    History,
    HistoryEntry,
    Text,
    ToolCall,
    ToolResult,
)
from lineup_plugin.protocol.session import BAD_HELLO, Batch, CloseLink, SaveCall, Send

from .driver import Driven as Session
from .test_session import FakeRecords, Rig, accept, closes, errors, kinds, payloads, result, sent


def hello(rig: Rig, link: str, last_seq: int | None = 0, **fields: object) -> Batch[str]:
    """Open ``link`` and say hello as device ``link`` asking for the history after ``last_seq``."""
    rig.session.open(link, name=link, verify=accept)
    return rig.send(link, DeviceHello(device_id=link, last_seq=last_seq, **fields))  # type: ignore[arg-type]


def histories(batch: Batch[str], link: str) -> list[History]:
    return [p for p in payloads(batch, link, History) if isinstance(p, History)]


def caught_up(batch: Batch[str], link: str) -> list[HistoryEntry]:
    return [entry for message in histories(batch, link) for entry in message.entries]


def conversation(rig: Rig) -> str:
    """A conversation on device ``phone``: text in, text out, a call answered there; the call id."""
    hello(rig, "phone")
    rig.send("phone", Text(text="deploy"), envelope_id="msg-deploy")
    rig.session.send_text("Which environment?")
    rig.start("c1")
    rig.send("phone", result("c1", "staging"))
    return "c1"


def test_every_event_is_numbered_in_order_with_what_a_device_shows() -> None:
    rig = Rig()
    conversation(rig)
    rig.session.set_status("thinking")
    rig.drain()

    entries = rig.records.history_after(0, oldest_at=float("-inf"), limit=100)

    assert [(e.seq, e.event) for e in entries] == [
        (1, "text.in"),
        (2, "text.out"),
        (3, "call"),
        (4, "call.end"),
        (5, "status"),
    ]
    assert (entries[0].text, entries[0].device_id, entries[0].ref) == ("deploy", "phone", "msg-deploy")
    assert entries[2].call is not None and entries[2].call.call_id == "c1"
    assert entries[3].result is not None and entries[3].result.result == {"selected": "staging"}
    assert entries[3].device_id == "phone"  # who answered where
    assert entries[4].status is not None and entries[4].status.state == "thinking"
    assert {e.conversation_id for e in entries} == {"default"}


def test_entries_are_in_the_same_batch_as_the_call_rows_so_they_commit_before_anything_is_sent() -> None:
    rig = Rig()
    hello(rig, "phone")

    call = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=30)
    batch = rig.session.take()

    records = [c for c in batch.changes if isinstance(c, Record)]
    assert [(r.event, r.call_id) for r in records] == [("call", "c1")]
    assert any(isinstance(c, SaveCall) and c.call is call for c in batch.changes)
    assert any(isinstance(c, SaveConversation) for c in batch.changes)
    # the live tool.call carries the entry's seq
    [tool_call] = [m for m in sent(batch, "phone") if m.kind == "tool.call"]
    assert tool_call.seq == records[0].seq


def test_live_messages_carry_their_seq_and_every_device_is_told_the_verdict_as_the_call_end_entry() -> None:
    rig = Rig()
    hello(rig, "phone")
    hello(rig, "tablet")
    rig.start("c1")

    batch = rig.send("phone", result("c1"))

    for device in ("phone", "tablet"):  # the answering device too: its card shows the verdict, not its guess
        [notice] = sent(batch, device)
        assert (notice.kind, notice.seq) == ("tool.cancel", rig.session.head)
    rig.session.send_text("done")
    out = rig.drain()
    assert [m.seq for m in sent(out, "phone")] == [rig.session.head]


def test_hello_without_last_seq_gets_no_history_and_with_it_gets_it_after_welcome() -> None:
    rig = Rig()
    conversation(rig)

    assert kinds(hello(rig, "old-app", last_seq=None), "old-app") == ["device.welcome", "tool.list", "agent.status"]
    batch = hello(rig, "tablet", last_seq=0)

    assert kinds(batch, "tablet") == ["device.welcome", "history", "tool.list", "agent.status"]
    [message] = histories(batch, "tablet")
    assert [e.seq for e in message.entries] == [1, 2, 3, 4]
    assert (message.head, message.reset, message.more) == (4, False, False)
    assert message.history_id == rig.records.history_id()
    assert message.conversations is not None
    assert [(c.conversation_id, c.last_seq) for c in message.conversations] == [("default", 4)]


def test_a_later_seq_gets_only_what_came_after_it() -> None:
    rig = Rig()
    conversation(rig)

    assert [e.seq for e in caught_up(hello(rig, "tablet", last_seq=2), "tablet")] == [3, 4]
    assert caught_up(hello(rig, "laptop", last_seq=4), "laptop") == []


def test_a_seq_from_the_future_or_another_history_gets_everything_with_reset() -> None:
    rig = Rig()
    conversation(rig)

    for link, fields in [("ahead", {"last_seq": 99}), ("other", {"last_seq": 2, "history_id": "not-this-one"})]:
        [message] = histories(hello(rig, link, **fields), link)  # type: ignore[arg-type]
        assert message.reset
        assert [e.seq for e in message.entries] == [1, 2, 3, 4]


@pytest.mark.parametrize(
    ("last_seq", "problem"),
    [
        (-1, "greater than or equal to 0"),
        (MAX_SEQ + 1, "less than or equal to"),
        ("5", "valid integer"),
        (1.5, "valid integer"),
    ],
)
def test_hostile_last_seq_is_refused_with_the_field_named(last_seq: object, problem: str) -> None:
    rig = Rig()
    conversation(rig)
    rig.session.open("evil", name="evil", verify=accept)
    message = codec.envelope(
        DeviceHello(device_id="evil"),
        sender=Actor(kind="device", id="evil"),
        target=rig.session.agent,
        conversation_id="default",
    )
    data = json.loads(codec.encode(message))
    data["payload"]["last_seq"] = last_seq

    rig.session.receive("evil", json.dumps(data))
    batch = rig.drain()

    [error] = errors(batch, "evil")
    assert "payload.last_seq" in error.message and problem in error.message
    assert closes(batch) == [CloseLink("evil", BAD_HELLO, error.message)]
    assert not rig.session.attached("evil")


def test_retention_by_count_hands_out_at_most_the_limit() -> None:
    retention = Retention(limit=3, max_age=None)
    rig = Rig.keeping(retention)
    hello(rig, "phone")
    for number in range(1, 8):
        rig.session.send_text(f"m{number}")
    rig.drain()

    assert [e.text for e in caught_up(hello(rig, "tablet", last_seq=0), "tablet")] == ["m5", "m6", "m7"]
    assert [e.text for e in caught_up(hello(rig, "laptop", last_seq=2), "laptop")] == ["m5", "m6", "m7"]


def test_retention_by_age_drops_entries_older_than_max_age_by_the_session_clock() -> None:
    retention = Retention(limit=100, max_age=60.0)
    rig = Rig.keeping(retention)
    hello(rig, "phone")
    rig.session.send_text("old")
    rig.drain()
    rig.clock.advance(45)
    rig.session.send_text("newer")
    rig.drain()
    rig.clock.advance(30)  # "old" is 75 s old now, "newer" 30 s

    assert [e.text for e in caught_up(hello(rig, "tablet", last_seq=0), "tablet")] == ["newer"]


def test_history_off_keeps_no_entries_and_numbers_nothing() -> None:
    rig = Rig()
    rig.session = Session(records=rig.records, catalog=rig.catalog, clock=rig.clock, retention=Retention(limit=0))
    conversation(rig)
    rig.session.send_text("hi")
    batch = rig.drain()

    assert not any(isinstance(c, Record) for c in batch.changes)
    assert all(m.seq is None for m in sent(batch, "phone"))
    [message] = histories(hello(rig, "tablet"), "tablet")
    assert (message.entries, message.head) == ([], 0)


def test_a_catch_up_too_long_for_the_link_is_split_into_messages_marked_more() -> None:
    rig = Rig()
    hello(rig, "phone")
    for number in range(40):
        rig.session.send_text(f"message number {number} " + "x" * 100)
    rig.drain()

    rig.session.open("im", name="im", device_id="app-user", max_text=4000)
    rig.session.receive_envelope(
        "im",
        codec.envelope(
            DeviceHello(device_id="app-user", last_seq=0),
            sender=Actor(kind="device", id="app-user"),
            target=rig.session.agent,
            conversation_id="default",
        ),
    )
    batch = rig.drain()

    messages = histories(batch, "im")
    assert len(messages) > 1
    assert [m.more for m in messages] == [True] * (len(messages) - 1) + [False]
    assert [e.seq for m in messages for e in m.entries] == list(range(1, 41))
    assert all(len(m.text.encode()) <= 4000 for m in batch.messages if isinstance(m, Send) and '"history"' in m.text)
    assert messages[0].conversations is not None and all(m.conversations is None for m in messages[1:])


def test_seqs_go_on_after_a_restart_on_the_same_records() -> None:
    rig = Rig()
    conversation(rig)
    again = Session(records=rig.records, catalog=rig.catalog, clock=rig.clock)

    again.send_text("after the restart")
    batch = again.take()
    rig.records.apply(batch.changes)

    assert [c.seq for c in batch.changes if isinstance(c, Record)] == [5]


def test_recover_keeps_how_the_left_calls_ended() -> None:
    call = Call(request=ToolCall(call_id="c9", name="choice"), conversation_id="cli-1", created_at=0, expires_at=1e12)
    call.state = CallState.DELIVERED
    rig = Rig(records=FakeRecords(calls=[call]))

    rig.session.recover()
    rig.drain()

    [entry] = rig.records.history_after(0, oldest_at=float("-inf"), limit=10)
    assert (entry.event, entry.conversation_id, entry.device_id) == ("call.end", "cli-1", None)
    assert entry.result is not None and entry.result.status == "cancelled"


def test_conversations_are_kept_titled_and_their_events_tagged() -> None:
    rig = Rig()
    hello(rig, "phone")
    rig.session.name_conversation("cli-1", "  Release   notes ")
    first = rig.drain()
    rig.session.name_conversation("cli-1", "Release notes")  # the same title: nothing new
    assert not rig.drain()

    rig.session.send_text("drafting", conversation_id="cli-1")
    call = rig.session.start_call(ToolCall(call_id="c1", name="choice"), wait=30, conversation_id="cli-1")
    batch = rig.drain()

    [titled] = caught_up(first, "phone")
    assert (titled.event, titled.title, titled.conversation_id) == ("conversation", "Release notes", "cli-1")
    assert call.conversation_id == "cli-1"
    assert {m.conversation_id for m in sent(batch, "phone")} == {"cli-1"}
    [message] = histories(hello(rig, "tablet"), "tablet")
    assert message.conversations is not None
    assert [(c.conversation_id, c.title) for c in message.conversations] == [("cli-1", "Release notes")]


def test_app_text_names_its_conversation_and_every_device_is_shown_it() -> None:
    rig = Rig()
    hello(rig, "phone")
    hello(rig, "tablet")
    text = codec.envelope(
        Text(text="plan"),
        sender=Actor(kind="device", id="phone"),
        target=rig.session.agent,
        conversation_id="app-42",
        id="msg-plan",
    )
    rig.session.receive_envelope("phone", text)
    batch = rig.drain()

    assert [(e.text, e.ref) for e in caught_up(batch, "tablet")] == [("plan", "msg-plan")]
    assert [(e.text, e.ref) for e in caught_up(batch, "phone")] == [("plan", "msg-plan")]
    assert batch.events[-1].conversation_id == "app-42"  # type: ignore[union-attr]


def test_a_device_renames_and_closes_a_conversation_and_every_device_is_told() -> None:
    rig = Rig()
    hello(rig, "phone")
    hello(rig, "tablet")

    def update(envelope_id: str, **change: object) -> Batch[str]:
        message = codec.envelope(
            ConversationUpdate.model_validate(change),
            sender=Actor(kind="device", id="phone"),
            target=rig.session.agent,
            conversation_id="app-42",
            id=envelope_id,
        )
        rig.session.receive_envelope("phone", message)
        return rig.drain()

    renamed = update("u1", title="Offsite")
    assert [(e.event, e.title, e.closed) for e in caught_up(renamed, "tablet")] == [("conversation", "Offsite", None)]
    closed = update("u2", closed=True)
    assert [(e.title, e.closed) for e in caught_up(closed, "phone")] == [("Offsite", True)]
    assert not update("u3", closed=True).messages  # closed already: nothing to tell
    [message] = histories(hello(rig, "laptop"), "laptop")
    listed = [(c.conversation_id, c.title, c.closed) for c in message.conversations or []]
    assert listed == [("app-42", "Offsite", True)]


def test_a_conversation_update_with_nothing_to_change_is_refused() -> None:
    rig = Rig()
    hello(rig, "phone")
    update = codec.envelope(
        ConversationUpdate(closed=True),
        sender=Actor(kind="device", id="phone"),
        target=rig.session.agent,
        conversation_id="app-42",
    )
    envelope = json.loads(codec.encode(update))
    envelope["payload"] = {}
    rig.session.receive("phone", json.dumps(envelope))
    batch = rig.drain()
    assert [e.code for e in errors(batch, "phone")] == ["bad_message"]
    assert not [c for c in batch.changes if isinstance(c, Record)]


def test_an_entry_survives_the_round_trip_through_the_wire_model() -> None:
    rig = Rig()
    conversation(rig)
    [message] = histories(hello(rig, "tablet"), "tablet")

    again = History.model_validate_json(message.model_dump_json())

    assert again == message
    assert isinstance(again.entries[3].result, ToolResult)
