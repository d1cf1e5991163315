"""What the hub and a transport promise each other.

A *transport* (direct WebSocket server, WuKongIM relay, in-memory) only moves text and names
the other end; every rule of a LineUp session (hello, welcome, redelivery, dedupe, first answer
wins...) lives in the sans-I/O core, :mod:`lineup_plugin.protocol.session`, which the hub drives.

- A transport hands the hub one :class:`Link` per connection (:meth:`Hub.connect
  <lineup_plugin.hub.Hub.connect>`), the text that arrives on it (``Hub.receive``) and its end
  (``Hub.disconnect``).
- The hub writes to a link only after the store changes the message depends on are committed,
  and never waits on it: :meth:`Link.send` queues.
- Runtimes start and stop a transport as an async context (:class:`Transport`).
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self


class Link(Protocol):
    """One connection to an App device, as a transport holds it.

    ``send`` queues and returns at once, in order: a transport writes a link's messages in the
    order it was given them, and closes a link whose queue overflows (a slow reader must not
    stall the others) — :meth:`send` then raises :class:`~lineup_plugin.errors.TransportError`.
    """

    #: how logs and the audit trail name this connection before its device says hello
    name: str

    @property
    def max_text(self) -> int | None:
        """The longest message (bytes of envelope JSON) the link carries, or None when it sets no limit.

        A link with a limit (an IM frame) gets a call only if it fits (a longer call fails at
        once, ``too_large``), and files inline instead of by URL.
        """

    def send(self, text: str) -> None:
        """Queue one encoded envelope for the App; raises TransportError if the link is closed or full."""

    def close(self, code: int, reason: str) -> None:
        """Start closing the connection with ``code`` and ``reason`` (after the messages queued before)."""


class Transport(Protocol):
    """A way for App devices to reach the hub: started and stopped as an async context.

    ``async with transport:`` listens (or connects out) and attaches what connects to the hub;
    leaving the block closes every link and stops.
    """

    async def __aenter__(self) -> Self:
        """Start: listen or connect. Raises TransportError when that is impossible (e.g. the port is taken)."""

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop: close every link (the Apps are told the agent is going away)."""

    def describe(self) -> str:
        """One line for a person: the mode and where the App reaches the agent (never a secret)."""

    @property
    def connect_link(self) -> str | None:
        """A link that opens the App already paired (it holds the token), or None when there is none.

        Show it to a person (terminal, QR code); never log it.
        """
