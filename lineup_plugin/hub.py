"""The hub: the asyncio driver of the session core, for every transport and runtime.

Every rule of a session (handshake, welcome, redelivery, dedupe, first answer wins, expiry,
dismissal on other devices, restart recovery) lives in the sans-I/O
:class:`~lineup_plugin.protocol.session.Session`. The hub feeds it — what transports receive,
what the runtime asks, the clock — and after each input applies its output in one place,
:meth:`Hub._flush`, in this order:

1. commit the store changes (one transaction);
2. hand the messages to the links (which only queue);
3. wake the callers whose calls ended;

so no ``tool.call`` and no terminal notice ever leaves before the row it depends on is
committed, whatever the transport. Then it runs the events that need the runtime (text typed
in the App, stop, tools declared, an App calling an agent tool).

Transports see :meth:`connect`, :meth:`receive` and :meth:`disconnect`; runtimes see
:meth:`call` / :meth:`agent_call`, :meth:`cancel`, :meth:`send_text` and :meth:`set_status`.
The hub runs on one asyncio event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import ArgumentsError, HandedOverError, MediaError, ProtocolError, StoreError, TransportError
from .media import MediaStore, StoredFile
from .protocol import codec
from .protocol.calls import Call
from .protocol.history import DEFAULT_RETENTION, Record, Retention
from .protocol.messages import (
    Actor,
    AgentState,
    Attachment,
    Envelope,
    Error,
    FileBegin,
    FileStored,
    Origin,
    Payload,
    ToolCall,
    ToolResult,
)
from .protocol.session import (
    ANSWERED_ELSEWHERE,
    AppToolCall,
    Audit,
    Batch,
    Change,
    CloseLink,
    DevicesChanged,
    Event,
    FileReceived,
    Peer,
    SaveCall,
    Send,
    Session,
    StopRequested,
    TextReceived,
    ToolsChanged,
    Verifier,
    closed_reason,
    failure,
)
from .protocol.tools import HIGH_RISK, ToolDefinition
from .store import MemoryStore, Store
from .tools.registry import RegisteredTool, Registry, call_risk, split_arguments
from .tools.runner import Confirm, run_for_agent

if TYPE_CHECKING:
    from .config.settings import Settings
    from .ports import Link

log = logging.getLogger(__name__)

DEFAULT_DEADLINE = 600.0
#: how many told-but-unwritten changes the hub keeps for a store that fails for long (oldest dropped)
UNWRITTEN_LIMIT = 10_000
#: seconds between tries to write them
RETRY_SECONDS = 1.0
INTERRUPTED = "the agent was interrupted"

TextHandler = Callable[[str, str], Awaitable[None] | None]
#: App text that came with files: device id, text, the files (kept in the media store)
FilesHandler = Callable[[str, str, list[StoredFile]], Awaitable[None] | None]
StopHandler = Callable[[str], Awaitable[None] | None]
ToolsChangedHandler = Callable[[], Awaitable[None] | None]

__all__ = ["ANSWERED_ELSEWHERE", "Hub", "Peer", "closed_reason", "failure"]


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if inspect.isawaitable(value):
        await value


class _Catalog:
    """The registry as the session core sees it."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry

    def agent_tools(self) -> list[ToolDefinition]:
        return [t.definition for t in self.registry if t.in_process]

    def runs_in_process(self, name: str) -> bool:
        tool = self.registry.get(name)
        return tool is not None and tool.in_process

    def declare(self, source: str, tools: list[ToolDefinition]) -> list[str]:
        return self.registry.replace_source(source, tools)

    def withdraw(self, source: str) -> bool:
        return bool(self.registry.remove_source(source))

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        return self.registry.check_result(name, action, result)


class Hub:
    """Drives the session of one agent with its user's devices on an asyncio loop (see the module docstring).

    ``clock`` (seconds since the epoch) is the session's clock; deadlines are armed on the
    running loop from it.
    """

    def __init__(
        self,
        registry: Registry,
        *,
        store: Store | None = None,
        agent_id: str = "lineup-agent",
        conversation_id: str = "default",
        deadline: float = DEFAULT_DEADLINE,
        deadlines: dict[str, float] | None = None,
        on_text: TextHandler | None = None,
        on_stop: StopHandler | None = None,
        on_tools_changed: ToolsChangedHandler | None = None,
        on_files: FilesHandler | None = None,
        media: MediaStore | None = None,
        clock: Callable[[], float] = time.time,
        retention: Retention = DEFAULT_RETENTION,
        reclaim: float = 0.0,
    ) -> None:
        self.registry = registry
        self.store: Store = store if store is not None else MemoryStore()
        self.deadline = deadline
        self.deadlines = dict(deadlines or {})
        self.on_text = on_text
        self.on_stop = on_stop
        self.on_tools_changed = on_tools_changed
        self.on_files = on_files
        #: where files sent either way are kept (None: this hub takes no files)
        self.media = media
        self.session: Session[Link] = Session(
            records=self.store,
            catalog=_Catalog(registry),
            clock=clock,
            agent_id=agent_id,
            conversation_id=conversation_id,
            retention=retention,
        )
        self._waiters: dict[str, list[asyncio.Future[ToolResult]]] = {}
        #: changes told to the devices and the model but not yet written (the store failed on them)
        self._unwritten: list[Change] = []
        self._retry: asyncio.TimerHandle | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self._devices_changed = asyncio.Event()
        #: the conversation of the App text :attr:`on_text` is handling (``default`` when not told)
        self.text_conversation = conversation_id
        #: runs of high-risk in-process tools an App called, waiting for the user's approval
        self.app_runs: set[asyncio.Task[None]] = set()
        #: the calls a previous process left pending and this hub closed when it was made (the
        #: others wait ``reclaim`` seconds for the processes that forwarded them to claim them again)
        self.recovered: list[Call] = self.recover(reclaim)

    @classmethod
    def from_settings(cls, settings: Settings, registry: Registry | None = None, **options: Any) -> Hub:
        """The hub ``settings`` describe: their store, agent id and deadlines, with ``registry``
        (default: every installed plugin's tools) and ``options`` (``on_text``, ``on_stop``,
        ``on_tools_changed``, ``conversation_id``...). Call it on the thread of the hub's event loop."""
        from .plugins import load_registry
        from .store import open_store

        return cls(
            registry if registry is not None else load_registry(),
            store=open_store(settings),
            media=MediaStore.from_settings(settings),
            agent_id=settings.agent_id,
            deadline=settings.deadline,
            deadlines=settings.deadlines,
            retention=settings.retention,
            reclaim=settings.handover_grace,
            **options,
        )

    # ------------------------------------------------------------------------ the one flush

    def _flush(self, *, retry: bool = True) -> list[Event]:
        """Apply what the session produced: commit, then send, then wake; returns the runtime's events."""
        batch = self.session.take()
        unsaved: list[Call] = []
        if self._unwritten:
            self._write_unwritten()
        if batch.changes:
            try:
                self.store.apply(batch.changes)  # committed when it returns: only now may anything leave
            except StoreError as exc:
                if retry:
                    unsaved = self._salvage(batch, exc)
                else:  # the failures of calls that could not be saved: told now, written when the store can
                    count = len(batch.ended)
                    log.error("lineup: could not save the failure of %d call(s) (%s); retrying later", count, exc)
                    self._unwritten.extend(batch.changes)
                    del self._unwritten[:-UNWRITTEN_LIMIT]
                    self._retry_later()
        for message in batch.messages:
            if isinstance(message, Send):
                try:
                    message.link.send(message.text)
                except TransportError as exc:  # a dead link must not stop the others
                    log.info("send to %s failed: %s", message.link.name, exc)
            elif isinstance(message, CloseLink):
                message.link.close(message.code, message.reason)
        for call in batch.ended:
            assert call.result is not None
            for waiter in self._waiters.pop(call.call_id, ()):
                if not waiter.done():  # a cancelled caller's wait is done already
                    waiter.set_result(call.result)
        if unsaved:  # the model and every App are told, in a batch of their own
            for call in unsaved:
                self.session.abandon(call, "the agent could not save this call; ask again")
            batch.events.extend(self._flush(retry=False))
        if batch.new_deadline or self._timer is None:
            self._arm_timer()
        if batch.events and any(isinstance(event, DevicesChanged) for event in batch.events):
            self._devices_changed.set()
        return batch.events

    def _retry_later(self) -> None:
        """Try the unwritten changes again in :data:`RETRY_SECONDS` (or at the next flush, if sooner)."""
        if self._retry is None:
            with contextlib.suppress(RuntimeError):  # no loop: the next flush tries
                self._retry = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._on_retry)

    def _on_retry(self) -> None:
        self._retry = None
        self._flush()

    def _write_unwritten(self) -> None:
        """Write the failures that were told but could not be saved, once the store takes writes again."""
        try:
            self.store.apply(self._unwritten)
        except StoreError:
            self._retry_later()  # still failing
            return
        log.info("lineup: saved %d change(s) that had waited for the store", len(self._unwritten))
        self._unwritten.clear()

    def _salvage(self, batch: Batch[Link], exc: StoreError) -> list[Call]:
        """A batch could not be committed: write what can be, call by call; the calls that could not.

        Their messages are dropped from ``batch`` and nobody waiting on them is woken yet (see
        :meth:`Session.abandon <lineup_plugin.protocol.session.Session.abandon>`). A store that
        fails on everything (a full disk) fails every call of the batch, and goes on trying with
        the next batches.
        """
        log.error("lineup: could not save a batch (%s); saving it call by call", exc)
        groups: dict[str | None, list[Change]] = {}
        calls: dict[str, Call] = {}
        for change in batch.changes:
            if isinstance(change, SaveCall):
                key: str | None = change.call.call_id
                calls[change.call.call_id] = change.call
            else:
                key = change.call_id if isinstance(change, Audit | Record) else None
            groups.setdefault(key, []).append(change)
        failed: set[str] = set()
        for key, changes in groups.items():
            try:
                self.store.apply(changes)
            except StoreError as group_exc:
                if key is None:
                    log.error("lineup: could not save %d record(s): %s", len(changes), group_exc)
                elif key in calls:
                    log.error("lineup: could not save call %s: %s", key, group_exc)
                    failed.add(key)
        batch.messages = [m for m in batch.messages if not (isinstance(m, Send) and m.call_id in failed)]
        batch.ended = [call for call in batch.ended if call.call_id not in failed]
        return [calls[call_id] for call_id in failed]

    async def _settle(self) -> None:
        """Flush, then run the events that need the runtime (each may produce more to flush)."""
        for event in self._flush():
            if isinstance(event, TextReceived):
                self.text_conversation = event.conversation_id
            if isinstance(event, TextReceived) and event.attachments:
                await self._text_with_files(event)
            elif isinstance(event, TextReceived):
                await _maybe_await(self.on_text(event.device_id, event.text) if self.on_text else None)
            elif isinstance(event, FileReceived):
                self._on_file(event)
            elif isinstance(event, StopRequested):
                await _maybe_await(self.on_stop(event.device_id) if self.on_stop else None)
            elif isinstance(event, ToolsChanged):
                await _maybe_await(self.on_tools_changed() if self.on_tools_changed else None)
                if event.reply_to is not None:  # the App asked for our tools: answer once the runtime has its own
                    self.session.send_tool_list(event.reply_to)
                    self._flush()
            elif isinstance(event, AppToolCall):
                await self._run_for_app(event.link, event.request)

    def _arm_timer(self) -> None:
        """One timer, at the session's next deadline. A timer due earlier is left alone: when it
        fires, the session ends what is due (perhaps nothing) and the timer is armed again."""
        due = self.session.next_deadline()
        if due is None or (self._timer_at is not None and self._timer_at <= due):
            return
        if self._timer is not None:
            self._timer.cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop yet (a hub made outside one): armed on the next flush inside one
            return
        self._timer_at = due
        self._timer = loop.call_later(max(0.0, due - self.session.clock()), self._on_timer)

    def _on_timer(self) -> None:
        self._timer = self._timer_at = None
        self.session.tick()
        self._flush()

    # ---------------------------------------------------------------------------- devices

    @property
    def agent(self) -> Actor:
        """The agent as it signs its messages."""
        return self.session.agent

    @property
    def conversation_id(self) -> str:
        """The conversation every message of this hub belongs to."""
        return self.session.conversation_id

    @property
    def peers(self) -> list[Peer[Link]]:
        """The attached App devices."""
        return self.session.peers

    @property
    def connected(self) -> bool:
        """Whether at least one App device is attached."""
        return bool(self.session.peers)

    async def wait_for_device(self) -> None:
        """Return once at least one App device is attached."""
        while not self.connected:
            self._devices_changed.clear()
            await self._devices_changed.wait()

    def connect(self, link: Link, *, verify: Verifier | None = None, device_id: str | None = None) -> None:
        """A transport connection ``link`` opened.

        With ``verify`` the App must say ``device.hello`` first and ``verify`` decides (a
        refusal is told and the link closed). Without, the transport vouches for ``device_id``
        and the device is attached at once.
        """
        max_text = getattr(link, "max_text", None)  # a link that carries bounded messages says so
        self.session.open(link, name=link.name, verify=verify, device_id=device_id, max_text=max_text)
        self._flush()

    def recover(self, reclaim: float = 0.0) -> list[Call]:
        """The calls a previous process left pending (done once, when the hub is made): see
        :meth:`Session.recover <lineup_plugin.protocol.session.Session.recover>`."""
        closed = self.session.recover(reclaim=reclaim)
        self._flush()
        return closed

    def add_secret(self, secret: str) -> None:
        """Never write ``secret`` (e.g. the direct token) to the audit log: it is redacted."""
        self.store.add_secret(secret)

    def attached(self, link: Link) -> bool:
        """Whether ``link`` passed its handshake."""
        return self.session.attached(link)

    async def receive(self, link: Link, text: str | bytes) -> None:
        """Handle one message that arrived on ``link``; bad input is answered with an ``error``."""
        self.session.receive(link, text)
        await self._settle()

    async def receive_object(self, link: Link, data: Any) -> None:
        """Handle one JSON object a transport has parsed already (e.g. out of an IM message)."""
        self.session.receive_object(link, data)
        await self._settle()

    async def handle(self, link: Link, message: Envelope) -> None:
        """Handle one decoded envelope from ``link``."""
        self.session.receive_envelope(link, message)
        await self._settle()

    async def disconnect(self, link: Link) -> None:
        """The connection ``link`` ended; its device's calls stay live until answered elsewhere or expired."""
        if self.media is not None:
            self.media.abort(link)
        self.session.close(link)
        await self._settle()

    def reply(self, link: Link, payload: Payload) -> None:
        """Send ``payload`` to the device on ``link`` (e.g. an ``error`` about its transport)."""
        self.session.reply(link, payload)
        self._flush()

    def encode(self, payload: Payload, device_id: str | None = None) -> str:
        """The wire text of ``payload`` from the agent, for a transport that answers before any link exists."""
        return self.session.encode(payload, device_id)

    # ---------------------------------------------------------------------------- outgoing

    async def broadcast(self, payload: Payload) -> int:
        """Send ``payload`` to every attached device; returns to how many."""
        sent = self.session.broadcast(payload)
        self._flush()
        return sent

    async def send_text(
        self,
        text: str,
        *,
        message_id: str | None = None,
        attachments: Sequence[Attachment] = (),
        conversation_id: str | None = None,
    ) -> str:
        """Send an agent reply (in ``conversation_id``, default the hub's) to every device, settling the reply
        streamed under ``message_id``; its id. Kept in the history."""
        message_id = self.session.send_text(
            text, message_id=message_id, attachments=attachments, conversation_id=conversation_id
        )
        self._flush()
        return message_id

    async def send_file(self, text: str, data: bytes, name: str, mime: str) -> str:
        """Send the agent's file ``data`` (kept in the media store) with ``text``; the message id.

        A link without URLs (the relay) gets it inline when it is small enough.
        """
        if self.media is None:
            raise MediaError("no_media", "this agent keeps no files")
        file = self.media.put(data, name, mime, check=False)
        inline = any(getattr(peer.link, "max_text", None) is not None for peer in self.peers)
        return await self.send_text(text, attachments=[self.media.attachment(file, inline=inline)])

    async def stream_text(self, message_id: str, text: str, *, conversation_id: str | None = None) -> None:
        """Reply ``message_id``, still being written, reads ``text`` so far: send every device the new piece."""
        self.session.stream_text(message_id, text, conversation_id=conversation_id)
        self._flush()

    async def set_status(
        self, state: AgentState, detail: str | None = None, *, conversation_id: str | None = None
    ) -> None:
        """Record and push the agent's status (in ``conversation_id``) to every device."""
        self.session.set_status(state, detail, conversation_id=conversation_id)
        self._flush()

    async def name_conversation(self, conversation_id: str, title: str) -> None:
        """Title a conversation (e.g. an agent session's title); every device is told, the history keeps it."""
        self.session.name_conversation(conversation_id, title)
        self._flush()

    @property
    def status(self) -> Any:
        """The agent's current status message."""
        return self.session.status

    # ------------------------------------------------------------------------------- calls

    def deadline_for(self, name: str) -> float:
        """The wait deadline in seconds for tool ``name`` (per-tool setting, else the default)."""
        return self.deadlines.get(name, self.deadline)

    async def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        action: str | None = None,
        deadline: float | None = None,
        call_id: str | None = None,
        conversation_id: str | None = None,
        origin: Origin | None = None,
        detached: bool = False,
    ) -> ToolResult:
        """Call a tool and wait for its terminal result; never raises for a bad call.

        The call belongs to ``conversation_id`` (default: the hub's); its card says so.

        Bad arguments give a ``failed`` result naming the field and what was expected; no App
        connected gives ``failed`` saying so. A call id that was already made is never run
        twice: its result is waited on or returned (a call recovered from the process that
        served before is claimed so). If the waiting task is cancelled (the runtime was
        interrupted) the call is cancelled on every device and the cancellation propagates —
        unless ``detached`` (a call another process forwarded, cancelled explicitly with
        :meth:`cancel`, and kept through a hand-over: see :meth:`release`, which raises
        :class:`~lineup_plugin.errors.HandedOverError` in its waiters). ``origin`` says who asks
        (shown on the card).
        """
        new_id = call_id is None
        if call_id is None:
            call_id = codec.new_id("call")
        else:
            known = self.session.lookup(call_id)
            if known is not None:
                self.session.claim(call_id)
                self._arm_timer()
                return await self._wait(known, owner=False)
        try:
            codec.check_storable(arguments, "arguments")  # what the store and the Apps could not take
            tool, spec = self.registry.resolve(name, action, arguments)
        except ProtocolError as exc:
            return failure(call_id, name, "failed", str(exc), error="invalid_arguments")
        except ArgumentsError as exc:
            return failure(
                call_id, name, "failed", str(exc), error="invalid_arguments", field=exc.path, expected=exc.expected
            )
        risk = call_risk(tool, spec, arguments)
        request = ToolCall(call_id=call_id, name=name, action=action, arguments=arguments, risk=risk, origin=origin)
        if tool.in_process:
            result = await run_for_agent(self.registry, tool, request, self._confirm(deadline))
            self.session.record_in_process(result)
            self._flush()
            return result
        wait = self.deadline_for(name) if deadline is None else deadline
        call = self.session.start_call(
            request, wait=wait, new_id=new_id, forwarded=detached, conversation_id=conversation_id
        )
        self._flush()
        return await self._wait(call, owner=not detached)

    async def agent_call(self, name: str, flat_arguments: dict[str, Any], **options: Any) -> ToolResult:
        """Call a tool with the model's flat arguments (``action`` among them for app/toolset tools)."""
        tool = self.registry.get(name)
        action, arguments = split_arguments(tool.definition, flat_arguments) if tool else (None, dict(flat_arguments))
        return await self.call(name, arguments, action=action, **options)

    async def _wait(self, call: Call, *, owner: bool) -> ToolResult:
        """The terminal result of ``call``; the ``owner``'s cancellation cancels the call on every device."""
        if call.done:
            assert call.result is not None
            return call.result
        waiter: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(call.call_id, []).append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if owner:
                self.session.cancel_call(call.call_id, INTERRUPTED)
                self._flush()
            raise

    def result_of(self, call_id: str) -> ToolResult | None:
        """The terminal result of ``call_id`` if it ended (an answer may win the race with an interrupt)."""
        call = self.session.lookup(call_id)
        return call.result if call is not None and call.done else None

    async def answer_from(self, surface: str, result: ToolResult) -> str | None:
        """Apply an answer given on ``surface``, which is no attached device (an MCP Apps host's card):
        as a device's answer, the first wins and every device's card is dismissed. Returns why it
        was refused (the call ended already, the answer breaks the tool's outputSchema), or None."""
        refused = self.session.answer_from(surface, result)
        self._flush()
        return refused

    async def cancel(self, call_id: str, reason: str = "cancelled by the agent") -> bool:
        """Cancel a live call on every device; returns False if it was not live."""
        cancelled = self.session.cancel_call(call_id, reason)
        self._flush()
        return cancelled

    def release(self, call_id: str) -> bool:
        """Let go of live call ``call_id`` without ending it, for the process that serves next to take over.

        Nothing is written or sent; its waiters get :class:`~lineup_plugin.errors.HandedOverError`.
        False when the call is not live.
        """
        if self.session.release(call_id) is None:
            return False
        for waiter in self._waiters.pop(call_id, ()):
            if not waiter.done():
                waiter.set_exception(HandedOverError(f"call {call_id} is handed over to the next serving process"))
        return True

    async def cancel_all(self, reason: str) -> int:
        """Cancel every live call (e.g. the user pressed stop); returns how many."""
        count = self.session.cancel_all(reason)
        self._flush()
        return count

    # ------------------------------------------------------------------------------- files

    def _on_file(self, event: FileReceived[Link]) -> None:
        """A piece of an upload: keep it; the App is told when the file is complete, or why it was refused."""
        message = event.message
        try:
            if self.media is None:
                raise MediaError("no_media", "this agent takes no files")
            if isinstance(message, FileBegin):
                self.media.begin(event.link, message)
                return
            file = self.media.chunk(event.link, message)
        except MediaError as exc:
            self.reply(event.link, Error(code=exc.code, message=str(exc), upload_id=message.upload_id))
            return
        if file is not None:
            self.session.audit_file(event.device_id, file.sha256, file.size)
            self.reply(event.link, FileStored(upload_id=message.upload_id, file=self.media.attachment(file)))

    async def _text_with_files(self, event: TextReceived) -> None:
        """App text with files: each is one the App uploaded, or comes inline; then the runtime gets them."""
        files: list[StoredFile] = []
        try:
            if self.media is None:
                raise MediaError("no_media", "this agent takes no files")
            for attachment in event.attachments:
                files.append(self.media.received(attachment))
        except MediaError as exc:
            for peer in self.peers:
                if peer.device_id == event.device_id:
                    self.reply(peer.link, Error(code=exc.code, message=f"the message was not delivered: {exc}"))
            return
        if self.on_files is not None:
            await _maybe_await(self.on_files(event.device_id, event.text, files))
        elif self.on_text is not None:
            names = ", ".join(file.name for file in files)
            await _maybe_await(self.on_text(event.device_id, f"{event.text}\n[files sent with it: {names}]"))

    def _confirm(self, deadline: float | None) -> Confirm:
        """How an in-process tool asks the user's approval: a ``confirm`` call to the App."""

        async def confirm(arguments: dict[str, Any]) -> ToolResult:
            return await self.call("confirm", arguments, deadline=deadline)

        return confirm

    async def _run_for_app(self, link: Link, request: ToolCall) -> None:
        """Run the in-process tool the App on ``link`` called, as for the agent: approved if high-risk, audited.

        A high-risk tool runs in a task of :attr:`app_runs`: its approval is answered on the very
        link whose message is being handled, so it cannot be waited for here.
        """
        tool = self.registry.get(request.name)
        if tool is None or not tool.in_process:  # withdrawn meanwhile
            message = f"the agent has no tool {request.name!r} an App can call"
            self.reply(link, failure(request.call_id, request.name, "unsupported", message))
        elif tool.definition.risk in HIGH_RISK:
            task = asyncio.create_task(self._app_run(link, tool, request))
            self.app_runs.add(task)
            task.add_done_callback(self.app_runs.discard)
        else:
            await self._app_run(link, tool, request)

    async def _app_run(self, link: Link, tool: RegisteredTool, request: ToolCall) -> None:
        result = await run_for_agent(self.registry, tool, request, self._confirm(None), caller="the App")
        self.session.record_in_process(result, link=link)
        self.session.reply(link, result)
        self._flush()
