"""Defects found by attacking the running plugin from outside and by running it against outside clients.

Each test failed before its fix. Item numbers are those of the third hardening round (see the
README's *Nothing lost* section for the bounds and the attacks defended).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidMessage

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.transports.direct.server import DirectServer, Limits
from tests.wsapp import WsApp, hello_text, wait_until

TOKEN = "outside-attack-token-0123456789"
GUARD = 60  # seconds a test may wait for its events before it fails instead of hanging


def settings(tmp_path: Path, **changes: Any) -> Settings:
    return Settings(**{"host": "127.0.0.1", "port": 0, "token": TOKEN, "data_dir": tmp_path / "data", **changes})


@asynccontextmanager
async def running(tmp_path: Path, **options: Any) -> AsyncIterator[DirectServer]:
    hub = Hub(load_registry(load_entrypoints=False))
    changes = options.pop("settings", {})
    async with DirectServer.from_settings(hub, settings(tmp_path, **changes), **options) as server:
        yield server


# --- 1. idle unauthenticated sockets, re-opened as they end, do not keep the owner's App out -----------------


async def hold_a_slot(port: int, opened: asyncio.Queue[None]) -> None:
    """An attacker's socket that never says hello, opened again each time the server ends it."""
    while True:
        try:
            ws = await connect(f"ws://127.0.0.1:{port}/ws", open_timeout=None)
        except (OSError, InvalidMessage, ConnectionClosed):
            continue
        opened.put_nowait(None)
        with suppress(ConnectionClosed):
            await ws.recv()  # the server's error, then its close
        await ws.wait_closed()


async def test_idle_unauthenticated_sockets_reopened_as_they_end_do_not_keep_the_owner_out(tmp_path: Path) -> None:
    limits = Limits(hello_timeout=0.5)  # the attacker's sockets end often and come straight back
    async with asyncio.timeout(GUARD), running(tmp_path, limits=limits) as server:
        opened: asyncio.Queue[None] = asyncio.Queue()
        holders = limits.max_unauthenticated + 4
        attackers = [asyncio.create_task(hold_a_slot(server.port, opened)) for _ in range(holders)]
        try:
            for _ in range(limits.max_unauthenticated):
                await opened.get()
            await wait_until(lambda: server.connections >= limits.max_unauthenticated)
            served = 0
            for _ in range(14):
                try:
                    app = await WsApp.connect(server, "owner")
                except ConnectionClosed:
                    continue
                served += 1
                await app.close()
                await opened.get()  # the attacker keeps re-opening throughout
            assert served >= 13, f"the owner's App got in {served} times of 14"
        finally:
            for task in attackers:
                task.cancel()
            await asyncio.gather(*attackers, return_exceptions=True)


async def test_a_new_connection_ends_the_oldest_waiting_one_of_the_address_holding_most(tmp_path: Path) -> None:
    limits = Limits(max_unauthenticated=3)
    async with asyncio.timeout(GUARD), running(tmp_path, limits=limits) as server:
        url = f"ws://127.0.0.1:{server.port}/ws"
        slow_phone = await connect(url, local_addr=("127.0.0.2", 0))  # has not said hello yet
        idle = [await connect(url) for _ in range(2)]
        await wait_until(lambda: server.connections == 3)
        newcomer = await connect(url)
        with suppress(ConnectionClosed):
            await idle[0].recv()
        assert idle[0].close_code == 1013 and idle[0].close_reason == "too many connections"
        await WsApp(slow_phone, "slow-phone").ws.send(hello_text("slow-phone", TOKEN))
        welcome = await WsApp(slow_phone, "slow-phone").next("device.welcome")
        assert welcome.payload.device_id == "slow-phone"  # type: ignore[union-attr]
        for ws in (slow_phone, idle[1], newcomer):
            await ws.close()
