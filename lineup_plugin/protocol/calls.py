"""The call state machine.

::

    created → delivered → acknowledged → waiting_user → completed | rejected | cancelled
                                                        | expired | unsupported | failed

Forward steps may be skipped (a call can go from ``delivered`` straight to ``waiting_user``, or
from any live state to a terminal one). The first terminal status wins: a later or duplicate
result is ignored, never applied. A step backwards, or a live state after a terminal one, is an
invalid transition and raises :class:`~lineup_plugin.errors.CallStateError`.
"""

from __future__ import annotations

import enum
import math
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..errors import CallStateError
from .messages import CallStatus, ToolCall, ToolResult


class CallState(enum.StrEnum):
    """Where a call is in its life."""

    CREATED = "created"
    DELIVERED = "delivered"
    ACKNOWLEDGED = "acknowledged"
    WAITING_USER = "waiting_user"
    COMPLETED = "completed"
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    UNSUPPORTED = "unsupported"
    FAILED = "failed"


_LIVE_ORDER = [CallState.CREATED, CallState.DELIVERED, CallState.ACKNOWLEDGED, CallState.WAITING_USER]
TERMINAL: frozenset[CallState] = frozenset(set(CallState) - set(_LIVE_ORDER))
#: each state by its value (what ``CallState(value)`` finds, without the enum's call)
_STATE_OF: dict[str, CallState] = {state.value: state for state in CallState}


def parse_timestamp(value: str) -> float:
    """Seconds since the epoch of an ISO 8601 timestamp (naive timestamps are read as UTC)."""
    moment = datetime.fromisoformat(value)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def format_timestamp(seconds: float) -> str:
    """An ISO 8601 UTC timestamp for seconds since the epoch, to the millisecond.

    The same text as ``datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")``
    (:func:`_format_slowly`), which it stands in for: the date and time of a whole second are
    written once, and only the milliseconds for each call. The last few seconds written are kept
    (a call's timestamps and its deadline, minutes later, alternate).
    """
    whole = math.floor(seconds)
    micros = round((seconds - whole) * 1_000_000)  # rounded half to even, as datetime rounds
    if micros >= 1_000_000:
        whole, micros = whole + 1, micros - 1_000_000
    if whole < 0 or whole > _LAST_SECOND:
        return _format_slowly(seconds)
    text = _seconds.get(whole)
    if text is None:
        if len(_seconds) >= _SECONDS_KEPT:
            _seconds.clear()  # dict operations hold the GIL: another thread's at worst writes one again
        text = _seconds[whole] = datetime.fromtimestamp(whole, UTC).isoformat()[:19]
    return f"{text}.{micros // 1000:03d}+00:00"


def _format_slowly(seconds: float) -> str:
    """:func:`format_timestamp` by ``datetime`` (its reference, and what it does outside 1970–9999)."""
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="milliseconds")


#: the last second of year 9999 (datetime's end)
_LAST_SECOND = 253_402_300_799
#: the whole seconds :func:`format_timestamp` wrote last, and their text up to the seconds
_seconds: dict[int, str] = {}
_SECONDS_KEPT = 16


@dataclass
class Call:
    """One tool call and everything known about it; holds no I/O.

    ``expires_at`` is seconds since the epoch (wall clock, so it survives a restart).
    ``forwarded``: another process of the agent made the call and waits on it here.
    """

    request: ToolCall
    conversation_id: str
    state: CallState = CallState.CREATED
    created_at: float = field(default_factory=time.time)
    expires_at: float | None = None
    result: ToolResult | None = None
    history: list[tuple[CallState, float]] = field(default_factory=list)
    #: made by another process of the agent, which waits on it through this one (see ``LiveCalls.recover``)
    forwarded: bool = False
    #: the call's id, unique within its conversation (the request's; read on every step of the call)
    call_id: str = field(init=False, repr=False)
    #: the device (or surface) whose answer ended the call, and how people call it; None when nobody answered
    answered_by: str | None = None
    answered_name: str | None = None

    def __post_init__(self) -> None:
        self.call_id = self.request.call_id
        if self.expires_at is None and self.request.expires_at is not None:
            self.expires_at = parse_timestamp(self.request.expires_at)
        if not self.history:
            self.history.append((self.state, self.created_at))

    @property
    def done(self) -> bool:
        """Whether the call has reached a terminal status."""
        return self.state in TERMINAL

    def advance(self, state: CallState, *, now: float | None = None) -> bool:
        """Move forward to a live ``state``; returns False when already there (a duplicate).

        Raises CallStateError for a step backwards or after the call finished.
        """
        if state in TERMINAL:
            raise CallStateError(f"call {self.call_id}: use finish() for the terminal status {state}")
        if self.state == state:
            return False
        if self.done:
            raise CallStateError(f"call {self.call_id}: cannot go to {state}, it already ended as {self.state}")
        if _LIVE_ORDER.index(state) < _LIVE_ORDER.index(self.state):
            raise CallStateError(f"call {self.call_id}: cannot go back from {self.state} to {state}")
        self._enter(state, now)
        return True

    def passed(self, state: CallState) -> bool:
        """Whether the call already went beyond live ``state`` (a later live state, or its end)."""
        return self.done or _LIVE_ORDER.index(state) < _LIVE_ORDER.index(self.state)

    def finish(self, result: ToolResult, *, now: float | None = None) -> bool:
        """Apply a terminal result; returns False (and changes nothing) if the call already ended.

        The first terminal result wins.
        """
        if result.call_id != self.call_id:
            raise CallStateError(f"result for call {result.call_id} given to call {self.call_id}")
        if self.done:
            return False
        name, action = result.name or self.request.name, result.action or self.request.action
        if name != result.name or action != result.action:  # fill them in on a copy (most Apps send both)
            result = result.model_copy(update={"name": name, "action": action})
        self.result = result
        self._enter(_STATE_OF[result.status], now)
        return True

    def end(self, status: CallStatus, message: str, *, now: float | None = None, **extra: Any) -> bool:
        """Finish with ``status`` and a human-readable ``message`` (plus any extra result fields)."""
        return self.finish(
            ToolResult(call_id=self.call_id, status=status, result={"message": message, **extra}), now=now
        )

    def is_expired(self, now: float | None = None) -> bool:
        """Whether the call is live and its deadline has passed."""
        moment = time.time() if now is None else now
        return not self.done and self.expires_at is not None and moment >= self.expires_at

    def expire_if_due(self, now: float | None = None) -> bool:
        """End the call as ``expired`` when its deadline has passed; returns whether it did."""
        if not self.is_expired(now):
            return False
        return self.end("expired", "no answer before the deadline", now=now)

    def _enter(self, state: CallState, now: float | None) -> None:
        self.state = state
        self.history.append((state, time.time() if now is None else now))
