"""An in-memory transport: an App device that lives in the same process (tests and demos).

:class:`MemoryApp` is both the transport's :class:`~lineup_plugin.ports.Link` and the App end:
what the hub sends arrives decoded in :attr:`MemoryApp.inbox`; the App answers with
:meth:`MemoryApp.send_payload`. It goes through the same handshake as every transport: its
first message is a ``device.hello``, checked by ``verify`` (by default any hello is accepted).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..errors import TransportError
from ..protocol import codec
from ..protocol.messages import Actor, DeviceHello, Envelope, Payload
from ..protocol.session import Verifier

if TYPE_CHECKING:
    from ..hub import Hub


def _accept(hello: DeviceHello) -> None:
    return None


class MemoryApp:
    """An App device connected to a hub through memory."""

    #: memory carries messages of any size
    max_text: int | None = None

    def __init__(self, hub: Hub, device_id: str = "memory-app", *, verify: Verifier = _accept) -> None:
        self.hub = hub
        self.device_id = device_id
        self.name = f"memory:{device_id}"
        self.verify = verify
        self.inbox: asyncio.Queue[Envelope] = asyncio.Queue()
        #: why the hub closed this link (``(code, reason)``), or "disconnected"
        self.closed: str | None = None
        self.close_code: int | None = None
        self.sent: list[str] = []

    def send(self, text: str) -> None:
        """Hub → App: decode and queue the message (as a real App would receive it)."""
        if self.closed is not None:
            raise TransportError(f"app {self.device_id} is closed")
        self.inbox.put_nowait(codec.decode(text))

    def close(self, code: int, reason: str) -> None:
        """Hub → App: the connection is closed."""
        self.closed, self.close_code = reason, code

    async def connect(self, *, open_calls: list[str] | None = None, token: str | None = None) -> None:
        """Open the link and say hello."""
        self.closed = self.close_code = None
        self.hub.connect(self, verify=self.verify)
        hello = DeviceHello(device_id=self.device_id, open_calls=open_calls or [], token=token)
        await self.send_payload(hello)

    async def disconnect(self) -> None:
        """The connection ends."""
        self.closed = "disconnected"
        await self.hub.disconnect(self)

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
