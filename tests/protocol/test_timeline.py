"""The history part on its own, on a fake clock: numbering, conversations, and what a catch-up asks the store for."""

from __future__ import annotations

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import format_timestamp
from lineup_plugin.protocol.devices import Devices
from lineup_plugin.protocol.history import PAGE_ENTRIES, Record, Retention, SaveConversation
from lineup_plugin.protocol.messages import ConversationInfo, History, HistoryOlder
from lineup_plugin.protocol.outputs import Outbox, Send
from lineup_plugin.protocol.reads import HistoryQuery, Kept
from lineup_plugin.protocol.timeline import Timeline


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


RETENTION = Retention(limit=100, max_age=60.0)


def make(kept: Kept, retention: Retention = RETENTION) -> tuple[Clock, Outbox[str], Timeline[str]]:
    clock = Clock()
    out: Outbox[str] = Outbox(clock)
    devices: Devices[str] = Devices(out, agent_id="agent", conversation_id="default")
    devices.open("phone", name="phone", verify=None, max_text=None)
    devices.attach("phone", "phone")
    out.take()
    return clock, out, Timeline(out, devices, retention=retention, kept=kept)


def test_entries_count_on_from_the_kept_head_and_carry_the_clock_time() -> None:
    clock, out, timeline = make(Kept("h1", head=41))
    clock.now = 1234.5
    record = timeline.record("text.out", "default", text="hi")
    assert record is not None and (record.seq, record.at) == (42, 1234.5) and timeline.head == 42
    assert out.take().changes == [record, SaveConversation("default", None, 42, 1234.5)]


def test_history_off_keeps_nothing() -> None:
    _, out, timeline = make(Kept("h1"), Retention(limit=0))
    assert timeline.record("text.out", "default", text="hi") is None and not out.take()


def test_a_catch_up_asks_for_what_the_device_missed_within_the_retention_by_the_clock() -> None:
    clock, _, timeline = make(Kept("h1", head=10))
    clock.now = 5000.0
    assert timeline.query(4, "h1") == HistoryQuery(4, 5000.0 - 60.0, 100)
    assert timeline.query(10, "h1") is None  # nothing missed
    assert timeline.query(4, "another") == HistoryQuery(0, 4940.0, 100)  # a seq of another history: everything


def test_a_catch_up_sends_the_stored_entries_and_those_of_this_batch_then_the_conversations() -> None:
    _, out, timeline = make(Kept("h1", head=2, conversations=[ConversationInfo(conversation_id="default", last_seq=2)]))
    stored = [Record(seq, 990.0, "default", "text.out", {"text": str(seq)}).entry() for seq in (1, 2)]
    fresh = timeline.record("text.out", "default", text="3")
    assert fresh is not None
    timeline.catch_up("phone", 0, "h1", stored)
    [message] = [codec.decode(m.text).payload for m in out.take().messages if isinstance(m, Send)]
    assert isinstance(message, History)
    assert [e.seq for e in message.entries] == [1, 2, 3] and message.head == 3 and not message.reset
    assert [c.conversation_id for c in message.conversations or []] == ["default"]


def test_a_title_is_kept_once_and_told_to_every_device() -> None:
    _, out, timeline = make(Kept("h1"))
    timeline.name("default", "  Release   notes ")
    timeline.name("default", "Release notes")
    batch = out.take()
    assert [r.fields for r in batch.changes if isinstance(r, Record)] == [{"title": "Release notes"}]
    assert timeline.title("default") == "Release notes"
    assert len([m for m in batch.messages if isinstance(m, Send)]) == 1


def test_a_conversation_closed_by_the_user_is_listed_closed_until_its_next_entry() -> None:
    clock, out, timeline = make(Kept("h1"))
    timeline.record("text.in", "app-1", text="plan the offsite")
    timeline.change("app-1", title="Offsite")
    clock.now = 1001.0
    timeline.change("app-1", closed=True)
    timeline.change("app-1", closed=True)  # closed again: nothing new
    batch = out.take()
    entries = [r for r in batch.changes if isinstance(r, Record)]
    assert [(r.event, r.fields) for r in entries] == [
        ("text.in", {"text": "plan the offsite"}),
        ("conversation", {"title": "Offsite"}),
        ("conversation", {"closed": True, "title": "Offsite"}),
    ]
    told = [codec.decode(m.text).payload for m in batch.messages if isinstance(m, Send)]
    assert [e.closed for h in told if isinstance(h, History) for e in h.entries] == [None, True]
    assert timeline.conversations() == [
        ConversationInfo(
            conversation_id="app-1", title="Offsite", last_seq=3, updated_at=format_timestamp(1001.0), closed=True
        )
    ]
    timeline.name("app-1", "Offsite plans")  # a new title alone leaves it closed
    assert timeline.conversations()[0].closed is True
    timeline.record("text.out", "app-1", text="the agent writes there again")
    assert timeline.conversations()[0].closed is False


def test_a_conversation_opened_again_by_the_user() -> None:
    _, out, timeline = make(
        Kept(
            "h1",
            head=5,
            conversations=[ConversationInfo(conversation_id="side", title="Side", last_seq=5, closed=True)],
        )
    )
    timeline.change("side", closed=False)
    [record] = [r for r in out.take().changes if isinstance(r, Record)]
    assert record.fields == {"closed": False, "title": "Side"} and timeline.conversations()[0].closed is False


def test_a_new_device_newest_first_and_a_page_before_the_oldest_shown_read_only_the_newest_entries() -> None:
    clock, _, timeline = make(Kept("h1", head=150), Retention(limit=100, max_age=60.0))
    clock.now = 5000.0
    # a new device: the newest PAGE_ENTRIES below the head only (not the whole history kept)
    assert timeline.query(0, "h1", newest_first=True) == HistoryQuery(50, 4940.0, PAGE_ENTRIES, 151)
    assert timeline.query(0, None, newest_first=True) == HistoryQuery(50, 4940.0, PAGE_ENTRIES, 151)
    assert timeline.query(7, "another", newest_first=True) == HistoryQuery(50, 4940.0, PAGE_ENTRIES, 151)  # reset
    # a device that resumes reads all it missed (its older pages follow the cards)
    assert timeline.query(120, "h1", newest_first=True) == HistoryQuery(120, 4940.0, 100)
    # the page before the oldest the device shows: within the retention, by the clock
    assert timeline.older_query(HistoryOlder(before=90)) == HistoryQuery(50, 4940.0, PAGE_ENTRIES, 90)
    assert timeline.older_query(HistoryOlder(before=151, history_id="h1")) == HistoryQuery(
        50, 4940.0, PAGE_ENTRIES, 151
    )
    assert timeline.older_query(HistoryOlder(before=51)) is None  # nothing kept before it
    assert timeline.older_query(HistoryOlder(before=152)) is None  # beyond the head: refused, nothing read
    assert timeline.older_query(HistoryOlder(before=90, history_id="another")) is None
    _, _, off = make(Kept("h1", head=150), Retention(limit=0))
    assert off.older_query(HistoryOlder(before=90)) is None
