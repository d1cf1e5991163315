"""A scripted App over a real WebSocket (websockets' asyncio client), for direct-mode tests."""

from __future__ import annotations

import asyncio
from contextlib import suppress
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidMessage

from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import (
    Actor,
    DeviceHello,
    Envelope,
    Payload,
    ToolAck,
    ToolCall,
    ToolResult,
)
from lineup_plugin.transports.direct.server import DirectServer


def hello_text(device_id: str, token: str | None, open_calls: list[str] | None = None) -> str:
    """The ``device.hello`` envelope an App sends first."""
    hello = DeviceHello(device_id=device_id, token=token, open_calls=open_calls or [])
    return encode_from(device_id, hello)


def encode_from(device_id: str, payload: Payload, *, id: str | None = None, conversation_id: str = "default") -> str:
    """``payload`` as an envelope from App device ``device_id`` to the agent."""
    message = codec.envelope(
        payload,
        sender=Actor(kind="device", id=device_id),
        target=Actor(kind="agent", id="lineup-agent"),
        conversation_id=conversation_id,
        id=id,
    )
    return codec.encode(message)


class _Address:
    """Where a server listens, as :meth:`WsApp.connect` reads it (a DirectServer's ``port`` and ``token``)."""

    def __init__(self, port: int, token: str) -> None:
        self.port = port
        self.token = token


class WsApp:
    """One App device connected to a :class:`DirectServer` over a real WebSocket."""

    def __init__(self, ws: ClientConnection, device_id: str) -> None:
        self.ws = ws
        self.device_id = device_id

    @classmethod
    async def connect(
        cls,
        server: DirectServer,
        device_id: str = "phone",
        *,
        token: str | None = None,
        open_calls: list[str] | None = None,
        welcome: bool = True,
        **options: Any,
    ) -> WsApp:
        """Connect, say hello with the server's token (or ``token``) and, if ``welcome``, await the welcome."""
        ws = await connect(f"ws://127.0.0.1:{server.port}/ws", **options)
        app = cls(ws, device_id)
        await ws.send(hello_text(device_id, server.token if token is None else token, open_calls))
        if welcome:
            assert (await app.next("device.welcome")).payload.device_id == device_id  # type: ignore[union-attr]
        return app

    @classmethod
    async def reconnecting(
        cls, port: int, token: str, *, attempts: int = 600, pace: float = 0.05, **options: Any
    ) -> WsApp:
        """Connect to whichever process serves 127.0.0.1:``port``, trying again while nothing does, as
        the reference App does: not listening yet, or a server that is starting or going away."""
        server = _Address(port, token)
        for _ in range(attempts):
            try:
                return await cls.connect(server, **options)  # type: ignore[arg-type]
            except (OSError, InvalidMessage, ConnectionClosed):
                await asyncio.sleep(pace)  # the App's own retry pace, not a synchronisation
        raise AssertionError(f"nothing served the App on port {port}")

    async def recv(self) -> Envelope:
        """The next message, whatever its kind."""
        data = await self.ws.recv()
        assert isinstance(data, str)
        return codec.decode(data)

    async def next(self, kind: str) -> Envelope:
        """The next message of ``kind``, skipping others."""
        while True:
            message = await self.recv()
            if message.kind == kind:
                return message

    async def send(self, payload: Payload, *, id: str | None = None, conversation_id: str = "default") -> None:
        """Send ``payload`` in an envelope (of ``conversation_id``)."""
        await self.ws.send(encode_from(self.device_id, payload, id=id, conversation_id=conversation_id))

    async def answer(self, call: ToolCall, status: str = "completed", **result: Any) -> None:
        """Show the card, then answer it."""
        await self.send(ToolAck(call_id=call.call_id, stage="waiting_user"))
        await self.send(ToolResult.model_validate({"call_id": call.call_id, "status": status, "result": result}))

    async def next_call(self) -> ToolCall:
        """The next ``tool.call``."""
        call = (await self.next("tool.call")).payload
        assert isinstance(call, ToolCall)
        return call

    async def closed(self) -> tuple[int, str, list[Envelope]]:
        """Read until the server closes; returns its close code and reason, and what came before."""
        before: list[Envelope] = []
        with suppress(ConnectionClosed):
            while True:
                before.append(await self.recv())
        await self.ws.wait_closed()
        assert self.ws.close_code is not None
        return self.ws.close_code, self.ws.close_reason or "", before

    async def close(self) -> None:
        """Disconnect."""
        await self.ws.close()


async def wait_until(predicate: Any, *, attempts: int = 2000) -> None:
    """Let the event loop run until ``predicate()`` holds (each attempt yields once)."""
    for _ in range(attempts):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("condition not reached")
