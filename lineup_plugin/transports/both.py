"""Direct and relay at once: the App server on :9527 and the WuKongIM relay serve one hub.

A paired App talks to the agent directly when it reaches :9527 and through WuKongIM when it does
not (see docs/away-from-home.md). Both transports attach their links to the same
hub, so the session core's rules (redelivery on hello, first answer wins, dedupe by call id) hold
across a switch: no card is lost or shown twice. The direct server also answers ``GET /api/pair``
(:meth:`Relay.pair <lineup_plugin.transports.wukongim.relay.Relay.pair>`).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from types import TracebackType
from typing import Self

from .direct.server import DirectServer
from .wukongim.relay import Relay


class DirectAndRelay:
    """A :class:`~lineup_plugin.ports.Transport` running a direct server and a relay for one hub."""

    def __init__(self, direct: DirectServer, relay: Relay) -> None:
        self.direct = direct
        self.relay = relay
        direct.api.pairing = relay.pair
        self._stack: AsyncExitStack | None = None

    async def __aenter__(self) -> Self:
        """Start the relay, then the direct server; if the second cannot start, the first is stopped."""
        async with AsyncExitStack() as stack:
            await stack.enter_async_context(self.relay)
            await stack.enter_async_context(self.direct)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop the direct server, then the relay."""
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()

    def describe(self) -> str:
        """Both lines: where the App is served, and the relay."""
        return f"{self.direct.describe()}; {self.relay.describe()}"

    @property
    def connect_link(self) -> str | None:
        """The direct server's link (the App pairs for the relay once it is connected)."""
        return self.direct.connect_link
