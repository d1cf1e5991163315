"""Installing the App to the home screen, in real Chromium: the page's manifest is found, parses
without errors, and every icon it names loads (served by the direct server under the App's policy).

Chromium's own verdict (``Page.getInstallabilityErrors``) is asserted too: on http://127.0.0.1
(a secure context), in a profile of its own (an incognito context is never offered installing), it
names no error at all. No service worker is needed for it: the App registers one only for Web Push.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .browser import CHROMIUM, CHROMIUM_ARGS, PHONE
from .conftest import Agent

if TYPE_CHECKING:
    from playwright.async_api import Browser

pytestmark = pytest.mark.browser


async def test_chromium_reads_the_manifest_and_finds_nothing_in_the_way_of_installing(
    agent: Agent, browser: Browser, tmp_path: Path
) -> None:
    from playwright.async_api import expect

    context = await browser.browser_type.launch_persistent_context(
        tmp_path / "profile", executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, **PHONE
    )
    try:
        page = await context.new_page()
        await page.goto(agent.link)
        await expect(page.locator("#link")).to_have_text("Connected")
        await installable(agent, page, await context.new_cdp_session(page))
    finally:
        await context.close()


async def installable(agent: Agent, page: Any, cdp: Any) -> None:
    """The manifest, its icons and Chromium's verdict, as the test above names them."""
    manifest: dict[str, Any] = await cdp.send("Page.getAppManifest", {})
    assert manifest["url"].startswith(f"{agent.url}manifest.webmanifest?v="), manifest["url"]
    assert manifest["errors"] == [], manifest["errors"]
    parsed = manifest["data"] and json.loads(manifest["data"])
    assert parsed["display"] == "standalone"
    # Chromium's reading of it: scope and id resolved against the manifest's address (the App's folder)
    assert manifest["parsed"]["scope"] == agent.url, manifest["parsed"]
    identity = await cdp.send("Page.getAppId", {})
    assert identity["appId"] == agent.url, identity
    for icon in parsed["icons"]:  # each icon loads in the page's own origin and policy
        loaded = await page.evaluate(
            """async (src) => {
                 const img = new Image();
                 img.src = new URL(src, document.baseURI).href;
                 try { await img.decode(); } catch { return null; }
                 return [img.naturalWidth, img.naturalHeight];
               }""",
            icon["src"],
        )
        assert loaded, f"{icon['src']} did not load"
        if icon["sizes"] != "any":
            assert f"{loaded[0]}x{loaded[1]}" == icon["sizes"], icon
    touch = await page.evaluate("document.querySelector('link[rel=apple-touch-icon]').href")
    status = await page.evaluate("async (url) => (await fetch(url)).status", touch)
    assert status == 200
    errors = await cdp.send("Page.getInstallabilityErrors", {})
    ids = [error["errorId"] for error in errors["installabilityErrors"]]
    assert ids == []
