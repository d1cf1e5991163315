"""The agent's side of the hub: tool calls and their answers, waiting and cancelling, hand-over,
and the agent's messages to every device. :class:`AgentSide` is a base of :class:`~lineup_plugin.hub.Hub`,
which drives the session: every method here feeds the session one input and flushes its output."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from .errors import HandedOverError
from .protocol import codec
from .protocol.calls import Call
from .protocol.live import INTERRUPTED
from .protocol.messages import Actor, AgentState, AgentStatus, Attachment, Origin, Payload, ToolResult
from .protocol.outputs import Event
from .protocol.session import Peer, Session
from .store import Store
from .tools.registry import Registry, split_arguments
from .tools.requests import prepare_call
from .tools.runner import run_for_agent
from .uploads import Uploads

if TYPE_CHECKING:
    from .ports import Link
    from .push.service import PushService


class AgentSide(ABC):
    """What a runtime asks of the hub (see the module docstring)."""

    registry: Registry
    store: Store
    session: Session[Link]
    files: Uploads
    deadline: float
    deadlines: dict[str, float]
    #: Web Push to the devices away (None: off; see :func:`lineup_plugin.hub.use_push`)
    push: PushService | None = None
    _waiters: dict[str, list[asyncio.Future[ToolResult]]]
    _devices_changed: asyncio.Event  #: set when a device attaches or detaches (the hub's)
    #: who a transport brings (a device, or None: any device) -> loop time until when (expect_device)
    _expected: dict[str | None, float]

    @abstractmethod
    def _flush(self, *, retry: bool = True) -> list[Event]:
        """Commit the session's batch, then send it; the events it held (the hub's loop step)."""

    def _audit(self, event: str, link: Link | None, detail: str = "", call_id: str | None = None) -> None:
        self.session.audit(event, link=link, call_id=call_id, detail=detail)

    @property
    def agent(self) -> Actor:
        """The agent as it signs its messages."""
        return self.session.agent

    @property
    def conversation_id(self) -> str:
        """The conversation every message of this hub belongs to by default."""
        return self.session.conversation_id

    @property
    def peers(self) -> list[Peer[Link]]:
        """The attached App devices."""
        return self.session.devices.peers

    # ---------------------------------------------------------------------------- devices

    @property
    def connected(self) -> bool:
        """Whether at least one App device is attached."""
        return bool(self.session.devices)

    async def wait_for_device(self) -> None:
        """Return once at least one App device is attached."""
        while not self.connected:
            self._devices_changed.clear()
            await self._devices_changed.wait()

    def expect_device(self, within: float, device_id: str | None = None) -> None:
        """A transport is bringing App devices (the relay logging in with devices paired, the direct
        server's App ``device_id`` whose network dropped reconnecting): a call made while none is
        attached waits up to ``within`` seconds for one (within its deadline) before it fails
        ``no_app``; a call to a device that can be pushed starts at once instead (it waits for that
        device anyway). Without ``device_id`` the first device to attach ends the expectation; with
        it, only that device attaching again does (a phone that dropped while a laptop stayed is
        still waited for once the laptop closes). ``expect_device(0)`` says the transport is there:
        the calls waiting for it go on at once."""
        if device_id is None or device_id not in self._attached_devices():  # not back on another connection
            self._expected[device_id] = asyncio.get_running_loop().time() + within
        if within <= 0:
            self._devices_changed.set()

    def _devices_moved(self) -> None:
        """A device attached or detached: the calls waiting for one look again; a device that was
        on its way (:meth:`expect_device`) and attached is here."""
        if self.connected and self._expected:
            now = asyncio.get_running_loop().time()
            back = self._attached_devices()
            self._expected = {d: t for d, t in self._expected.items() if t > now and d is not None and d not in back}
        self._devices_changed.set()

    def _attached_devices(self) -> set[str]:
        return {peer.device_id for peer in self.peers}

    async def _await_expected_device(self, at_most: float) -> float:
        """While no device is attached and a transport brings one, wait for it (``at_most`` seconds);
        returns how long that took."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        until = min(max(self._expected.values(), default=0.0), start + at_most)
        while not self.connected and (left := until - loop.time()) > 0:
            self._devices_changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._devices_changed.wait(), left)
        return loop.time() - start

    # ---------------------------------------------------------------------------- outgoing

    async def broadcast(self, payload: Payload) -> int:
        """Send ``payload`` to every attached device; returns to how many."""
        sent = self.session.broadcast(payload)
        self._flush()
        return sent

    async def send_text(
        self, text: str, *, message_id: str | None = None, attachments: Sequence[Attachment] = (),
        conversation_id: str | None = None,
    ) -> str:  # fmt: skip
        """Send an agent reply (in ``conversation_id``, default the hub's) to every device, settling the reply
        streamed under ``message_id``; its id. Kept in the history."""
        message_id = self.session.send_text(
            text, message_id=message_id, attachments=attachments, conversation_id=conversation_id
        )
        self._flush()
        return message_id

    async def send_file(self, text: str, data: bytes, name: str, mime: str) -> str:
        """Send the agent's file ``data`` (kept in the media store) with ``text``; the message id.
        A link without URLs (the relay) gets it inline when it is small enough."""
        inline = any(peer.link.max_text is not None for peer in self.peers)
        return await self.send_text(text, attachments=[self.files.outgoing(data, name, mime, inline=inline)])

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
    def status(self) -> AgentStatus:
        """The agent's current status message."""
        return self.session.status

    # ------------------------------------------------------------------------------- calls

    def deadline_for(self, name: str) -> float:
        """The wait deadline in seconds for tool ``name`` (per-tool setting, else the default)."""
        return self.deadlines.get(name, self.deadline)

    def stored_call(self, call_id: str) -> Call | None:
        """The call ``call_id`` as the session or else the store knows it (None: never made)."""
        return self.session.calls.lookup(call_id) or self.store.get_call(call_id)

    async def call(
        self, name: str, arguments: dict[str, Any], *, action: str | None = None, deadline: float | None = None,
        call_id: str | None = None, conversation_id: str | None = None, origin: Origin | None = None,
        detached: bool = False,
    ) -> ToolResult:  # fmt: skip
        """Call a tool and wait for its terminal result; never raises for a bad call.

        The call belongs to ``conversation_id`` (default: the hub's); its card says so. Bad
        arguments or no App connected give a ``failed`` result saying why. A call id already
        made is never run twice: its result is waited on or returned (a call recovered from the
        process that served before is claimed so). If the waiting task is cancelled the call is
        cancelled on every device and the cancellation propagates — unless ``detached`` (a call
        another process forwarded, kept through a hand-over: see :meth:`release`). ``origin``
        says who asks (shown on the card).
        """
        known = self.stored_call(call_id) if call_id is not None else None
        if known is not None:  # the session's rule: not started again, a recovered call is claimed
            call = self.session.start_call(known.request, wait=0, known=known)
            self._flush()
            return await self._wait(call, owner=False)
        prepared = prepare_call(
            self.registry, name, arguments, call_id=call_id or codec.new_id("call"), action=action, origin=origin
        )
        if isinstance(prepared, ToolResult):  # refused before it was made: metered all the same
            shown = name.encode("utf-8", "replace").decode("utf-8")[:200]  # any name, even a lone surrogate
            self._audit("call.created", None, shown, prepared.call_id)
            self._audit("call.failed", None, "invalid_arguments", prepared.call_id)
            self._flush()
            return prepared
        tool, request = prepared
        if tool.in_process:
            result = await run_for_agent(self.registry, tool, request, self._confirm(deadline))
            self._audit(f"tool.{result.status}", None, result.name or "", result.call_id)
            self._flush()
            return result
        wait = self.deadline_for(name) if deadline is None else deadline
        if not self.connected and not self.session.calls.reachable_offline:  # a device on its way: not no_app yet
            wait = max(0.0, wait - await self._await_expected_device(wait))
        call = self.session.start_call(request, wait=wait, forwarded=detached, conversation_id=conversation_id)
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

    async def answer_from(self, surface: str, result: ToolResult) -> str | None:
        """Apply an answer given on ``surface``, which is no attached device (an MCP Apps host's card):
        as a device's answer, the first wins and every device's card is dismissed. Returns why it
        was refused (the call ended already, the answer breaks the tool's outputSchema), or None."""
        refused = self.session.answer_from(surface, result, self.stored_call(result.call_id))
        self._flush()
        return refused

    async def cancel(self, call_id: str, reason: str = "cancelled by the agent") -> bool:
        """Cancel a live call on every device; returns False if it was not live."""
        cancelled = self.session.cancel_call(call_id, reason)
        self._flush()
        return cancelled

    def release(self, call_id: str) -> bool:
        """Let go of live call ``call_id`` without ending it, for the process that serves next to take over:
        nothing is written or sent; its waiters get HandedOverError. False when the call is not live."""
        if self.session.calls.release(call_id) is None:
            return False
        for waiter in self._waiters.pop(call_id, ()):
            if not waiter.done():
                waiter.set_exception(HandedOverError(f"call {call_id} is handed over to the next serving process"))
        return True

    async def cancel_all(self, reason: str) -> int:
        """Cancel every live call (e.g. the user pressed stop); returns how many."""
        count = self.session.calls.cancel_all(reason)
        self._flush()
        return count

    def _confirm(self, deadline: float | None) -> Callable[[dict[str, Any]], Awaitable[ToolResult]]:
        """How an in-process tool asks the user's approval: a ``confirm`` call to the App."""

        async def confirm(arguments: dict[str, Any]) -> ToolResult:
            return await self.call("confirm", arguments, deadline=deadline)

        return confirm

    def _ran_for_app(self, link: Link, result: ToolResult) -> None:
        """An in-process tool the App on ``link`` called ended: audited, the App told."""
        self._audit(f"tool.{result.status}", link, result.name or "", result.call_id)
        self.session.reply(link, result)
        self._flush()
