"""docs/text_fallback.py draws a text-only conversation in real Chromium: every message shown, nothing cut off."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from playwright.async_api import Browser

SCRIPT = Path(__file__).resolve().parents[2] / "docs" / "text_fallback.py"
pytestmark = pytest.mark.browser


async def test_the_conversation_picture_shows_every_message_within_a_phone_screen(
    browser: Browser, tmp_path: Path
) -> None:
    spec = importlib.util.spec_from_file_location("text_fallback", SCRIPT)
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    lines = [("user", "Ship it"), ("agent", "Deploy where?\n1. test\n2. " + "production-" * 30), ("user", "2")]
    picture = tmp_path / "chat.png"
    await script.photograph(browser, lines, picture)
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = await browser.new_page(viewport={"width": 390, "height": 844})
    await page.set_content(script.render(lines))
    bubbles = page.locator(".msg")
    assert await bubbles.count() == 3
    assert await bubbles.nth(1).inner_text() == lines[1][1]  # line breaks kept
    overflow = await page.evaluate("document.documentElement.scrollWidth > document.documentElement.clientWidth")
    assert not overflow  # a long word wraps instead of widening the page
    await page.close()
