"""An in-memory transport: an App device that lives in the same process (tests and demos).

:class:`MemoryApp` is both the hub's :class:`~lineup_plugin.ports.Peer` and the App end:
what the hub sends arrives decoded in :attr:`MemoryApp.inbox`; the App answers with
:meth:`MemoryApp.send_payload`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..protocol import codec
from ..protocol.messages import Actor, DeviceHello, Envelope, Payload

if TYPE_CHECKING:
    from ..hub import Hub


class MemoryApp:
    """An App device connected to a hub through memory."""

    def __init__(self, hub: Hub, device_id: str = "memory-app") -> None:
        self.hub = hub
        self.device_id = device_id
        self.inbox: asyncio.Queue[Envelope] = asyncio.Queue()
        self.closed: str | None = None
        self.sent: list[str] = []

    async def send(self, text: str) -> None:
        """Hub → App: decode and queue the message (as a real App would receive it)."""
        if self.closed is not None:
            raise ConnectionError(f"app {self.device_id} is closed")
        self.inbox.put_nowait(codec.decode(text))

    async def close(self, reason: str) -> None:
        """Hub → App: the connection is closed."""
        self.closed = reason

    async def connect(self, *, open_calls: list[str] | None = None) -> None:
        """Say hello and attach to the hub."""
        self.closed = None
        hello = DeviceHello(device_id=self.device_id, open_calls=open_calls or [])
        await self.hub.attach(self, hello)

    async def disconnect(self) -> None:
        """Detach from the hub."""
        self.closed = "disconnected"
        await self.hub.detach(self)

    async def send_payload(self, payload: Payload, *, id: str | None = None) -> str:
        """App → hub: wrap ``payload`` in an envelope, encode it and hand it to the hub."""
        message = codec.envelope(
            payload,
            sender=Actor(kind="device", id=self.device_id),
            target=self.hub.agent,
            conversation_id=self.hub.conversation_id,
            id=id,
        )
        text = codec.encode(message)
        self.sent.append(text)
        await self.hub.receive(self, text)
        return message.id

    async def next(self, kind: str) -> Envelope:
        """The next received message of ``kind``, skipping (and dropping) others."""
        while True:
            message = await self.inbox.get()
            if message.kind == kind:
                return message
