"""How the end-to-end tests (and docs/screenshots.py) start Debian's Chromium under Playwright.

Playwright never downloads a browser here: it drives ``/usr/bin/chromium`` (or ``$LINEUP_CHROMIUM``).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright

CHROMIUM = os.environ.get("LINEUP_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
#: browser-context options of a phone-sized screen
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 2,
}


async def launch(playwright: Playwright) -> Browser:
    """Start headless Chromium with the flags this project uses everywhere."""
    return await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
