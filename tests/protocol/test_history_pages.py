"""The history a page at a time, on the session's fake clock: a new device's catch-up is the newest
page (≤ 64 KB) before the waiting cards and nothing more; the older pages go one per
``history.older`` the App sends as the user scrolls up. A device that resumes gets the rest of what
it missed after the cards, marked ``older``."""

from __future__ import annotations

import json

import pytest

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.history import FIRST_PAGE_CHARS, HISTORY_MAX_AGE, PAGE_ENTRIES, Retention, newest_page_first
from lineup_plugin.protocol.messages import MAX_SEQ, Actor, DeviceHello, History, HistoryEntry, HistoryOlder
from lineup_plugin.protocol.outputs import SeenEnvelope, Send
from lineup_plugin.protocol.reads import HistoryQuery, Known, Wants
from lineup_plugin.protocol.session import Batch

from .driver import Driven
from .test_session import Rig, accept, errors, sent


def hello(rig: Rig, link: str, **fields: object):  # type: ignore[no-untyped-def]
    rig.session.open(link, name=link, verify=accept)
    return rig.send(link, DeviceHello(device_id=link, **fields))  # type: ignore[arg-type]


def busy_rig(texts: int = 300, rig: Rig | None = None) -> Rig:
    """A session with ``texts`` agent messages of about 1 KB kept, then a call waiting."""
    rig = rig or Rig()
    hello(rig, "phone")
    for index in range(texts):
        rig.session.send_text(f"{index:04d} " + "x" * 1000)
    rig.start("c1")
    rig.drain()
    return rig


def pages(batch: Batch[str], link: str) -> list[History]:
    return [m.payload for m in sent(batch, link) if isinstance(m.payload, History)]


def wire(batch: Batch[str], link: str, kind: str = "history") -> list[str]:
    """The texts ``batch`` sends on ``link`` of ``kind``, as they go on the wire."""
    return [
        m.text for m in batch.messages if isinstance(m, Send) and m.link == link and f'"lineup.v1.{kind}"' in m.text
    ]


def test_a_new_device_gets_the_newest_page_and_the_waiting_card_and_no_older_page() -> None:
    rig = busy_rig()

    batch = hello(rig, "tablet", last_seq=0, newest_first=True)

    kinds = [m.kind for m in sent(batch, "tablet")]
    assert kinds == ["device.welcome", "history", "tool.list", "agent.status", "tool.call"]
    [first] = pages(batch, "tablet")
    [text] = wire(batch, "tablet")
    assert len(text.encode()) <= FIRST_PAGE_CHARS  # the only history on the wire: at most 64 KB
    assert first.entries[-1].seq == rig.session.head and first.conversations is not None
    assert first.earlier and not first.more and not first.older and first.before is None
    assert 40 < len(first.entries) < 64  # about 1 KB each


def test_scrolling_up_gets_every_older_page_once_in_order_each_at_most_64_kb() -> None:
    rig = busy_rig()
    [first] = pages(hello(rig, "tablet", last_seq=0, newest_first=True), "tablet")
    got = [first.entries]
    page = first
    while page.earlier:
        before = got[-1][0].seq  # the oldest the device shows
        batch = rig.send("tablet", HistoryOlder(before=before, history_id=rig.session.history_id))
        [page] = pages(batch, "tablet")
        [text] = wire(batch, "tablet")
        assert len(text.encode()) <= FIRST_PAGE_CHARS
        assert (page.older, page.before, page.more, page.reset, page.conversations) == (
            True,
            before,
            False,
            False,
            None,
        )
        assert page.entries and page.entries[-1].seq == before - 1  # right below what the device shows
        got.append(page.entries)
    assert len(got) > 4
    seqs = [entry.seq for entries in reversed(got) for entry in entries]
    assert seqs == list(range(1, rig.session.head + 1))  # nothing missing, nothing twice, oldest first
    # at the beginning: an empty page that says so
    [start] = pages(rig.send("tablet", HistoryOlder(before=1)), "tablet")
    assert (start.entries, start.earlier, start.before) == ([], False, 1)


def test_the_store_is_asked_for_a_bounded_number_of_the_newest_entries_not_the_whole_history() -> None:
    rig = Rig()
    hello(rig, "phone")
    for index in range(2 * PAGE_ENTRIES):
        rig.session.send_text(f"{index}")  # small entries: the page is cut by count, or by size first
    rig.drain()
    head = rig.session.head
    asked: list[HistoryQuery | None] = []
    read = rig.records.read

    def spy(wants: Wants) -> Known:
        asked.append(wants.history)
        return read(wants)

    rig.records.read = spy  # type: ignore[method-assign]
    [first] = pages(hello(rig, "tablet", last_seq=0, newest_first=True), "tablet")
    assert asked[-1] is not None and (asked[-1].limit, asked[-1].before) == (PAGE_ENTRIES, head + 1)
    assert first.entries[-1].seq == head and len(first.entries) <= PAGE_ENTRIES and first.earlier
    [older] = pages(rig.send("tablet", HistoryOlder(before=first.entries[0].seq)), "tablet")
    assert asked[-1] == HistoryQuery(0, rig.clock.now - HISTORY_MAX_AGE, PAGE_ENTRIES, first.entries[0].seq)
    assert older.entries[-1].seq == first.entries[0].seq - 1 and older.earlier


def test_a_small_history_is_one_page_that_says_nothing_is_earlier() -> None:
    rig = busy_rig(3)
    [page] = pages(hello(rig, "tablet", last_seq=0, newest_first=True), "tablet")
    assert [e.seq for e in page.entries] == list(range(1, rig.session.head + 1))
    assert not page.earlier and not page.older
    [empty] = pages(hello(Rig(), "new", last_seq=0, newest_first=True), "new")  # no history at all
    assert (empty.entries, empty.earlier) == ([], False)


def test_an_entry_larger_than_a_page_still_goes_alone() -> None:
    big = HistoryEntry.model_validate(
        {
            "seq": 1,
            "at": "2026-01-01T00:00:00.000+00:00",
            "conversation_id": "c",
            "event": "text.out",
            "text": "y" * 90_000,
        }
    )
    small = big.model_copy(update={"seq": 2, "text": "z"})
    assert newest_page_first([big, small], 64_000, 256_000) == [[small], [big]]
    assert newest_page_first([small, big], 64_000, 256_000) == [[big], [small]]  # the newest goes, even alone too big
    assert newest_page_first([], 64_000, 256_000) == [[]]


def test_an_app_that_does_not_ask_newest_first_gets_the_catch_up_oldest_first_as_before() -> None:
    rig = busy_rig(120)

    batch = hello(rig, "old-app", last_seq=0)

    history = pages(batch, "old-app")
    assert not any(page.older or page.earlier for page in history)
    seqs = [entry.seq for page in history for entry in page.entries]
    assert seqs == list(range(1, rig.session.head + 1))
    kinds = [m.kind for m in sent(batch, "old-app")]
    assert kinds.index("tool.call") > max(i for i, kind in enumerate(kinds) if kind == "history")


def test_a_resuming_device_gets_the_rest_of_what_it_missed_after_the_waiting_card() -> None:
    rig = busy_rig()
    missed_from = 10  # it showed entries 1..10 before

    batch = hello(rig, "laptop", last_seq=missed_from, history_id=rig.session.history_id, newest_first=True)

    kinds = [m.kind for m in sent(batch, "laptop")]
    assert kinds[:5] == ["device.welcome", "history", "tool.list", "agent.status", "tool.call"]
    first, *older = pages(batch, "laptop")
    assert len(wire(batch, "laptop")[0].encode()) <= FIRST_PAGE_CHARS
    assert older and all(page.older and page.before is None for page in older) and not older[-1].more
    assert not any(page.earlier for page in (first, *older))
    starts = [page.entries[0].seq for page in (first, *older)]
    assert starts == sorted(starts, reverse=True)  # newest first, page by page; oldest first within a page
    seqs = sorted(entry.seq for page in (first, *older) for entry in page.entries)
    assert seqs == list(range(missed_from + 1, rig.session.head + 1))


def test_a_device_resuming_newest_first_gets_only_what_it_missed_and_nothing_when_it_missed_nothing() -> None:
    rig = busy_rig(4)
    head = rig.session.head

    missed = pages(hello(rig, "laptop", last_seq=head - 1, newest_first=True), "laptop")
    assert [[e.seq for e in page.entries] for page in missed] == [[head]]
    assert not missed[0].reset and not missed[0].more and missed[0].head == head

    # what the browser test saw when a closing page had kept the last entry: one page, no entries
    current = pages(hello(rig, "phone2", last_seq=head, newest_first=True), "phone2")
    assert [page.entries for page in current] == [[]]
    assert not current[0].reset and current[0].conversations is not None


def test_pages_over_a_link_with_a_size_limit_fit_it() -> None:
    rig = busy_rig(40)
    rig.session.open("im", name="im", device_id="app-user", max_text=8000)
    rig.session.receive_envelope(
        "im",
        codec.envelope(
            DeviceHello(device_id="app-user", last_seq=0, newest_first=True),
            sender=Actor(kind="device", id="app-user"),
            target=rig.session.agent,
            conversation_id="default",
        ),
    )
    batch = rig.drain()
    [first] = pages(batch, "im")
    got = list(first.entries)
    while got[0].seq > 1:
        rig.session.receive_envelope(
            "im",
            codec.envelope(
                HistoryOlder(before=got[0].seq),
                sender=Actor(kind="device", id="app-user"),
                target=rig.session.agent,
                conversation_id="default",
            ),
        )
        batch = rig.drain()
        [page] = pages(batch, "im")
        assert all(len(text.encode()) <= 8000 for text in wire(batch, "im"))
        got[:0] = page.entries
    assert [e.seq for e in got] == list(range(1, rig.session.head + 1)) and not page.earlier


def test_the_retention_bounds_the_older_pages_by_count_and_by_age_on_the_fake_clock() -> None:
    retention = Retention(limit=6, max_age=60.0)
    rig = Rig.keeping(retention)
    hello(rig, "phone")
    for number in range(1, 9):
        rig.session.send_text(f"m{number}")
        rig.drain()
        rig.clock.advance(10 if number != 4 else 40)  # m1..m4 are more than 60 s old at the end
    # kept by count: m3..m8; by age: m5..m8
    [page] = pages(rig.send("phone", HistoryOlder(before=8)), "phone")
    assert [e.text for e in page.entries] == ["m5", "m6", "m7"] and not page.earlier
    [gone] = pages(rig.send("phone", HistoryOlder(before=3)), "phone")  # pruned by count: nothing, the beginning
    assert (gone.entries, gone.earlier) == ([], False)


@pytest.mark.parametrize(
    ("before", "problem"),
    [
        (0, "greater than or equal to 1"),
        (-5, "greater than or equal to 1"),
        (MAX_SEQ + 1, "less than or equal to"),
        ("12", "valid integer"),
        (1.5, "valid integer"),
        (None, "valid integer"),
        ([1], "valid integer"),
        (True, "valid integer"),
        (..., "field required"),
        ("\ud800", "lone surrogate"),
    ],
)
def test_a_hostile_history_older_is_refused_with_the_field_named_and_the_device_stays(
    before: object, problem: str
) -> None:
    rig = busy_rig(5)
    hello(rig, "tablet", last_seq=0, newest_first=True)
    data = json.loads(rig.text_from("tablet", HistoryOlder(before=3)))
    data["payload"]["before"] = before
    if before is ...:
        del data["payload"]["before"]

    rig.session.receive("tablet", json.dumps(data))
    batch = rig.drain()

    [error] = errors(batch, "tablet")
    assert error.code == "bad_message" and "payload.before" in error.message and problem in error.message
    assert not pages(batch, "tablet") and rig.session.attached("tablet")
    [page] = pages(rig.send("tablet", HistoryOlder(before=3)), "tablet")  # and it goes on
    assert [e.seq for e in page.entries] == [1, 2]


def test_a_seq_beyond_the_head_or_of_another_history_is_refused_saying_to_catch_up() -> None:
    rig = busy_rig(5)
    hello(rig, "tablet", last_seq=0, newest_first=True)
    head = rig.session.head

    for request in (HistoryOlder(before=head + 2), HistoryOlder(before=3, history_id="another-history")):
        batch = rig.send("tablet", request)
        [error] = errors(batch, "tablet")
        assert error.code == "unknown_history" and "catch up with device.hello" in error.message
        assert error.ref is not None and not pages(batch, "tablet")
    # the page before a seq just past the head is the newest page
    [page] = pages(rig.send("tablet", HistoryOlder(before=head + 1)), "tablet")
    assert page.entries[-1].seq == head


def test_history_older_before_the_hello_or_replayed_is_not_answered() -> None:
    rig = busy_rig(5)
    rig.session.open("stranger", name="stranger", verify=accept)
    batch = rig.send("stranger", HistoryOlder(before=3))
    assert [e.code for e in errors(batch, "stranger")] == ["hello_required"] and not pages(batch, "stranger")

    hello(rig, "tablet", last_seq=0, newest_first=True)
    first = rig.send("tablet", HistoryOlder(before=3), envelope_id="older-1")
    assert len(pages(first, "tablet")) == 1
    assert any(isinstance(change, SeenEnvelope) for change in first.changes)
    again = rig.send("tablet", HistoryOlder(before=3), envelope_id="older-1")  # the same envelope again
    assert not pages(again, "tablet")


def test_history_off_answers_an_empty_page() -> None:
    rig = Rig()
    rig.session = Driven(records=rig.records, catalog=rig.catalog, clock=rig.clock, retention=Retention(limit=0))
    hello(rig, "tablet", last_seq=0, newest_first=True)
    [page] = pages(rig.send("tablet", HistoryOlder(before=1)), "tablet")
    assert (page.entries, page.earlier, page.head) == ([], False, 0)
