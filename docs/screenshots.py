"""Take the App screenshots in docs/ with the real direct server, a hub call and headless Chromium.

Run from the repository root: ``.venv/bin/python docs/screenshots.py``. It writes
``docs/choice-card.png`` (a choice card in the chat), ``docs/canvas.png`` (a canvas the agent
drew on), ``docs/history.png`` (a second phone that caught up: the answered card says where it was
answered, the board is rebuilt) and ``docs/conversations.png`` (a card of another agent session),
all phone-sized. ``--only history`` writes the last two only.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from playwright.async_api import Page, async_playwright, expect

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from lineup_plugin import Hub, load_registry  # noqa: E402
from lineup_plugin.config.settings import Settings  # noqa: E402
from lineup_plugin.transports.direct.server import DirectServer  # noqa: E402
from tests.e2e.browser import PHONE, launch  # noqa: E402

DOCS = ROOT / "docs"
TOKEN = "screenshot-token-0123456789"

#: a small landscape, stroke by stroke: (path, colour, width)
LANDSCAPE = [
    ("M0 230 L360 230", "#4a7c3a", 6),
    ("M0 230 L90 110 L150 180 L220 80 L360 230", "#5b6b7c", 5),
    ("M50 230 L50 200 M35 205 L50 175 L65 205 Z", "#2e7d32", 4),
    ("M300 40 m-22 0 a22 22 0 1 0 44 0 a22 22 0 1 0 -44 0", "#f2a900", 5),
    ("M30 60 q15 -12 30 0 q15 -12 30 0", "#2f6fed", 3),
]


async def user_says(page: Page, text: str) -> None:
    await page.get_by_label("Message to the agent").fill(text)
    await page.keyboard.press("Enter")
    await expect(page.locator(".msg-user").last).to_have_text(text)
    await page.get_by_label("Message to the agent").blur()  # no focus ring in the pictures


def screenshot_settings(data: str) -> Settings:
    """The settings of a screenshot agent whose data lives in the directory ``data``."""
    return Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=Path(data))


@asynccontextmanager
async def phone_app(hub: Hub, settings: Settings) -> AsyncIterator[Page]:
    """The App, served for ``hub``, connected in a light phone-sized Chromium page."""
    async with DirectServer.from_settings(hub, settings) as server, async_playwright() as playwright:
        browser = await launch(playwright)
        context = await browser.new_context(**PHONE, color_scheme="light", reduced_motion="reduce")
        page = await context.new_page()
        await page.goto(server.connect_link)
        await expect(page.locator("#link")).to_have_text("Connected")
        try:
            yield page
        finally:
            await browser.close()


async def main() -> None:
    with tempfile.TemporaryDirectory() as data:
        hub = Hub(load_registry(load_entrypoints=False), agent_id="hermes")
        async with phone_app(hub, screenshot_settings(data)) as page:
            await user_says(page, "Ship build 1.4.2, please.")
            await hub.send_text("Build 1.4.2 passed all 312 checks. Where should I deploy it?")
            await hub.set_status("waiting_input")
            question = {
                "question": "Deploy build 1.4.2 to which environment?",
                "options": ["test", "staging", "production"],
            }
            choice = asyncio.create_task(hub.call("choice", question))
            await expect(page.get_by_role("button", name="production")).to_be_visible()
            if "history" not in sys.argv:
                await page.screenshot(path=DOCS / "choice-card.png")
            await page.get_by_role("button", name="staging").click()
            await choice

            await hub.set_status("running")
            await user_says(page, "Draw me a landscape.")
            opened = await hub.call("canvas", {"width": 360, "height": 240}, action="open")
            instance = opened.result["instance_id"]
            for path, color, width in LANDSCAPE:
                arguments = {"instance_id": instance, "path": path, "color": color, "width": width}
                await hub.call("canvas", arguments, action="draw")
            await hub.send_text("Here it is: mountains, a tree, the sun and a bird.")
            await hub.set_status("idle")
            await expect(page.locator("svg.board path")).to_have_count(len(LANDSCAPE))
            if "history" not in sys.argv:
                await page.screenshot(path=DOCS / "canvas.png")
            await history_shots(page, hub)


async def history_shots(first: Page, hub: Hub) -> None:
    """A second phone opens the link: the conversation so far comes from the history; then another session asks."""
    browser = first.context.browser
    assert browser is not None
    context = await browser.new_context(**PHONE, color_scheme="light", reduced_motion="reduce")
    page = await context.new_page()
    await page.goto(f"{first.url.split('#')[0]}#token={TOKEN}")
    await expect(page.locator("#link")).to_have_text("Connected")
    answered = page.locator('article.card[data-tool="choice"]')
    await expect(answered.locator(".card-outcome")).to_have_text("Chose: staging on Linux PC (Chrome)")
    await expect(page.locator("svg.board path")).to_have_count(len(LANDSCAPE))
    await answered.scroll_into_view_if_needed()
    await page.screenshot(path=DOCS / "history.png")

    await hub.name_conversation("hermes-cli-7f3a", "CLI: release notes")
    await hub.send_text("Drafting the release notes for 1.4.2.", conversation_id="hermes-cli-7f3a")
    question = {"message": "Publish the release notes to the changelog?", "risk": "user_confirmation"}
    confirm = asyncio.create_task(hub.call("confirm", question, conversation_id="hermes-cli-7f3a"))
    await page.get_by_role("group", name="Conversations").get_by_role("button", name="CLI: release notes").click()
    await expect(page.get_by_role("button", name="Approve")).to_be_visible()
    await page.get_by_role("button", name="Approve").blur()
    await page.screenshot(path=DOCS / "conversations.png")
    await page.get_by_role("button", name="Approve").click()
    await confirm
    await context.close()


if __name__ == "__main__":
    asyncio.run(main())
