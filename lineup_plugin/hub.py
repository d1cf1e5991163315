"""The hub: the asyncio driver of the session core, for every transport and runtime.

Every rule of a session lives in the sans-I/O :class:`~lineup_plugin.protocol.session.Session`.
The hub feeds it — what transports receive (with what the store knows of it, read first), what
the runtime asks, the clock — and after each input applies its output in one place,
:meth:`Hub._flush`, in this order:

1. commit the store changes (one transaction);
2. apply the registry changes (an App's declared tools);
3. wake the callers whose calls ended (they run once the flush is done);
4. hand the messages to the links (which only queue);

so no ``tool.call`` and no terminal notice ever leaves before the row it depends on is
committed, whatever the transport. The callers are woken before the links are handed their
messages, so a caller's next call is queued before the links write: a call's outcome and the
next call leave in one write to the socket (see ``DirectLink``). Then it runs the events that
need the runtime (text typed in the App, stop, tools declared, an App calling an agent tool).
Argument checks and in-process tools are :mod:`lineup_plugin.tools`'; files
:mod:`lineup_plugin.uploads`'; writing what can be of a batch the store failed on is the
store's (:meth:`Store.salvage <lineup_plugin.store.Store.salvage>`).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .agent_side import AgentSide
from .alarm import Alarm
from .errors import PushError, StoreError, TransportError
from .media import MediaStore, StoredFile
from .plugins import load_registry
from .protocol.calls import Call
from .protocol.history import DEFAULT_RETENTION, Retention
from .protocol.messages import Envelope, Error, Payload, ToolResult
from .protocol.outputs import (
    AppToolCall,
    Batch,
    DevicesChanged,
    Event,
    FileReceived,
    Send,
    StopRequested,
    TextReceived,
    ToolsChanged,
)
from .protocol.session import ANSWERED_ELSEWHERE, Peer, Session, Verifier, closed_reason, failure
from .store import MemoryStore, Store, open_store
from .tools.catalog import RegistryCatalog
from .tools.registry import Registry
from .tools.runner import AppRuns
from .uploads import Uploads

if TYPE_CHECKING:
    from .config.settings import Settings
    from .ports import Link
    from .push.service import PushService

log = logging.getLogger(__name__)
_NONE: frozenset[str] = frozenset()

DEFAULT_DEADLINE = 600.0
#: seconds between tries to write what a failing store could not
RETRY_SECONDS = 1.0

TextHandler = Callable[[str, str], Awaitable[None] | None]
#: App text that came with files: device id, text, the files (kept in the media store)
FilesHandler = Callable[[str, str, list[StoredFile]], Awaitable[None] | None]
StopHandler = Callable[[str], Awaitable[None] | None]
ToolsChangedHandler = Callable[[], Awaitable[None] | None]

__all__ = ["ANSWERED_ELSEWHERE", "Hub", "Peer", "closed_reason", "failure"]


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if inspect.isawaitable(value):
        await value


class Hub(AgentSide):
    """Drives the session of one agent with its user's devices on an asyncio loop (see the module docstring).

    ``clock`` (seconds since the epoch) is the session's clock; deadlines are armed on the running loop from it.
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
        self.registry, self.deadline, self.deadlines = registry, deadline, dict(deadlines or {})
        self.store: Store = store if store is not None else MemoryStore()
        self.on_text, self.on_stop, self.on_tools_changed, self.on_files = on_text, on_stop, on_tools_changed, on_files
        self.catalog = RegistryCatalog(registry)
        self.session: Session[Link] = Session(
            catalog=self.catalog, clock=clock, kept=self.store.kept(), agent_id=agent_id,
            conversation_id=conversation_id, retention=retention,
        )  # fmt: skip
        #: files sent either way (``media``: where they are kept; None: this hub takes no files)
        self.files = Uploads(media, reply=self.reply, audit=lambda link, detail: self._audit("file.in", link, detail))
        #: the agent's in-process tools Apps call (high-risk ones wait for the user's approval)
        self.app_runs = AppRuns(registry, self._confirm(None), self._ran_for_app)
        self._waiters: dict[str, list[asyncio.Future[ToolResult]]] = {}
        self._retry: asyncio.TimerHandle | None = None
        self._alarm = Alarm(self.session.clock, self._on_timer)
        self._devices_changed = asyncio.Event()
        self._expected: dict[str | None, float] = {}
        self.watchers: list[Callable[[Batch[Link]], None]] = []  #: read each committed batch (Web Push)
        #: the conversation of the App text :attr:`on_text` or :attr:`on_files` is handling (``default``
        #: when not told)
        self.text_conversation = conversation_id
        #: the calls a previous process left pending and this hub closed when it was made (the
        #: others wait ``reclaim`` seconds for the processes that forwarded them to claim them again)
        self.recovered: list[Call] = self.recover(reclaim)

    @classmethod
    def from_settings(cls, settings: Settings, registry: Registry | None = None, **options: Any) -> Hub:
        """The hub ``settings`` describe: their store, agent id and deadlines, with ``registry``
        (default: every installed plugin's tools) and ``options`` (``on_text``, ``on_stop``,
        ``on_tools_changed``, ``conversation_id``...). Call it on the thread of the hub's event loop."""
        return push_as_set(cls(
            registry if registry is not None else load_registry(), store=open_store(settings),
            media=MediaStore.from_settings(settings), agent_id=settings.agent_id, deadline=settings.deadline,
            deadlines=settings.deadlines, retention=settings.retention, reclaim=settings.handover_grace, **options,
        ), settings)  # fmt: skip

    @property
    def media(self) -> MediaStore | None:
        """Where files sent either way are kept (None: this hub takes no files)."""
        return self.files.media

    # ------------------------------------------------------------------------ the one flush

    def _flush(self, *, retry: bool = True) -> list[Event]:
        """Apply what the session produced: commit, registry, wake, send; returns the runtime's events."""
        batch = self.session.take()
        failed: set[str] | frozenset[str] = _NONE
        if not self.store.write_deferred():
            self._retry_later()
        if batch.changes:
            try:
                self.store.apply(batch.changes)  # committed when it returns: only now may anything leave
            except StoreError as exc:
                if retry:
                    log.error("lineup: could not save a batch (%s); saving it call by call", exc)
                    failed = self.store.salvage(batch.changes)
                    batch.messages = [m for m in batch.messages if not (isinstance(m, Send) and m.call_id in failed)]
                else:  # the failures of calls that could not be saved: told now, written when the store can
                    log.error(
                        "lineup: could not save the failure of %d call(s) (%s); retrying later", len(batch.ended), exc
                    )
                    self.store.defer(batch.changes)
                    self._retry_later()
        for change in batch.registry:
            self.session.registry_applied(change, self.catalog.apply(change))
        unsaved = [call for call in batch.ended if call.call_id in failed] if failed else []
        for call in batch.ended:
            assert call.result is not None
            if call.call_id not in failed:
                for waiter in self._waiters.pop(call.call_id, ()):
                    if not waiter.done():  # a cancelled caller's wait is done already
                        waiter.set_result(call.result)
        for message in batch.messages:
            if isinstance(message, Send):
                try:
                    message.link.send(message.text)
                except TransportError as exc:  # a dead link must not stop the others
                    log.info("send to %s failed: %s", message.link.name, exc)
            else:
                message.link.close(message.code, message.reason)
        for watch in self.watchers:
            watch(batch)
        for call in unsaved:  # the model and every App are told, in a batch of their own
            self.session.calls.abandon(call, "the agent could not save this call; ask again")
        if unsaved or batch.registry:
            batch.events.extend(self._flush(retry=not unsaved))
        if batch.new_deadline or not self._alarm.armed:  # one timer, at the session's next deadline
            self._alarm.arm(self.session.calls.next_deadline())
        if batch.events and any(isinstance(event, DevicesChanged) for event in batch.events):
            self._devices_moved()
        return batch.events

    def _retry_later(self) -> None:
        """Flush again in :data:`RETRY_SECONDS` (or at the next flush, if sooner): the store may take writes then."""
        if self._retry is None:
            with contextlib.suppress(RuntimeError):  # no loop: the next flush tries
                self._retry = asyncio.get_running_loop().call_later(RETRY_SECONDS, self._on_retry)

    def _on_retry(self) -> None:
        self._retry = None
        self._flush()

    async def run_events(self, events: list[Event]) -> None:
        """Run the events of a flush that need the runtime (each may produce more to flush), in order."""
        for event in events:
            if isinstance(event, TextReceived):
                self.text_conversation = event.conversation_id
                await self._text(event)
            elif isinstance(event, FileReceived):
                self.files.piece(event)
                self._flush()
            elif isinstance(event, StopRequested):
                await _maybe_await(self.on_stop(event.device_id) if self.on_stop else None)
            elif isinstance(event, ToolsChanged):
                await _maybe_await(self.on_tools_changed() if self.on_tools_changed else None)
                if event.reply_to is not None:  # the App asked for our tools: answer once the runtime has its own
                    self.session.send_tool_list(event.reply_to)
                    self._flush()
            elif isinstance(event, AppToolCall):
                await self.app_runs.start(event.link, event.request)

    def _on_timer(self) -> None:
        self.session.calls.tick()
        self._flush()

    # ---------------------------------------------------------------------------- devices

    def connect(self, link: Link, *, verify: Verifier | None = None, device_id: str | None = None) -> None:
        """A transport connection ``link`` opened: with ``verify`` the App must say ``device.hello``
        first and ``verify`` decides; without, the transport vouches for ``device_id``."""
        self.session.open(link, name=link.name, verify=verify, device_id=device_id, max_text=link.max_text)
        self._flush()

    def recover(self, reclaim: float = 0.0) -> list[Call]:
        """The calls a previous process left pending (done once, when the hub is made): see
        :meth:`LiveCalls.recover <lineup_plugin.protocol.live.LiveCalls.recover>`."""
        closed = self.session.recover(self.store.pending_calls(), reclaim=reclaim)
        self._flush()
        return closed

    def add_secret(self, secret: str) -> None:
        """Never write ``secret`` (e.g. the direct token) to the audit log: it is redacted."""
        self.store.add_secret(secret)

    def device_of(self, link: Link) -> str | None:
        """The device ``link`` is attached as, once it passed its handshake; else None."""
        devices = self.session.devices
        return devices.device_id(link) if devices.attached(link) else None

    async def receive(self, link: Link, text: str | bytes | Any, *, parsed: bool = False) -> None:
        """Handle one message that arrived on ``link`` (``parsed``: a JSON value a transport parsed already,
        e.g. out of an IM message); bad input is answered with an ``error``."""
        if events := self.receive_now(link, text, parsed=parsed):  # most of an App's messages make none
            await self.run_events(events)

    def receive_now(self, link: Link, text: str | bytes | Any, *, parsed: bool = False) -> list[Event]:
        """:meth:`receive` as far as it goes without the runtime: the message is applied, committed and
        answered; the events left for the runtime, for :meth:`run_events` (most messages leave none).
        A transport may call it from its own callback, as the message arrives (no task switch)."""
        session = self.session
        message = session.decode(link, text, parsed=parsed)
        if message is not None:
            session.receive(link, message, self.store.read(session.wants(link, message)))
        return self._flush()

    async def receive_object(self, link: Link, data: Any) -> None:
        """Handle one JSON object a transport has parsed already (e.g. out of an IM message)."""
        await self.receive(link, data, parsed=True)

    async def handle(self, link: Link, message: Envelope) -> None:
        """Handle one decoded envelope from ``link``, with what the store knows of it."""
        self.session.receive(link, message, self.store.read(self.session.wants(link, message)))
        await self.run_events(self._flush())

    async def disconnect(self, link: Link) -> None:
        """The connection ``link`` ended; its device's calls stay live until answered elsewhere or expired."""
        self.files.abort(link)
        self.session.close(link)
        await self.run_events(self._flush())

    def reply(self, link: Link, payload: Payload) -> None:
        """Send ``payload`` to the device on ``link`` (e.g. an ``error`` about its transport)."""
        self.session.reply(link, payload)
        self._flush()

    def encode(self, payload: Payload, device_id: str | None = None) -> str:
        """The wire text of ``payload`` from the agent, for a transport that answers before any link exists."""
        return self.session.devices.encode(payload, device_id)

    # ---------------------------------------------------------------------- runtime side

    async def _text(self, event: TextReceived) -> None:
        """App text for the runtime; with files, each one the App uploaded or sent inline."""
        if not event.attachments:
            await _maybe_await(self.on_text(event.device_id, event.text) if self.on_text else None)
            return
        links = [peer.link for peer in self.peers if peer.device_id == event.device_id]
        files = self.files.with_text(event.attachments, links, ref=event.ref)
        if files is not None:
            self.session.history.keep_text(event)  # committed before the runtime hears of it
        self._flush()
        if files is None:
            return
        if self.on_files is not None:
            await _maybe_await(self.on_files(event.device_id, event.text, files))
        elif self.on_text is not None:
            names = ", ".join(file.name for file in files)
            await _maybe_await(self.on_text(event.device_id, f"{event.text}\n[files sent with it: {names}]"))


def use_push(hub: Hub, push: PushService) -> Hub:
    """``hub`` with Web Push: every welcome names the agent's key, every committed batch is read by
    ``push`` (cards waiting, shown, ended; subscriptions sent), a refused subscription is answered
    ``push_refused``, and while a device can be pushed a call waits for it instead of failing ``no_app``."""

    def refuse(link: Link, why: str) -> None:  # after the batch being applied
        asyncio.get_running_loop().call_soon(hub.reply, link, Error(code="push_refused", message=why))

    def reachable(count: int) -> None:
        hub.session.calls.reachable_offline = count > 0

    hub.push = push
    hub.session.push_key = push.public_key
    push.refuse, push.on_subscriptions = refuse, reachable
    reachable(len(push.subscriptions))
    hub.watchers.append(push.observe)
    return hub


def push_as_set(hub: Hub, settings: Settings) -> Hub:
    """``hub`` with Web Push as ``settings`` say (``push``, ``push_preview``, ``push_contact``,
    ``push_services``); without it when ``push`` is off or its key cannot be kept (logged)."""
    if not settings.push:
        return hub
    from .push.service import PushService

    push = PushService(
        settings.data_dir,
        preview=settings.push_preview,
        contact=settings.push_contact,
        services=settings.push_services,
    )
    try:
        return use_push(hub, push)
    except PushError as exc:
        log.warning("lineup: no Web Push: %s", exc)
        return hub
