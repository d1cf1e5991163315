"""What the session core produces: one :class:`Batch` per input, shared by all of its parts.

A driver takes the batch (:meth:`Outbox.take`) and applies it in order: commit the store
:attr:`~Batch.changes`, apply the :attr:`~Batch.registry` changes, send the
:attr:`~Batch.messages`, wake the callers of the :attr:`~Batch.ended` calls, run the
:attr:`~Batch.events`. Every part of the session (:mod:`.devices`, :mod:`.live`,
:mod:`.timeline`) writes to the same :class:`Outbox`, so one input gives one batch whatever
part handled it. Every time in a change comes from the session's injected clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from .calls import Call
from .history import Record, SaveConversation
from .messages import Attachment, FileBegin, FileChunk, ToolCall
from .tools import ToolDefinition

#: a link: whatever object the driver uses to name a connection (hashable)
L = TypeVar("L")


# ---------------------------------------------------------------------------- store changes


class SaveCall(NamedTuple):
    """Store change: insert or update this call (its latest state is written; its last transition's time)."""

    call: Call


class SeenEnvelope(NamedTuple):
    """Store change: remember this envelope id (duplicates are dropped, also after a restart), handled ``at``."""

    envelope_id: str
    at: float | None = None


class Audit(NamedTuple):
    """Store change: one audit record, made ``at`` (seconds since the epoch, by the session's clock)."""

    event: str
    call_id: str | None = None
    device_id: str | None = None
    detail: str = ""
    at: float | None = None


Change = SaveCall | SeenEnvelope | Audit | Record | SaveConversation


class Grouped(NamedTuple):
    """A batch's changes grouped for writing (see :func:`changes_by_kind`)."""

    calls: dict[str, Call]
    seen: list[SeenEnvelope]
    audits: list[Audit]
    records: list[Record]
    conversations: dict[str, SaveConversation]

    def __bool__(self) -> bool:
        return any((self.calls, self.seen, self.audits, self.records, self.conversations))


def changes_by_kind(changes: Iterable[Change]) -> Grouped:
    """A batch's changes grouped for writing: the latest of each call and conversation (saved once),
    seen ids, audit records, history entries."""
    grouped = Grouped({}, [], [], [], {})
    for change in changes:
        if isinstance(change, SaveCall):
            grouped.calls[change.call.call_id] = change.call
        elif isinstance(change, SeenEnvelope):
            grouped.seen.append(change)
        elif isinstance(change, Audit):
            grouped.audits.append(change)
        elif isinstance(change, Record):
            grouped.records.append(change)
        else:
            grouped.conversations[change.conversation_id] = change
    return grouped


# ------------------------------------------------------------------------- registry changes


#: the registry source of the tools an App declared: ``app:<device_id>``
APP_SOURCE = "app:"


@dataclass(frozen=True, slots=True)
class DeclareTools(Generic[L]):
    """Registry change: the App on ``link`` (device ``device_id``) declared ``tools`` under ``source``
    (none: it withdraws its tools). ``request``: it asked for the agent's tools in return.

    The driver applies it to its registry and tells the session the outcome
    (:meth:`Session.registry_applied <lineup_plugin.protocol.session.Session.registry_applied>`).
    """

    link: L
    device_id: str
    source: str
    tools: tuple[ToolDefinition, ...]
    request: bool = False


@dataclass(frozen=True, slots=True)
class WithdrawTools:
    """Registry change: the last link of a device closed: remove the tools it declared under ``source``."""

    source: str


RegistryChange = DeclareTools[Any] | WithdrawTools


@dataclass(frozen=True, slots=True)
class Applied:
    """What applying a :data:`RegistryChange` did: the tools ``changed`` (or not), the names
    ``skipped`` because others own them, or why it was ``refused`` (nothing changed then)."""

    changed: bool
    skipped: tuple[str, ...] = ()
    refused: str | None = None


# --------------------------------------------------------------------------------- messages


class Send(NamedTuple, Generic[L]):
    """Send ``text`` (an encoded envelope) on ``link``; ``call_id`` names the call it is about, if any."""

    link: L
    text: str
    call_id: str | None = None


class CloseLink(NamedTuple, Generic[L]):
    """Close ``link`` with ``code`` and ``reason`` after the messages queued before."""

    link: L
    code: int
    reason: str


# ----------------------------------------------------------------------------------- events


@dataclass(frozen=True, slots=True)
class TextReceived:
    """Event: the user typed ``text`` in the App on ``device_id`` (with ``attachments``, files they sent),
    in conversation ``conversation_id``; ``ref`` is the id of its envelope.

    A text with files is kept in the history only once the driver has found them
    (:meth:`Timeline.keep_text <lineup_plugin.protocol.timeline.Timeline.keep_text>`): one refused
    is not delivered, and the device that sent it is told so by an ``error`` naming ``ref``.
    """

    device_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    conversation_id: str = "default"
    ref: str | None = None


@dataclass(frozen=True, slots=True)
class StopRequested:
    """Event: the user pressed stop on ``device_id``."""

    device_id: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class ToolsChanged:
    """Event: the tools an App declared changed (the runtime re-registers its tools).

    ``reply_to`` is the link that asked for the agent's tools with its declaration: once the
    runtime has taken the change, answer it with ``Session.send_tool_list``.
    """

    reply_to: Any = None


@dataclass(frozen=True, slots=True)
class AppToolCall(Generic[L]):
    """Event: the App on ``link`` calls the agent's in-process tool; answer with ``Session.reply``."""

    link: L
    request: ToolCall


@dataclass(frozen=True, slots=True)
class FileReceived(Generic[L]):
    """Event: a piece of an upload (``file.begin`` or ``file.chunk``) arrived on ``link``; the driver keeps it."""

    link: L
    device_id: str
    message: FileBegin | FileChunk


@dataclass(frozen=True, slots=True)
class DevicesChanged:
    """Event: a device was attached or detached."""

    device_id: str
    attached: bool


@dataclass(frozen=True, slots=True)
class CardWaiting:
    """Event: ``call`` started and waits for the user until it expires (the devices that do not show
    it may be told by Web Push)."""

    call: Call


@dataclass(frozen=True, slots=True)
class CardShown:
    """Event: ``device_id`` shows the card of live call ``call_id`` (it acknowledged ``waiting_user``)."""

    call_id: str
    device_id: str


@dataclass(frozen=True, slots=True)
class PushSubscribed(Generic[L]):
    """Event: the App on ``link`` (device ``device_id``) sent its Web Push ``subscription``
    (``PushSubscription.toJSON()``; None: stop pushing to it). A driver that refuses it answers
    an ``error`` ``push_refused`` with ``Session.reply``."""

    link: L
    device_id: str
    subscription: dict[str, Any] | None


Event = (
    TextReceived
    | StopRequested
    | ToolsChanged
    | AppToolCall[Any]
    | FileReceived[Any]
    | DevicesChanged
    | CardWaiting
    | CardShown
    | PushSubscribed[Any]
)


class Batch(Generic[L]):
    """What a session produced since the last take, in the order to apply it."""

    __slots__ = ("changes", "ended", "events", "messages", "new_deadline", "registry")

    def __init__(self) -> None:
        #: store changes: commit these first
        self.changes: list[Change] = []
        #: registry changes: apply these next (and tell the session what they did)
        self.registry: list[RegistryChange] = []
        #: then send these (and close links), in order
        self.messages: list[Send[L] | CloseLink[L]] = []
        #: calls that reached a terminal status: wake whoever waits on them
        self.ended: list[Call] = []
        #: for the runtime
        self.events: list[Event] = []
        #: whether a call started: its deadline may be the next one (see ``LiveCalls.next_deadline``)
        self.new_deadline = False

    def __bool__(self) -> bool:
        return bool(self.changes or self.registry or self.messages or self.ended or self.events)


class Outbox(Generic[L]):
    """The one batch the parts of a session fill, with the session's clock, and what it holds
    that the store does not know yet (the store learns it when the driver commits the batch)."""

    __slots__ = ("_ended", "_saved", "_seen", "batch", "clock")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.batch: Batch[L] = Batch()
        #: envelope ids handled since the last take
        self._seen: set[str] = set()
        #: calls that ended since the last take
        self._ended: dict[str, Call] = {}
        #: the calls (by object) this batch saves: written as they stand when it is committed
        self._saved: set[int] = set()

    def take(self) -> Batch[L]:
        """The batch so far; a new one starts (the driver commits this one now)."""
        batch, self.batch = self.batch, Batch()
        if self._ended:
            self._ended.clear()
        if self._seen:
            self._seen.clear()
        if self._saved:
            self._saved.clear()
        return batch

    def save(self, call: Call) -> None:
        """Store change: write ``call`` as it stands when the batch is committed (so once a batch)."""
        if id(call) not in self._saved:  # the batch holds the call: no other object takes its id meanwhile
            self._saved.add(id(call))
            self.batch.changes.append(SaveCall(call))

    def audit(self, event: str, *, call_id: str | None = None, device_id: str | None = None, detail: str = "") -> None:
        """Store change: one audit record, made now."""
        self.batch.changes.append(Audit(event, call_id, device_id, detail, self.clock()))

    def first_seen(self, envelope_id: str, seen_before: bool, *, keep: bool = True) -> bool:
        """Whether ``envelope_id`` is new (``seen_before``: the store knows it); a new one is remembered
        in this batch, and by the store unless not ``keep`` (then :meth:`keep_seen` may still)."""
        if seen_before or envelope_id in self._seen:
            return False
        self._seen.add(envelope_id)
        if keep:
            self.keep_seen(envelope_id)
        return True

    def keep_seen(self, envelope_id: str) -> None:
        """Store change: ``envelope_id`` was handled (a later copy of it is a duplicate)."""
        self.batch.changes.append(SeenEnvelope(envelope_id, self.clock()))

    def ended(self, call: Call) -> None:
        """``call`` reached a terminal status: its waiters are woken once the batch is committed."""
        self._ended[call.call_id] = call
        self.batch.ended.append(call)

    def ended_now(self, call_id: str) -> Call | None:
        """The call ``call_id`` if it ended in this batch (the store does not know it yet)."""
        return self._ended.get(call_id)

    def send(self, link: L, text: str, call_id: str | None = None) -> None:
        """Send ``text`` on ``link`` once the batch is committed."""
        self.batch.messages.append(Send(link, text, call_id))

    def close(self, link: L, code: int, reason: str) -> None:
        """Close ``link`` after the messages before."""
        self.batch.messages.append(CloseLink(link, code, reason))

    def event(self, event: Event) -> None:
        """An event for the runtime."""
        self.batch.events.append(event)
