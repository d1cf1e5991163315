"""The history in both stores: kept in order, bounded by count and age, durable, migrated from schema 1."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from lineup_plugin.errors import StoreError
from lineup_plugin.protocol.calls import format_timestamp
from lineup_plugin.protocol.history import DEFAULT_RETENTION, Record, Retention, SaveConversation
from lineup_plugin.protocol.messages import HistoryEntry, ToolCall
from lineup_plugin.protocol.reads import HistoryQuery, Wants
from lineup_plugin.protocol.session import Change
from lineup_plugin.store import _MIGRATIONS, APPLICATION_ID, SCHEMA_VERSION, MemoryStore, SQLiteStore, Store

START = 1_700_000_000.0
EVERYTHING = float("-inf")


def entry(seq: int, at: float, conversation_id: str = "default", text: str | None = None) -> list[Change]:
    """The changes a session makes for one text entry: the entry and its conversation's new state."""
    record = Record(seq, at, conversation_id, "text.out", {"text": text or f"m{seq}"})
    return [record, SaveConversation(conversation_id, conversation_id.upper(), seq, at)]


@pytest.fixture(params=["memory", "sqlite"])
def make(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[object]:
    """A function that makes a store of the parametrized kind with a retention."""
    opened: list[SQLiteStore] = []

    def build(retention: Retention = DEFAULT_RETENTION) -> Store:
        if request.param == "memory":
            return MemoryStore(retention=retention)
        store = SQLiteStore(tmp_path / f"s{len(opened)}.sqlite3", retention=retention)
        opened.append(store)
        return store

    yield build
    for store in opened:
        store.close()


def texts(store: Store, after: int = 0) -> list[str | None]:
    return [e.text for e in store.history_after(after, oldest_at=EVERYTHING, limit=1000)]


def test_entries_are_kept_in_seq_order_and_read_after_a_seq(make) -> None:  # type: ignore[no-untyped-def]
    store = make()
    for seq in range(1, 6):
        store.apply(entry(seq, START + seq))

    assert store.history_head() == 5
    assert texts(store) == ["m1", "m2", "m3", "m4", "m5"]
    assert texts(store, after=3) == ["m4", "m5"]
    assert store.history_after(0, oldest_at=START + 4, limit=1000)[0].seq == 4
    assert len(store.history_after(0, oldest_at=EVERYTHING, limit=2)) == 2


def test_the_newest_entries_before_a_seq_are_read_oldest_first(make) -> None:  # type: ignore[no-untyped-def]
    store = make()
    for seq in range(1, 11):
        store.apply(entry(seq, START + seq))

    def before(seq: int, *, after: int = 0, oldest_at: float = EVERYTHING, limit: int = 1000) -> list[int]:
        return [e.seq for e in store.history_before(seq, after=after, oldest_at=oldest_at, limit=limit)]

    assert before(8, limit=3) == [5, 6, 7]  # the newest three below 8, oldest first
    assert before(11) == list(range(1, 11))
    assert before(8, after=5) == [6, 7]
    assert before(8, oldest_at=START + 6) == [6, 7]
    assert before(1) == [] and before(8, limit=0) == []
    assert before(2**53 - 1, limit=2) == [9, 10]
    assert [e.seq for e in store.read(Wants(history=HistoryQuery(0, EVERYTHING, 2, 5))).history] == [3, 4]


def test_count_bound_prunes_the_oldest_and_their_conversations(make) -> None:  # type: ignore[no-untyped-def]
    store = make(Retention(limit=3, max_age=None))
    store.apply(entry(1, START, "cli-1"))
    for seq in range(2, 8):
        store.apply(entry(seq, START + seq, "default"))

    assert texts(store) == ["m5", "m6", "m7"]
    assert [c.conversation_id for c in store.conversations()] == ["default"]  # cli-1's history is gone


def test_age_bound_prunes_what_is_older_than_max_age_from_the_newest(make) -> None:  # type: ignore[no-untyped-def]
    store = make(Retention(limit=100, max_age=60))
    store.apply(entry(1, START))
    store.apply(entry(2, START + 30))
    store.apply(entry(3, START + 100))

    assert texts(store) == ["m3"]


def test_conversations_are_listed_most_recent_first_with_titles(make) -> None:  # type: ignore[no-untyped-def]
    store = make()
    store.apply(entry(1, START, "a"))
    store.apply(entry(2, START, "b"))
    store.apply(entry(3, START, "a"))

    assert [(c.conversation_id, c.title, c.last_seq) for c in store.conversations()] == [("a", "A", 3), ("b", "B", 2)]


def test_a_closed_conversation_is_read_back_closed(make) -> None:  # type: ignore[no-untyped-def]
    store = make()
    store.apply(entry(1, START, "a"))
    closing = Record(2, START, "a", "conversation", {"title": "A", "closed": True})
    store.apply([closing, SaveConversation("a", "A", 2, START, closed=True)])

    [info] = store.conversations()
    assert (info.conversation_id, info.last_seq, info.closed) == ("a", 2, True)
    store.apply(entry(3, START, "a"))  # its next entry opens it again
    assert [c.closed for c in store.conversations()] == [False]


def test_a_record_is_written_as_its_wire_entry() -> None:
    call = ToolCall(call_id="c1", name="choice", arguments={"options": ["a"]})
    record = Record(4, START, "cli-1", "call", {"call": call, "text": None}, "c1")

    assert HistoryEntry.model_validate_json(record.json()) == record.entry()
    assert record.entry().at == format_timestamp(START)


def test_history_id_is_one_per_store(make) -> None:  # type: ignore[no-untyped-def]
    first, second = make(), make()

    assert first.history_id() == first.history_id()
    assert first.history_id() != second.history_id()


def test_sqlite_history_survives_reopening_and_keeps_its_id(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    with SQLiteStore(path) as store:
        store.apply(entry(1, START, "cli-1", "kept"))
        history_id = store.history_id()

    with SQLiteStore(path) as again:
        assert (again.history_head(), texts(again), again.history_id()) == (1, ["kept"], history_id)
        assert [c.title for c in again.conversations()] == ["CLI-1"]


def test_a_batch_that_fails_keeps_none_of_its_entries(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "h.sqlite3") as store:
        store.apply(entry(1, START))
        bad = Record(2, START, "default", "text.out", {"text": "\ud800"})  # a lone surrogate cannot be written
        with pytest.raises(StoreError):
            store.apply([*entry(3, START), bad])
        assert texts(store) == ["m1"]
        assert store.conversations()[0].last_seq == 1


def test_a_schema_1_file_is_migrated_with_its_calls_and_a_new_history(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    db = sqlite3.connect(path)
    for statement in _MIGRATIONS[1]:
        db.execute(statement)
    db.execute(
        "INSERT INTO audit (at, event, call_id, device_id, detail) VALUES (1, 'call.created', 'c1', NULL, 'choice')"
    )
    db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()

    with SQLiteStore(path) as store:
        assert store.audit_log == [("call.created", "c1", None, "choice")]
        assert (store.history_head(), store.conversations()) == (0, [])
        store.apply(entry(1, START))
        assert texts(store) == ["m1"]
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_sqlite_prunes_what_an_earlier_run_kept_beyond_a_smaller_bound(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    with SQLiteStore(path) as store:
        for seq in range(1, 6):
            store.apply(entry(seq, START + seq))
    with SQLiteStore(path, retention=Retention(limit=2, max_age=None)) as store:
        store.apply(entry(6, START + 6))
        assert texts(store) == ["m5", "m6"]
        for seq in range(7, 10):  # and keeps pruning, batch after batch
            store.apply(entry(seq, START + seq))
        assert texts(store) == ["m8", "m9"]


def test_sqlite_prunes_by_age_along_the_seqs_with_no_index_on_the_time(tmp_path: Path) -> None:
    path = tmp_path / "h.sqlite3"
    with SQLiteStore(path, retention=Retention(limit=1000, max_age=60)) as store:
        for seq in range(1, 201):  # one entry a second
            store.apply(entry(seq, START + seq))
        assert texts(store)[0] == "m140"  # the 60 s before the newest (at START + 200) and no older
        plan = store._db.execute("EXPLAIN QUERY PLAN SELECT seq FROM history WHERE at >= 0 ORDER BY seq LIMIT 1")
        assert "history_at" not in str(plan.fetchall())


def test_what_is_past_the_bound_is_deleted_in_bulk_and_never_read(make) -> None:  # type: ignore[no-untyped-def]
    def rows(store: Store) -> int:
        if isinstance(store, SQLiteStore):
            return int(store._db.execute("SELECT count(*) FROM history").fetchone()[0])
        assert isinstance(store, MemoryStore)
        return len(store._history)

    store = make(Retention(limit=100, max_age=None))
    for seq in range(1, 111):  # 10 past the bound: a tenth of the limit, not yet deleted
        store.apply(entry(seq, START + seq))
    assert rows(store) == 110
    assert texts(store)[0] == "m11" and len(texts(store)) == 100  # what is past the bound is never read
    assert [e.seq for e in store.history_before(12, after=0, oldest_at=EVERYTHING, limit=10)] == [11]
    store.apply(entry(111, START + 111))  # 11 past it: deleted, all at once
    assert rows(store) == 100 and texts(store)[0] == "m12"

    store = make(Retention(limit=1000, max_age=100))
    store.apply(entry(1, START, "old"))
    for seq in range(2, 101):
        store.apply(entry(seq, START + seq))
    store.apply(entry(101, START + 100.5))  # "old" is past the age limit by less than a hundredth of it
    assert rows(store) == 101
    assert "old" not in [c.conversation_id for c in store.conversations()]  # but no longer read
    store.apply(entry(102, START + 101.5))  # now by more: deleted
    assert rows(store) == 101 and texts(store)[0] == "m2"
    assert "old" not in [c.conversation_id for c in store.conversations()]
    assert store.history_after(0, oldest_at=EVERYTHING, limit=1)[0].seq == 2


def test_a_conversation_keeps_its_title_when_it_comes_back_after_its_entries_aged_out(make) -> None:  # type: ignore[no-untyped-def]
    from lineup_plugin.protocol.devices import Devices
    from lineup_plugin.protocol.outputs import Outbox
    from lineup_plugin.protocol.timeline import Timeline

    retention = Retention(limit=1000, max_age=100)
    store = make(retention)
    clock = [START]
    out: Outbox[str] = Outbox(lambda: clock[0])
    devices: Devices[str] = Devices(out, agent_id="agent", conversation_id="default")
    timeline: Timeline[str] = Timeline(out, devices, retention=retention, kept=store.kept())

    def record(conversation_id: str, **fields: object) -> None:
        timeline.record("text.out", conversation_id, **fields)
        store.apply(out.take().changes)

    record("a", title="Deploys")
    for step in range(1, 4):  # "a" ages out of the store (well past the age limit and its slack)
        clock[0] = START + 150 * step
        record("b", text="busy")
    assert "a" not in [c.conversation_id for c in store.conversations()]
    record("a", text="back again")
    newest = store.conversations()[0]  # the most recently active first
    assert (newest.conversation_id, newest.title) == ("a", "Deploys")
