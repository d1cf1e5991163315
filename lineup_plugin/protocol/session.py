"""The session core: every rule of a LineUp session between one agent and its user's devices, with no I/O.

Like the ``protocol`` module of websockets, this is a state machine that is fed and drained.
Inputs are method calls; nothing here waits, reads a socket, a clock or a file by itself:

- a transport's connections: :meth:`Session.open` (a *link*, any hashable object the driver
  names), :meth:`Session.decode` then :meth:`Session.receive` (the envelope that arrived on it,
  with what the store knows of it: :meth:`Session.wants`), :meth:`Session.close`;
- the agent's side: :meth:`Session.start_call`, :meth:`Session.cancel_call`,
  :meth:`Session.send_text`, :meth:`Session.set_status`, :meth:`Session.reply`;
- time: the injected ``clock`` stamps every envelope, record and deadline;
  ``session.calls.tick()`` ends the calls whose deadline passed and
  ``session.calls.next_deadline()`` says when to tick next;
- reads: what the session needs of the store is handed to it (:mod:`.reads`).

Outputs queue up in one :class:`~.outputs.Batch` shared by the session's parts until the
driver takes it (:meth:`Session.take`): the store changes, the registry changes, the messages
to send per link, the calls that ended and the events for the runtime. A driver applies them in
that order — commit the store changes, then send — so no ``tool.call`` and no terminal notice
ever leaves before the row it depends on is committed (see :mod:`lineup_plugin.hub`).

The parts (each I/O-free, each writing to the same batch):

- :attr:`Session.devices` (:mod:`.devices`): links, handshake state, the agent's envelopes;
- :attr:`Session.calls` (:mod:`.live`): a call's life, repeats, expiry, recovery, hand-over;
- :attr:`Session.history` (:mod:`.timeline`): numbered entries, conversations, catch-up;
- :attr:`Session.replies` (:mod:`.replies`): the agent's replies being streamed.

This module composes them and holds the rules that span them:

- **Handshake**: a link opened with a ``verify`` function must say ``device.hello`` first; a
  hello ``verify`` refuses closes the link (4401), anything else first closes it (4400). A second
  hello on such a link is refused. A link whose identity its transport vouches for (an IM user)
  is attached at once, and each hello it sends re-syncs it.
- **Welcome and redelivery**: an attached device gets ``device.welcome``, the agent's tools, its
  status and every live call; cards it still shows (``open_calls``) for calls that ended get a
  ``tool.cancel`` saying how they ended.
- **Answers**: duplicate envelopes (by id) and repeated answers are applied once (an answer that
  ends its call is kept by the call, not by its envelope id); a late answer
  is refused with the reason; a ``completed`` answer must fit the tool's ``outputSchema``.
- **History**: a hello with ``last_seq`` gets what it missed (``history``) before the live
  messages, which carry their entry's ``seq``; a ``history.older`` gets the page before the
  oldest entry the device shows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic

from ..errors import CallStateError, ProtocolError, VersionError
from . import codec
from .base import bounded
from .calls import Call
from .devices import AUTH_FAILED, BAD_HELLO, Devices, LinkState, Peer, Verifier
from .history import DEFAULT_RETENTION, Retention
from .live import (
    ANSWERED_ELSEWHERE,
    EXPIRED,
    NO_APP,
    RESTARTED,
    UNKNOWN_CALL,
    LiveCalls,
    call_closed,
    closed_reason,
    failure,
    verdict,
)
from .messages import (
    AgentState,
    AgentStatus,
    AgentStop,
    Attachment,
    ConversationUpdate,
    DeviceHello,
    DeviceWelcome,
    Envelope,
    Error,
    FileBegin,
    FileChunk,
    HistoryOlder,
    Payload,
    PushSubscribe,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from .outputs import (
    APP_SOURCE,
    Applied,
    AppToolCall,
    Audit,
    Batch,
    Change,
    CloseLink,
    DeclareTools,
    DevicesChanged,
    Event,
    FileReceived,
    L,
    Outbox,
    PushSubscribed,
    RegistryChange,
    SaveCall,
    SeenEnvelope,
    Send,
    StopRequested,
    TextReceived,
    ToolsChanged,
    WithdrawTools,
    changes_by_kind,
)
from .reads import NO_WANTS, NOTHING, Catalog, Kept, Known, Wants
from .replies import Replies
from .timeline import Timeline, by_url

__all__ = [
    "ANSWERED_ELSEWHERE",
    "AUTH_FAILED",
    "BAD_HELLO",
    "EXPIRED",
    "NO_APP",
    "RESTARTED",
    "AppToolCall",
    "Applied",
    "Audit",
    "Batch",
    "Catalog",
    "Change",
    "CloseLink",
    "DeclareTools",
    "DevicesChanged",
    "Event",
    "FileReceived",
    "Kept",
    "Known",
    "Peer",
    "RegistryChange",
    "SaveCall",
    "SeenEnvelope",
    "Send",
    "Session",
    "StopRequested",
    "TextReceived",
    "ToolsChanged",
    "Verifier",
    "Wants",
    "WithdrawTools",
    "changes_by_kind",
    "closed_reason",
    "failure",
]


class Session(Generic[L]):
    """The sans-I/O session of one agent with its user's devices (see the module docstring).

    ``catalog`` is read for the agent's tools, ``clock`` (seconds since the epoch, like
    ``time.time``) for every timestamp and deadline, ``kept`` is the store's history as the
    session starts on it (a new, empty history when not given).
    """

    def __init__(
        self,
        *,
        catalog: Catalog,
        clock: Callable[[], float],
        kept: Kept | None = None,
        agent_id: str = "lineup-agent",
        conversation_id: str = "default",
        retention: Retention = DEFAULT_RETENTION,
    ) -> None:
        self.catalog = catalog
        self.clock = clock
        self.out: Outbox[L] = Outbox(clock)
        self.devices: Devices[L] = Devices(self.out, agent_id=agent_id, conversation_id=conversation_id)
        kept = kept if kept is not None else Kept(history_id=codec.new_id("history"))
        self.history: Timeline[L] = Timeline(self.out, self.devices, retention=retention, kept=kept)
        self.calls: LiveCalls[L] = LiveCalls(self.out, self.devices, self.history, handled_by=catalog.handled_by)
        #: the agent's replies being streamed
        self.replies = Replies()
        self.agent = self.devices.agent
        self.conversation_id = conversation_id
        self.status = AgentStatus(state="idle")
        #: the agent's Web Push key, told in every welcome (None: the agent sends no push)
        self.push_key: str | None = None
        self._recorded_status: tuple[str, AgentState, str | None] | None = None

    def take(self) -> Batch[L]:
        """Everything produced since the last call, to apply in order: changes, registry, messages, ended, events."""
        return self.out.take()

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
        if verify is None and device_id is None:
            raise ValueError("a link opened without verify needs the device_id its transport vouches for")
        self.devices.open(link, name=name, verify=verify, max_text=max_text)
        if verify is None:
            assert device_id is not None
            self._attach(link, device_id, None, NOTHING)

    def close(self, link: L) -> None:
        """The connection ended. Its calls stay live until answered elsewhere or expired."""
        device_id = self.devices.detach(link)
        if device_id is not None:  # its last link: the tools it declared go
            self.out.batch.registry.append(WithdrawTools(f"{APP_SOURCE}{device_id}"))

    def decode(self, link: L, data: str | bytes | Any, *, parsed: bool = False) -> Envelope | None:
        """The envelope in ``data`` that arrived on ``link`` (``parsed``: a JSON value a transport has
        parsed already), or None: bad input is answered with an ``error`` (a link not attached yet is closed)."""
        try:
            return codec.decode_object(data) if parsed else codec.decode(data)
        except ProtocolError as exc:
            state = self.devices.state(link)
            if state is not None:
                code = "unsupported_version" if isinstance(exc, VersionError) else "bad_message"
                if state.attached:
                    self.reply(link, Error(code=code, message=str(exc)))
                else:
                    reason = str(exc) if code == "unsupported_version" else f"bad hello: {exc}"
                    self.devices.refuse(link, code, reason, BAD_HELLO)
            return None

    def wants(self, link: L, message: Envelope) -> Wants:
        """What the store must say about ``message`` from ``link`` before :meth:`receive` (read as :class:`Known`)."""
        state = self.devices.state(link)
        if state is None:
            return NO_WANTS
        payload = message.payload
        if isinstance(payload, ToolResult):
            live = self.calls.lookup(payload.call_id)
            return Wants(message.id, () if live is not None else (payload.call_id,))
        if isinstance(payload, DeviceHello):
            open_calls = tuple(c for c in payload.open_calls if self.calls.live(c) is None)
            return Wants(message.id if state.attached else None, open_calls, self.history.wanted(payload))
        return Wants(message.id, (), self.history.wanted(payload)) if state.attached else NO_WANTS

    def receive(self, link: L, message: Envelope, known: Known = NOTHING) -> None:
        """Handle one decoded envelope from ``link``, with what the store knows of it (a duplicate id is dropped)."""
        state = self.devices.state(link)
        if state is None:
            return
        if not state.attached:
            self._handshake(link, state, message, known)
            return
        device_id = state.device_id
        assert device_id is not None
        # An answer that ends its call is not kept by its envelope id: the ended call is its record,
        # and a copy of it meets "the same answer again" (applied once, silently). Any other is kept.
        answer = message.payload if isinstance(message.payload, ToolResult) else None
        if not self.out.first_seen(message.id, known.seen, keep=answer is None):
            self.out.audit("duplicate.envelope", device_id=device_id, detail=message.id)
            return
        live = answer is not None and self.calls.live(answer.call_id) is not None
        try:
            self._dispatch(link, state, device_id, message, known)
        except CallStateError as exc:
            self.reply(link, Error(code="invalid_transition", message=str(exc), ref=message.id))
        if answer is not None and not (live and self.calls.live(answer.call_id) is None):
            self.out.keep_seen(message.id)

    def _dispatch(self, link: L, state: LinkState, device_id: str, message: Envelope, known: Known) -> None:
        payload = message.payload
        if isinstance(payload, ToolResult):
            self._on_result(link, device_id, payload, message.id, known.calls.get(payload.call_id))
        elif isinstance(payload, ToolAck):
            self.calls.ack(device_id, payload)
        elif isinstance(payload, ToolCancel):
            self.calls.end(payload.call_id, "cancelled", payload.reason or "cancelled by the user", by=link)
        elif isinstance(payload, ToolList):
            self._on_tool_list(link, device_id, payload)
        elif isinstance(payload, ToolCall):
            if self.catalog.runs_in_process(payload.name):
                self.out.event(AppToolCall(link, payload))
            else:
                message_text = f"the agent has no tool {payload.name!r} an App can call"
                self.reply(link, failure(payload.call_id, payload.name, "unsupported", message_text))
        elif isinstance(payload, Text):
            self.out.audit("text.in", device_id=device_id)
            typed = TextReceived(
                device_id, payload.text, tuple(payload.attachments), message.conversation_id, message.id
            )
            if not typed.attachments:
                self.history.keep_text(typed)
            self.out.event(typed)
        elif isinstance(payload, FileBegin | FileChunk):
            self.out.event(FileReceived(link, device_id, payload))
        elif isinstance(payload, ConversationUpdate):
            self.out.audit("conversation.update", device_id=device_id, detail=message.conversation_id)
            self.history.change(message.conversation_id, title=payload.title, closed=payload.closed)
        elif isinstance(payload, HistoryOlder):
            self.history.older(link, payload, known.history, ref=message.id)
        elif isinstance(payload, AgentStop):
            self.out.audit("agent.stop", device_id=device_id, detail=payload.reason or "")
            self.out.event(StopRequested(device_id, payload.reason))
        elif isinstance(payload, PushSubscribe):
            wanted = payload.subscription.model_dump() if payload.subscription is not None else None
            self.out.event(PushSubscribed(link, device_id, wanted))
        elif isinstance(payload, DeviceHello):
            if state.verify is None:  # a vouched link re-syncs on each hello
                self._attach(link, device_id, payload, known)
            else:
                text = "device.hello was already received"
                self.reply(link, Error(code="already_connected", message=text, ref=message.id))
        else:
            text = f"{message.kind} is not accepted from an App"
            self.reply(link, Error(code="unexpected_kind", message=text, ref=message.id))

    def _handshake(self, link: L, state: LinkState, message: Envelope, known: Known) -> None:
        payload = message.payload
        if not isinstance(payload, DeviceHello):
            self.devices.refuse(link, "hello_required", "device.hello required", BAD_HELLO)
            return
        assert state.verify is not None
        refusal = state.verify(payload)
        if refusal is not None:
            self.devices.refuse(link, "auth_failed", refusal, AUTH_FAILED)
            return
        self._attach(link, payload.device_id or message.sender.id, payload, known)

    def _attach(self, link: L, device_id: str, hello: DeviceHello | None, known: Known) -> None:
        self.devices.attach(link, device_id, hello.name if hello is not None else None)
        live, key = self.calls.all(), self.push_key
        self.reply(link, DeviceWelcome(device_id=device_id, agent=self.agent, pending=len(live), push_key=key))
        for call_id in hello.open_calls if hello else ():  # before the history, which says how they ended too
            if self.calls.live(call_id) is None:
                ended = self.calls.lookup(call_id) or known.calls.get(call_id)
                self.reply(link, verdict(call_id, closed_reason(ended), ended))
        older = None
        if hello is not None and hello.last_seq is not None:
            older = self.history.catch_up(
                link, hello.last_seq, hello.history_id, known.history, newest_first=hello.newest_first
            )
        self.send_tool_list(link)
        self.reply(link, self.status)
        for item in live:
            if self.calls.for_device(item, device_id):
                self.calls.deliver(item, link, device_id)
        if older is not None:  # a newest-first catch-up: the older pages after the waiting cards
            older()
        self.out.event(DevicesChanged(device_id, attached=True))

    # ------------------------------------------------------------------------ from the App

    def _on_result(self, link: L, device_id: str, result: ToolResult, ref: str, known: Call | None) -> None:
        problem = self._answer(result, device_id, known, by=link)
        if problem is not None:
            code, message = problem
            if code == "call_closed":  # the verdict first: the device's card shows how the call ended
                ended = self.calls.lookup(result.call_id) or known
                if ended is not None:
                    self.reply(link, verdict(result.call_id, closed_reason(ended), ended))
            self.reply(link, Error(code=code, message=message, ref=ref, call_id=result.call_id))

    def _answer(
        self, result: ToolResult, device_id: str, known: Call | None, *, by: L | None = None, surface: str | None = None
    ) -> tuple[str, str] | None:
        """Apply an answer to a call under the rules every answer follows; why not, as (code, message), or None."""
        item = self.calls.live(result.call_id)
        if item is None:
            ended = self.calls.lookup(result.call_id) or known
            if ended is None:
                return "unknown_call", UNKNOWN_CALL
            if surface is None and ended.result is not None and ended.result.status == result.status:
                given = self.catalog.complete_result(ended.request.name, ended.request.arguments, result.result)
                if ended.result.result == given:
                    return None  # the same answer again (in the seeds' shape too): already applied
            if surface is None:
                self.out.audit("result.refused", call_id=result.call_id, device_id=device_id, detail=str(ended.state))
            return "call_closed", call_closed(ended)
        if result.status == "unsupported" and by is not None and not self.calls.unsupported(item, device_id):
            self.out.audit(
                "result.unsupported", call_id=result.call_id, device_id=device_id, detail="others may answer"
            )
            return None  # another attached device can handle it: the call waits for its answer
        if result.status == "completed":
            request = item.request
            filled = self.catalog.complete_result(request.name, request.arguments, result.result)
            if filled is not result.result:  # an answer in the seeds' shape (a choice without its index)
                result = result.model_copy(update={"result": filled})
            problem = self.catalog.check_result(item.request.name, item.request.action, result.result)
            if problem is not None:  # the call stays live: the App may answer again
                problem = bounded(problem)  # it may quote the App's value
                self.out.audit("result.invalid", call_id=result.call_id, device_id=device_id, detail=problem)
                return "invalid_result", problem
        self.calls.finish(item, result, by=by, surface=surface)
        return None

    def answer_from(self, surface: str, result: ToolResult, known: Call | None = None) -> str | None:
        """An answer given on a surface that is no attached device (the card an MCP Apps host shows
        inline), under a device's rules: the first answer wins, every device's card is dismissed
        ("answered on another device"), a ``completed`` answer must fit the tool's ``outputSchema``.
        ``known``: the call as the store holds it. Returns why it was not applied, or None;
        ``surface`` names it in the audit log.
        """
        problem = self._answer(result, surface, known, surface=surface)
        return problem[1] if problem is not None else None

    def _on_tool_list(self, link: L, device_id: str, listing: ToolList) -> None:
        self.out.batch.registry.append(
            DeclareTools(link, device_id, f"{APP_SOURCE}{device_id}", tuple(listing.tools), bool(listing.request))
        )

    def registry_applied(self, change: RegistryChange, outcome: Applied) -> None:
        """The driver applied ``change`` (from :attr:`Batch.registry`) to its registry; ``outcome`` is what it did."""
        if isinstance(change, WithdrawTools):
            if outcome.changed:
                self.out.event(ToolsChanged())
            return
        link, device_id = change.link, change.device_id
        if outcome.refused is not None:  # nothing was changed
            self.out.audit("tools.refused", device_id=device_id, detail=bounded(outcome.refused))
            message = bounded(f"tool.list refused, no tool changed: {outcome.refused}")
            self.reply(link, Error(code="bad_tools", message=message))
        elif change.tools or outcome.changed:
            if outcome.skipped:
                message = f"tools already provided by the agent side: {list(outcome.skipped)}"
                self.reply(link, Error(code="tool_name_taken", message=message))
            self.out.audit("tools.declared", device_id=device_id, detail=",".join(t.name for t in change.tools))
            self.out.event(ToolsChanged(reply_to=link if change.request else None))
        elif change.request:
            self.send_tool_list(link)

    def send_tool_list(self, link: L) -> None:
        """Send the agent's tools to the device on ``link`` (the answer to a ``tool.list`` with ``request``)."""
        self.reply(link, ToolList(tools=self.catalog.agent_tools()))

    # ------------------------------------------------------------------------ from the agent

    def start_call(
        self,
        request: ToolCall,
        *,
        wait: float,
        known: Call | None = None,
        forwarded: bool = False,
        conversation_id: str | None = None,
    ) -> Call:
        """Start a call to the App with a deadline ``wait`` seconds from now; returns its :class:`Call`.

        The call belongs to ``conversation_id`` (default: the session's) and is kept in its
        history. ``known``: the call with this id as the store holds it, read by the driver (a
        known id is not started again). ``forwarded``: another process of the agent made the
        call and waits on it here. See :meth:`LiveCalls.start <.live.LiveCalls.start>`.
        """
        return self.calls.start(request, wait=wait, known=known, forwarded=forwarded, conversation_id=conversation_id)

    def cancel_call(self, call_id: str, reason: str = "cancelled by the agent") -> bool:
        """Cancel a live call on every device; False when it is not live."""
        return self.calls.end(call_id, "cancelled", reason)

    def recover(self, pending: list[Call], *, reclaim: float = 0.0) -> list[Call]:
        """Once per session: close the calls a previous process left ``pending`` (see ``LiveCalls.recover``)."""
        return self.calls.recover(pending, reclaim=reclaim)

    def reply(self, link: L, payload: Payload) -> None:
        """Send ``payload`` to the device on ``link`` (e.g. the result of a tool the App called)."""
        self.devices.reply(link, payload)

    def broadcast(self, payload: Payload, *, conversation_id: str | None = None, seq: int | None = None) -> int:
        """Send ``payload`` to every attached device (in ``conversation_id``, as entry ``seq``); returns to how many."""
        return self.devices.broadcast(payload, conversation_id=conversation_id, seq=seq)

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
        conversation_id = self.devices.conversation(conversation_id)
        message_id = message_id or codec.new_id("msg")
        settled = self.replies.settle(message_id, text)
        if settled is None:
            return message_id
        self.out.audit("text.out")
        files = list(attachments)
        kept = by_url(files) or []
        entry = self.history.record(
            "text.out", conversation_id, text=settled.text, message_id=message_id, attachments=kept or None
        )
        seq = entry.seq if entry is not None else None
        for link, device_id in self.devices.items():
            inline = self.devices.max_text(link) is not None
            message = settled.model_copy(update={"attachments": files if inline else kept})
            self.out.send(link, self.devices.encode(message, device_id, conversation_id=conversation_id, seq=seq))
        return message_id

    def stream_text(self, message_id: str, text: str, *, conversation_id: str | None = None) -> None:
        """Reply ``message_id`` being written reads ``text`` so far: every device gets the new piece."""
        delta = self.replies.update(message_id, text)
        if delta is not None:
            self.broadcast(delta, conversation_id=conversation_id)

    def set_status(self, state: AgentState, detail: str | None = None, *, conversation_id: str | None = None) -> None:
        """Record the agent's status (in ``conversation_id``) and push it to every device.

        A run that ended ``interrupted`` or ``failed`` settles its replies still being written as
        interrupted (an ``idle`` run's last piece may still be on its way). A status that differs
        from the last one kept is kept in the history.
        """
        conversation_id = self.devices.conversation(conversation_id)
        self.status = AgentStatus(state=state, detail=detail)
        if state in ("interrupted", "failed"):
            for message in self.replies.interrupt():
                self.out.audit("text.out", detail="interrupted")
                cut = self.history.record(
                    "text.out", conversation_id, text=message.text, message_id=message.message_id, interrupted=True
                )
                self.broadcast(message, conversation_id=conversation_id, seq=cut.seq if cut is not None else None)
        entry = None
        if self._recorded_status != (conversation_id, state, detail):
            self._recorded_status = (conversation_id, state, detail)
            entry = self.history.record("status", conversation_id, status=self.status)
        self.broadcast(self.status, conversation_id=conversation_id, seq=entry.seq if entry else None)

    def name_conversation(self, conversation_id: str, title: str) -> None:
        """Title conversation ``conversation_id`` (e.g. a Hermes session's title); every device is told.

        Kept in the history; the same title again changes nothing. ``title`` is cut to 200 characters.
        """
        self.history.name(self.devices.conversation(conversation_id), title)

    def audit(self, event: str, *, link: L | None = None, call_id: str | None = None, detail: str = "") -> None:
        """Record an audit event the driver saw (an in-process tool's run, a file kept), about ``link``'s device."""
        device_id = self.devices.device_id(link) if link is not None else None
        self.out.audit(event, call_id=call_id, device_id=device_id, detail=detail)
