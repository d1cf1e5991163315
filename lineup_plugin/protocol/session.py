"""The session core: every rule of a LineUp session between one agent and its user's devices, with no I/O.

Like the ``protocol`` module of websockets, this is a state machine that is fed and drained.
Inputs are method calls; nothing here waits, reads a socket, a clock or a file by itself:

- a transport's connections: :meth:`Session.open` (a *link*, any hashable object the driver
  names), :meth:`Session.receive` (the text that arrived on it), :meth:`Session.close`;
- the agent's side: :meth:`Session.start_call`, :meth:`Session.cancel_call`,
  :meth:`Session.send_text`, :meth:`Session.set_status`, :meth:`Session.reply`;
- time: :meth:`Session.tick` ends the calls whose deadline passed by the injected ``clock``;
  :meth:`Session.next_deadline` says when to tick next.

Outputs queue up until the driver takes them (:meth:`Session.take`) as one :class:`Batch`:
the store changes, the messages to send per link, the calls that ended and the events for the
runtime. A driver applies them in that order — commit the store changes, then send — so no
``tool.call`` and no terminal notice ever leaves before the row it depends on is committed
(see :mod:`lineup_plugin.hub`).

What a session guarantees:

- **Handshake**: a link opened with a ``verify`` function must say ``device.hello`` first; a
  hello ``verify`` refuses closes the link (4401), anything else first closes it (4400). A second
  hello on such a link is refused. A link whose identity its transport vouches for (an IM user)
  is attached at once, and each hello it sends re-syncs it.
- **Welcome and redelivery**: an attached device gets ``device.welcome``, the agent's tools, its
  status and every live call; cards it still shows (``open_calls``) for calls that ended get a
  ``tool.cancel`` saying how they ended.
- **Calls**: a call goes to every attached device; the first terminal answer wins, the other
  devices get ``tool.cancel`` ("answered on another device"); duplicate envelopes (by id) and
  repeated answers are applied once; a late answer is refused with the reason; a call ends
  ``expired`` at its deadline and ``cancelled`` when either side cancels. A call id is never
  run twice: starting a known id gives back the known call.
- **Restart and hand-over**: :meth:`Session.recover` closes the calls a previous process left
  pending, or (``reclaim``) keeps them live a little while for the processes that still wait on
  them to claim them again by id; :meth:`Session.release` lets go of a live call without ending
  it, for the next process to take over.
- **History** (:mod:`.history`): every event a device shows is numbered and kept with the
  batch that causes it; a hello with ``last_seq`` gets what it missed (``history``) before the
  live messages, which carry their entry's ``seq``. Each event belongs to a conversation
  (``conversation_id`` of its envelope): :meth:`Session.name_conversation` titles one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, Protocol, TypeVar

from ..errors import CallStateError, ProtocolError, ToolError, VersionError
from . import codec
from .base import bounded
from .calls import Call, CallState, format_timestamp
from .history import CHUNK_CHARS, DEFAULT_RETENTION, Record, Retention, SaveConversation, chunks
from .messages import (
    Actor,
    AgentState,
    AgentStatus,
    AgentStop,
    Attachment,
    ConversationInfo,
    DeviceHello,
    DeviceWelcome,
    Envelope,
    Error,
    FileBegin,
    FileChunk,
    History,
    HistoryEntry,
    HistoryEvent,
    Payload,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from .replies import Replies
from .tools import ToolDefinition

#: a link: whatever object the driver uses to name a connection (hashable)
L = TypeVar("L")

ANSWERED_ELSEWHERE = "answered on another device"
NO_APP = "no LineUp App is connected; ask the user to open the App"
RESTARTED = "the agent restarted before an answer arrived; ask again"
EXPIRED = "no answer before the deadline"
#: how many conversations a session keeps track of, and lists to a device
MAX_CONVERSATIONS = 1000
MAX_LISTED = 200

#: close codes a session asks a link to close with (WebSocket application codes)
AUTH_FAILED = 4401
BAD_HELLO = 4400

#: a hello check: None to accept it, else the reason it is refused (told to the App)
Verifier = Callable[[DeviceHello], "str | None"]


def failure(call_id: str, name: str, status: str, message: str, **extra: Any) -> ToolResult:
    """A result with ``status`` and a human-readable ``message`` that never came from the App."""
    return ToolResult.model_validate(
        {"call_id": call_id, "name": name, "status": status, "result": {"message": message, **extra}}
    )


def _unknown_call(call_id: str) -> str:
    return f"unknown call {call_id!r}; the answer was not applied"


def _call_closed(call: Call) -> str:
    return f"call {call.call_id!r} already ended as {call.state}; this answer was not applied"


def closed_reason(call: Call | None) -> str:
    """Why a card the App still shows is closed: how its call ended (and the recorded message)."""
    if call is None:
        return "the agent no longer knows this call"
    message = call.result.result.get("message") if call.result is not None else None
    return f"this call already ended ({call.state})" + (f": {message}" if isinstance(message, str) else "")


# ------------------------------------------------------------------------------- injected


class Records(Protocol):
    """What a session reads from the durable store (it writes only through :class:`Batch` changes)."""

    def get_call(self, call_id: str) -> Call | None:
        """The call with ``call_id``, live or ended, if the store still knows it."""

    def pending_calls(self) -> list[Call]:
        """Every call that has not reached a terminal status, oldest first."""

    def was_seen(self, envelope_id: str) -> bool:
        """Whether an envelope with this id was handled before (also by an earlier process)."""

    def history_id(self) -> str:
        """The id of the store's history (a new store, a new history: seqs count again from 1)."""

    def history_head(self) -> int:
        """The highest seq the store has kept (0 for none)."""

    def history_after(self, after: int, *, oldest_at: float, limit: int) -> list[HistoryEntry]:
        """At most ``limit`` entries with a seq above ``after`` and a time not before ``oldest_at``, oldest first."""

    def conversations(self) -> list[ConversationInfo]:
        """The conversations the store keeps, most recently active first."""


class Catalog(Protocol):
    """The agent's tools as a session needs them (a :class:`~lineup_plugin.tools.registry.Registry` adapter)."""

    def agent_tools(self) -> list[ToolDefinition]:
        """The tools an App may call on the agent (in-process tools)."""

    def runs_in_process(self, name: str) -> bool:
        """Whether ``name`` is an agent tool an App may call."""

    def declare(self, source: str, tools: list[ToolDefinition]) -> list[str]:
        """Set the tools an App declared under ``source``; the names skipped because others own them.

        All or nothing: raises :class:`~lineup_plugin.errors.ToolError` (saying why), leaving
        the tools of ``source`` as they were, when one definition is refused or there are too many.
        """

    def withdraw(self, source: str) -> bool:
        """Remove the tools of ``source``; whether there were any."""

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        """None when a completed ``result`` of tool ``name`` satisfies its outputSchema, else what is wrong."""


# -------------------------------------------------------------------------------- outputs


class SaveCall(NamedTuple):
    """Store change: insert or update this call (its latest state is written)."""

    call: Call


class SeenEnvelope(NamedTuple):
    """Store change: remember this envelope id (duplicates are dropped, also after a restart)."""

    envelope_id: str


class Audit(NamedTuple):
    """Store change: one audit record."""

    event: str
    call_id: str | None = None
    device_id: str | None = None
    detail: str = ""


Change = SaveCall | SeenEnvelope | Audit | Record | SaveConversation


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


@dataclass(frozen=True, slots=True)
class TextReceived:
    """Event: the user typed ``text`` in the App on ``device_id`` (with ``attachments``, files they sent),
    in conversation ``conversation_id``."""

    device_id: str
    text: str
    attachments: tuple[Attachment, ...] = ()
    conversation_id: str = "default"


@dataclass(frozen=True, slots=True)
class StopRequested:
    """Event: the user pressed stop on ``device_id``."""

    device_id: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class ToolsChanged:
    """Event: the tools an App declared changed (the runtime re-registers its tools).

    ``reply_to`` is the link that asked for the agent's tools with its declaration: once the
    runtime has taken the change, answer it with :meth:`Session.send_tool_list`.
    """

    reply_to: Any = None


@dataclass(frozen=True, slots=True)
class AppToolCall(Generic[L]):
    """Event: the App on ``link`` calls the agent's in-process tool; answer with :meth:`Session.reply`."""

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


Event = TextReceived | StopRequested | ToolsChanged | AppToolCall[Any] | FileReceived[Any] | DevicesChanged


class Batch(Generic[L]):
    """What a session produced since the last :meth:`Session.take`, in the order to apply it."""

    __slots__ = ("changes", "ended", "events", "messages", "new_deadline")

    def __init__(self) -> None:
        #: store changes: commit these first
        self.changes: list[Change] = []
        #: then send these (and close links), in order
        self.messages: list[Send[L] | CloseLink[L]] = []
        #: calls that reached a terminal status: wake whoever waits on them
        self.ended: list[Call] = []
        #: for the runtime
        self.events: list[Event] = []
        #: whether a call started: its deadline may be the next one (see :meth:`Session.next_deadline`)
        self.new_deadline = False

    def __bool__(self) -> bool:
        return bool(self.changes or self.messages or self.ended or self.events)


# ---------------------------------------------------------------------------------- state


@dataclass
class _Link:
    name: str
    verify: Verifier | None
    device_id: str | None = None
    #: the longest message the link carries (None: no limit of its own)
    max_text: int | None = None

    @property
    def attached(self) -> bool:
        return self.device_id is not None


@dataclass(frozen=True, slots=True)
class Peer(Generic[L]):
    """An attached App device as the agent's side sees it: its id and the link that reaches it."""

    device_id: str
    link: L


class Session(Generic[L]):
    """The sans-I/O session of one agent with its user's devices (see the module docstring).

    ``records`` is read for ended calls and seen envelope ids, ``catalog`` for the agent's tools,
    ``clock`` (seconds since the epoch, like ``time.time``) for every timestamp and deadline.
    """

    def __init__(
        self,
        *,
        records: Records,
        catalog: Catalog,
        clock: Callable[[], float],
        agent_id: str = "lineup-agent",
        conversation_id: str = "default",
        retention: Retention = DEFAULT_RETENTION,
    ) -> None:
        self.records = records
        self.catalog = catalog
        self.clock = clock
        self.agent = Actor(kind="agent", id=agent_id)
        self.conversation_id = conversation_id
        self.status = AgentStatus(state="idle")
        #: the agent's replies being streamed
        self.replies = Replies()
        self._links: dict[L, _Link] = {}
        #: the attached links and their devices, in the order they attached
        self._attached: dict[L, str] = {}
        self._live: dict[str, Call] = {}
        self._deadlines: list[tuple[float, str]] = []
        self._targets: dict[str | None, Actor] = {}
        self._out: Batch[L] = Batch()
        #: envelope ids handled since the last take (not in the records until the driver applies the batch)
        self._seen_in_batch: set[str] = set()
        #: calls that ended since the last take (not in the records until the driver applies the batch)
        self._ended_in_batch: dict[str, Call] = {}
        self._recovered = False
        #: recovered calls nobody has claimed yet, and until when they wait for a claim
        self._unclaimed: dict[str, float] = {}
        #: how much history is kept; the history's state is read from the records on first use
        self.retention = retention
        self._head: int | None = None
        self._history_id: str | None = None
        self._conversations: dict[str, SaveConversation] | None = None
        #: history entries made since the last take (not in the records until the driver applies the batch)
        self._history_in_batch: list[Record] = []
        self._recorded_status: tuple[str, AgentState, str | None] | None = None

    # ---------------------------------------------------------------------------- reading

    def take(self) -> Batch[L]:
        """Everything produced since the last call, to apply in order: changes, messages, ended, events."""
        batch, self._out = self._out, Batch()
        if self._ended_in_batch:
            self._ended_in_batch.clear()  # the driver writes them now: from here the records know them
        if self._seen_in_batch:
            self._seen_in_batch.clear()
        if self._history_in_batch:
            self._history_in_batch.clear()
        return batch

    @property
    def peers(self) -> list[Peer[L]]:
        """The attached devices, in the order they attached."""
        return [Peer(device_id, link) for link, device_id in self._attached.items()]

    def attached(self, link: L) -> bool:
        """Whether ``link`` passed its handshake and is attached."""
        state = self._links.get(link)
        return state is not None and state.attached

    def device_id(self, link: L) -> str | None:
        """The device ``link`` belongs to, once attached."""
        state = self._links.get(link)
        return state.device_id if state is not None else None

    def live_call(self, call_id: str) -> Call | None:
        """The call ``call_id`` if it is live."""
        return self._live.get(call_id)

    def lookup(self, call_id: str) -> Call | None:
        """The call ``call_id``, live or ended, if known."""
        return self.live_call(call_id) or self._ended_in_batch.get(call_id) or self.records.get_call(call_id)

    def next_deadline(self) -> float | None:
        """When the next live call expires or a recovered call stops waiting for its claim (by ``clock``), or None."""
        heap = self._deadlines
        while heap and (heap[0][1] not in self._live or self._live[heap[0][1]].expires_at != heap[0][0]):
            heapq.heappop(heap)
        due = [heap[0][0]] if heap else []
        if self._unclaimed:
            due.append(min(self._unclaimed.values()))
        return min(due) if due else None

    # ------------------------------------------------------------------------------ links

    def open(
        self,
        link: L,
        *,
        name: str,
        verify: Verifier | None = None,
        device_id: str | None = None,
        max_text: int | None = None,
    ) -> None:
        """A transport connection exists.

        With ``verify``, the link must say ``device.hello`` first and ``verify`` decides on it.
        Without, the transport vouches for who is there: the link is attached at once as
        ``device_id`` (each later hello re-syncs it). ``max_text`` is the longest message the
        link can carry (an IM frame): a call longer than that fails at once instead of waiting
        for an answer that cannot come.
        """
        if link in self._links:
            raise CallStateError(f"link {name} is already open")
        if verify is None and device_id is None:
            raise ValueError("a link opened without verify needs the device_id its transport vouches for")
        self._links[link] = _Link(name=name, verify=verify, max_text=max_text)
        if verify is None:
            assert device_id is not None
            self._attach(link, device_id, None)

    def close(self, link: L) -> None:
        """The connection ended. Its calls stay live until answered elsewhere or expired."""
        state = self._links.pop(link, None)
        self._attached.pop(link, None)
        if state is None or state.device_id is None:
            return
        device_id = state.device_id
        self._audit("device.detach", device_id=device_id)
        self._out.events.append(DevicesChanged(device_id, attached=False))
        alone = not any(other.device_id == device_id for other in self._links.values())
        if alone and self.catalog.withdraw(f"app:{device_id}"):
            self._out.events.append(ToolsChanged())

    def receive(self, link: L, text: str | bytes) -> None:
        """Handle one message that arrived on ``link``; bad input is answered with an ``error``."""
        self._decoded(link, codec.decode, text)

    def receive_object(self, link: L, data: Any) -> None:
        """Like :meth:`receive` for a JSON object a transport has parsed already (e.g. from an IM message)."""
        self._decoded(link, codec.decode_object, data)

    def _decoded(self, link: L, decode: Callable[[Any], Envelope], data: Any) -> None:
        try:
            message = decode(data)
        except ProtocolError as exc:
            self._bad_input(link, exc)
            return
        self.receive_envelope(link, message)

    def _bad_input(self, link: L, exc: ProtocolError) -> None:
        state = self._links.get(link)
        if state is None:
            return
        code = "unsupported_version" if isinstance(exc, VersionError) else "bad_message"
        if state.attached:
            self.reply(link, Error(code=code, message=str(exc)))
        else:
            self._refuse(link, code, str(exc) if code == "unsupported_version" else f"bad hello: {exc}", BAD_HELLO)

    def receive_envelope(self, link: L, message: Envelope) -> None:
        """Handle one decoded envelope from ``link`` (a duplicate envelope id is dropped)."""
        state = self._links.get(link)
        if state is None:
            return
        if not state.attached:
            self._handshake(link, state, message)
            return
        device_id = state.device_id
        assert device_id is not None
        if not self._first_seen(message.id):
            self._audit("duplicate.envelope", device_id=device_id, detail=message.id)
            return
        try:
            self._dispatch(link, state, device_id, message)
        except CallStateError as exc:
            self.reply(link, Error(code="invalid_transition", message=str(exc), ref=message.id))

    def _dispatch(self, link: L, state: _Link, device_id: str, message: Envelope) -> None:
        payload = message.payload
        if isinstance(payload, ToolResult):
            self._on_result(link, device_id, payload, message.id)
        elif isinstance(payload, ToolAck):
            self._on_ack(device_id, payload)
        elif isinstance(payload, ToolCancel):
            item = self._live.get(payload.call_id)
            if item is not None:
                reason = payload.reason or "cancelled by the user"
                self._finish(item, failure(payload.call_id, item.request.name, "cancelled", reason), by=link)
        elif isinstance(payload, ToolList):
            self._on_tool_list(link, device_id, payload)
        elif isinstance(payload, ToolCall):
            if self.catalog.runs_in_process(payload.name):
                self._out.events.append(AppToolCall(link, payload))
            else:
                message_text = f"the agent has no tool {payload.name!r} an App can call"
                self.reply(link, failure(payload.call_id, payload.name, "unsupported", message_text))
        elif isinstance(payload, Text):
            self._audit("text.in", device_id=device_id)
            conversation_id = message.conversation_id
            files = tuple(payload.attachments)
            entry = self._record(
                "text.in", conversation_id, device_id=device_id, ref=message.id, text=payload.text,
                attachments=_by_url(files),
            )
            if entry is not None:  # every device shows it (the one that typed it knows it by ``ref``)
                self._broadcast_entry(entry)
            self._out.events.append(TextReceived(device_id, payload.text, files, conversation_id))
        elif isinstance(payload, FileBegin | FileChunk):
            self._out.events.append(FileReceived(link, device_id, payload))
        elif isinstance(payload, AgentStop):
            self._audit("agent.stop", device_id=device_id, detail=payload.reason or "")
            self._out.events.append(StopRequested(device_id, payload.reason))
        elif isinstance(payload, DeviceHello):
            if state.verify is None:  # a vouched link re-syncs on each hello
                self._attach(link, device_id, payload)
            else:
                text = "device.hello was already received"
                self.reply(link, Error(code="already_connected", message=text, ref=message.id))
        else:
            text = f"{message.kind} is not accepted from an App"
            self.reply(link, Error(code="unexpected_kind", message=text, ref=message.id))

    def _handshake(self, link: L, state: _Link, message: Envelope) -> None:
        payload = message.payload
        if not isinstance(payload, DeviceHello):
            self._refuse(link, "hello_required", "device.hello required", BAD_HELLO)
            return
        assert state.verify is not None
        refusal = state.verify(payload)
        if refusal is not None:
            self._refuse(link, "auth_failed", refusal, AUTH_FAILED)
            return
        self._attach(link, payload.device_id or message.sender.id, payload)

    def _refuse(self, link: L, code: str, message: str, close_code: int) -> None:
        self._out.messages.append(Send(link, self.encode(Error(code=code, message=message))))
        self._out.messages.append(CloseLink(link, close_code, message))
        self._links.pop(link, None)
        self._attached.pop(link, None)

    def _attach(self, link: L, device_id: str, hello: DeviceHello | None) -> None:
        state = self._links[link]
        state.device_id = device_id
        self._attached[link] = device_id
        self._audit("device.attach", device_id=device_id)
        live = list(self._live.values())
        self.reply(link, DeviceWelcome(device_id=device_id, agent=self.agent, pending=len(live)))
        for call_id in hello.open_calls if hello else ():  # before the history, which says how they ended too
            if call_id not in self._live:
                self.reply(link, ToolCancel(call_id=call_id, reason=closed_reason(self.records.get_call(call_id))))
        if hello is not None and hello.last_seq is not None:
            self._catch_up(link, hello.last_seq, hello.history_id)
        self.reply(link, ToolList(tools=self.catalog.agent_tools()))
        self.reply(link, self.status)
        for item in live:
            self._deliver(item, link, device_id)
        self._out.events.append(DevicesChanged(device_id, attached=True))

    # ------------------------------------------------------------------------ from the App

    def _on_result(self, link: L, device_id: str, result: ToolResult, ref: str) -> None:
        item = self._live.get(result.call_id)
        if item is not None:
            problem = self._invalid(item, result, device_id)
            if problem is not None:  # the call stays live: the App may answer again
                self.reply(link, Error(code="invalid_result", message=problem, ref=ref, call_id=result.call_id))
                return
            self._finish(item, result, by=link)
            return
        ended = self.records.get_call(result.call_id)
        if ended is None:
            message = _unknown_call(result.call_id)
            self.reply(link, Error(code="unknown_call", message=message, ref=ref, call_id=result.call_id))
            return
        if ended.result is not None and (ended.result.status, ended.result.result) == (result.status, result.result):
            return  # the same answer again: already applied
        self._audit("result.refused", call_id=result.call_id, device_id=device_id, detail=str(ended.state))
        message = _call_closed(ended)
        self.reply(link, Error(code="call_closed", message=message, ref=ref, call_id=result.call_id))

    def _invalid(self, item: Call, result: ToolResult, device_id: str) -> str | None:
        """Why a ``completed`` answer breaks the tool's ``outputSchema`` (audited), or None."""
        if result.status != "completed":
            return None
        problem = self.catalog.check_result(item.request.name, item.request.action, result.result)
        if problem is None:
            return None
        problem = bounded(problem)  # it may quote the App's value
        self._audit("result.invalid", call_id=result.call_id, device_id=device_id, detail=problem)
        return problem

    def answer_from(self, surface: str, result: ToolResult) -> str | None:
        """An answer given on a surface that is no attached device (the card an MCP Apps host shows
        inline), under a device's rules: the first answer wins, every device's card is dismissed
        ("answered on another device"), a ``completed`` answer must fit the tool's ``outputSchema``.
        Returns why it was not applied, or None; ``surface`` names it in the audit log.
        """
        item = self._live.get(result.call_id)
        if item is None:
            ended = self.records.get_call(result.call_id)
            return _unknown_call(result.call_id) if ended is None else _call_closed(ended)
        problem = self._invalid(item, result, surface)
        if problem is None:
            self._finish(item, result, surface=surface)
        return problem

    def _on_ack(self, device_id: str, ack: ToolAck) -> None:
        item = self._live.get(ack.call_id)
        if item is not None and item.advance(CallState(ack.stage), now=self.clock()):
            self._save(item)
            self._audit(f"call.{ack.stage}", call_id=ack.call_id, device_id=device_id)

    def _on_tool_list(self, link: L, device_id: str, listing: ToolList) -> None:
        source = f"app:{device_id}"
        if listing.tools or self.catalog.withdraw(source):
            try:
                skipped = self.catalog.declare(source, listing.tools)
            except ToolError as exc:  # nothing was changed
                self._audit("tools.refused", device_id=device_id, detail=bounded(str(exc)))
                self.reply(link, Error(code="bad_tools", message=bounded(f"tool.list refused, no tool changed: {exc}")))
                return
            if skipped:
                message = f"tools already provided by the agent side: {skipped}"
                self.reply(link, Error(code="tool_name_taken", message=message))
            self._audit("tools.declared", device_id=device_id, detail=",".join(t.name for t in listing.tools))
            self._out.events.append(ToolsChanged(reply_to=link if listing.request else None))
        elif listing.request:
            self.send_tool_list(link)

    def record_in_process(self, result: ToolResult, *, link: L | None = None) -> None:
        """Audit the run of an in-process tool: ``result`` is its outcome; ``link`` the App that called it, if any."""
        device_id = self.device_id(link) if link is not None else None
        self._audit(f"tool.{result.status}", call_id=result.call_id, device_id=device_id, detail=result.name or "")

    def send_tool_list(self, link: L) -> None:
        """Send the agent's tools to the device on ``link`` (the answer to a ``tool.list`` with ``request``)."""
        self.reply(link, ToolList(tools=self.catalog.agent_tools()))

    # ------------------------------------------------------------------------ from the agent

    def encode(
        self,
        payload: Payload,
        device_id: str | None = None,
        *,
        conversation_id: str | None = None,
        seq: int | None = None,
    ) -> str:
        """The wire text of ``payload`` sent by the agent to ``device_id`` (or to the user).

        ``conversation_id`` defaults to the session's; ``seq`` is the history entry the message
        is the live form of.
        """
        target = self._targets.get(device_id)
        if target is None:  # built once per device: validating an Actor per message shows in profiles
            if len(self._targets) >= 1024:
                self._targets.clear()
            target = Actor(kind="device", id=device_id) if device_id else Actor(kind="human", id="user")
            self._targets[device_id] = target
        return codec.encode_envelope(
            payload, sender=self.agent, target=target, conversation_id=conversation_id or self.conversation_id, seq=seq
        )

    def reply(self, link: L, payload: Payload) -> None:
        """Send ``payload`` to the device on ``link`` (e.g. the result of a tool the App called)."""
        state = self._links.get(link)
        if state is not None:
            self._out.messages.append(Send(link, self.encode(payload, state.device_id)))

    def broadcast(self, payload: Payload, *, conversation_id: str | None = None, seq: int | None = None) -> int:
        """Send ``payload`` to every attached device (in ``conversation_id``, as entry ``seq``); returns to how many."""
        for link, device_id in self._attached.items():
            text = self.encode(payload, device_id, conversation_id=conversation_id, seq=seq)
            self._out.messages.append(Send(link, text))
        return len(self._attached)

    def send_text(
        self,
        text: str,
        *,
        message_id: str | None = None,
        attachments: Iterable[Attachment] = (),
        conversation_id: str | None = None,
    ) -> str:
        """An agent reply in ``conversation_id`` (default: the session's), for every device; returns its
        ``message_id`` (made here when not given). Kept in the history.

        A reply being streamed under ``message_id`` is settled by it. An attachment's inline
        ``data`` goes only to links that carry bounded messages (the relay: no URLs there).
        """
        conversation_id = self._conversation(conversation_id)
        message_id = message_id or codec.new_id("msg")
        settled = self.replies.settle(message_id, text)
        if settled is None:
            return message_id
        self._audit("text.out")
        files = list(attachments)
        by_url = _by_url(files) or []
        entry = self._record(
            "text.out", conversation_id, text=settled.text, message_id=message_id, attachments=by_url or None
        )
        seq = entry.seq if entry is not None else None
        for link, device_id in self._attached.items():
            inline = self._links[link].max_text is not None
            message = settled.model_copy(update={"attachments": files if inline else by_url})
            text = self.encode(message, device_id, conversation_id=conversation_id, seq=seq)
            self._out.messages.append(Send(link, text))
        return message_id

    def stream_text(self, message_id: str, text: str, *, conversation_id: str | None = None) -> None:
        """Reply ``message_id`` being written reads ``text`` so far: every device gets the new piece."""
        delta = self.replies.update(message_id, text)
        if delta is not None:
            self.broadcast(delta, conversation_id=conversation_id)

    def audit_file(self, device_id: str, sha256: str, size: int) -> None:
        """Record that the App on ``device_id`` sent a file (kept by the driver under ``sha256``)."""
        self._audit("file.in", device_id=device_id, detail=f"{sha256} {size}")

    def set_status(self, state: AgentState, detail: str | None = None, *, conversation_id: str | None = None) -> None:
        """Record the agent's status (in ``conversation_id``) and push it to every device.

        A run that ended ``interrupted`` or ``failed`` settles its replies still being written as
        interrupted (an ``idle`` run's last piece may still be on its way). A status that differs
        from the last one kept is kept in the history.
        """
        conversation_id = self._conversation(conversation_id)
        self.status = AgentStatus(state=state, detail=detail)
        if state in ("interrupted", "failed"):
            for message in self.replies.interrupt():
                self._audit("text.out", detail="interrupted")
                cut = self._record(
                    "text.out", conversation_id, text=message.text, message_id=message.message_id, interrupted=True
                )
                self.broadcast(message, conversation_id=conversation_id, seq=cut.seq if cut is not None else None)
        entry = None
        if self._recorded_status != (conversation_id, state, detail):
            self._recorded_status = (conversation_id, state, detail)
            entry = self._record("status", conversation_id, status=self.status)
        self.broadcast(self.status, conversation_id=conversation_id, seq=entry.seq if entry else None)

    def name_conversation(self, conversation_id: str, title: str) -> None:
        """Title conversation ``conversation_id`` (e.g. a Hermes session's title); every device is told.

        Kept in the history; the same title again changes nothing. ``title`` is cut to 200 characters.
        """
        conversation_id = self._conversation(conversation_id)
        title = " ".join(title.split())[:200]
        known = self._known_conversations().get(conversation_id)
        if not title or (known is not None and known.title == title):
            return
        entry = self._record("conversation", conversation_id, title=title)
        if entry is not None:
            self._broadcast_entry(entry)

    # ------------------------------------------------------------------------------ history

    @property
    def head(self) -> int:
        """The newest history seq (0 before the first entry)."""
        if self._head is None:
            self._head = self.records.history_head()
        return self._head

    @property
    def history_id(self) -> str:
        """The id of the history the seqs count in (the store's)."""
        if self._history_id is None:
            self._history_id = self.records.history_id()
        return self._history_id

    def conversations(self) -> list[ConversationInfo]:
        """The conversations with history kept, most recently active first (at most :data:`MAX_LISTED`)."""
        known = sorted(self._known_conversations().values(), key=lambda c: c.last_seq, reverse=True)
        return [c.info() for c in known[:MAX_LISTED]]

    def _known_conversations(self) -> dict[str, SaveConversation]:
        if self._conversations is None:
            # oldest activity first, as :meth:`_record` keeps it
            known = reversed(self.records.conversations())
            self._conversations = {
                c.conversation_id: SaveConversation(c.conversation_id, c.title, c.last_seq) for c in known
            }
        return self._conversations

    def _conversation(self, conversation_id: str | None) -> str:
        """A conversation id fit for an envelope: the session's when none, cut to 200 characters."""
        return conversation_id[:200] if conversation_id else self.conversation_id

    def _record(
        self, event: HistoryEvent, conversation_id: str, *, call_id: str | None = None, **fields: Any
    ) -> Record | None:
        """Number and keep one history entry (with this batch); None when history is off."""
        if self.retention.limit <= 0:
            return None
        now = self.clock()
        seq = self.head + 1
        self._head = seq
        record = Record(seq, now, conversation_id, event, fields, call_id)
        self._history_in_batch.append(record)
        self._out.changes.append(record)
        conversations = self._known_conversations()
        known = conversations.pop(conversation_id, None)  # re-inserted last: the dict stays in activity order
        title = fields.get("title") or (known.title if known is not None else None)
        info = SaveConversation(conversation_id, title, seq, now)
        conversations[conversation_id] = info
        self._out.changes.append(info)
        oldest = self.retention.oldest_seq(seq)
        while len(conversations) > MAX_CONVERSATIONS or next(iter(conversations.values())).last_seq < oldest:
            del conversations[next(iter(conversations))]  # its history is gone (the store drops it too)
        return record

    def _record_end(self, call: Call, device_id: str | None) -> int | None:
        """Keep how ``call`` ended (and who answered it) in the history; the entry's seq."""
        entry = self._record(
            "call.end", call.conversation_id, call_id=call.call_id, result=call.result, device_id=device_id
        )
        return entry.seq if entry is not None else None

    def _broadcast_entry(self, record: Record) -> None:
        """Send one new entry to every device as a ``history`` message (for events with no message of their own)."""
        live = History.model_construct(history_id=self.history_id, head=record.seq, entries=[record.entry()])
        self.broadcast(live, conversation_id=record.conversation_id, seq=record.seq)

    def _catch_up(self, link: L, last_seq: int, history_id: str | None) -> None:
        """Send the device on ``link`` the entries after ``last_seq`` (everything kept, with ``reset``,
        when its seq does not count in this history), in as many ``history`` messages as its link needs."""
        head = self.head
        reset = last_seq > head or (history_id is not None and history_id != self.history_id)
        after = max(0 if reset else last_seq, self.retention.oldest_seq(head) - 1)
        entries: list[HistoryEntry] = []
        if self.retention.limit > 0 and after < head:
            oldest_at = self.retention.oldest_at(self.clock())
            entries = self.records.history_after(after, oldest_at=oldest_at, limit=self.retention.limit)
            newest = entries[-1].seq if entries else after
            entries += [r.entry() for r in self._history_in_batch if r.seq > newest]  # in this batch: not committed
        groups = list(chunks(entries, self._links[link].max_text or CHUNK_CHARS)) or [[]]
        for index, group in enumerate(groups):
            first = index == 0
            message = History.model_construct(
                history_id=self.history_id,
                head=head,
                entries=group,
                conversations=self.conversations() if first else None,
                reset=reset and first,
                more=index < len(groups) - 1,
            )
            self.reply(link, message)

    def start_call(
        self,
        request: ToolCall,
        *,
        wait: float,
        new_id: bool = False,
        forwarded: bool = False,
        conversation_id: str | None = None,
    ) -> Call:
        """Start a call to the App with a deadline ``wait`` seconds from now; returns its :class:`Call`.

        The call belongs to ``conversation_id`` (default: the session's) and is kept in its history.

        A call id already known (live or ended) is not started again: its call is returned as it
        stands, and a recovered call waiting for its claim is claimed (``new_id``: the caller
        has just made the id with :func:`codec.new_id`, so no lookup is needed). With no device
        attached the call ends ``failed`` (``no_app``) at once, recorded like any other.
        ``forwarded``: another process of the agent made the call and waits on it here.
        """
        known = None if new_id else self.lookup(request.call_id)
        if known is not None:
            self.claim(known.call_id)
            return known
        now = self.clock()
        conversation_id = self._conversation(conversation_id)
        if not self._attached:
            call = Call(request=request, conversation_id=conversation_id, created_at=now, forwarded=forwarded)
            call.end("failed", NO_APP, now=now, error="no_app")
            self._save(call)
            self._audit("call.failed", call_id=call.call_id, detail="no_app")
            self._ended(call)
            return call
        expires_at = now + max(0.0, wait)
        request.expires_at = format_timestamp(expires_at)
        call = Call(
            request=request,
            conversation_id=conversation_id,
            created_at=now,
            expires_at=expires_at,
            forwarded=forwarded,
        )
        too_long = self._too_long(call)
        if too_long is not None:
            call.end("failed", too_long, now=now, error="too_large")
            self._save(call)
            self._audit("call.failed", call_id=call.call_id, detail="too_large")
            self._ended(call)
            return call
        self._live[call.call_id] = call
        heapq.heappush(self._deadlines, (expires_at, call.call_id))
        self._out.new_deadline = True
        self._save(call)
        self._audit("call.created", call_id=call.call_id, detail=request.name)
        entry = self._record("call", conversation_id, call_id=call.call_id, call=request)
        seq = entry.seq if entry is not None else None
        for link, device_id in self._attached.items():
            self._deliver(call, link, device_id, seq)
        return call

    def cancel_call(self, call_id: str, reason: str = "cancelled by the agent") -> bool:
        """Cancel a live call on every device; False when it is not live."""
        item = self._live.get(call_id)
        if item is None:
            return False
        return self._finish(item, failure(call_id, item.request.name, "cancelled", reason), reason=reason)

    def cancel_all(self, reason: str) -> int:
        """Cancel every live call; returns how many."""
        return sum(self.cancel_call(call_id, reason) for call_id in list(self._live))

    def abandon(self, call: Call, message: str) -> None:
        """The store could not write the last changes of ``call``, and nothing of them was sent: end it ``failed``.

        A live call ends ``failed`` with ``message``. A call whose end could not be written (an
        answer nothing may rely on, since nobody was told) ends ``failed`` instead of that
        answer. Either way every device gets a ``tool.cancel`` with ``message`` and the call is
        in :attr:`Batch.ended`, so the model is told too.
        """
        now = self.clock()
        result = failure(call.call_id, call.request.name, "failed", message, error="store_failed")
        if call.call_id in self._live:
            self._finish(self._live[call.call_id], result, reason=message)
            return
        if not call.done:
            return
        call.result = result  # replaces an end that was never written nor told
        call.state = CallState.FAILED
        call.history.append((CallState.FAILED, now))
        self._save(call)
        self._audit("call.failed", call_id=call.call_id, detail="store_failed")
        self._ended(call)
        self._notify(call, ToolCancel(call_id=call.call_id, reason=message), self._record_end(call, None))

    def claim(self, call_id: str) -> bool:
        """The agent's side waits on call ``call_id`` again: a recovered call then lives on to its deadline.

        True when it was a recovered call waiting for its claim.
        """
        return self._unclaimed.pop(call_id, None) is not None

    def release(self, call_id: str) -> Call | None:
        """Let go of live call ``call_id`` without ending it: this process stops serving, another takes it over.

        Nothing is written and nobody is told: the call stays pending in the records, the devices
        keep showing its card, and the next session on the same records recovers it (``reclaim``).
        Returns the call, or None when it is not live.
        """
        self._unclaimed.pop(call_id, None)
        return self._live.pop(call_id, None)

    def tick(self) -> int:
        """End every live call whose deadline has passed, and every recovered call nobody claimed in time; how many."""
        now = self.clock()
        count = 0
        for call_id, until in list(self._unclaimed.items()):
            if until <= now:
                del self._unclaimed[call_id]
                item = self._live[call_id]
                result = failure(call_id, item.request.name, "cancelled", RESTARTED)
                count += self._finish(item, result, reason=RESTARTED)
        while (due := self.next_deadline()) is not None and due <= now:
            _, call_id = heapq.heappop(self._deadlines)
            item = self._live[call_id]
            result = failure(call_id, item.request.name, "expired", EXPIRED)
            count += self._finish(item, result, reason=f"expired: {EXPIRED}")
        return count

    def recover(self, *, reclaim: float = 0.0) -> list[Call]:
        """Once per session: the calls a previous process left pending; returns those closed now.

        Calls past their deadline end ``expired``, the others ``cancelled`` at once (their waiter
        is gone); an App that still shows one of them has its card closed with that reason when
        it reconnects — except, with ``reclaim`` > 0, the calls another process forwarded (a
        hand-over: the process that served is gone, but the one that asked may still wait): they
        stay live and are delivered to the devices as before; one started again by its id within
        ``reclaim`` seconds (:meth:`start_call`) lives on to its own deadline, the others end
        ``cancelled`` then. A store belongs to one session at a time: a second one on
        the same store would close the first one's calls.
        """
        if self._recovered:
            return []
        self._recovered = True
        now = self.clock()
        closed = []
        for call in self.records.pending_calls():
            if reclaim > 0 and call.forwarded and call.expires_at is not None and call.expires_at > now:
                self._live[call.call_id] = call
                heapq.heappush(self._deadlines, (call.expires_at, call.call_id))
                self._unclaimed[call.call_id] = now + reclaim
                self._out.new_deadline = True
                self._audit("call.recovered", call_id=call.call_id, detail=f"waits {reclaim:g} s for its caller")
                continue
            if not call.expire_if_due(now):
                call.end("cancelled", RESTARTED, now=now)
            self._save(call)
            self._audit(f"call.{call.state}", call_id=call.call_id, detail="recovered after restart")
            self._record_end(call, None)
            closed.append(call)
        return closed

    # ------------------------------------------------------------------------------ shared

    def _too_long(self, call: Call) -> str | None:
        """Why ``call`` cannot reach an attached device whose link has a size limit, if it cannot."""
        for link in self._attached:
            limit = self._links[link].max_text
            if limit is not None:
                size = len(self.encode(call.request, self._attached[link]).encode())
                if size > limit:
                    return (
                        f"the call is {size:,} bytes, more than {self._links[link].name} carries ({limit:,}); "
                        "ask for less (shorter text, fewer options)"
                    )
        return None

    def _deliver(self, call: Call, link: L, device_id: str, seq: int | None = None) -> None:
        text = self.encode(call.request, device_id, conversation_id=call.conversation_id, seq=seq)
        limit = self._links[link].max_text
        if limit is not None and len(text.encode()) > limit:  # a link that attached after the call started
            self._audit("call.undeliverable", call_id=call.call_id, device_id=device_id, detail="too_large")
            return
        self._out.messages.append(Send(link, text, call.call_id))
        if call.state == CallState.CREATED:
            call.advance(CallState.DELIVERED, now=self.clock())
            self._save(call)
        self._audit("call.delivered", call_id=call.call_id, device_id=device_id)

    def _finish(
        self,
        call: Call,
        result: ToolResult,
        *,
        by: L | None = None,
        reason: str | None = None,
        surface: str | None = None,
    ) -> bool:
        """The one way a live call ends: the first terminal result wins, the other devices are told.

        ``by``: the device's link that answered; ``surface``: what answered when no device did.
        """
        if not call.finish(result, now=self.clock()):
            self._audit("duplicate.result", call_id=call.call_id)
            return False
        del self._live[call.call_id]
        self._save(call)
        by_device = self._links[by].device_id if by is not None and by in self._links else surface
        self._audit(f"call.{call.state}", call_id=call.call_id, device_id=by_device)
        self._ended(call)
        seq = self._record_end(call, by_device)
        answered = by is not None or surface is not None
        notice = ToolCancel(call_id=call.call_id, reason=ANSWERED_ELSEWHERE if answered else reason)
        self._notify(call, notice, seq, skip=by)
        return True

    def _notify(self, call: Call, notice: ToolCancel, seq: int | None, *, skip: L | None = None) -> None:
        """Send ``notice`` about ``call`` (the live form of entry ``seq``) to every device but the one on ``skip``."""
        for link, device_id in self._attached.items():
            if link != skip:
                text = self.encode(notice, device_id, conversation_id=call.conversation_id, seq=seq)
                self._out.messages.append(Send(link, text, call.call_id))

    def _ended(self, call: Call) -> None:
        self._ended_in_batch[call.call_id] = call
        self._out.ended.append(call)

    def _first_seen(self, envelope_id: str) -> bool:
        if envelope_id in self._seen_in_batch or self.records.was_seen(envelope_id):
            return False
        self._seen_in_batch.add(envelope_id)
        self._out.changes.append(SeenEnvelope(envelope_id))
        return True

    def _save(self, call: Call) -> None:
        self._out.changes.append(SaveCall(call))

    def _audit(self, event: str, *, call_id: str | None = None, device_id: str | None = None, detail: str = "") -> None:
        self._out.changes.append(Audit(event, call_id, device_id, detail))


def _by_url(files: Iterable[Attachment]) -> list[Attachment] | None:
    """Files as the history keeps them: without their inline data (a device fetches them by URL); None for none."""
    kept = [file.model_copy(update={"data": None}) if file.data else file for file in files]
    return kept or None


class Grouped(NamedTuple):
    """A batch's changes grouped for writing (see :func:`changes_by_kind`)."""

    calls: dict[str, Call]
    seen: list[str]
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
            grouped.seen.append(change.envelope_id)
        elif isinstance(change, Audit):
            grouped.audits.append(change)
        elif isinstance(change, Record):
            grouped.records.append(change)
        else:
            grouped.conversations[change.conversation_id] = change
    return grouped
