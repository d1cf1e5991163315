"""``lineup mcp`` in a child process, with its App server on a free port, and the official MCP client."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, types

from tests.wsapp import WsApp

ROOT = Path(__file__).resolve().parents[2]
TOKEN = "mcp-test-token-0123456789abcdef"


def free_port() -> int:
    """A port nobody listens on right now (127.0.0.1)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class AppServer:
    """Where the child serves the App (what :meth:`WsApp.connect` reads of a DirectServer)."""

    port: int
    token: str = TOKEN


@dataclass
class Lineup:
    """One ``lineup mcp`` child's settings (environment) and its App server."""

    env: dict[str, str]
    app_server: AppServer
    notifications: list[str] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def app(self, device_id: str = "phone") -> WsApp:
        """An App device connected to the child's direct server."""
        return await WsApp.connect(self.app_server, device_id)  # type: ignore[arg-type]

    async def on_message(self, message: Any) -> None:
        """The client's message handler: note server notifications."""
        if isinstance(message, types.ServerNotification):
            self.notifications.append(message.method)
            if message.method == "notifications/tools/list_changed":
                self.changed.set()


@pytest.fixture
def lineup(tmp_path: Path) -> Lineup:
    """Settings for a child: data in ``tmp_path``, the App server on a free port of 127.0.0.1."""
    return make_lineup(tmp_path)


def make_lineup(tmp_path: Path) -> Lineup:
    """What the ``lineup`` fixture gives (for test modules outside this folder)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("LINEUP_")}
    env.update(
        PYTHONPATH=str(ROOT),
        LINEUP_DATA_DIR=str(tmp_path),
        LINEUP_MODE="direct",
        LINEUP_HOST="127.0.0.1",
        LINEUP_PORT=str(free_port()),
        LINEUP_TOKEN=TOKEN,
    )
    return Lineup(env, AppServer(int(env["LINEUP_PORT"])))


def stdio_client(lineup: Lineup, *, mode: str = "legacy", **options: Any) -> Client:
    """The official client, running ``python -m lineup_plugin.cli mcp`` over stdio."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "lineup_plugin.cli", "mcp"], env=lineup.env, cwd=str(ROOT)
    )
    return Client(params, mode=mode, message_handler=lineup.on_message, **options)  # type: ignore[arg-type]


@asynccontextmanager
async def http_server(lineup: Lineup, address: str = "127.0.0.1:0") -> AsyncIterator[str]:
    """``lineup mcp --http <address>`` as a child; yields its MCP URL once it listens."""
    async with http_child(lineup, address) as (_, url):
        yield url


@asynccontextmanager
async def http_child(
    lineup: Lineup, address: str = "127.0.0.1:0"
) -> AsyncIterator[tuple[asyncio.subprocess.Process, str]]:
    """``lineup mcp --http <address>`` as a child; yields it and its MCP URL once it listens
    (the rest of its stderr is left to read); terminated at the end if still running."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lineup_plugin.cli",
        "mcp",
        "--http",
        address,
        env=lineup.env,
        cwd=str(ROOT),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert child.stderr is not None
    try:
        url = None
        while url is None:
            line = (await asyncio.wait_for(child.stderr.readline(), 60)).decode()
            assert line, "lineup mcp --http exited before it listened"
            if "MCP over streamable HTTP at " in line:
                url = line.rsplit(" ", 1)[1].strip()
        yield child, url
    finally:
        if child.returncode is None:
            child.terminate()
        await asyncio.wait_for(child.wait(), 30)


async def until(predicate: Callable[[], bool], event: asyncio.Event) -> None:
    """Await ``event`` until ``predicate()`` holds (the event is cleared before each wait)."""
    while not predicate():
        event.clear()
        await asyncio.wait_for(event.wait(), 30)
