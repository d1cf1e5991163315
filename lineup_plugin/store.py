"""Where the hub keeps calls, seen envelope ids, the audit log and the conversations' history.

:class:`MemoryStore` keeps them for the life of the process. The durable SQLite store
(:class:`SQLiteStore`) keeps them across restarts, a SIGKILL included. Neither stores secrets or
tokens. :func:`open_store` builds the one the settings ask for.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import logging
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol, runtime_checkable
from urllib.parse import quote

from pydantic_core import to_json

from .errors import StoreBusyError, StoreError
from .protocol.calls import Call, CallState
from .protocol.history import DEFAULT_RETENTION, Record, Retention, SaveConversation
from .protocol.messages import ConversationInfo, HistoryEntry, ToolCall, ToolResult
from .protocol.outputs import Audit, Change, SaveCall, SeenEnvelope, changes_by_kind
from .protocol.reads import HistoryQuery, Kept, Known, Wants

if TYPE_CHECKING:
    from .config.settings import Settings

log = logging.getLogger(__name__)

#: how many envelope ids a store remembers for deduplication
SEEN_LIMIT = 100_000
#: how many ended calls a store keeps (to refuse late answers and replay repeated call ids)
ENDED_LIMIT = 10_000
#: how many audit records the durable store keeps
AUDIT_LIMIT = 200_000
#: how many told-but-unwritten changes a store keeps for later when it fails for long (oldest dropped)
UNWRITTEN_LIMIT = 10_000


class Store(Protocol):
    """What the hub needs from a store: the session core's reads, and one way to write.

    The session core (:mod:`lineup_plugin.protocol.session`) never writes: it produces changes,
    and the hub hands each batch of them to :meth:`apply`, which returns once they are
    committed — before anything they allow is sent.
    """

    def apply(self, changes: Iterable[Change]) -> None:
        """Write ``changes`` as one transaction and commit it; raises StoreError when that fails."""

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id``, live or ended, if the store still knows it."""

    def pending_calls(self) -> list[Call]:
        """Every call that has not reached a terminal status, oldest first."""

    def kept(self) -> Kept:
        """The state of the store's history, as a new session starts on it."""

    def read(self, wants: Wants) -> Known:
        """What the store knows of ``wants`` (an envelope the session core is about to handle)."""

    def salvage(self, changes: list[Change]) -> set[str]:
        """After :meth:`apply` failed on ``changes``: write what can be, call by call; the ids of the calls
        whose changes could not be written."""

    def defer(self, changes: Iterable[Change]) -> None:
        """Keep ``changes`` (already told) to write later, when the store takes writes again."""

    def write_deferred(self) -> bool:
        """Try to write what :meth:`defer` kept; whether nothing is left."""

    def add_secret(self, secret: str) -> None:
        """Redact ``secret`` from audit details written from now on (e.g. a token generated after opening)."""

    @property
    def audit_log(self) -> list[tuple[str, str | None, str | None, str]]:
        """The kept audit records, oldest first, as ``(event, call_id, device_id, detail)``."""

    def close(self) -> None:
        """Release the store's resources."""


@runtime_checkable
class AuditPages(Protocol):
    """A store whose audit log can be read a page at a time while it serves (the durable store):
    what ``GET /api/stats`` meters."""

    def call_audit_page(
        self, *, since: float | None = None, after: int = 0, limit: int = 5000
    ) -> tuple[list[AuditRecord], int | None]:
        """Up to ``limit`` audit records about calls after position ``after``; the position to read on from."""
        ...


class _OneChange(ABC):
    """What both stores share: redaction of secrets, the reads of the session core made of the
    store's own, and writing what can be of a failed batch."""

    _secrets: list[str]
    #: changes told to the devices and the model but not yet written (the store failed on them)
    _unwritten: list[Change]
    retention: Retention
    #: the oldest and the newest history entry kept (seq, time): entries past the retention are
    #: never read (:meth:`_bound`), and deleted in bulk once enough of them are (:meth:`_noted`)
    _oldest: tuple[int, float] | None = None
    _newest: tuple[int, float] | None = None

    def add_secret(self, secret: str) -> None:
        """Write ``secret`` as ``[redacted]`` wherever it shows up in an audit detail from now on."""
        if secret and secret not in self._secrets:
            self._secrets.append(secret)

    def _noted(self, first: Record, newest: Record) -> bool:
        """Note the entries ``first`` to ``newest`` just kept; whether those past the retention's
        bound are due for deletion: as the other bounded tables are pruned, once enough of them are
        (a delete with every entry would, in a file, write the table's oldest page with every entry)."""
        self._newest = (newest.seq, newest.at)
        if self._oldest is None:
            self._oldest = (first.seq, first.at)
        kept, retention = newest.seq - self._oldest[0] + 1, self.retention
        aged = retention.max_age is not None and self._oldest[1] < newest.at - retention.max_age * (1 + AGE_SLACK)
        return _over(kept, retention.limit) or aged

    def _bound(self) -> tuple[int, float]:
        """The seq below the oldest entry the retention keeps, and the oldest time it keeps (from the newest)."""
        if self._newest is None:
            return 0, float("-inf")
        seq, at = self._newest
        return self.retention.oldest_seq(seq) - 1, self.retention.oldest_at(at)

    def _within_bound(self, after: int, oldest_at: float) -> tuple[int, float]:
        """A read's ``after`` and ``oldest_at`` narrowed to what the retention keeps (see :meth:`_bound`)."""
        floor, since = self._bound()
        return max(after, floor), max(oldest_at, since)

    def _redact(self, detail: str) -> str:
        """``detail`` with every secret written ``[redacted]`` (the same object when it holds none)."""
        for secret in self._secrets:
            if secret in detail:
                detail = detail.replace(secret, "[redacted]")
        return detail

    @abstractmethod
    def apply(self, changes: Iterable[Change]) -> None:
        """Write ``changes`` as one transaction (see :class:`Store`)."""

    @abstractmethod
    def was_seen(self, envelope_id: str) -> bool:
        """Whether ``envelope_id`` was recorded (see :class:`Store`)."""

    @abstractmethod
    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id``, live or ended, if the store still knows it."""

    @abstractmethod
    def history_id(self) -> str:
        """The id of this store's history (made with the store; a new store counts seqs from 1 again)."""

    @abstractmethod
    def history_head(self) -> int:
        """The highest seq kept (0 for none)."""

    @abstractmethod
    def history_after(self, after: int, *, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """At most ``limit`` entries with a seq above ``after`` and a time not before ``oldest_at``, oldest first."""

    @abstractmethod
    def history_before(self, before: int, *, after: int, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """The newest ``limit`` entries with a seq between ``after`` and ``before`` (both excluded) and a
        time not before ``oldest_at``, oldest first."""

    @abstractmethod
    def conversations(self) -> list[ConversationInfo]:
        """The conversations with history kept, most recently active first."""

    def history(self, query: HistoryQuery) -> list[HistoryEntry]:
        """The entries ``query`` asks for, oldest first."""
        after, oldest_at, limit, before = query
        if before is not None:
            return self.history_before(before, after=after, oldest_at=oldest_at, limit=limit)
        return self.history_after(after, oldest_at=oldest_at, limit=limit)

    def kept(self) -> Kept:
        """The state of the store's history: its id, its head, its conversations."""
        return Kept(self.history_id(), self.history_head(), self.conversations())

    def read(self, wants: Wants) -> Known:
        """What the store knows of ``wants``, for the session core."""
        envelope_id, call_ids, query = wants
        seen = envelope_id is not None and self.was_seen(envelope_id)
        if not call_ids and query is None:
            return Known(seen) if seen else _NOTHING
        calls = {call_id: call for call_id in call_ids if (call := self.get_call(call_id)) is not None}
        history = self.history(query) if query is not None else []
        return Known(seen, calls, history)

    def salvage(self, changes: list[Change]) -> set[str]:
        """After :meth:`apply` failed on ``changes``: write what can be, call by call; the ids of the calls
        whose changes could not be written (a store that fails on everything, a full disk, fails them all)."""
        groups: dict[str | None, list[Change]] = {}
        calls: set[str] = set()
        for change in changes:
            if isinstance(change, SaveCall):
                key: str | None = change.call.call_id
                calls.add(change.call.call_id)
            else:
                key = change.call_id if isinstance(change, Audit | Record) else None
            groups.setdefault(key, []).append(change)
        failed: set[str] = set()
        for key, group in groups.items():
            try:
                self.apply(group)
            except StoreError as exc:
                if key is None:
                    log.error("lineup: could not save %d record(s): %s", len(group), exc)
                elif key in calls:
                    log.error("lineup: could not save call %s: %s", key, exc)
                    failed.add(key)
        return failed

    def defer(self, changes: Iterable[Change]) -> None:
        """Keep ``changes`` (already told) to write later (at most :data:`UNWRITTEN_LIMIT`, oldest dropped)."""
        self._unwritten.extend(changes)
        del self._unwritten[:-UNWRITTEN_LIMIT]

    def write_deferred(self) -> bool:
        """Try to write what :meth:`defer` kept; whether nothing is left."""
        if not self._unwritten:
            return True
        try:
            self.apply(self._unwritten)
        except StoreError:
            return False  # still failing
        log.info("lineup: saved %d change(s) that had waited for the store", len(self._unwritten))
        self._unwritten.clear()
        return True


_NOTHING = Known()


def _updated_at(call: Call) -> float:
    """When ``call`` last changed: its latest transition's time (the session's clock)."""
    return call.history[-1][1] if call.history else call.created_at


class MemoryStore(_OneChange):
    """A store that lives as long as the process; ended calls, seen ids, audit records and history are bounded."""

    def __init__(
        self,
        *,
        seen_limit: int = SEEN_LIMIT,
        ended_limit: int = ENDED_LIMIT,
        retention: Retention = DEFAULT_RETENTION,
    ) -> None:
        self._calls: dict[str, Call] = {}
        self._ended: OrderedDict[str, Call] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_limit = seen_limit
        self._ended_limit = ended_limit
        self._audit: list[Audit] = []
        self._secrets: list[str] = []
        self._unwritten: list[Change] = []
        self.retention = retention
        self._history: OrderedDict[int, Record] = OrderedDict()
        self._conversations: dict[str, SaveConversation] = {}
        self._history_id = os.urandom(16).hex()

    def apply(self, changes: Iterable[Change]) -> None:
        """Keep the changes (an ended call moves to the bounded list of ended calls)."""
        for change in changes:
            if isinstance(change, SaveCall):
                self._keep(change.call)
            elif isinstance(change, SeenEnvelope):
                self._seen[change.envelope_id] = None
                if len(self._seen) > self._seen_limit:
                    self._seen.popitem(last=False)
            elif isinstance(change, Record):
                self._keep_entry(change)
            elif isinstance(change, SaveConversation):
                self._conversations.pop(change.conversation_id, None)
                self._conversations[change.conversation_id] = change
            else:
                detail = self._redact(change.detail) if change.detail and self._secrets else change.detail
                self._audit.append(change if detail is change.detail else change._replace(detail=detail))
        if len(self._audit) > 10_000:
            del self._audit[:1000]

    def _keep(self, call: Call) -> None:
        if call.call_id in self._ended:
            return  # the first end wins
        if call.done:
            self._calls.pop(call.call_id, None)
            self._ended[call.call_id] = call
            while len(self._ended) > self._ended_limit:
                self._ended.popitem(last=False)
        else:
            self._calls[call.call_id] = call

    def _keep_entry(self, record: Record) -> None:
        self._history[record.seq] = record
        if self._noted(record, record):
            self._prune_history()

    def _prune_history(self) -> None:
        """Delete the entries past the retention's bound, and the conversations they were the last of."""
        history, (floor, since) = self._history, self._bound()
        first = next(iter(history.values()))
        while first.seq <= floor or first.at < since:  # the newest entry is always kept
            del history[first.seq]
            first = next(iter(history.values()))
        self._oldest = (first.seq, first.at)
        for conversation_id in [c for c, info in self._conversations.items() if info.last_seq < first.seq]:
            del self._conversations[conversation_id]

    def history_id(self) -> str:
        """A random id made with this store."""
        return self._history_id

    def history_head(self) -> int:
        """The highest seq kept (0 for none)."""
        return next(reversed(self._history), 0)

    def history_after(self, after: int, *, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """At most ``limit`` kept entries after seq ``after`` and not older than ``oldest_at``, oldest first."""
        after, oldest_at = self._within_bound(after, oldest_at)
        found = [record for seq, record in self._history.items() if seq > after and record.at >= oldest_at]
        return [record.entry() for record in found[:limit]]

    def history_before(self, before: int, *, after: int, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """The newest ``limit`` kept entries between seqs ``after`` and ``before`` (both excluded), not older
        than ``oldest_at``, oldest first."""
        after, oldest_at = self._within_bound(after, oldest_at)
        found: list[Record] = []
        for seq, record in reversed(self._history.items()):
            if len(found) >= limit or seq <= after:
                break
            if seq < before and record.at >= oldest_at:
                found.append(record)
        return [record.entry() for record in reversed(found)]

    def conversations(self) -> list[ConversationInfo]:
        """The conversations with history kept, most recently active first."""
        floor, since = self._bound()
        return [
            c.info()
            for c in reversed(self._conversations.values())
            if c.last_seq > floor and (c.updated_at is None or c.updated_at >= since)
        ]

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id`` if known (the object the session saved: a memory store keeps no copies)."""
        return self._calls.get(call_id) or self._ended.get(call_id)

    def pending_calls(self) -> list[Call]:
        """Live calls, oldest first."""
        return sorted(self._calls.values(), key=lambda c: c.created_at)

    def was_seen(self, envelope_id: str) -> bool:
        """Whether ``envelope_id`` was recorded."""
        return envelope_id in self._seen

    @property
    def audit_log(self) -> list[tuple[str, str | None, str | None, str]]:
        """The most recent audit records (at most 10,000), oldest first."""
        return [(a.event, a.call_id, a.device_id, a.detail) for a in self._audit]

    def close(self) -> None:
        """Nothing to release."""


# ------------------------------------------------------------------------------------ SQLite

#: the schema version this code writes (``PRAGMA user_version``); older files are migrated
SCHEMA_VERSION = 7
#: ``PRAGMA application_id`` of a LineUp store ("LnUp"), so a foreign SQLite file is refused
APPLICATION_ID = 0x4C6E5570
#: a bounded table is pruned back to its limit once it is this many rows over it (or a tenth of the limit)
PRUNE_SLACK = 1_000
#: the history is pruned for age once its oldest entry is this share of the age limit past it
AGE_SLACK = 0.01

Synchronous = Literal["full", "normal", "off"]

_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE calls (
            call_id TEXT PRIMARY KEY,
            conversation_id TEXT NOT NULL,
            name TEXT NOT NULL,
            state TEXT NOT NULL,
            done INTEGER NOT NULL,
            request TEXT NOT NULL,
            result TEXT,
            created_at REAL NOT NULL,
            expires_at REAL,
            history TEXT NOT NULL,
            updated_at REAL NOT NULL
        )""",
        "CREATE INDEX calls_live ON calls (created_at) WHERE done = 0",
        "CREATE TABLE seen (seq INTEGER PRIMARY KEY, envelope_id TEXT NOT NULL UNIQUE, at REAL NOT NULL)",
        """CREATE TABLE audit (
            seq INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            event TEXT NOT NULL,
            call_id TEXT,
            device_id TEXT,
            detail TEXT NOT NULL
        )""",
    ),
    # 2: calls another process of the agent forwarded (kept through a hand-over)
    2: ("ALTER TABLE calls ADD COLUMN forwarded INTEGER NOT NULL DEFAULT 0",),
    # 3: the history of the conversations (lineup_plugin.protocol.history)
    3: (
        """CREATE TABLE history (
            seq INTEGER PRIMARY KEY,
            at REAL NOT NULL,
            conversation_id TEXT NOT NULL,
            entry TEXT NOT NULL
        )""",
        "CREATE INDEX history_at ON history (at)",
        """CREATE TABLE conversations (
            conversation_id TEXT PRIMARY KEY,
            title TEXT,
            last_seq INTEGER NOT NULL,
            updated_at REAL
        )""",
        "CREATE INDEX conversations_last ON conversations (last_seq)",
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "INSERT INTO meta (key, value) VALUES ('history_id', lower(hex(randomblob(16))))",
    ),
    # 4: who answered an ended call (its device id and name, JSON), for the verdict the devices are shown
    4: ("ALTER TABLE calls ADD COLUMN answered TEXT",),
    # 5: conversations the user closed (conversation.update)
    5: ("ALTER TABLE conversations ADD COLUMN closed INTEGER NOT NULL DEFAULT 0",),
    # 6: history is pruned along its seqs (_PRUNE_HISTORY): an index on the time only cost every entry a page
    6: ("DROP INDEX IF EXISTS history_at",),
    # 7: the live calls are read once, when a session starts (a scan of ~2 ms with 10,000 ended calls
    # kept): an index on them only cost every call's start and end a page each
    7: ("DROP INDEX IF EXISTS calls_live",),
}

_SAVE_CALL = """
INSERT INTO calls (call_id, conversation_id, name, state, done, request, result, created_at, expires_at, history,
                   updated_at, forwarded, answered)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
ON CONFLICT (call_id) DO UPDATE SET
    state = excluded.state, done = excluded.done, result = excluded.result, expires_at = excluded.expires_at,
    history = excluded.history, updated_at = excluded.updated_at, answered = excluded.answered
WHERE calls.done = 0
"""
#: a later save of a call this store wrote: only what a transition changes (request, deadline... never change)
_UPDATE_CALL = (
    "UPDATE calls SET state = ?, done = ?, result = ?, history = ?, updated_at = ?, answered = ? "
    "WHERE call_id = ? AND done = 0"
)
_INSERT_SEEN = "INSERT OR IGNORE INTO seen (envelope_id, at) VALUES (?, ?)"
_CALL_COLUMNS = "request, conversation_id, state, created_at, expires_at, result, history, forwarded, answered"
_PRUNE_ENDED = "DELETE FROM calls WHERE rowid IN (SELECT rowid FROM calls WHERE done = 1 ORDER BY updated_at LIMIT ?)"
_INSERT_ENTRY = "INSERT OR REPLACE INTO history (seq, at, conversation_id, entry) VALUES (?, ?, ?, ?)"
_SAVE_CONVERSATION = """
INSERT INTO conversations (conversation_id, title, last_seq, updated_at, closed) VALUES (?, ?, ?, ?, ?)
ON CONFLICT (conversation_id) DO UPDATE SET
    title = excluded.title, last_seq = max(last_seq, excluded.last_seq), updated_at = excluded.updated_at,
    closed = excluded.closed
"""
#: drop the entries before the oldest kept: below the lowest seq kept (?1) and before the first entry
#: that is not too old (at ?2 or later; ?3, the newest, if none is) — read along the seqs, where the
#: old ones come first, so that no index on the time is kept up for this
_PRUNE_HISTORY = """
DELETE FROM history WHERE seq < max(?1, coalesce((SELECT seq FROM history WHERE at >= ?2 ORDER BY seq LIMIT 1), ?3))
"""
#: conversations whose history is gone (at open; a conversation is listed only while it has entries)
_PRUNE_CONVERSATIONS = "DELETE FROM conversations WHERE conversation_id NOT IN (SELECT conversation_id FROM history)"
_READ_HISTORY = "SELECT entry FROM history WHERE seq > ? AND at >= ? ORDER BY seq LIMIT ?"
_READ_HISTORY_BEFORE = "SELECT entry FROM history WHERE seq > ? AND seq < ? AND at >= ? ORDER BY seq DESC LIMIT ?"
#: the conversations with entries kept: title and closed mark (written when they change), latest seq, its time
_READ_CONVERSATIONS = """
SELECT h.conversation_id, c.title, max(h.seq), max(h.at), coalesce(c.closed, 0) FROM history h
LEFT JOIN conversations c ON c.conversation_id = h.conversation_id
WHERE h.seq > ? AND h.at >= ?
GROUP BY h.conversation_id ORDER BY max(h.seq) DESC
"""
_READ_TITLES = "SELECT conversation_id, title, closed FROM conversations"
#: a multi-row insert of audit records takes at most this many rows
_AUDIT_ROWS = 64


@functools.cache
def _insert_audits(count: int) -> str:
    """The insert of ``count`` audit records in one statement."""
    return "INSERT INTO audit (at, event, call_id, device_id, detail) VALUES " + ",".join(["(?, ?, ?, ?, ?)"] * count)


def _over(count: int, limit: int) -> bool:
    """Whether a table of ``count`` rows kept to ``limit`` is due for pruning."""
    return count > limit + min(PRUNE_SLACK, max(1, limit // 10))


class _Transaction:
    """``with _Transaction(db):`` one immediate transaction, committed at the end, rolled back on any error.

    A class rather than a ``contextlib.contextmanager`` generator: it runs twice per round trip.
    """

    __slots__ = ("db",)

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        db = self.db
        try:
            if exc_type is None:
                db.execute("COMMIT")
                return
        except BaseException:
            self.rollback()
            raise
        self.rollback()

    def rollback(self) -> None:
        """Roll back what is still open (a failed COMMIT may have ended the transaction already)."""
        if self.db.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")


class SQLiteStore(_OneChange):
    """The durable store: one SQLite file (WAL) holding calls, seen envelope ids and the audit log.

    - **Atomic, one transaction per batch**: :meth:`apply` writes a batch of the session core's
      changes (a call and its delivery; an answer, its dedupe record and its audit record) and
      commits before it returns. A SIGKILL leaves the file at the last commit.
    - **Durable** per ``synchronous``: ``"full"`` syncs every commit to disk (survives power loss),
      ``"normal"`` (default) survives a crash of the process, ``"off"`` leaves syncing to the OS.
    - **One owner**: the file is opened in exclusive locking mode, so a second agent on the same
      file gets :class:`~lineup_plugin.errors.StoreBusyError` instead of closing the first one's calls.
    - **One thread**: the connection is made with ``check_same_thread=True``; open the store on the
      thread whose event loop runs the hub and use it only there (another thread gets a StoreError).
    - **Bounded**: seen ids, ended calls and audit records beyond their limits are pruned, oldest
      first; history entries beyond ``retention`` (a count and an age) and the conversations
      they alone kept, with each batch that adds entries.
    - **No secrets**: tokens are never written (``DeviceHello`` is not stored); any string in
      ``secrets`` that shows up in an audit detail is written as ``[redacted]``.

    A file of a newer schema, a file that is not a LineUp store or not a database at all raises
    :class:`~lineup_plugin.errors.StoreError` naming the file.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        synchronous: Synchronous = "normal",
        seen_limit: int = SEEN_LIMIT,
        ended_limit: int = ENDED_LIMIT,
        audit_limit: int = AUDIT_LIMIT,
        secrets: Iterable[str | None] = (),
        busy_timeout: float = 0.5,
        retention: Retention = DEFAULT_RETENTION,
    ) -> None:
        self.path = Path(path)
        self.retention = retention
        self.seen_limit = seen_limit
        self.ended_limit = ended_limit
        self.audit_limit = audit_limit
        self._secrets = [s for s in secrets if s]
        self._unwritten: list[Change] = []
        self._thread = threading.get_ident()
        self._counts = {"seen": 0, "audit": 0, "ended": 0}
        self._closed = False
        #: ids of the live calls whose row this store wrote (a later save updates only what changed)
        self._written: set[str] = set()
        #: the conversations' titles and closed marks as written (a conversation's row changes only with them)
        self._titles: dict[str, tuple[str | None, bool]] = {}
        #: the envelope ids in the ``seen`` table, oldest first (a dedupe check reads no row); None: unknown
        self._seen: dict[str, None] | None = None
        self._db = self._open(synchronous, busy_timeout)

    # ------------------------------------------------------------------------------ opening

    def _open(self, synchronous: Synchronous, busy_timeout: float) -> sqlite3.Connection:
        where = str(self.path)
        if where != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                with contextlib.suppress(FileExistsError):  # created private to the user
                    os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
            except OSError as exc:
                raise StoreError(f"cannot create the store {where}: {exc.strerror or exc}") from exc
        try:
            db = sqlite3.connect(where, timeout=busy_timeout, isolation_level=None, check_same_thread=True)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the store {where}: {exc}") from exc
        try:
            db.execute("PRAGMA locking_mode = EXCLUSIVE")
            mode = db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if where != ":memory:" and mode != "wal":
                raise StoreError(f"the store {where} cannot use write-ahead logging (journal mode {mode})")
            db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            with _Transaction(db):
                self._migrate(db)
        except sqlite3.OperationalError as exc:
            db.close()
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreBusyError(f"the store {where} is in use by another agent process") from exc
            raise StoreError(f"cannot open the store {where}: {exc}") from exc
        except sqlite3.Error as exc:
            db.close()
            raise StoreError(f"the store {where} is unreadable: {exc}") from exc
        except StoreError:
            db.close()
            raise
        self._counts = self._count(db)
        self._seen = self._read_seen(db)
        self._oldest, self._newest = self._entry(db, "ASC"), self._entry(db, "DESC")
        with contextlib.suppress(sqlite3.Error):
            db.execute(_PRUNE_CONVERSATIONS)
        self._titles = self._read_titles(db)
        return db

    @staticmethod
    def _read_titles(db: sqlite3.Connection) -> dict[str, tuple[str | None, bool]]:
        """The title and closed mark of each conversation as the file has them (a conversation row is
        written when they change)."""
        with contextlib.suppress(sqlite3.Error):
            return {cid: (title, bool(closed)) for cid, title, closed in db.execute(_READ_TITLES).fetchall()}
        return {}

    @staticmethod
    def _read_seen(db: sqlite3.Connection) -> dict[str, None] | None:
        """The envelope ids of the ``seen`` table, oldest first (None if it cannot be read: the table is asked)."""
        with contextlib.suppress(sqlite3.Error):
            return dict.fromkeys(eid for (eid,) in db.execute("SELECT envelope_id FROM seen ORDER BY seq"))
        return None

    @staticmethod
    def _entry(db: sqlite3.Connection, order: Literal["ASC", "DESC"]) -> tuple[int, float] | None:
        """The seq and time of the oldest (``ASC``) or newest (``DESC``) history entry in the file (None for none)."""
        with contextlib.suppress(sqlite3.Error):
            row = db.execute(f"SELECT seq, at FROM history ORDER BY seq {order} LIMIT 1").fetchone()
            return (int(row[0]), float(row[1])) if row else None
        return None

    @staticmethod
    def _count(db: sqlite3.Connection) -> dict[str, int]:
        """The row counts the pruning keeps track of."""
        return {
            "seen": db.execute("SELECT count(*) FROM seen").fetchone()[0],
            "audit": db.execute("SELECT count(*) FROM audit").fetchone()[0],
            "ended": db.execute("SELECT count(*) FROM calls WHERE done = 1").fetchone()[0],
        }

    def _migrate(self, db: sqlite3.Connection) -> None:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"the store {self.path} has schema version {version}, newer than this lineup-plugin reads "
                f"({SCHEMA_VERSION}); upgrade lineup-plugin or point store_path elsewhere"
            )
        if app_id not in (0, APPLICATION_ID) or (
            app_id == 0 and db.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]
        ):
            raise StoreError(f"{self.path} is not a lineup store; point store_path elsewhere")
        for target in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _MIGRATIONS[target]:
                db.execute(statement)
        db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    def _error(self, what: str, exc: sqlite3.Error) -> StoreError:
        """The StoreError for ``exc``, raised while doing ``what``."""
        if isinstance(exc, sqlite3.ProgrammingError) and threading.get_ident() != self._thread:
            return StoreError(f"the store was used from another thread while {what}; use it on one thread")
        return StoreError(f"store failure while {what}: {exc}")

    def apply(self, changes: Iterable[Change]) -> None:
        """Write ``changes`` in one transaction and commit it (synced per ``synchronous``).

        A call saved several times in the batch is written once, as it stands last; a call that
        already ended in the store is never changed (the first end wins). On failure nothing of
        the batch is kept and StoreError is raised.
        """
        if self._closed:
            raise StoreError(f"the store {self.path} is closed")
        if threading.get_ident() != self._thread:
            raise StoreError("the store was used from another thread while writing; use it on one thread")
        grouped = changes_by_kind(changes)
        if not grouped:
            return
        try:
            with _Transaction(self._db):
                for call in grouped.calls.values():
                    self._save_row(call)
                if grouped.seen:
                    self._insert_seen(grouped.seen)
                if grouped.audits:
                    self._insert_audit(grouped.audits)
                if grouped.records or grouped.conversations:
                    self._insert_history(grouped.records, grouped.conversations.values())
        except (sqlite3.Error, TypeError, ValueError) as exc:  # ValueError: pydantic's serialization errors too
            log.error("lineup store %s: could not save writes: %s", self.path, exc)
            self._resync()
            if isinstance(exc, sqlite3.Error):
                raise self._error("writing", exc) from exc
            raise StoreError(f"store failure while writing: a value could not be written ({exc})") from exc

    def _resync(self) -> None:
        """After a rolled-back batch: count the rows again and forget which calls were written."""
        self._written.clear()  # the next save of each call writes its whole row (an upsert)
        self._titles = self._read_titles(self._db)
        self._seen = self._read_seen(self._db)
        self._oldest, self._newest = self._entry(self._db, "ASC"), self._entry(self._db, "DESC")
        with contextlib.suppress(sqlite3.Error):
            self._counts = self._count(self._db)

    def _insert_seen(self, seen: list[SeenEnvelope]) -> None:
        now = time.time()
        known = self._seen
        for envelope_id, at in seen:
            if known is not None and envelope_id in known:
                continue  # recorded already: the insert would be ignored
            if self._db.execute(_INSERT_SEEN, (envelope_id, now if at is None else at)).rowcount:
                self._counts["seen"] += 1
                if known is not None:
                    known[envelope_id] = None
        pruned = self._prune_if_over("seen", self.seen_limit)
        if pruned and known is not None:  # the oldest rows are the ones pruned (seq grows with each insert)
            for envelope_id in list(itertools.islice(known, pruned)):
                del known[envelope_id]

    def _insert_audit(self, audits: list[Audit]) -> None:
        now = time.time()
        rows: list[Any] = []
        for event, call_id, device_id, detail, at in audits:
            rows += (now if at is None else at, event, call_id, device_id, self._redact(detail) if detail else detail)
        for start in range(0, len(audits), _AUDIT_ROWS):  # one statement for the records of a batch
            count = min(_AUDIT_ROWS, len(audits) - start)
            self._db.execute(_insert_audits(count), rows[start * 5 : (start + count) * 5])
        self._counts["audit"] += len(audits)
        self._prune_if_over("audit", self.audit_limit)

    # ------------------------------------------------------------------------------ history

    def _insert_history(self, records: list[Record], conversations: Iterable[SaveConversation]) -> None:
        execute = self._db.execute
        for record in records:
            execute(_INSERT_ENTRY, (record.seq, record.at, record.conversation_id, record.json()))
        titles = self._titles
        for info in conversations:  # written when new, retitled, closed or opened (the latest seq: from the history)
            if titles.get(info.conversation_id) != (info.title, info.closed):
                execute(_SAVE_CONVERSATION, info)
                titles[info.conversation_id] = (info.title, info.closed)
        if records and self._noted(records[0], records[-1]):  # past the retention's bound: deleted now
            floor, since = self._bound()
            execute(_PRUNE_HISTORY, (floor + 1, since, records[-1].seq))
            self._oldest = self._entry(self._db, "ASC")

    def history_id(self) -> str:
        """The random id made with this store file."""
        rows = self._read("reading the history id", "SELECT value FROM meta WHERE key = 'history_id'")
        return str(rows[0][0])

    def history_head(self) -> int:
        """The highest seq kept (0 for none)."""
        return int(self._read("reading the history", "SELECT coalesce(max(seq), 0) FROM history")[0][0])

    def history_after(self, after: int, *, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """At most ``limit`` kept entries after seq ``after`` and not older than ``oldest_at``, oldest first."""
        params = (*self._within_bound(after, oldest_at), limit)
        return self._entries(self._read("reading the history", _READ_HISTORY, params))

    def history_before(self, before: int, *, after: int, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """The newest ``limit`` kept entries between seqs ``after`` and ``before`` (both excluded), not older
        than ``oldest_at``, oldest first."""
        after, oldest_at = self._within_bound(after, oldest_at)
        params = (after, before, oldest_at, limit)
        return self._entries(self._read("reading the history", _READ_HISTORY_BEFORE, params)[::-1])

    def _entries(self, rows: list[Any]) -> list[HistoryEntry]:
        try:
            return [HistoryEntry.model_validate_json(text) for (text,) in rows]
        except ValueError as exc:
            raise StoreError(f"the store {self.path} holds an unreadable history entry: {exc}") from exc

    def conversations(self) -> list[ConversationInfo]:
        """The conversations with history kept, most recently active first."""
        rows = self._read("reading the conversations", _READ_CONVERSATIONS, self._bound())
        return [SaveConversation(cid, title, seq, at, bool(closed)).info() for cid, title, seq, at, closed in rows]

    def _read(self, what: str, sql: str, params: Any = ()) -> list[Any]:
        try:
            return self._db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise self._error(what, exc) from exc

    # ------------------------------------------------------------------------------- calls

    def _save_row(self, call: Call) -> None:
        call_id = call.call_id
        done = call.done
        result = call.result.model_dump_json(exclude_none=True) if call.result is not None else None
        history = to_json([(state.value, at) for state, at in call.history]).decode()
        answered = to_json([call.answered_by, call.answered_name]).decode() if call.answered_by is not None else None
        if call_id in self._written:
            params: tuple[Any, ...] = (
                str(call.state),
                int(done),
                result,
                history,
                _updated_at(call),
                answered,
                call_id,
            )
            changed = self._db.execute(_UPDATE_CALL, params).rowcount
        else:
            params = (
                call_id,
                call.conversation_id,
                call.request.name,
                str(call.state),
                int(done),
                call.request.model_dump_json(exclude_none=True),
                result,
                call.created_at,
                call.expires_at,
                history,
                _updated_at(call),
                int(call.forwarded),
                answered,
            )
            changed = self._db.execute(_SAVE_CALL, params).rowcount
        if done:
            self._written.discard(call_id)
        elif changed:
            self._written.add(call_id)
        if not changed:
            log.debug("call %s already ended in the store; save ignored", call_id)
        elif done:
            self._counts["ended"] += 1
            if _over(self._counts["ended"], self.ended_limit):
                excess = self._counts["ended"] - self.ended_limit
                self._counts["ended"] -= self._db.execute(_PRUNE_ENDED, (excess,)).rowcount

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id``, live or ended, if the store still knows it."""
        rows = self._read("reading a call", f"SELECT {_CALL_COLUMNS} FROM calls WHERE call_id = ?", (call_id,))
        return self._call(rows[0]) if rows else None

    def pending_calls(self) -> list[Call]:
        """Every call that has not reached a terminal status, oldest first."""
        rows = self._read(
            "reading pending calls", f"SELECT {_CALL_COLUMNS} FROM calls WHERE done = 0 ORDER BY created_at"
        )
        return [self._call(row) for row in rows]

    def _call(self, row: tuple[Any, ...]) -> Call:
        request, conversation_id, state, created_at, expires_at, result, history, forwarded, answered = row
        try:
            by, name = json.loads(answered) if answered is not None else (None, None)
            return Call(
                request=ToolCall.model_validate_json(request),
                conversation_id=conversation_id,
                state=CallState(state),
                created_at=created_at,
                expires_at=expires_at,
                result=ToolResult.model_validate_json(result) if result is not None else None,
                history=[(CallState(s), at) for s, at in json.loads(history)],
                forwarded=bool(forwarded),
                answered_by=str(by) if by is not None else None,
                answered_name=str(name) if name is not None else None,
            )
        except (ValueError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
            raise StoreError(f"the store {self.path} holds an unreadable call: {exc}") from exc

    # -------------------------------------------------------------------------- dedupe, audit

    def was_seen(self, envelope_id: str) -> bool:
        """Whether ``envelope_id`` was recorded (also by an earlier process)."""
        if self._seen is not None and not self._closed and threading.get_ident() == self._thread:
            return envelope_id in self._seen  # the table as this store (its only writer) wrote it
        return bool(self._read("reading seen ids", "SELECT 1 FROM seen WHERE envelope_id = ?", (envelope_id,)))

    def _prune_if_over(self, table: str, keep: int) -> int:
        """Delete the oldest rows of ``table`` beyond ``keep`` if it is due; returns how many went."""
        if not _over(self._counts[table], keep):
            return 0
        sql = f"DELETE FROM {table} WHERE seq <= (SELECT max(seq) FROM {table}) - ?"
        pruned: int = self._db.execute(sql, (keep,)).rowcount
        self._counts[table] -= pruned
        return pruned

    @property
    def audit_log(self) -> list[tuple[str, str | None, str | None, str]]:
        """Every kept audit record, oldest first, as ``(event, call_id, device_id, detail)``."""
        return self._read("reading the audit log", "SELECT event, call_id, device_id, detail FROM audit ORDER BY seq")

    def call_audit_page(
        self, *, since: float | None = None, after: int = 0, limit: int = 5000
    ) -> tuple[list[AuditRecord], int | None]:
        """Up to ``limit`` kept audit records about calls after position ``after``, oldest first, and
        the position to read on from (None at the end): :func:`read_call_audit` in pages, for the
        process that holds the store (``GET /api/stats``), which serves its Apps between pages."""
        rows = self._read("reading the audit log", _READ_CALL_AUDIT_PAGE, (after, _since(since), limit))
        return [AuditRecord(*row[1:]) for row in rows], (rows[-1][0] if len(rows) == limit else None)

    def close(self) -> None:
        """Close the file (idempotent); every applied batch is committed already."""
        if self._closed:
            return
        try:
            self._db.close()
        except sqlite3.Error as exc:
            raise self._error("closing", exc) from exc
        self._closed = True

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class AuditRecord(NamedTuple):
    """One kept audit record about a call, with when it was written, the call's tool and the name
    of the device that answered it, as people call it (each when the store still knows the call)."""

    at: float
    event: str
    call_id: str | None
    device_id: str | None
    detail: str
    tool: str | None
    answered_name: str | None = None


#: a record's call's tool, and the name of the device that answered it (``answered`` is ``[id, name]``)
_CALL_AUDIT_COLUMNS = """a.at, a.event, a.call_id, a.device_id, a.detail, c.name,
CASE WHEN json_valid(c.answered) THEN json_extract(c.answered, '$[1]') END"""
_READ_CALL_AUDIT = f"""
SELECT {_CALL_AUDIT_COLUMNS} FROM audit a LEFT JOIN calls c ON c.call_id = a.call_id
WHERE a.event LIKE 'call.%' AND a.at >= ? ORDER BY a.seq
"""


_READ_CALL_AUDIT_PAGE = f"""
SELECT a.seq, {_CALL_AUDIT_COLUMNS}
FROM audit a LEFT JOIN calls c ON c.call_id = a.call_id
WHERE a.seq > ? AND a.event LIKE 'call.%' AND a.at >= ? ORDER BY a.seq LIMIT ?
"""


def _since(since: float | None) -> float:
    return since if since is not None else float("-inf")


def read_call_audit(path: str | os.PathLike[str], *, since: float | None = None) -> list[AuditRecord]:
    """The kept audit records about calls (``call.*``) in the store file ``path``, oldest first; read-only.

    ``since`` (seconds since the epoch) keeps the records written then or later. Only what the
    store's retention kept is there (:data:`AUDIT_LIMIT` records; the tool of an ended call beyond
    :data:`ENDED_LIMIT` is no longer known unless its ``call.created`` record names it). Raises
    StoreBusyError while a process serving the App holds the file (it is opened exclusively),
    StoreError when it is missing or not a LineUp store.
    """
    where = Path(path)
    if not where.is_file():
        raise StoreError(f"no store at {where}")
    try:
        db = sqlite3.connect(f"file:{quote(str(where.resolve()))}?mode=ro", uri=True, timeout=0.5)
    except sqlite3.Error as exc:
        raise StoreError(f"cannot open the store {where}: {exc}") from exc
    try:
        if db.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise StoreError(f"{where} is not a lineup store")
        rows = db.execute(_READ_CALL_AUDIT, (_since(since),)).fetchall()
    except sqlite3.OperationalError as exc:
        if "locked" in str(exc) or "busy" in str(exc):
            raise StoreBusyError(f"the store {where} is in use by the process serving the App") from exc
        raise StoreError(f"cannot read the store {where}: {exc}") from exc
    except sqlite3.Error as exc:
        raise StoreError(f"cannot read the store {where}: {exc}") from exc
    finally:
        db.close()
    return [AuditRecord(*row) for row in rows]


def open_store(settings: Settings) -> Store:
    """The store ``settings`` ask for: SQLite at ``settings.database`` (default) or memory.

    Call it on the thread that runs the hub's event loop.
    """
    if settings.store == "memory":
        return MemoryStore(retention=settings.retention)
    return SQLiteStore(
        settings.database, synchronous=settings.fsync, secrets=[settings.token], retention=settings.retention
    )
