"""What a transport gives the hub: one :class:`Peer` per connected App device."""

from __future__ import annotations

from typing import Protocol


class Peer(Protocol):
    """One connected App device (or IM user) as the hub sees it.

    ``send`` must not wait on a slow reader for long: a transport queues, and closes a peer whose
    queue overflows, so one slow App cannot stall the others.
    """

    device_id: str

    async def send(self, text: str) -> None:
        """Send one encoded envelope."""

    async def close(self, reason: str) -> None:
        """Close the connection, telling the App ``reason``."""
