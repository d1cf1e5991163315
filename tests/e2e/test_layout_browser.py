"""The App on a phone in real headless Chromium: one header row, the browser's font size followed,
a usable message box at 200% text, 44 px touch targets, and axe-core with no violation on the chat
(Markdown, marks, closed cards, the connection pill, the conversation options) in light and dark,
on a phone and a desktop."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from playwright.async_api import Browser, BrowserContext, Page, expect

from .browser import PHONE
from .conftest import Agent
from .test_accessibility import violations
from .test_app_browser import DEPLOY, wait_for_card
from .test_history_browser import typed

pytestmark = pytest.mark.browser

DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}


@pytest.fixture
async def contexts(browser: Browser) -> AsyncIterator[list[BrowserContext]]:
    """Browser contexts a test opens (closed at its end)."""
    opened: list[BrowserContext] = []
    yield opened
    for context in opened:
        await context.close()


async def open_chat(
    browser: Browser, agent: Agent, contexts: list[BrowserContext], *, font_px: int | None = None, **options: Any
) -> Page:
    """The App connected in a new context (phone-sized unless told); ``font_px`` is the browser's font-size setting."""
    context = await browser.new_context(**(options or PHONE))
    contexts.append(context)
    page = await context.new_page()
    if font_px is not None:
        cdp = await context.new_cdp_session(page)
        await cdp.send("Page.setFontSizes", {"fontSizes": {"standard": font_px, "fixed": font_px}})
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    return page


async def no_sideways_scroll(page: Page) -> bool:
    return bool(await page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth"))


async def test_the_header_is_one_row_on_a_phone(agent: Agent, browser: Browser, contexts: list[BrowserContext]) -> None:
    page = await open_chat(browser, agent, contexts)
    await agent.hub.set_status("waiting_input")  # the longest badge
    await expect(page.locator("#agent-status")).to_have_text("Waiting for you")
    box = await page.locator(".topbar").bounding_box()
    assert box is not None and box["height"] <= 56, box
    # nothing in the row is cut short: the name, and the state the agent is in
    cut = "(e) => e.scrollWidth > e.clientWidth"
    assert not await page.locator(".title").evaluate(cut)
    assert not await page.locator("#agent-status").evaluate(cut)
    # the Notify explanation is the button's description, never a row of its own
    hint = await page.locator("#notify-hint").bounding_box()
    assert hint is None or hint["height"] <= 1
    assert await no_sideways_scroll(page)
    # away from the agent: the link's state takes the room of the agent's (not known then)
    await agent.server.close()
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    box = await page.locator(".topbar").bounding_box()
    assert box is not None and box["height"] <= 56, box


async def test_with_large_text_the_header_wraps_rather_than_cut_the_agents_state(
    agent: Agent, browser: Browser, contexts: list[BrowserContext]
) -> None:
    page = await open_chat(browser, agent, contexts, font_px=32)
    cut = "(e) => e.scrollWidth > e.clientWidth"
    # the longest state wraps the row; the shortest fits in it, next to "LineUp" whole (not "L…")
    for state, text in [("waiting_input", "Waiting for you"), ("idle", "Idle")]:
        await agent.hub.set_status(state)  # type: ignore[arg-type]
        await expect(page.locator("#agent-status")).to_have_text(text)
        assert not await page.locator("#agent-status").evaluate(cut), state
        assert not await page.locator(".title").evaluate(cut), state
        assert await no_sideways_scroll(page)


async def test_a_long_conversation_title_leaves_new_on_the_screen(
    agent: Agent, browser: Browser, contexts: list[BrowserContext]
) -> None:
    page = await open_chat(browser, agent, contexts)
    title = "Plan the two-week trip to Lisbon and Porto with the whole family in May"
    await agent.hub.name_conversation("trip", title)
    tab = page.get_by_role("button", name=title)
    await tab.click()
    await expect(tab).to_have_attribute("aria-pressed", "true")
    assert await tab.get_attribute("title") == title  # the whole name, where it is cut
    new = await page.get_by_role("button", name="+ New").bounding_box()
    width = page.viewport_size["width"] if page.viewport_size else 0
    assert new is not None and new["x"] + new["width"] <= width, (new, width)
    assert await no_sideways_scroll(page)


@pytest.mark.parametrize("font_px", [16, 20, 32])
async def test_the_page_follows_the_browsers_font_size(
    agent: Agent, browser: Browser, contexts: list[BrowserContext], font_px: int
) -> None:
    page = await open_chat(browser, agent, contexts, font_px=font_px)
    assert await page.evaluate("getComputedStyle(document.documentElement).fontSize") == f"{font_px}px"
    await typed(page, "hello")
    size = await page.locator(".msg-user p").evaluate("(p) => parseFloat(getComputedStyle(p).fontSize)")
    assert size == font_px  # the messages grow with it
    # the message box keeps room to type (at 200%, most of the width); nothing scrolls sideways
    composer = await page.locator("#composer").bounding_box()
    box = await page.get_by_label("Message to the agent").bounding_box()
    assert composer is not None and box is not None
    assert box["width"] >= (0.6 if font_px >= 32 else 0.45) * composer["width"], (box, composer)
    assert await no_sideways_scroll(page)


async def test_touch_targets_are_at_least_44px(agent: Agent, browser: Browser, contexts: list[BrowserContext]) -> None:
    page = await open_chat(browser, agent, contexts)
    await agent.hub.set_status("running")  # Stop is shown
    agent.call("choice", DEPLOY)
    await wait_for_card(page, "choice")
    await page.get_by_role("button", name="+ New").click()
    await page.get_by_role("group", name="Conversations").get_by_role("button", name="Main").click()
    # measured once the cards have appeared (their entrance animation moves them), as laid out in
    # whole CSS pixels (offsetWidth/Height: a sub-pixel layout of 43.98 px is a 44 px target)
    small = await page.evaluate(
        """async () => {
          await Promise.all(document.getAnimations().map((animation) => animation.finished));
          return [...document.querySelectorAll('button, label.button, [role=button]')]
            .filter((el) => el.offsetParent !== null && !el.closest('dialog:not([open])'))
            .map((el) => [el.getAttribute('aria-label') || el.textContent.trim(), el.offsetWidth, el.offsetHeight])
            .filter(([, width, height]) => width < 44 || height < 44)
            .map(([name, width, height]) => `${name}: ${width}x${height}`);
        }"""
    )
    assert small == []


@pytest.mark.node  # axe-core comes from npm (tests/js)
@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize("screen", ["phone", "desktop"])
async def test_the_chat_has_no_accessibility_violation(
    agent: Agent, browser: Browser, contexts: list[BrowserContext], scheme: str, screen: str
) -> None:
    options = {**(PHONE if screen == "phone" else DESKTOP), "color_scheme": scheme, "bypass_csp": True}
    page = await open_chat(browser, agent, contexts, **options)
    await typed(page, "deploy it")
    await agent.hub.send_text("**Sure.** Steps:\n\n1. build\n2. `ship`\n\nSee [the notes](https://example.invalid/).")
    # a closed card: answered here; another one dismissed by the agent
    answered = agent.call("choice", DEPLOY)
    await wait_for_card(page, "choice")
    await page.get_by_role("button", name="staging").click()
    await answered
    dismissed = agent.call("confirm", {"message": "Delete the branch?"})
    await wait_for_card(page, "confirm")
    dismissed.cancel()
    await expect(page.locator('article.card[data-tool="confirm"]:not([data-state="waiting"])')).to_have_count(1)
    await expect(page.locator(".msg-agent strong")).to_have_text("Sure.")
    assert await violations(page) == []
    # the conversation options, open
    await page.get_by_role("button", name="Rename or close this conversation").click()
    await expect(page.get_by_role("dialog", name="This conversation")).to_be_visible()
    assert await violations(page) == []
