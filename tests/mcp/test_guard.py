"""The Host and Origin guard of ``lineup mcp --http`` holds WebSocket handshakes to the HTTP rules.

It passed every scope that was not ``http`` straight through: a page that rebound its name to the
server, or any foreign page, could open a WebSocket to whatever the app serves there. The server
is a real uvicorn on 127.0.0.1, port 0; the client a real ``websockets`` client.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.types import Message
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus
from websockets.typing import Origin

from lineup_plugin.runtime.mcp.guard import WS_POLICY_VIOLATION, HostOriginGuard


async def echo(websocket: WebSocket) -> None:
    await websocket.accept()
    await websocket.send_text(await websocket.receive_text())
    await websocket.close()


@asynccontextmanager
async def guarded_server() -> AsyncIterator[int]:
    """A real uvicorn serving a WebSocket echo behind the guard; its port."""
    app = HostOriginGuard(Starlette(routes=[WebSocketRoute("/ws", echo)]), allowed_hosts=["lineup.home.arpa"])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn accepts them: no race with its start
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off", ws="websockets-sansio"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield int(sock.getsockname()[1])
    finally:
        server.should_exit = True
        await asyncio.wait_for(serving, 30)
        sock.close()


async def refused_status(port: int, host: str, **options: Any) -> InvalidStatus:
    with pytest.raises(InvalidStatus) as refused:
        async with connect(f"ws://{host}:{port}/ws", host="127.0.0.1", port=port, open_timeout=30, **options):
            pass
    return refused.value


async def test_a_websocket_from_a_rebound_host_or_a_foreign_origin_is_refused_and_a_local_one_served() -> None:
    async with guarded_server() as port:
        rebound = await refused_status(port, "rebind.evil", origin=f"http://rebind.evil:{port}")
        foreign = await refused_status(port, "127.0.0.1", origin="http://evil.example")
        # uvicorn sends the guard's own answer to the handshake (the websocket.http.response extension)
        assert rebound.response.status_code == 421 and b"host rebind.evil" in (rebound.response.body or b"")
        assert foreign.response.status_code == 403 and b"origin http://evil.example" in (foreign.response.body or b"")
        for host, origin in [("127.0.0.1", None), ("lineup.home.arpa", Origin(f"http://lineup.home.arpa:{port}"))]:
            async with connect(f"ws://{host}:{port}/ws", host="127.0.0.1", port=port, origin=origin) as ws:
                await ws.send("hello")
                assert await asyncio.wait_for(ws.recv(), 30) == "hello"


async def test_without_the_denial_extension_a_refused_handshake_is_closed_with_1008_before_the_app() -> None:
    reached: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope["type"])

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    async def receive() -> Message:
        return {"type": "websocket.connect"}

    scope = {
        "type": "websocket",
        "path": "/ws",
        "headers": [(b"host", b"127.0.0.1:8765"), (b"origin", b"http://evil.example")],
    }
    await HostOriginGuard(app)(scope, receive, send)
    assert reached == [] and sent == [{"type": "websocket.close", "code": WS_POLICY_VIOLATION, "reason": ""}]
    scope["headers"] = [(b"host", b"127.0.0.1:8765")]
    await HostOriginGuard(app)(scope, receive, send)
    assert reached == ["websocket"]
