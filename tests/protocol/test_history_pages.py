"""A new device's catch-up, newest page first: the newest ≤ 64 KB and the waiting cards before the
older pages, which follow newest first, marked ``older`` — on the session's fake clock."""

from __future__ import annotations

from lineup_plugin.protocol.history import FIRST_PAGE_CHARS, newest_page_first
from lineup_plugin.protocol.messages import DeviceHello, History, HistoryEntry
from lineup_plugin.protocol.outputs import Send

from .test_session import Rig, accept, sent


def hello(rig: Rig, link: str, **fields: object):  # type: ignore[no-untyped-def]
    rig.session.open(link, name=link, verify=accept)
    return rig.send(link, DeviceHello(device_id=link, **fields))  # type: ignore[arg-type]


def busy_rig(texts: int = 300) -> Rig:
    """A session with ``texts`` agent messages of about 1 KB kept, then a call waiting."""
    rig = Rig()
    hello(rig, "phone")
    for index in range(texts):
        rig.session.send_text(f"{index:04d} " + "x" * 1000)
    rig.start("c1")
    rig.drain()
    return rig


def test_a_new_device_gets_the_newest_page_and_the_waiting_card_first_then_the_older_pages() -> None:
    rig = busy_rig()

    batch = hello(rig, "tablet", last_seq=0, newest_first=True)

    messages = sent(batch, "tablet")
    kinds = [m.kind for m in messages]
    assert kinds[:5] == ["device.welcome", "history", "tool.list", "agent.status", "tool.call"]
    pages = [m.payload for m in messages if isinstance(m.payload, History)]
    first, *older = pages
    wire = [m.text for m in batch.messages if isinstance(m, Send) and m.link == "tablet"]
    assert len(wire[1].encode()) <= FIRST_PAGE_CHARS  # the first page: at most 64 KB on the wire
    assert first.entries[-1].seq == rig.session.head and not first.older and first.conversations is not None
    assert older and all(page.older for page in older) and not older[-1].more
    assert all(page.more for page in pages[:-1])
    # newest first, page by page; oldest first within a page; every entry exactly once
    starts = [page.entries[0].seq for page in pages]
    assert starts == sorted(starts, reverse=True)
    seqs = sorted(entry.seq for page in pages for entry in page.entries)
    assert seqs == list(range(1, rig.session.head + 1))
    for page in pages:
        assert [e.seq for e in page.entries] == sorted(e.seq for e in page.entries)


def test_an_app_that_does_not_ask_newest_first_gets_the_catch_up_oldest_first_as_before() -> None:
    rig = busy_rig(120)

    batch = hello(rig, "old-app", last_seq=0)

    pages = [m.payload for m in sent(batch, "old-app") if isinstance(m.payload, History)]
    assert not any(page.older for page in pages)
    seqs = [entry.seq for page in pages for entry in page.entries]
    assert seqs == list(range(1, rig.session.head + 1))
    kinds = [m.kind for m in sent(batch, "old-app")]
    assert kinds.index("tool.call") > max(i for i, kind in enumerate(kinds) if kind == "history")


def test_a_small_history_is_one_page_and_an_entry_larger_than_a_page_still_goes_alone() -> None:
    rig = busy_rig(3)
    batch = hello(rig, "tablet", last_seq=0, newest_first=True)
    assert [m.payload.older for m in sent(batch, "tablet") if isinstance(m.payload, History)] == [False]

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


def test_a_device_resuming_newest_first_gets_only_what_it_missed_and_nothing_when_it_missed_nothing() -> None:
    rig = busy_rig(4)
    head = rig.session.head

    missed = sent(hello(rig, "laptop", last_seq=head - 1, newest_first=True), "laptop")
    pages = [m.payload for m in missed if isinstance(m.payload, History)]
    assert [[e.seq for e in page.entries] for page in pages] == [[head]]
    assert not pages[0].reset and not pages[0].more and pages[0].head == head

    # what the browser test saw when a closing page had kept the last entry: one page, no entries
    current = sent(hello(rig, "phone2", last_seq=head, newest_first=True), "phone2")
    pages = [m.payload for m in current if isinstance(m.payload, History)]
    assert [page.entries for page in pages] == [[]]
    assert not pages[0].reset and pages[0].conversations is not None
