"""Take ``docs/chat.png``: the App's chat on a phone (a Markdown reply with a list, code and a link,
times under the messages, a message still marked "Sending…", a conversation with unread news).

Run from the repository root: ``.venv/bin/python docs/chat_screenshot.py``. Real direct server,
hub and headless Chromium, as ``docs/screenshots.py``.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from playwright.async_api import expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from docs.screenshots import DOCS, phone_app, screenshot_settings, user_says  # noqa: E402
from lineup_plugin import Hub, load_registry  # noqa: E402

REPLY = """Build **1.4.2** is ready. Before it ships:

1. run the migrations: `lineup migrate --check`
2. tell the on-call team
3. deploy to *staging* first

The changelog is at https://example.org/changelog."""


async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        hub = Hub(load_registry(load_entrypoints=False), agent_id="hermes")
        await hub.name_conversation("hermes-cli-7f3a", "CLI: release notes")
        async with phone_app(hub, screenshot_settings(data)) as page:
            await user_says(page, "What is left before 1.4.2 ships?")
            await hub.send_text(REPLY)
            await hub.send_text("Drafting the notes.", conversation_id="hermes-cli-7f3a")
            await expect(page.locator(".msg-agent ol > li")).to_have_count(3)
            # the next message waits for the agent: marked "Sending…"
            for peer in hub.peers:
                peer.link.close(1000, "the phone lost its network for a moment")
            await expect(page.locator("#link")).to_have_text("Reconnecting…")
            await page.get_by_label("Message to the agent").fill("Go ahead with staging.")
            await page.keyboard.press("Enter")
            await page.get_by_label("Message to the agent").blur()
            await expect(page.locator(".msg-row-user .msg-mark")).to_have_text("Sending…")
            await page.screenshot(path=DOCS / "chat.png")


if __name__ == "__main__":
    asyncio.run(main())
