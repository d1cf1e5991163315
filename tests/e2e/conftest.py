"""Fixtures for end-to-end tests: real headless Chromium (Debian's, driven by Playwright) against
the reference App served by a real :class:`~lineup_plugin.transports.direct.server.DirectServer`.

The browser is started once per session; every test gets its own server and hub on 127.0.0.1,
port 0, and drives the agent side by calling ``hub.call(...)`` itself.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from lineup_plugin import Hub, ToolResult, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.media import StoredFile
from lineup_plugin.transports.direct.server import DirectServer

from .browser import CHROMIUM, PHONE, launch

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

TOKEN = "e2e-token-0123456789abcdef"
AXE = Path(__file__).parents[1] / "js" / "node_modules" / "axe-core" / "axe.min.js"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Skip the browser tests, saying why, when Chromium is not installed."""
    if Path(CHROMIUM).exists():
        return
    skip = pytest.mark.skip(reason=f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium)")
    for item in items:
        if "browser" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    """One asyncio loop for the session, so the browser fixture can be session-scoped."""
    return "asyncio"


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    """Headless Debian Chromium, once per session (Playwright never downloads a browser here)."""
    from playwright.async_api import async_playwright, expect

    expect.set_options(timeout=10_000)  # 2 shared cores in CI: be patient, never sleep
    async with async_playwright() as playwright:
        chromium = await launch(playwright)
        yield chromium
        await chromium.close()


@dataclass
class Agent:
    """The agent side of a test: the hub to call tools with and the server that serves the App."""

    hub: Hub
    server: DirectServer
    port: int

    @property
    def url(self) -> str:
        """The App's address without the token."""
        return self.server.url

    @property
    def link(self) -> str:
        """The link the agent prints: the App's address with ``#token=...``."""
        return self.server.connect_link

    def call(self, name: str, arguments: dict[str, Any], **options: Any) -> asyncio.Task[ToolResult]:
        """Start ``hub.call(...)`` in the background, as a runtime waiting for the user would."""
        return asyncio.create_task(self.hub.call(name, arguments, **options))

    async def restart_server(self) -> None:
        """Start a new server for the same hub on the same port (after ``server.close()``)."""
        options = dataclasses.replace(self.server.options, port=self.port)
        self.server = DirectServer(self.hub, options)
        await self.server.start()


@asynccontextmanager
async def serving(hub: Hub, tmp_path: Path) -> AsyncIterator[Agent]:
    """``hub`` behind a started DirectServer on 127.0.0.1, port 0; every call cancelled at the end."""
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, store="memory")
    server = DirectServer.from_settings(hub, settings)
    await server.start()
    agent = Agent(hub, server, server.port)
    try:
        yield agent
    finally:
        await hub.cancel_all("the test ended")
        await agent.server.close()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    """A hub with the built-in tools behind a started DirectServer on 127.0.0.1, port 0."""
    async with serving(Hub(load_registry(load_entrypoints=False)), tmp_path) as agent:
        yield agent


OpenApp = Callable[..., Awaitable["Page"]]


@pytest.fixture
async def open_app(browser: Browser, agent: Agent) -> AsyncIterator[OpenApp]:
    """Open the App in a fresh browser context (its own storage: another device), phone-sized.

    ``await open_app()`` follows the printed link and waits until the App is connected;
    ``open_app(url=..., connected=False)`` opens any address without waiting; ``init_script`` runs
    in the page before the App. Uncaught page errors fail the test.
    """
    from playwright.async_api import expect

    contexts = []
    errors: list[str] = []

    async def open_page(url: str | None = None, *, connected: bool = True, init_script: str | None = None) -> Page:
        context = await browser.new_context(**PHONE)
        contexts.append(context)
        if init_script:
            await context.add_init_script(init_script)
        page = await context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(url or agent.link)
        if connected:
            await expect(page.locator("#link")).to_have_text("Connected")
        return page

    try:
        yield open_page
    finally:
        for context in contexts:
            await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


Open = Callable[..., Awaitable["Page"]]


@pytest.fixture
async def open_themed(browser: Browser, agent: Agent) -> AsyncIterator[Open]:
    """Open the App in a phone-sized context with ``scheme`` (light or dark); axe is injected on demand."""
    from playwright.async_api import expect

    if not AXE.is_file():
        pytest.skip("axe-core is not installed (npm ci in tests/js)")
    contexts = []

    async def open_page(scheme: str, *, connected: bool = True) -> Page:
        context = await browser.new_context(**PHONE, color_scheme=scheme, bypass_csp=True)  # axe is injected inline
        contexts.append(context)
        page = await context.new_page()
        await page.goto(agent.link if connected else f"http://127.0.0.1:{agent.port}/")
        if connected:
            await expect(page.locator("#link")).to_have_text("Connected")
        return page

    yield open_page
    for context in contexts:
        await context.close()


class FilesReceived(list[tuple[str, list[StoredFile]]]):
    """App text with files, as the hub hands it to the runtime (``arrived`` is set at the first)."""

    def __init__(self) -> None:
        super().__init__()
        self.arrived = asyncio.Event()

    def __call__(self, device_id: str, text: str, files: list[StoredFile]) -> None:
        self.append((text, files))
        self.arrived.set()

    async def first(self, timeout: float = 30.0) -> tuple[str, list[StoredFile]]:
        """The first text with files, once it has arrived."""
        await asyncio.wait_for(self.arrived.wait(), timeout)
        return self[0]
