"""One timer on the running event loop for the earliest moment something is due.

The hub arms it at the session's next deadline, the push service at its plan's next decision.
Arming it for a later moment than the one it is armed for leaves it alone: when it goes off,
the owner decides what is due then (perhaps nothing) and arms it again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class Alarm:
    """Calls ``callback`` (on the loop) at the earliest moment :meth:`arm` was given, on ``clock``'s scale."""

    __slots__ = ("_at", "_callback", "_clock", "_handle")

    def __init__(self, clock: Callable[[], float], callback: Callable[[], None]) -> None:
        self._clock = clock
        self._callback = callback
        self._handle: asyncio.TimerHandle | None = None
        self._at = 0.0

    @property
    def armed(self) -> bool:
        """Whether it will go off."""
        return self._handle is not None

    def arm(self, due: float | None) -> None:
        """Go off at ``due`` (None: nothing is due), unless it goes off then or sooner already.
        With no running loop (an owner made outside one) nothing is armed: the next arm inside one does it."""
        if due is None or (self._handle is not None and self._at <= due):
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        if self._handle is not None:
            self._handle.cancel()
        self._at = due
        self._handle = loop.call_later(max(0.0, due - self._clock()), self._go_off)

    def cancel(self) -> None:
        """Not go off (until armed again)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def _go_off(self) -> None:
        self._handle = None
        self._callback()
