"""Take the screenshots of a plugin's renderer and of the Tool usage view, like docs/screenshots.py.

Run from the repository root with the example plugin importable:
``PYTHONPATH=.:examples/lineup-weather .venv/bin/python docs/screenshots_renderers.py``. It writes
``docs/plugin-renderer.png`` (the ``rating`` card that ``lineup-weather`` ships) and
``docs/tool-usage.png`` (the App's metering view), both phone-sized, and ``docs/mcp-apps-card.png``
(a ``choice`` card as an MCP Apps host shows it: ``lineup mcp`` with the official client, the
test host page of ``tests/fixtures/mcp_host.html``).
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import lineup_weather
from playwright.async_api import async_playwright, expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs.screenshots import phone_app  # noqa: E402
from lineup_plugin import Hub  # noqa: E402
from lineup_plugin.config.settings import Settings  # noqa: E402
from lineup_plugin.plugins import collect_tools, get_plugin_manager  # noqa: E402
from lineup_plugin.store import SQLiteStore  # noqa: E402
from tests.e2e.browser import launch  # noqa: E402
from tests.e2e.test_mcp_apps_host import host, view  # noqa: E402
from tests.mcp.conftest import make_lineup  # noqa: E402
from tests.mcp.test_mcp_apps import apps_client  # noqa: E402

DOCS = ROOT / "docs"


async def main() -> None:
    pm = get_plugin_manager(load_entrypoints=False)
    pm.register(lineup_weather, name="weather")
    with tempfile.TemporaryDirectory() as data, SQLiteStore(Path(data) / "lineup.sqlite3") as store:
        settings = Settings(host="127.0.0.1", port=0, token="screenshot-token-0123456789", data_dir=Path(data))
        hub = Hub(collect_tools(pm), store=store, agent_id="hermes")
        async with phone_app(hub, settings) as page:
            await hub.send_text("Here is tomorrow's forecast for Paris: 18 °C and cloudy.")
            for city, choice in (("test", "staging"), ("staging", "production")):
                call = asyncio.create_task(hub.call("choice", {"question": "Deploy where?", "options": [city, choice]}))
                await page.get_by_role("button", name=choice).click()
                await call
            rating = asyncio.create_task(hub.call("rating", {"subject": "the forecast"}))
            await expect(page.get_by_role("button", name="5 of 5 stars")).to_be_visible()
            await page.screenshot(path=DOCS / "plugin-renderer.png")
            await page.get_by_role("button", name="4 of 5 stars").click()
            await rating

            await page.get_by_role("button", name="Tool usage").click()
            await expect(page.get_by_role("table", name="By device")).to_be_visible()
            await page.evaluate("document.activeElement.blur()")  # no focus ring in the picture
            await page.screenshot(path=DOCS / "tool-usage.png")


async def mcp_apps_card() -> None:
    question = {"question": "Deploy build 1.4.2 to which environment?", "options": ["test", "staging", "production"]}
    with tempfile.TemporaryDirectory() as data:
        lineup = make_lineup(Path(data))
        async with apps_client(lineup) as client, async_playwright() as playwright:
            phone = await lineup.app()
            call = asyncio.create_task(client.call_tool("choice", question))
            await phone.next_call()
            browser = await launch(playwright)
            async with host(browser, client, "choice", question) as page:
                await expect(view(page).get_by_role("button", name="production")).to_be_visible()
                await page.locator("#view").screenshot(path=DOCS / "mcp-apps-card.png")
                await view(page).get_by_role("button", name="staging").click()
                await call
            await browser.close()
            await phone.close()


if __name__ == "__main__":
    asyncio.run(main())
    asyncio.run(mcp_apps_card())
