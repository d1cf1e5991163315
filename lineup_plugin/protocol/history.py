"""The history of a session's conversations: numbered entries, their retention, and catch-up messages.

Every event of a conversation that a device shows — the user's and the agent's messages, a card
and how it ended (with the answer and the device that gave it), the agent's status, a
conversation's title — becomes a :class:`~lineup_plugin.protocol.messages.HistoryEntry` with the
next sequence number. The session core (:mod:`.session`) makes the entries and puts them in the
same :class:`~.session.Batch` of store changes as the call rows they belong to (a :class:`Record`
each), so they are committed before anything about them is sent. A device that names the last
``seq`` it has seen gets the entries after it (``history`` messages, cut by :func:`chunks` to fit
its link), then the live messages, which carry their entry's ``seq`` in the envelope.

:class:`Retention` bounds what is kept, by count and by age; the store prunes by it and the
session never hands out an entry beyond it, whatever the store has not pruned yet.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, NamedTuple

from pydantic_core import to_json

from .calls import format_timestamp
from .messages import ConversationInfo, HistoryEntry, HistoryEvent

#: the fields of an entry, in the order the model declares them
_ENTRY_FIELDS = tuple(HistoryEntry.model_fields)

#: how many entries are kept by default
HISTORY_LIMIT = 10_000
#: how long entries are kept by default (seconds): 30 days
HISTORY_MAX_AGE = 30 * 86_400.0
#: the most characters of entries one ``history`` message carries when its link sets no limit
CHUNK_CHARS = 256_000
#: the most characters of entries the first page of a newest-first catch-up carries (a phone on a
#: slow network shows it, and the calls waiting after it, before the older pages arrive)
FIRST_PAGE_CHARS = 64_000
#: the most entries read from the store for one page before the oldest a device shows (a new
#: device's first page, a ``history.older``): the page is then cut to :data:`FIRST_PAGE_CHARS`
PAGE_ENTRIES = 500
#: what an envelope around a ``history`` payload adds, at most (ids, actors, timestamp, the other fields)
ENVELOPE_CHARS = 1_500


class Retention(NamedTuple):
    """How much history is kept: at most ``limit`` entries (0: none), none older than ``max_age`` seconds."""

    limit: int = HISTORY_LIMIT
    max_age: float | None = HISTORY_MAX_AGE

    def oldest_seq(self, head: int) -> int:
        """The lowest seq still kept when ``head`` is the newest (the seqs before it are dropped)."""
        return max(1, head - self.limit + 1)

    def oldest_at(self, now: float) -> float:
        """The earliest time (seconds since the epoch) of an entry still kept at ``now``."""
        return float("-inf") if self.max_age is None else now - self.max_age


#: the retention of the default settings
DEFAULT_RETENTION = Retention()


class Record(NamedTuple):
    """Store change: keep this history entry.

    A plain tuple, made for every event: the wire model (:meth:`entry`) and its JSON text
    (:meth:`json`) are made only when a store writes it or a device is sent it. ``at`` is the
    time in seconds since the epoch; ``call_id`` the call it is about; ``fields`` the entry's
    other fields (``text``, ``call``, ``result``...).
    """

    seq: int
    at: float
    conversation_id: str
    event: HistoryEvent
    fields: dict[str, Any]
    call_id: str | None = None

    def _values(self) -> dict[str, Any]:
        values = {"seq": self.seq, "at": format_timestamp(self.at), "conversation_id": self.conversation_id}
        values["event"] = self.event
        values.update((key, value) for key, value in self.fields.items() if value is not None)
        return values

    def entry(self) -> HistoryEntry:
        """The entry as it goes on the wire."""
        values: dict[str, Any] = dict.fromkeys(_ENTRY_FIELDS)  # every field given: model_construct looks up no default
        values.update(self._values())
        return HistoryEntry.model_construct(**values)

    def json(self) -> str:
        """The entry's JSON text, as ``entry().model_dump_json(exclude_none=True)`` writes it."""
        return to_json(self._values(), by_alias=True, exclude_none=True).decode()


class SaveConversation(NamedTuple):
    """Store change: insert or update this conversation: its title, its latest seq and that entry's time,
    whether the user closed it.

    A plain tuple (made for every entry); :meth:`info` is its wire form.
    """

    conversation_id: str
    title: str | None
    last_seq: int
    updated_at: float | None = None
    closed: bool = False

    def info(self) -> ConversationInfo:
        """The conversation as the App is told it."""
        updated = format_timestamp(self.updated_at) if self.updated_at is not None else None
        return ConversationInfo.model_construct(
            conversation_id=self.conversation_id,
            title=self.title,
            last_seq=self.last_seq,
            updated_at=updated,
            closed=self.closed,
        )


def newest_page_first(entries: list[HistoryEntry], first_chars: int, max_chars: int) -> list[list[HistoryEntry]]:
    """``entries`` (oldest first) as pages newest first: the newest that fit in ``first_chars``, then
    the older ones in pages of at most ``max_chars``, each page oldest first within itself."""
    budget = max(1, min(first_chars, max_chars) - ENVELOPE_CHARS)
    start, size = len(entries), 0
    while start > 0:
        length = len(entries[start - 1].model_dump_json(exclude_none=True)) + 1
        if start < len(entries) and size + length > budget:
            break
        start -= 1
        size += length
    older = list(chunks(entries[:start], max_chars))
    return [entries[start:], *reversed(older)]


def chunks(entries: Iterable[HistoryEntry], max_chars: int) -> Iterator[list[HistoryEntry]]:
    """``entries`` in consecutive groups, each small enough for one message of at most ``max_chars``.

    An entry that alone is larger than that is still sent, alone (the link refuses it or not).
    """
    budget = max(1, max_chars - ENVELOPE_CHARS)
    group: list[HistoryEntry] = []
    size = 0
    for entry in entries:
        length = len(entry.model_dump_json(exclude_none=True)) + 1
        if group and size + length > budget:
            yield group
            group, size = [], 0
        group.append(entry)
        size += length
    if group:
        yield group
