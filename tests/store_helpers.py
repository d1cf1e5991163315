"""Writing one change at a time to a store, as the tests set one up (the hub writes whole batches)."""

from __future__ import annotations

import sqlite3

from lineup_plugin.protocol.calls import Call
from lineup_plugin.protocol.outputs import Audit, SaveCall, SeenEnvelope
from lineup_plugin.protocol.reads import Wants
from lineup_plugin.store import Store


def save_call(store: Store, call: Call) -> None:
    """Insert or update ``call`` and commit; a call that already ended is never changed."""
    store.apply([SaveCall(call)])


def first_seen(store: Store, envelope_id: str) -> bool:
    """Record ``envelope_id`` and commit; True the first time, False for a repeat."""
    if store.read(Wants(envelope_id)).seen:
        return False
    store.apply([SeenEnvelope(envelope_id)])
    return True


def audit(
    store: Store, event: str, *, call_id: str | None = None, device_id: str | None = None, detail: str = ""
) -> None:
    """Append one audit record and commit."""
    store.apply([Audit(event, call_id, device_id, detail)])


class FailingCommits:
    """A connection whose COMMIT fails, as on a full disk."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __getattr__(self, name: str) -> object:
        return getattr(self.db, name)

    def execute(self, sql: str, *params: object) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self.db.execute(sql, *params)
