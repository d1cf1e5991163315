"""The agent side of the relay browser tests: one hub behind a direct server AND a relay through the
fake WuKongIM (validated by the official JS SDK in tests/transports and tests/js), as ``mode:
both`` runs them; the App in real Chromium pairs on the "LAN" and falls back to the relay when the
direct server is closed. The exported App is served by a plain static server on another port (the
HTTPS static host of docs/away-from-home.md, without TLS: 127.0.0.1 is a secure context for the browser too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import http.server
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from lineup_plugin import Hub, ToolResult, load_registry
from lineup_plugin.config.settings import Settings, WuKongIMSettings
from lineup_plugin.hub import use_push
from lineup_plugin.media import MediaStore
from lineup_plugin.push.service import PushService
from lineup_plugin.transports.both import DirectAndRelay
from lineup_plugin.transports.direct.server import DirectServer
from lineup_plugin.transports.wukongim.client import Timers
from lineup_plugin.transports.wukongim.pairing import Pairings
from lineup_plugin.transports.wukongim.relay import Relay
from tests.fakes.wukongim import FakeWuKongIM

from .conftest import TOKEN, FilesReceived

AGENT_UID, APP_UID = "lineup-agent", "alice"
MANAGER_TOKEN = "manager-token-for-tests"
FAST = Timers(connect_timeout=5, send_timeout=5, reconnect_min=0.01, reconnect_max=0.05)


@dataclass
class RelayAgent:
    """A hub served directly and by relay; ``im`` is the fake WuKongIM server."""

    hub: Hub
    im: FakeWuKongIM
    both: DirectAndRelay
    settings: Settings
    port: int

    @property
    def relay(self) -> Relay:
        """The relay transport."""
        return self.both.relay

    @property
    def link(self) -> str:
        """The direct server's link (with the token)."""
        return self.both.direct.connect_link

    @property
    def pairings(self) -> Pairings:
        """The agent's pairing file."""
        assert self.relay.pairings is not None
        return self.relay.pairings

    def call(self, name: str, arguments: dict[str, Any], **options: Any) -> asyncio.Task[ToolResult]:
        """Start ``hub.call(...)`` in the background."""
        return asyncio.create_task(self.hub.call(name, arguments, **options))

    async def close_direct(self) -> None:
        """Close the direct server (the phone left the LAN: :9527 cannot be reached)."""
        await self.both.direct.close()

    async def reopen_direct(self) -> None:
        """Serve directly again on the same port (the phone is back on the LAN)."""
        options = dataclasses.replace(self.both.direct.options, port=self.port)
        server = DirectServer(self.hub, options)
        server.api.pairing = self.relay.pair
        await server.start()
        self.both.direct = server


@functools.cache
def _quiet_handler(directory: str) -> type[http.server.SimpleHTTPRequestHandler]:
    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=directory, **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@dataclass
class StaticHost:
    """The exported App on a static web server."""

    url: str


def serve_static(directory: Path) -> Iterator[StaticHost]:
    """Serve ``directory`` on 127.0.0.1, a free port, until the generator is closed."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _quiet_handler(str(directory)))
    thread = threading.Thread(target=server.serve_forever, name="static-host", daemon=True)
    thread.start()
    try:
        yield StaticHost(f"http://127.0.0.1:{server.server_address[1]}/")
    finally:
        server.shutdown()
        server.server_close()


async def relay_agent(
    tmp_path: Path, *, e2e: bool = True, push: PushService | None = None
) -> AsyncIterator[RelayAgent]:
    """A started :class:`RelayAgent` (fake WuKongIM with token checks and a manager token); ``push``: its Web Push."""
    async with FakeWuKongIM(token_auth=True, bad_token="connack", manager_token=MANAGER_TOKEN) as im:
        wk = WuKongIMSettings(
            api_url=im.api_url,
            ws_url=im.ws_url,
            uid=AGENT_UID,
            app_uid=APP_UID,
            manager_token=MANAGER_TOKEN,
            e2e=e2e,
        )
        settings = Settings(
            mode="both", host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, store="memory", wukongim=wk
        )
        media = MediaStore.from_settings(settings)
        hub = Hub(load_registry(load_entrypoints=False), media=media, on_files=FilesReceived())
        if push is not None:
            use_push(hub, push)
        pairings = Pairings(tmp_path, AGENT_UID, APP_UID) if e2e else None
        both = DirectAndRelay(DirectServer.from_settings(hub, settings), Relay(wk, hub, timers=FAST, pairings=pairings))
        async with both:
            with anyio.fail_after(10):
                await both.relay.connected.wait()
            agent = RelayAgent(hub, im, both, settings, both.direct.port)
            try:
                yield agent
            finally:
                await hub.cancel_all("the test ended")
