"""Take docs/relay.png: the App connected by relay (path indicator "Relay") with a card open.

The agent runs the direct server and the relay (``mode: both``) with the fake WuKongIM of the tests;
the App pairs on the "LAN", the direct port closes, and the App carries on through the relay. Run
from the repository root: ``.venv/bin/python docs/relay_screenshot.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from playwright.async_api import async_playwright, expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.browser import PHONE, launch  # noqa: E402
from tests.e2e.relay_rig import relay_agent  # noqa: E402

DOCS = ROOT / "docs"


async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        async for agent in relay_agent(Path(data)):
            async with async_playwright() as playwright:
                browser = await launch(playwright)
                context = await browser.new_context(**PHONE, color_scheme="light", reduced_motion="reduce")
                page = await context.new_page()
                await page.goto(agent.link)
                await expect(page.locator(".msg-system")).to_contain_text("Paired")
                await agent.close_direct()  # the phone left home
                await expect(page.locator("#path")).to_have_text("Relay")
                await expect(page.locator("#link")).to_have_text("Connected")
                await agent.hub.send_text("You are away: I reach you through the relay, end-to-end encrypted.")
                question = {"question": "Restart the backup job now?", "options": ["now", "tonight", "skip"]}
                call = asyncio.create_task(agent.hub.call("choice", question))
                await expect(page.get_by_role("button", name="tonight")).to_be_visible()
                await page.screenshot(path=DOCS / "relay.png")
                await page.get_by_role("button", name="tonight").click()
                await call
                await browser.close()


if __name__ == "__main__":
    asyncio.run(main())
