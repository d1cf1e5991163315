"""The history part of a session: numbering the entries, keeping the conversations, catching a device up.

Every event a device shows becomes a :class:`~.history.Record` with the next seq, put in the
same batch as the changes it belongs to (so it is committed before anything about it is
sent). The store's history as the session starts on it is handed in (:class:`~.reads.Kept`);
the entries a catching-up device missed are read by the driver before the batch
(:meth:`Timeline.query`, then :meth:`Timeline.catch_up`), and so are those before the oldest a
device shows when it asks for them as the user scrolls up (:meth:`Timeline.older_query`, then
:meth:`Timeline.older`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic

from .calls import Call
from .devices import Devices
from .history import (
    CHUNK_CHARS,
    FIRST_PAGE_CHARS,
    PAGE_ENTRIES,
    Record,
    Retention,
    SaveConversation,
    chunks,
    newest_page_first,
)
from .messages import (
    MAX_TITLE,
    Attachment,
    ConversationInfo,
    DeviceHello,
    Error,
    History,
    HistoryEntry,
    HistoryEvent,
    HistoryOlder,
    Payload,
)
from .outputs import Batch, L, Outbox, TextReceived
from .reads import HistoryQuery, Kept

#: how many conversations a session keeps track of, and lists to a device
MAX_CONVERSATIONS = 1000
MAX_LISTED = 200


def by_url(files: Iterable[Attachment]) -> list[Attachment] | None:
    """Files as the history keeps them: without their inline data (a device fetches them by URL); None for none."""
    kept = [file.model_copy(update={"data": None}) if file.data else file for file in files]
    return kept or None


class Timeline(Generic[L]):
    """The numbered history of a session's conversations (see the module docstring)."""

    def __init__(self, out: Outbox[L], devices: Devices[L], *, retention: Retention, kept: Kept) -> None:
        self.out = out
        self.devices = devices
        #: how much history is kept
        self.retention = retention
        #: the id of the history the seqs count in (the store's)
        self.history_id = kept.history_id
        #: the newest seq (0 before the first entry)
        self.head = kept.head
        # oldest activity first, as :meth:`record` keeps it
        self._conversations = {
            c.conversation_id: SaveConversation(c.conversation_id, c.title, c.last_seq, closed=c.closed)
            for c in reversed(kept.conversations)
        }
        #: entries made in the batch being filled (the store knows them once the driver commits it)
        self._in_batch: list[Record] = []
        self._batch: Batch[L] | None = None

    def conversations(self) -> list[ConversationInfo]:
        """The conversations with history kept, most recently active first (at most :data:`MAX_LISTED`)."""
        known = sorted(self._conversations.values(), key=lambda c: c.last_seq, reverse=True)
        return [c.info() for c in known[:MAX_LISTED]]

    def title(self, conversation_id: str) -> str | None:
        """The title of a conversation, if it has one."""
        known = self._conversations.get(conversation_id)
        return known.title if known is not None else None

    def record(
        self, event: HistoryEvent, conversation_id: str, *, call_id: str | None = None, **fields: Any
    ) -> Record | None:
        """Number and keep one history entry (with this batch); None when history is off."""
        if self.retention.limit <= 0:
            return None
        out = self.out
        now = out.clock()
        seq = self.head = self.head + 1
        record = Record(seq, now, conversation_id, event, fields, call_id)
        batch = out.batch
        if self._batch is not batch:  # a new batch: the entries of the one before are the store's now
            self._batch, self._in_batch = batch, []
        self._in_batch.append(record)
        batch.changes.append(record)
        conversations = self._conversations
        known = conversations.pop(conversation_id, None)  # re-inserted last: the dict stays in activity order
        title = fields.get("title") or (known.title if known is not None else None)
        # closed until its next entry (a new title alone leaves it as it is)
        closed = event == "conversation" and fields.get("closed", known is not None and known.closed) is True
        info = SaveConversation(conversation_id, title, seq, now, closed)
        conversations[conversation_id] = info
        batch.changes.append(info)
        oldest = self.retention.oldest_seq(seq)
        if oldest > 1 or len(conversations) > MAX_CONVERSATIONS:  # only then may a conversation's history be gone
            while len(conversations) > MAX_CONVERSATIONS or next(iter(conversations.values())).last_seq < oldest:
                del conversations[next(iter(conversations))]  # its history is gone (the store drops it too)
        return record

    def record_end(self, call: Call) -> int | None:
        """Keep how ``call`` ended (and who answered it, :attr:`Call.answered_by`) in the history; the entry's seq."""
        fields: dict[str, Any] = {"result": call.result}
        if call.answered_by is not None:
            fields["device_id"] = call.answered_by
        if call.answered_name is not None:
            fields["device_name"] = call.answered_name
        entry = self.record("call.end", call.conversation_id, call_id=call.call_id, **fields)
        return entry.seq if entry is not None else None

    def keep_text(self, text: TextReceived) -> None:
        """Keep what the user typed and show it on every device (the one that typed it knows it by
        ``ref``). The session keeps a text without files; the driver one with files, once found."""
        entry = self.record(
            "text.in",
            text.conversation_id,
            device_id=text.device_id,
            ref=text.ref,
            text=text.text,
            attachments=by_url(text.attachments),
        )
        if entry is not None:
            self.broadcast_entry(entry)

    def broadcast_entry(self, record: Record) -> None:
        """Send one new entry to every device as a ``history`` message (for events with no message of their own)."""
        live = History.model_construct(history_id=self.history_id, head=record.seq, entries=[record.entry()])
        self.devices.broadcast(live, conversation_id=record.conversation_id, seq=record.seq)

    def _reset(self, last_seq: int, history_id: str | None) -> bool:
        return last_seq > self.head or (history_id is not None and history_id != self.history_id)

    def _fresh(self, last_seq: int, history_id: str | None) -> bool:
        """Whether a device that names ``last_seq`` of ``history_id`` shows nothing of this history."""
        return last_seq == 0 or self._reset(last_seq, history_id)

    def query(self, last_seq: int, history_id: str | None, *, newest_first: bool = False) -> HistoryQuery | None:
        """What the store must read for a device whose last seen entry is ``last_seq`` of ``history_id``
        (everything kept when its seq does not count in this history); None when nothing.

        ``newest_first`` for a device that shows nothing of this history: only the newest
        :data:`PAGE_ENTRIES` (it gets one page; it asks for the older ones, :meth:`older`)."""
        head = self.head
        after = max(0 if self._reset(last_seq, history_id) else last_seq, self.retention.oldest_seq(head) - 1)
        if self.retention.limit <= 0 or after >= head:
            return None
        oldest_at = self.retention.oldest_at(self.out.clock())
        if newest_first and self._fresh(last_seq, history_id):
            return HistoryQuery(after, oldest_at, PAGE_ENTRIES, head + 1)
        return HistoryQuery(after, oldest_at, self.retention.limit)

    def catch_up(
        self,
        link: L,
        last_seq: int,
        history_id: str | None,
        stored: Sequence[HistoryEntry],
        *,
        newest_first: bool = False,
    ) -> Callable[[], None]:
        """Send the device on ``link`` the entries after ``last_seq``: ``stored`` (what the store read for
        :meth:`query`) and those of this batch, in as many ``history`` messages as its link needs.

        ``newest_first``: only the newest page (:data:`FIRST_PAGE_CHARS`) goes now. For a device
        that resumes, the returned function sends the older pages of what it missed, newest
        first, each marked ``older`` (the session calls it once the live calls are delivered); a
        device that shows nothing of this history gets no more (the page says ``earlier`` when
        older entries are kept: it asks for them, :meth:`older`). Otherwise everything goes now,
        oldest first, and the function does nothing."""
        head = self.head
        reset = self._reset(last_seq, history_id)
        entries = list(stored)
        query = self.query(last_seq, history_id, newest_first=newest_first)
        if query is not None:
            newest = entries[-1].seq if entries else query.after
            entries += [r.entry() for r in self._pending() if r.seq > newest]  # in this batch: not committed
        limit = self.devices.max_text(link) or CHUNK_CHARS
        earlier = False
        if newest_first:
            groups = [group for group in newest_page_first(entries, FIRST_PAGE_CHARS, limit) if group] or [[]]
            if self._fresh(last_seq, history_id):
                earlier = len(groups) > 1 or (query is not None and len(stored) >= query.limit)
                groups = groups[:1]
        else:
            groups = list(chunks(entries, limit)) or [[]]
        messages = [
            History.model_construct(
                history_id=self.history_id,
                head=head,
                entries=group,
                conversations=self.conversations() if index == 0 else None,
                reset=reset and index == 0,
                more=index < len(groups) - 1,
                older=newest_first and index > 0,
                before=None,
                earlier=earlier,
            )
            for index, group in enumerate(groups)
        ]
        self.devices.reply(link, messages[0])

        def rest() -> None:
            for message in messages[1:]:
                self.devices.reply(link, message)

        if not newest_first:
            rest()
            return lambda: None
        return rest

    def wanted(self, payload: Payload) -> HistoryQuery | None:
        """What the store must read of the history for ``payload`` from a device: what a hello's
        ``last_seq`` missed (:meth:`query`), the page a ``history.older`` asks for; None when nothing."""
        if isinstance(payload, DeviceHello) and payload.last_seq is not None:
            return self.query(payload.last_seq, payload.history_id, newest_first=payload.newest_first)
        return self.older_query(payload) if isinstance(payload, HistoryOlder) else None

    def _unknown(self, request: HistoryOlder) -> str | None:
        """Why ``request`` names no seq of this history, or None."""
        if request.history_id is not None and request.history_id != self.history_id:
            return f"history.older names history {request.history_id!r}, not the agent's: catch up with device.hello"
        if request.before > self.head + 1:
            return f"history.older names seq {request.before}, past the head ({self.head}): catch up with device.hello"
        return None

    def older_query(self, request: HistoryOlder) -> HistoryQuery | None:
        """What the store must read to answer ``request`` (:meth:`older`); None when nothing."""
        after = self.retention.oldest_seq(self.head) - 1
        if self.retention.limit <= 0 or self._unknown(request) is not None or request.before - 1 <= after:
            return None
        return HistoryQuery(after, self.retention.oldest_at(self.out.clock()), PAGE_ENTRIES, request.before)

    def older(self, link: L, request: HistoryOlder, stored: Sequence[HistoryEntry], *, ref: str | None = None) -> None:
        """Answer a ``history.older`` from ``link`` (envelope ``ref``) with one ``history`` message: the
        newest of ``stored`` (read for :meth:`older_query`) that fit in :data:`FIRST_PAGE_CHARS`,
        marked ``earlier`` when older entries are kept. A seq this history does not hold is refused."""
        problem = self._unknown(request)
        if problem is not None:
            self.devices.reply(link, Error(code="unknown_history", message=problem, ref=ref))
            return
        limit = self.devices.max_text(link) or CHUNK_CHARS
        page, *rest = newest_page_first(list(stored), FIRST_PAGE_CHARS, limit)
        message = History.model_construct(
            history_id=self.history_id,
            head=self.head,
            entries=page,
            conversations=None,
            reset=False,
            more=False,
            older=True,
            before=request.before,
            earlier=bool(rest) or len(stored) >= PAGE_ENTRIES,
        )
        self.devices.reply(link, message)

    def name(self, conversation_id: str, title: str) -> None:
        """Title a conversation (cut to 200 characters); every device is told. The same title again changes nothing."""
        self.change(conversation_id, title=title)

    def change(self, conversation_id: str, *, title: str | None = None, closed: bool | None = None) -> None:
        """Title (cut to 200 characters) or close (or open) a conversation; every device is told by a
        ``conversation`` entry. What changes nothing (the same title, closed again) makes no entry."""
        known = self._conversations.get(conversation_id)
        fields: dict[str, Any] = {}
        if title is not None:
            title = " ".join(title.split())[:MAX_TITLE]
            if title and (known is None or known.title != title):
                fields["title"] = title
        if closed is not None and closed != (known is not None and known.closed):
            fields["closed"] = closed
        if not fields:
            return
        fields.setdefault("title", known.title if known is not None else None)
        entry = self.record("conversation", conversation_id, **fields)
        if entry is not None:
            self.broadcast_entry(entry)

    def _pending(self) -> list[Record]:
        if self._batch is not self.out.batch:
            self._batch = self.out.batch
            self._in_batch = []
        return self._in_batch
