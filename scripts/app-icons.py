"""Draw the App's home-screen icons (PNG) from ``lineup_plugin/app/icon.svg`` with headless Chromium.

Run from the repository root after changing the icon: ``.venv/bin/python scripts/app-icons.py``.
It writes, into ``lineup_plugin/app/``:

- ``icon-192.png`` and ``icon-512.png``: the icon as it is (rounded square, transparent corners),
  the ``any`` icons of ``manifest.webmanifest``;
- ``icon-maskable-512.png``: the ``maskable`` icon: the blue fills the whole square and the mark
  is drawn at 60 % of the size in the middle, inside the safe zone (a circle of 80 % of the width)
  that every launcher mask keeps;
- ``apple-touch-icon.png`` (180×180): for iOS "Add to Home Screen", full-bleed (iOS rounds the
  corners itself and would show transparent corners black);
- ``badge-96.png``: the ``badge`` of a card's notification (``sw.js``, ``notify.js``): the mark
  alone, white on transparent and framed close, since Android draws a badge from its alpha only.

``.venv/bin/python scripts/app-icons.py badge-96.png`` draws only the files it names.

The PNGs are committed: the App is served and exported as files, nothing is drawn at run time.
Chromium is Debian's (the end-to-end tests' browser, ``tests/e2e/browser.py``).
"""

from __future__ import annotations

import asyncio
import base64
import re
import sys
from pathlib import Path

from playwright.async_api import async_playwright

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.e2e.browser import launch  # noqa: E402

APP = ROOT / "lineup_plugin" / "app"
#: the icon's blue (its rect's fill), the maskable icon's and the apple touch icon's background
BLUE = "#2f6fed"
#: file, size in pixels, how much of the square the SVG takes, whether the background is full-bleed
ICONS = (
    ("icon-192.png", 192, 1.0, False),
    ("icon-512.png", 512, 1.0, False),
    ("icon-maskable-512.png", 512, 0.6, True),
    ("apple-touch-icon.png", 180, 0.8, True),
)
#: the notification badge: file and size in pixels (drawn from :func:`badge_svg`)
BADGE = ("badge-96.png", 96)


def badge_svg(svg: bytes) -> bytes:
    """The icon's mark without its blue square, the view cut close around it (the mark fills ~80 %)."""
    mark = re.sub(r"<rect[^>]*/>", "", svg.decode())
    return mark.replace('viewBox="0 0 32 32"', 'viewBox="4 4 24 24"').encode()


def page(svg: bytes, size: int, scale: float, full_bleed: bool) -> str:
    """A page of exactly ``size`` px showing the SVG at ``scale`` of it, centred."""
    source = "data:image/svg+xml;base64," + base64.b64encode(svg).decode()
    inner = round(size * scale)
    background = BLUE if full_bleed else "transparent"
    return (
        "<!doctype html><html><body style='margin:0'>"
        f"<div style='width:{size}px;height:{size}px;background:{background};display:grid;place-items:center'>"
        f"<img src='{source}' width='{inner}' height='{inner}' alt=''></div></body></html>"
    )


async def main() -> None:
    """Draw every icon of :data:`ICONS` and the :data:`BADGE` (or those named on the command line) into the
    App's directory."""
    svg = (APP / "icon.svg").read_bytes()
    drawn = [(name, svg, size, scale, full_bleed) for name, size, scale, full_bleed in ICONS]
    drawn.append((BADGE[0], badge_svg(svg), BADGE[1], 1.0, False))
    wanted = set(sys.argv[1:])
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        for name, source, size, scale, full_bleed in drawn:
            if wanted and name not in wanted:
                continue
            context = await browser.new_context(viewport={"width": size, "height": size}, device_scale_factor=1)
            tab = await context.new_page()
            await tab.set_content(page(source, size, scale, full_bleed))
            await tab.locator("img").evaluate("img => img.decode()")
            await tab.screenshot(path=str(APP / name), omit_background=not full_bleed)
            await context.close()
            print(f"wrote lineup_plugin/app/{name} ({size}×{size})")
        await browser.close()


if __name__ == "__main__":
    asyncio.run(main())
