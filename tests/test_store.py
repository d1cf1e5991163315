"""The stores: SQLiteStore keeps calls, seen ids and the audit log across reopening; both stores agree."""

from __future__ import annotations

import sqlite3
import stat
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import StoreBusyError, StoreError
from lineup_plugin.protocol.calls import Call, CallState, format_timestamp
from lineup_plugin.protocol.messages import ToolCall, ToolResult
from lineup_plugin.protocol.session import Audit, SaveCall, SeenEnvelope
from lineup_plugin.store import SCHEMA_VERSION, MemoryStore, SQLiteStore, Store, open_store

from .store_helpers import FailingCommits, audit, first_seen, save_call


def make_call(call_id: str = "c1", *, created_at: float | None = None, expires_in: float = 60.0) -> Call:
    now = time.time() if created_at is None else created_at
    request = ToolCall(
        call_id=call_id,
        name="choice",
        arguments={"question": "Deploy where?", "options": ["staging", "预发布"]},
        expires_at=format_timestamp(now + expires_in),
    )
    return Call(request=request, conversation_id="conv", created_at=now)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "lineup.sqlite3"


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "s.sqlite3")
    yield made
    made.close()


# --------------------------------------------------------------------- the Store protocol, both stores


def test_a_saved_call_reads_back_equal(store: Store) -> None:
    call = make_call()
    call.advance(CallState.DELIVERED)
    save_call(store, call)
    again = store.get_call("c1")
    assert again is not None
    assert (again.request, again.state, again.created_at, again.expires_at, again.history) == (
        call.request,
        call.state,
        call.created_at,
        call.expires_at,
        call.history,
    )


def test_pending_calls_are_the_live_ones_oldest_first(store: Store) -> None:
    for call_id, created in (("late", 20.0), ("early", 10.0), ("ended", 5.0)):
        save_call(store, make_call(call_id, created_at=time.time() + created))
    ended = make_call("ended")
    ended.end("cancelled", "stop")
    save_call(store, ended)
    assert [c.call_id for c in store.pending_calls()] == ["early", "late"]


def test_an_ended_call_keeps_its_result(store: Store) -> None:
    call = make_call()
    save_call(store, call)
    call.finish(ToolResult(call_id="c1", result={"selected": "预发布", "index": 1}))
    save_call(store, call)
    again = store.get_call("c1")
    assert again is not None and again.done
    assert again.result == ToolResult(call_id="c1", name="choice", result={"selected": "预发布", "index": 1})


def test_first_seen_is_true_once(store: Store) -> None:
    assert first_seen(store, "msg_1")
    assert not first_seen(store, "msg_1")
    assert first_seen(store, "msg_2")


def test_unknown_call_is_none(store: Store) -> None:
    assert store.get_call("nope") is None


# ------------------------------------------------------------------------------------ SQLite only


def test_everything_survives_reopening(db_path: Path) -> None:
    with SQLiteStore(db_path) as first:
        live, ended = make_call("live"), make_call("ended")
        ended.end("expired", "no answer before the deadline")
        save_call(first, live)
        save_call(first, ended)
        first_seen(first, "msg_1")
        audit(first, "call.created", call_id="live", device_id="phone", detail="choice")
    with SQLiteStore(db_path) as second:
        assert [c.call_id for c in second.pending_calls()] == ["live"]
        assert second.get_call("ended") is not None
        assert second.get_call("ended").state is CallState.EXPIRED  # type: ignore[union-attr]
        assert not first_seen(second, "msg_1")
        assert second.audit_log == [("call.created", "live", "phone", "choice")]


def test_a_stale_live_save_never_reopens_an_ended_call(db_path: Path) -> None:
    with SQLiteStore(db_path) as store:
        stale = make_call()
        ended = make_call()
        ended.end("cancelled", "stopped")
        save_call(store, ended)
        save_call(store, stale)
        saved = store.get_call("c1")
        assert saved is not None and saved.state is CallState.CANCELLED
        assert store.pending_calls() == []


def test_seen_ids_are_bounded_and_the_oldest_go_first(db_path: Path) -> None:
    with SQLiteStore(db_path, seen_limit=10) as store:
        for n in range(30):
            assert first_seen(store, f"msg_{n}")
        assert not first_seen(store, "msg_29")  # recent ids are remembered
        assert first_seen(store, "msg_0")  # the oldest were pruned
        count = store._db.execute("SELECT count(*) FROM seen").fetchone()[0]
        assert count <= 10 + 1 + 1


def test_ended_calls_are_bounded_and_live_calls_never_pruned(db_path: Path) -> None:
    with SQLiteStore(db_path, ended_limit=10) as store:
        save_call(store, make_call("live"))
        for n in range(40):
            call = make_call(f"c{n}")
            call.end("completed", "ok")
            save_call(store, call)
        assert store.get_call("live") is not None
        assert store.get_call("c39") is not None
        assert store.get_call("c0") is None
        assert store._db.execute("SELECT count(*) FROM calls WHERE done = 1").fetchone()[0] <= 10 + 1


def test_audit_log_is_bounded(db_path: Path) -> None:
    with SQLiteStore(db_path, audit_limit=20) as store:
        for n in range(100):
            audit(store, "text.in", detail=str(n))
        log = store.audit_log
        assert len(log) <= 20 + 2
        assert log[-1] == ("text.in", None, None, "99")


def test_secrets_in_audit_details_are_redacted(db_path: Path) -> None:
    secret = "s3cret-token-0123456789"
    with SQLiteStore(db_path, secrets=[secret, None]) as store:
        audit(store, "auth.refused", device_id="phone", detail=f"token {secret} was wrong")
        assert store.audit_log == [("auth.refused", None, "phone", "token [redacted] was wrong")]
    assert secret.encode() not in b"".join(p.read_bytes() for p in db_path.parent.iterdir())


def test_the_file_is_private_to_the_user(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    assert stat.S_IMODE(db_path.stat().st_mode) == 0o600


@pytest.mark.parametrize(("fsync", "level"), [("full", 2), ("normal", 1), ("off", 0)])
def test_fsync_setting_sets_synchronous(tmp_path: Path, fsync: str, level: int) -> None:
    store = open_store(Settings(data_dir=tmp_path, fsync=fsync))  # type: ignore[arg-type]
    assert isinstance(store, SQLiteStore)
    assert store._db.execute("PRAGMA synchronous").fetchone()[0] == level
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    store.close()


def test_open_store_puts_the_file_in_the_data_directory(tmp_path: Path) -> None:
    store = open_store(Settings(data_dir=tmp_path / "agent"))
    assert isinstance(store, SQLiteStore)
    assert store.path == tmp_path / "agent" / "lineup.sqlite3"
    store.close()
    assert (tmp_path / "agent" / "lineup.sqlite3").exists()


def test_open_store_honours_store_path_and_memory(tmp_path: Path) -> None:
    store = open_store(Settings(data_dir=tmp_path, store_path=tmp_path / "elsewhere.db"))
    assert isinstance(store, SQLiteStore) and store.path == tmp_path / "elsewhere.db"
    store.close()
    assert isinstance(open_store(Settings(data_dir=tmp_path, store="memory")), MemoryStore)


def test_a_second_agent_on_the_same_file_is_refused(db_path: Path) -> None:
    with SQLiteStore(db_path), pytest.raises(StoreBusyError, match="in use by another agent process"):
        SQLiteStore(db_path, busy_timeout=0.01)
    SQLiteStore(db_path).close()  # free again once the first closed


def test_a_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteStore(db_path).close()
    with closing(sqlite3.connect(db_path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match=f"schema version {SCHEMA_VERSION + 1}, newer than this lineup-plugin"):
        SQLiteStore(db_path)


def test_a_file_that_is_not_a_database_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    db_path.write_bytes(b"this is not sqlite\n" * 200)
    with pytest.raises(StoreError, match="is unreadable: file is not a database"):
        SQLiteStore(db_path)


def test_a_foreign_sqlite_file_is_refused(db_path: Path) -> None:
    db_path.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db_path)) as db:
        db.execute("CREATE TABLE notes (body TEXT)")
    with pytest.raises(StoreError, match="is not a lineup store"):
        SQLiteStore(db_path)


def test_an_uncreatable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="cannot create the store"):
        SQLiteStore(tmp_path / "file" / "lineup.sqlite3")


def test_use_from_another_thread_is_refused(db_path: Path) -> None:
    errors: list[BaseException] = []
    with SQLiteStore(db_path) as store:

        def other() -> None:
            try:
                first_seen(store, "msg")
            except BaseException as exc:
                errors.append(exc)

        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert len(errors) == 1 and isinstance(errors[0], StoreError)
    assert "another thread" in str(errors[0])


def test_close_is_idempotent(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    store.close()
    store.close()


# ------------------------------------------------------------------------------ transactions


def test_a_batch_of_changes_commits_as_one_transaction_before_apply_returns(db_path: Path) -> None:
    with SQLiteStore(db_path) as store:
        call = make_call()
        call.advance(CallState.DELIVERED)
        store.apply([SaveCall(call), SeenEnvelope("msg_1"), Audit("call.created", call_id="c1"), SaveCall(call)])
        assert not store._db.in_transaction  # committed when apply returns
        assert store.get_call("c1").state == CallState.DELIVERED  # type: ignore[union-attr]
        assert store.was_seen("msg_1") and not first_seen(store, "msg_1")
        assert store.audit_log == [("call.created", "c1", None, "")]


def test_every_single_write_commits_at_once(db_path: Path) -> None:
    with SQLiteStore(db_path) as store:
        audit(store, "text.in")
        assert not store._db.in_transaction


def test_a_failed_commit_keeps_nothing_of_the_batch_and_raises(db_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SQLiteStore(db_path)
    real = store._db
    store._db = FailingCommits(real)  # type: ignore[assignment]
    with pytest.raises(StoreError, match="database or disk is full"):
        store.apply([SaveCall(make_call()), Audit("call.created", call_id="c1")])
    assert "could not save writes: database or disk is full" in caplog.text
    assert not real.in_transaction
    store._db = real
    assert store.audit_log == [] and store.get_call("c1") is None
    first_seen(store, "msg_1")  # the store goes on with the next batch
    assert store.was_seen("msg_1")
    store.close()


def test_a_version_1_file_is_migrated_and_its_calls_read_back_not_forwarded(db_path: Path) -> None:
    from lineup_plugin.store import _MIGRATIONS, APPLICATION_ID

    db_path.parent.mkdir(mode=0o700)
    with sqlite3.connect(db_path) as db:
        for statement in _MIGRATIONS[1]:
            db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute("PRAGMA user_version = 1")
        request = ToolCall(call_id="old", name="choice").model_dump_json(exclude_none=True)
        db.execute(
            "INSERT INTO calls VALUES ('old', 'default', 'choice', 'created', 0, ?, NULL, 1.0, NULL, '[]', 1.0)",
            (request,),
        )
    db.close()
    store = SQLiteStore(db_path)
    try:
        (call,) = store.pending_calls()
        assert call.call_id == "old" and call.forwarded is False
        forwarded = Call(request=ToolCall(call_id="new", name="choice"), conversation_id="default", forwarded=True)
        save_call(store, forwarded)
        saved = store.get_call("new")
        assert saved is not None and saved.forwarded is True
    finally:
        store.close()
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 7
        assert not db.execute("SELECT 1 FROM sqlite_schema WHERE name IN ('history_at', 'calls_live')").fetchall()
    db.close()


def test_who_answered_a_call_is_kept_across_a_restart_and_a_damaged_record_is_refused(db_path: Path) -> None:
    store = SQLiteStore(db_path)
    call = Call(request=ToolCall(call_id="c1", name="confirm"), conversation_id="default")
    save_call(store, call)  # live first, then its end: the update path
    call.finish(ToolResult(call_id="c1", status="completed", result={"approved": True}), now=time.time())
    call.answered_by, call.answered_name = "phone", "Pixel 7 (Chrome)"
    save_call(store, call)
    store.close()
    again = SQLiteStore(db_path)
    try:
        kept = again.get_call("c1")
        assert kept is not None and (kept.answered_by, kept.answered_name) == ("phone", "Pixel 7 (Chrome)")
    finally:
        again.close()
    with closing(sqlite3.connect(db_path)) as db, db:
        db.execute("UPDATE calls SET answered = '[1, 2, 3]' WHERE call_id = 'c1'")
    damaged = SQLiteStore(db_path)
    try:
        with pytest.raises(StoreError, match="unreadable call"):
            damaged.get_call("c1")
    finally:
        damaged.close()
