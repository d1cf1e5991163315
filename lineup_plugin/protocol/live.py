"""The calls part of a session: a call's life from start to end, its repeats, expiry, recovery and hand-over.

- **Lifecycle**: a call goes to every attached device that can handle it
  (:meth:`LiveCalls.for_device`: a tool an App declared and no renderer draws goes to the devices
  that declared it, while one of them is attached); the first terminal answer wins
  (:meth:`LiveCalls.finish`), and every device — the one whose answer won too — gets
  ``tool.cancel`` with the verdict (:func:`verdict`: the result the agent got and the device
  that gave it), which its card shows; a call ends ``expired`` at its deadline
  (:meth:`LiveCalls.tick`) and ``cancelled`` when either side cancels. An ``unsupported`` answer
  settles a call only when no other attached device that can handle it is left to answer
  (:meth:`LiveCalls.unsupported`).
- **Repeats**: a call id is never run twice: starting a known id gives back the known call.
- **Recovery and hand-over**: :meth:`LiveCalls.recover` closes the calls a previous process
  left pending, or keeps forwarded ones live a while for their callers to claim
  (:meth:`LiveCalls.claim`); :meth:`LiveCalls.release` lets go of a live call without ending it.

Every time is the session's clock; what the store knows of a call is handed in by the driver.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any, Generic

from .base import bounded
from .calls import Call, CallState, format_timestamp
from .devices import Devices
from .messages import CallStatus, ToolAck, ToolCall, ToolCancel, ToolResult
from .outputs import CardShown, CardWaiting, L, Outbox
from .timeline import Timeline

ANSWERED_ELSEWHERE = "answered on another device"
NO_APP = "no LineUp App is connected; ask the user to open the App"
RESTARTED = "the agent restarted before an answer arrived; ask again"
EXPIRED = "no answer before the deadline"
#: why a call ends when the run that waits on it is interrupted
INTERRUPTED = "the agent was interrupted"


def interrupt_reason(is_interrupted: object) -> str:
    """Why a call ends once the check ``is_interrupted`` it waits with turned true: the check's own
    ``reason`` when it has one (a prompt answered in the agent's terminal), else :data:`INTERRUPTED`."""
    reason = getattr(is_interrupted, "reason", None)
    return reason if isinstance(reason, str) and reason.strip() else INTERRUPTED


def failure(call_id: str, name: str, status: str, message: str, **extra: Any) -> ToolResult:
    """A result with ``status`` and a human-readable ``message`` that never came from the App."""
    return ToolResult.model_validate(
        {"call_id": call_id, "name": name, "status": status, "result": {"message": message, **extra}}
    )


#: how people call an answering surface that is no device (its name on the other devices' cards)
SURFACE_NAMES = {"mcp-host": "the MCP host's card"}


#: why an answer to a call nobody knows was not applied (said to people: no call id in it)
UNKNOWN_CALL = "the agent does not know this call (any more); the answer was not applied"


def call_closed(call: Call) -> str:
    """Why an answer to a call that ended was not applied (said to people: no call id in it)."""
    return f"this call already ended as {call.state}; this answer was not applied"


def verdict(call_id: str, reason: str | None, call: Call | None) -> ToolCancel:
    """The ``tool.cancel`` that closes the cards of call ``call_id`` saying ``reason``, with the
    verdict on it when ``call`` is known and ended: what the agent got and whose answer it was."""
    outcome = None
    if call is not None and call.result is not None:
        outcome = {
            "status": call.result.status,
            "result": call.result.result,
            "device_id": call.answered_by,
            "device_name": call.answered_name,
        }
    return ToolCancel.model_validate({"call_id": call_id, "reason": reason, "outcome": outcome})


def closed_reason(call: Call | None) -> str:
    """Why a card the App still shows is closed: how its call ended (and the recorded message)."""
    if call is None:
        return "the agent no longer knows this call"
    message = call.result.result.get("message") if call.result is not None else None
    return bounded(f"this call already ended ({call.state})" + (f": {message}" if isinstance(message, str) else ""))


class LiveCalls(Generic[L]):
    """The live calls of a session and how each ends (see the module docstring)."""

    def __init__(
        self,
        out: Outbox[L],
        devices: Devices[L],
        timeline: Timeline[L],
        *,
        handled_by: Callable[[str], frozenset[str] | None] | None = None,
    ) -> None:
        self.out = out
        self.devices = devices
        self.timeline = timeline
        #: which devices can handle a tool when only some can (the catalog's ``handled_by``)
        self._handled_by = handled_by or (lambda name: None)
        self._live: dict[str, Call] = {}
        #: the devices that answered ``unsupported`` to a live call that others may still answer
        self._unsupported: dict[str, set[str]] = {}
        self._deadlines: list[tuple[float, str]] = []
        #: recovered calls nobody has claimed yet, and until when they wait for a claim
        self._unclaimed: dict[str, float] = {}
        self._recovered = False
        #: whether a device that is not attached can be told of a call (it subscribed to Web Push):
        #: then a call waits for it instead of failing ``no_app`` (the driver keeps this up to date)
        self.reachable_offline = False

    # ---------------------------------------------------------------------------- reading

    def live(self, call_id: str) -> Call | None:
        """The call ``call_id`` if it is live."""
        return self._live.get(call_id)

    def all(self) -> list[Call]:
        """The live calls, oldest first."""
        return list(self._live.values())

    def lookup(self, call_id: str) -> Call | None:
        """The call ``call_id`` if live or ended in the batch being filled (the store knows the others)."""
        return self._live.get(call_id) or self.out.ended_now(call_id)

    def next_deadline(self) -> float | None:
        """When the next live call expires or a recovered call stops waiting for its claim (by the clock), or None."""
        heap = self._deadlines
        while heap and (heap[0][1] not in self._live or self._live[heap[0][1]].expires_at != heap[0][0]):
            heapq.heappop(heap)
        due = [heap[0][0]] if heap else []
        if self._unclaimed:
            due.append(min(self._unclaimed.values()))
        return min(due) if due else None

    # ------------------------------------------------------------------------------ start

    def start(
        self,
        request: ToolCall,
        *,
        wait: float,
        known: Call | None = None,
        forwarded: bool = False,
        conversation_id: str | None = None,
    ) -> Call:
        """Start a call with a deadline ``wait`` seconds from now; returns its :class:`Call`.

        ``known``: the call with this id as the store holds it (read by the driver): a known id
        is not started again (a recovered call waiting for its claim is claimed) and its call
        is returned as it stands. With no device attached the call ends ``failed`` (``no_app``),
        unless a device can be told of it while away (:attr:`reachable_offline`).
        """
        known = known or self.lookup(request.call_id)
        if known is not None:
            self.claim(known.call_id)
            return known
        now = self.out.clock()
        conversation_id = self.devices.conversation(conversation_id)
        if not self.devices and not self.reachable_offline:
            call = Call(request=request, conversation_id=conversation_id, created_at=now, forwarded=forwarded)
            return self._fail_at_once(call, NO_APP, "no_app")
        expires_at = now + max(0.0, wait)
        request.expires_at = format_timestamp(expires_at)
        call = Call(
            request=request, conversation_id=conversation_id, created_at=now, expires_at=expires_at, forwarded=forwarded
        )
        over = self.devices.too_long(lambda device_id: self.devices.encode(call.request, device_id))
        if over is not None:
            name, limit, size = over
            message = (
                f"the call is {size:,} bytes, more than {name} carries ({limit:,}); "
                "ask for less (shorter text, fewer options)"
            )
            return self._fail_at_once(call, message, "too_large")
        self._live[call.call_id] = call
        heapq.heappush(self._deadlines, (expires_at, call.call_id))
        self.out.batch.new_deadline = True
        self.out.save(call)
        self.out.audit("call.created", call_id=call.call_id, detail=request.name)
        entry = self.timeline.record("call", conversation_id, call_id=call.call_id, call=request)
        seq = entry.seq if entry is not None else None
        for link, device_id in self.devices.items():
            if self.for_device(call, device_id):
                self.deliver(call, link, device_id, seq)
        self.out.event(CardWaiting(call))
        return call

    def for_device(self, call: Call, device_id: str) -> bool:
        """Whether ``call`` goes to device ``device_id``: when every App renders its tool, or the
        device declared it, or none of the devices that declared it is attached (someone must
        answer, if only ``unsupported``)."""
        handlers = self._handled_by(call.request.name)
        if handlers is None or device_id in handlers:
            return True
        return not any(other in handlers for _, other in self.devices.items())

    def unsupported(self, call: Call, device_id: str) -> bool:
        """Device ``device_id`` answered live ``call`` ``unsupported``: whether that settles it —
        only when no other attached device that can handle it is left to answer."""
        said = self._unsupported.setdefault(call.call_id, set())
        said.add(device_id)
        return not any(other not in said and self.for_device(call, other) for _, other in self.devices.items())

    def _fail_at_once(self, call: Call, message: str, error: str) -> Call:
        call.end("failed", message, now=self.out.clock(), error=error)
        self.out.save(call)
        self.out.audit("call.failed", call_id=call.call_id, detail=error)
        self.out.ended(call)
        return call

    def deliver(self, call: Call, link: L, device_id: str, seq: int | None = None) -> None:
        """Send live ``call`` to the device on ``link`` (unless the link cannot carry it: audited)."""
        text = self.devices.encode(call.request, device_id, conversation_id=call.conversation_id, seq=seq)
        limit = self.devices.max_text(link)
        if limit is not None and len(text.encode()) > limit:  # a link that attached after the call started
            self.out.audit("call.undeliverable", call_id=call.call_id, device_id=device_id, detail="too_large")
            return
        self.out.send(link, text, call.call_id)
        if call.state == CallState.CREATED:
            call.advance(CallState.DELIVERED, now=self.out.clock())
            self.out.save(call)
        self.out.audit("call.delivered", call_id=call.call_id, device_id=device_id)

    # -------------------------------------------------------------------------------- end

    def finish(
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
        if not call.finish(result, now=self.out.clock()):
            self.out.audit("duplicate.result", call_id=call.call_id)
            return False
        del self._live[call.call_id]
        self._unsupported.pop(call.call_id, None)
        by_device = (self.devices.device_id(by) if by is not None else None) or surface
        if by_device is not None:
            call.answered_by = by_device
            call.answered_name = self.devices.name_of(by_device) if by is not None else SURFACE_NAMES.get(by_device)
        self.out.save(call)
        self.out.audit(f"call.{call.state}", call_id=call.call_id, device_id=by_device)
        self.out.ended(call)
        seq = self.timeline.record_end(call)
        # a device's or surface's answer is "answered elsewhere"; its cancel keeps its own reason
        answered = (by is not None or surface is not None) and call.state is not CallState.CANCELLED
        told = ANSWERED_ELSEWHERE if answered else reason and bounded(reason)  # an agent's reason may be long
        self.devices.broadcast(
            verdict(call.call_id, told, call), conversation_id=call.conversation_id, seq=seq, call_id=call.call_id
        )
        return True

    def end(
        self, call_id: str, status: CallStatus, reason: str, *, by: L | None = None, told: str | None = None
    ) -> bool:
        """End live call ``call_id`` with ``status`` and ``reason`` (``told``: what the devices are told);
        False when it is not live."""
        item = self._live.get(call_id)
        if item is None:
            return False
        return self.finish(item, failure(call_id, item.request.name, status, reason), by=by, reason=told or reason)

    def cancel_all(self, reason: str) -> int:
        """Cancel every live call; returns how many."""
        return sum(self.end(call_id, "cancelled", reason) for call_id in list(self._live))

    def ack(self, device_id: str, ack: ToolAck) -> None:
        """A device says how far it got with a live call. An ack behind the call (another device
        took it further, or this one's acks crossed) is old news: ignored, never an error."""
        item = self._live.get(ack.call_id)
        stage = CallState(ack.stage)
        if item is None or item.passed(stage):
            return
        if item.advance(stage, now=self.out.clock()):
            self.out.save(item)
            self.out.audit(f"call.{ack.stage}", call_id=ack.call_id, device_id=device_id)
        if ack.stage == "waiting_user":  # every device that shows it, not only the first
            self.out.event(CardShown(ack.call_id, device_id))

    def abandon(self, call: Call, message: str) -> None:
        """The store could not write the last changes of ``call``, and nothing of them was sent: end it ``failed``.

        A live call ends ``failed`` with ``message``. A call whose end could not be written (an
        answer nothing may rely on, since nobody was told) ends ``failed`` instead of that
        answer. Either way every device gets a ``tool.cancel`` with ``message`` and the call is
        in :attr:`Batch.ended`, so the model is told too.
        """
        now = self.out.clock()
        result = failure(call.call_id, call.request.name, "failed", message, error="store_failed")
        if call.call_id in self._live:
            self.finish(self._live[call.call_id], result, reason=message)
            return
        if not call.done:
            return
        call.result = result  # replaces an end that was never written nor told
        call.state = CallState.FAILED
        call.history.append((CallState.FAILED, now))
        self.out.save(call)
        self.out.audit("call.failed", call_id=call.call_id, detail="store_failed")
        call.answered_by = call.answered_name = None
        self.out.ended(call)
        seq = self.timeline.record_end(call)
        self.devices.broadcast(
            verdict(call.call_id, bounded(message), call),
            conversation_id=call.conversation_id,
            seq=seq,
            call_id=call.call_id,
        )

    def tick(self) -> int:
        """End every live call whose deadline has passed, and every recovered call nobody claimed in time; how many."""
        now = self.out.clock()
        count = 0
        for call_id, until in list(self._unclaimed.items()):
            if until <= now:
                del self._unclaimed[call_id]
                count += self.end(call_id, "cancelled", RESTARTED)
        while (due := self.next_deadline()) is not None and due <= now:
            _, call_id = heapq.heappop(self._deadlines)
            count += self.end(call_id, "expired", EXPIRED, told=f"expired: {EXPIRED}")
        return count

    # ------------------------------------------------------------------ restart, hand-over

    def claim(self, call_id: str) -> bool:
        """The agent's side waits on call ``call_id`` again: a recovered call then lives on to its deadline.

        True when it was a recovered call waiting for its claim.
        """
        return self._unclaimed.pop(call_id, None) is not None

    def release(self, call_id: str) -> Call | None:
        """Let go of live call ``call_id`` without ending it: this process stops serving, another takes it over.

        Nothing is written and nobody is told: the call stays pending in the store, the devices
        keep showing its card, and the next session on the same store recovers it (``reclaim``).
        Returns the call, or None when it is not live.
        """
        self._unclaimed.pop(call_id, None)
        self._unsupported.pop(call_id, None)
        return self._live.pop(call_id, None)

    def recover(self, pending: list[Call], *, reclaim: float = 0.0) -> list[Call]:
        """Once per session: the calls a previous process left ``pending`` (read from the store); those closed now.

        Calls past their deadline end ``expired``, the others ``cancelled`` at once (their waiter
        is gone); an App that still shows one of them has its card closed with that reason when
        it reconnects — except, with ``reclaim`` > 0, the calls another process forwarded (a
        hand-over: the process that served is gone, but the one that asked may still wait): they
        stay live and are delivered to the devices as before; one started again by its id within
        ``reclaim`` seconds lives on to its own deadline, the others end ``cancelled`` then. A
        store belongs to one session at a time: a second one on the same store would close the
        first one's calls.
        """
        if self._recovered:
            return []
        self._recovered = True
        now = self.out.clock()
        closed = []
        for call in pending:
            if reclaim > 0 and call.forwarded and call.expires_at is not None and call.expires_at > now:
                self._live[call.call_id] = call
                heapq.heappush(self._deadlines, (call.expires_at, call.call_id))
                self._unclaimed[call.call_id] = now + reclaim
                self.out.batch.new_deadline = True
                self.out.audit("call.recovered", call_id=call.call_id, detail=f"waits {reclaim:g} s for its caller")
                continue
            if not call.expire_if_due(now):
                call.end("cancelled", RESTARTED, now=now)
            self.out.save(call)
            self.out.audit(f"call.{call.state}", call_id=call.call_id, detail="recovered after restart")
            self.timeline.record_end(call)
            closed.append(call)
        return closed
