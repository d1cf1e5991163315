"""The hub: routes LineUp messages between the agent and every connected App device.

It is transport-neutral (a transport hands it :class:`~lineup_plugin.ports.Peer`
objects and the text they receive) and runtime-neutral (a runtime calls :meth:`Hub.call` and
gets a :class:`~lineup_plugin.protocol.ToolResult`). It runs on one asyncio event loop.

What it guarantees:

- a call goes to every connected device; the first answer wins and the other devices get a
  ``tool.cancel`` with the reason "answered on another device";
- duplicate envelopes and results are applied once; an answer to an ended call is refused with a
  clear reason;
- a call ends ``expired`` at its deadline, ``cancelled`` when the agent side cancels or is
  interrupted, and is re-sent to a device that reconnects while it is live.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .config.settings import Settings

from .errors import ArgumentsError, CallStateError, ProtocolError, VersionError
from .protocol import codec
from .protocol.calls import Call, CallState, format_timestamp
from .protocol.messages import (
    Actor,
    AgentState,
    AgentStatus,
    AgentStop,
    DeviceHello,
    DeviceWelcome,
    Envelope,
    Error,
    Payload,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from .protocol.tools import HIGH_RISK
from .store import MemoryStore, Store
from .tools.registry import RegisteredTool, Registry, split_arguments

log = logging.getLogger(__name__)


class Peer(Protocol):
    device_id: str

    async def send(self, text: str) -> None: ...

    async def close(self, reason: str) -> None: ...

ANSWERED_ELSEWHERE = "answered on another device"
DEFAULT_DEADLINE = 600.0

TextHandler = Callable[[str, str], Awaitable[None] | None]
StopHandler = Callable[[str], Awaitable[None] | None]
ToolsChanged = Callable[[], Awaitable[None] | None]


async def _maybe_await(value: Awaitable[None] | None) -> None:
    if inspect.isawaitable(value):
        await value


@dataclass
class _Live:
    call: Call
    #: the first caller's wait (cancelling that caller cancels it: no shield needed)
    future: asyncio.Future[ToolResult]
    timer: asyncio.TimerHandle | None = None
    delivered_to: set[str] = field(default_factory=set)
    #: the waits of later callers with the same call id
    repeats: list[asyncio.Future[ToolResult]] = field(default_factory=list)


def failure(call_id: str, name: str, status: str, message: str, **extra: Any) -> ToolResult:
    """A result with ``status`` and a human-readable ``message`` that never reached the App."""
    return ToolResult.model_validate(
        {"call_id": call_id, "name": name, "status": status, "result": {"message": message, **extra}}
    )


def closed_reason(call: Call | None) -> str:
    """Why a card the App still shows is closed: how its call ended (and the recorded message)."""
    if call is None:
        return "the agent no longer knows this call"
    message = call.result.result.get("message") if call.result is not None else None
    return f"this call already ended ({call.state})" + (f": {message}" if isinstance(message, str) else "")


class Hub:
    """Routes calls, results, text and status between one agent and its user's devices."""

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
        on_tools_changed: ToolsChanged | None = None,
    ) -> None:
        self.registry = registry
        self.store: Store = store if store is not None else MemoryStore()
        self.agent = Actor(kind="agent", id=agent_id)
        self.conversation_id = conversation_id
        self.deadline = deadline
        self.deadlines = dict(deadlines or {})
        self.on_text = on_text
        self.on_stop = on_stop
        self.on_tools_changed = on_tools_changed
        self.status = AgentStatus(state="idle")
        self._peers: list[Peer] = []
        self._live: dict[str, _Live] = {}
        self._targets: dict[str | None, Actor] = {}
        self._recovered = False
        #: the calls a previous process left pending, closed when this hub was made
        self.recovered: list[Call] = self.recover()

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
            agent_id=settings.agent_id,
            deadline=settings.deadline,
            deadlines=settings.deadlines,
            **options,
        )

    # ----------------------------------------------------------------------------- devices

    @property
    def peers(self) -> list[Peer]:
        """The connected App devices."""
        return list(self._peers)

    @property
    def connected(self) -> bool:
        """Whether at least one App device is connected."""
        return bool(self._peers)

    async def attach(self, peer: Peer, hello: DeviceHello | None = None) -> None:
        """A device connected: welcome it, send it the agent's tools and status and its live calls.

        Calls whose cards the App still shows (``hello.open_calls``) but that ended meanwhile get
        a ``tool.cancel`` saying how they ended, so no card dangles.
        """
        self._peers.append(peer)
        self.store.audit("device.attach", device_id=peer.device_id)
        live = [item for item in self._live.values() if not item.call.done]
        await self._send(peer, DeviceWelcome(device_id=peer.device_id, agent=self.agent, pending=len(live)))
        await self._send(peer, ToolList(tools=self._agent_tools()))
        await self._send(peer, self.status)
        for item in live:
            await self._deliver(item, peer)
        for call_id in hello.open_calls if hello else ():
            if call_id in self._live:
                continue
            await self._send(peer, ToolCancel(call_id=call_id, reason=closed_reason(self.store.get_call(call_id))))

    async def detach(self, peer: Peer) -> None:
        """A device disconnected; its calls stay live until answered elsewhere or expired."""
        if peer in self._peers:
            self._peers.remove(peer)
        self.store.audit("device.detach", device_id=peer.device_id)
        gone = not any(p.device_id == peer.device_id for p in self._peers)
        if gone and self.registry.remove_source(f"app:{peer.device_id}"):
            await _maybe_await(self.on_tools_changed() if self.on_tools_changed else None)

    # ---------------------------------------------------------------------------- incoming

    async def receive(self, peer: Peer, text: str | bytes) -> None:
        """Handle one message from ``peer``; bad input is answered with an ``error`` message."""
        try:
            message = codec.decode(text)
        except VersionError as exc:
            await self._send(peer, Error(code="unsupported_version", message=str(exc)))
            return
        except ProtocolError as exc:
            await self._send(peer, Error(code="bad_message", message=str(exc)))
            return
        await self.handle(peer, message)

    async def handle(self, peer: Peer, message: Envelope) -> None:
        """Handle one decoded envelope from ``peer`` (duplicates by envelope id are dropped)."""
        if not self.store.first_seen(message.id):
            self.store.audit("duplicate.envelope", device_id=peer.device_id, detail=message.id)
            return
        payload = message.payload
        try:
            if isinstance(payload, ToolResult):
                await self._on_result(peer, payload, message.id)
            elif isinstance(payload, ToolAck):
                self._on_ack(peer, payload)
            elif isinstance(payload, ToolCancel):
                await self._on_cancel(peer, payload)
            elif isinstance(payload, ToolList):
                await self._on_tool_list(peer, payload)
            elif isinstance(payload, ToolCall):
                await self._on_app_call(peer, payload)
            elif isinstance(payload, Text):
                self.store.audit("text.in", device_id=peer.device_id)
                await _maybe_await(self.on_text(peer.device_id, payload.text) if self.on_text else None)
            elif isinstance(payload, AgentStop):
                self.store.audit("agent.stop", device_id=peer.device_id, detail=payload.reason or "")
                await _maybe_await(self.on_stop(peer.device_id) if self.on_stop else None)
            elif isinstance(payload, DeviceHello):
                await self._send(
                    peer, Error(code="already_connected", message="device.hello was already received", ref=message.id)
                )
            else:
                await self._send(
                    peer,
                    Error(
                        code="unexpected_kind", message=f"{message.kind} is not accepted from an App", ref=message.id
                    ),
                )
        except CallStateError as exc:
            await self._send(peer, Error(code="invalid_transition", message=str(exc), ref=message.id))

    async def _on_result(self, peer: Peer, result: ToolResult, ref: str) -> None:
        item = self._live.get(result.call_id)
        if item is None:
            ended = self.store.get_call(result.call_id)
            if ended is None:
                message = f"unknown call {result.call_id!r}; the answer was not applied"
                await self._send(peer, Error(code="unknown_call", message=message, ref=ref, call_id=result.call_id))
                return
            if (
                ended.result is not None
                and ended.result.status == result.status
                and ended.result.result == result.result
            ):
                return  # the same answer again: already applied
            self.store.audit(
                "result.refused", call_id=result.call_id, device_id=peer.device_id, detail=str(ended.state)
            )
            message = f"call {result.call_id!r} already ended as {ended.state}; this answer was not applied"
            await self._send(peer, Error(code="call_closed", message=message, ref=ref, call_id=result.call_id))
            return
        await self._finish(item, result, answered_by=peer)

    def _on_ack(self, peer: Peer, ack: ToolAck) -> None:
        item = self._live.get(ack.call_id)
        if item is None or item.call.done:
            return
        if item.call.advance(CallState(ack.stage)):
            self.store.save_call(item.call)
            self.store.audit(f"call.{ack.stage}", call_id=ack.call_id, device_id=peer.device_id)

    async def _on_cancel(self, peer: Peer, cancel: ToolCancel) -> None:
        item = self._live.get(cancel.call_id)
        if item is None:
            return
        reason = cancel.reason or "cancelled by the user"
        await self._finish(item, failure(cancel.call_id, item.call.request.name, "cancelled", reason), answered_by=peer)

    async def _on_tool_list(self, peer: Peer, listing: ToolList) -> None:
        source = f"app:{peer.device_id}"
        if listing.tools or self.registry.remove_source(source):
            skipped = self.registry.replace_source(source, listing.tools)
            if skipped:
                await self._send(
                    peer,
                    Error(code="tool_name_taken", message=f"tools already provided by the agent side: {skipped}"),
                )
            self.store.audit("tools.declared", device_id=peer.device_id, detail=",".join(t.name for t in listing.tools))
            await _maybe_await(self.on_tools_changed() if self.on_tools_changed else None)
        if listing.request:
            await self._send(peer, ToolList(tools=self._agent_tools()))

    async def _on_app_call(self, peer: Peer, request: ToolCall) -> None:
        tool = self.registry.get(request.name)
        if tool is None or not tool.in_process:
            result = failure(
                request.call_id, request.name, "unsupported", f"the agent has no tool {request.name!r} an App can call"
            )
        else:
            result = await self._run_in_process(tool, request)
        await self._send(peer, result)

    # ---------------------------------------------------------------------------- outgoing

    def _agent_tools(self) -> list[Any]:
        return [t.definition for t in self.registry if t.in_process]

    def encode(self, payload: Payload, device_id: str | None = None) -> str:
        """The wire text of ``payload`` sent by the agent to ``device_id`` (or to the user).

        For a transport that must answer a connection the hub does not know yet (e.g. a refused hello).
        """
        target = self._targets.get(device_id)
        if target is None:  # built once per device: validating an Actor per message shows in profiles
            if len(self._targets) >= 1024:
                self._targets.clear()
            target = Actor(kind="device", id=device_id) if device_id else Actor(kind="human", id="user")
            self._targets[device_id] = target
        return codec.encode_envelope(payload, sender=self.agent, target=target, conversation_id=self.conversation_id)

    async def _send(self, peer: Peer, payload: Payload) -> bool:
        try:
            await peer.send(self.encode(payload, peer.device_id))
        except Exception as exc:  # a dead peer must not stop the others
            log.info("send to %s failed: %s", peer.device_id, exc)
            return False
        return True

    async def broadcast(self, payload: Payload) -> int:
        """Send ``payload`` to every connected device; returns how many took it."""
        sent = 0
        for peer in list(self._peers):
            sent += await self._send(peer, payload)
        return sent

    async def send_text(self, text: str) -> None:
        """Send an agent reply to every device."""
        self.store.audit("text.out")
        await self.broadcast(Text(text=text))

    async def set_status(self, state: AgentState, detail: str | None = None) -> None:
        """Record and push the agent's status to every device."""
        self.status = AgentStatus(state=state, detail=detail)
        await self.broadcast(self.status)

    # ------------------------------------------------------------------------------- calls

    def recover(self) -> list[Call]:
        """Once, when the hub is made: close calls a previous process left pending (their waiter is gone).

        Calls past their deadline end ``expired``, the others ``cancelled``; an App that still
        shows one of them has its card closed with that reason when it reconnects. So a store
        belongs to one hub: a second hub on the same store would close the first one's calls.
        """
        if self._recovered:
            return []
        self._recovered = True
        closed = self.store.pending_calls()
        now = time.time()
        for call in closed:
            if not call.expire_if_due(now):
                call.end("cancelled", "the agent restarted before an answer arrived; ask again", now=now)
            self.store.save_call(call)
            self.store.audit(f"call.{call.state}", call_id=call.call_id, detail="recovered after restart")
        if closed:
            log.info("closed %d call(s) a previous run left pending", len(closed))
        return closed

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
    ) -> ToolResult:
        """Call a tool and wait for its terminal result; never raises for a bad call.

        Bad arguments give a ``failed`` result naming the field and what was expected; no App
        connected gives ``failed`` saying so. If the waiting task is cancelled (the runtime was
        interrupted) the call is cancelled on every device and the cancellation propagates.
        """
        if call_id is None:
            call_id = codec.new_id("call")  # fresh: neither live nor in the store
        else:
            repeated = await self._repeated_call(call_id)
            if repeated is not None:
                return repeated
        try:
            tool, _spec = self.registry.resolve(name, action, arguments)
        except ArgumentsError as exc:
            return failure(
                call_id, name, "failed", str(exc), error="invalid_arguments", field=exc.path, expected=exc.expected
            )
        request = ToolCall(call_id=call_id, name=name, action=action, arguments=arguments, risk=tool.definition.risk)
        if tool.in_process:
            if tool.definition.risk in HIGH_RISK:
                approval = await self.call(
                    "confirm",
                    {
                        "message": f"Allow the agent to run {name}?",
                        "details": json.dumps(arguments, ensure_ascii=False),
                        "risk": tool.definition.risk,
                    },
                    deadline=deadline,
                )
                if approval.status != "completed" or not approval.result.get("approved"):
                    return failure(
                        call_id, name, "rejected", f"the user did not approve {name}", approval=approval.status
                    )
            return await self._run_in_process(tool, request)
        if not self._peers:  # recorded like any call, so the store and the audit log know it ended
            refused = Call(request=request, conversation_id=self.conversation_id)
            refused.end("failed", "no LineUp App is connected; ask the user to open the App", error="no_app")
            self.store.save_call(refused)
            self.store.audit("call.failed", call_id=call_id, detail="no_app")
            assert refused.result is not None
            return refused.result
        wait = self.deadline_for(name) if deadline is None else deadline
        request.expires_at = format_timestamp(time.time() + wait)
        call = Call(request=request, conversation_id=self.conversation_id)
        loop = asyncio.get_running_loop()
        item = _Live(call=call, future=loop.create_future())
        self._live[call_id] = item
        self.store.save_call(call)
        self.store.audit("call.created", call_id=call_id, detail=name)
        item.timer = loop.call_later(max(0.0, wait), self._expire_soon, item)
        for peer in list(self._peers):
            await self._deliver(item, peer)
        try:
            return await item.future
        except asyncio.CancelledError:
            await self.cancel(call_id, "the agent was interrupted")
            raise

    async def agent_call(self, name: str, flat_arguments: dict[str, Any], **options: Any) -> ToolResult:
        """Call a tool with the model's flat arguments (``action`` among them for app/toolset tools)."""
        tool = self.registry.get(name)
        action, arguments = split_arguments(tool.definition, flat_arguments) if tool else (None, dict(flat_arguments))
        return await self.call(name, arguments, action=action, **options)

    async def _repeated_call(self, call_id: str) -> ToolResult | None:
        """The result of a call id that was already made: it is waited on, never run twice."""
        item = self._live.get(call_id)
        if item is not None:
            repeat: asyncio.Future[ToolResult] = asyncio.get_running_loop().create_future()
            item.repeats.append(repeat)
            return await repeat
        ended = self.store.get_call(call_id)
        return ended.result if ended is not None and ended.done else None

    async def _deliver(self, item: _Live, peer: Peer) -> None:
        if await self._send(peer, item.call.request):
            item.delivered_to.add(peer.device_id)
            if item.call.state == CallState.CREATED:
                item.call.advance(CallState.DELIVERED)
                self.store.save_call(item.call)
            self.store.audit("call.delivered", call_id=item.call.call_id, device_id=peer.device_id)

    def _expire_soon(self, item: _Live) -> None:
        asyncio.get_running_loop().create_task(self._expire(item))

    async def _expire(self, item: _Live) -> None:
        if not item.call.done:
            result = failure(item.call.call_id, item.call.request.name, "expired", "no answer before the deadline")
            await self._finish(item, result, answered_by=None, reason="expired: no answer before the deadline")

    async def cancel(self, call_id: str, reason: str = "cancelled by the agent") -> bool:
        """Cancel a live call on every device; returns False if it was not live."""
        item = self._live.get(call_id)
        if item is None or item.call.done:
            return False
        result = failure(call_id, item.call.request.name, "cancelled", reason)
        return await self._finish(item, result, answered_by=None, reason=reason)

    async def cancel_all(self, reason: str) -> int:
        """Cancel every live call (e.g. the user pressed stop); returns how many."""
        count = 0
        for call_id in list(self._live):
            count += await self.cancel(call_id, reason)
        return count

    async def _finish(
        self, item: _Live, result: ToolResult, *, answered_by: Peer | None, reason: str | None = None
    ) -> bool:
        call = item.call
        if not call.finish(result):
            self.store.audit("duplicate.result", call_id=call.call_id)
            return False
        self._live.pop(call.call_id, None)
        if item.timer is not None:
            item.timer.cancel()
        self.store.save_call(call)
        self.store.audit(
            f"call.{call.state}", call_id=call.call_id, device_id=answered_by.device_id if answered_by else None
        )
        assert call.result is not None
        for waiter in (item.future, *item.repeats):
            if not waiter.done():  # a cancelled caller's wait is done already
                waiter.set_result(call.result)
        others = [peer for peer in self._peers if peer is not answered_by]
        if others:
            notice = ToolCancel(call_id=call.call_id, reason=ANSWERED_ELSEWHERE if answered_by else reason)
            for peer in others:
                await self._send(peer, notice)
        return True

    async def _run_in_process(self, tool: RegisteredTool, request: ToolCall) -> ToolResult:
        try:
            value = self.registry.run_in_process(tool, request.arguments)
            if inspect.isawaitable(value):
                value = await value
        except ArgumentsError as exc:
            return failure(request.call_id, tool.name, "failed", str(exc), error="invalid_arguments")
        except Exception as exc:
            log.warning("in-process tool %s raised", tool.name, exc_info=True)
            return failure(request.call_id, tool.name, "failed", f"{type(exc).__name__}: {exc}", error="tool_error")
        result = value if isinstance(value, dict) else {"value": value}
        try:
            json.dumps(result)
        except (TypeError, ValueError):
            result = {"value": repr(value)}
        return ToolResult(
            call_id=request.call_id, name=tool.name, action=request.action, status="completed", result=result
        )
