"""Where the hub keeps calls, seen envelope ids and the audit log.

:class:`MemoryStore` keeps them for the life of the process. The durable SQLite store
(:class:`SQLiteStore`) keeps them across restarts. Neither stores secrets or tokens.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Protocol

from .protocol.calls import Call

#: how many envelope ids a store remembers for deduplication
SEEN_LIMIT = 100_000


class Store(Protocol):
    """What the hub needs from a store."""

    def save_call(self, call: Call) -> None:
        """Insert or update ``call`` (its state, result and deadline)."""

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id``, live or ended, if the store still knows it."""

    def pending_calls(self) -> list[Call]:
        """Every call that has not reached a terminal status, oldest first."""

    def first_seen(self, envelope_id: str) -> bool:
        """Record ``envelope_id``; True the first time, False for a repeat."""

    def audit(self, event: str, *, call_id: str | None = None, device_id: str | None = None, detail: str = "") -> None:
        """Append one audit record (call, delivery, answer, cancel, expiry, refusal...)."""

    def close(self) -> None:
        """Release the store's resources."""


class MemoryStore:
    """A store that lives as long as the process; ended calls and seen ids are bounded."""

    def __init__(self, *, seen_limit: int = SEEN_LIMIT, ended_limit: int = 10_000) -> None:
        self._calls: dict[str, Call] = {}
        self._ended: OrderedDict[str, Call] = OrderedDict()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._seen_limit = seen_limit
        self._ended_limit = ended_limit
        self.audit_log: list[tuple[str, str | None, str | None, str]] = []

    def save_call(self, call: Call) -> None:
        """Keep ``call``; an ended call moves to the bounded list of ended calls."""
        if call.done:
            self._calls.pop(call.call_id, None)
            self._ended[call.call_id] = call
            while len(self._ended) > self._ended_limit:
                self._ended.popitem(last=False)
        else:
            self._calls[call.call_id] = call

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id`` if known."""
        return self._calls.get(call_id) or self._ended.get(call_id)

    def pending_calls(self) -> list[Call]:
        """Live calls, oldest first."""
        return sorted(self._calls.values(), key=lambda c: c.created_at)

    def first_seen(self, envelope_id: str) -> bool:
        """Record ``envelope_id``; True the first time."""
        if envelope_id in self._seen:
            return False
        self._seen[envelope_id] = None
        if len(self._seen) > self._seen_limit:
            self._seen.popitem(last=False)
        return True

    def audit(self, event: str, *, call_id: str | None = None, device_id: str | None = None, detail: str = "") -> None:
        """Append to the in-memory audit log (bounded to the most recent 10,000 records)."""
        self.audit_log.append((event, call_id, device_id, detail))
        if len(self.audit_log) > 10_000:
            del self.audit_log[:1000]

    def close(self) -> None:
        """Nothing to release."""
