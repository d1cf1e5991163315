"""Plugin renderers in real headless Chromium: the example plugin's rating card, and broken renderers
that cost only their own card (the agent hears `unsupported` or `failed`; the App goes on)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from lineup_plugin import Hub
from tests.plugin_renderers import PLAIN, renderer_registry

from .conftest import Agent, OpenApp, serving
from .test_app_browser import DEPLOY, wait_for_card

pytestmark = pytest.mark.browser


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    """The e2e agent, with the example plugin (its rating renderer) and the Gadgets plugin installed."""
    async with serving(Hub(renderer_registry()), tmp_path) as agent:
        yield agent


async def test_the_example_plugins_rating_card_answers_with_stars(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("rating", {"subject": "the forecast"})
    call_id = await wait_for_card(page, "rating")
    card = page.locator(f'article.card[data-call-id="{call_id}"]')
    await expect(card.locator(".card-tag")).to_have_text("Rating")
    await expect(card.get_by_role("heading")).to_have_text("How would you rate the forecast?")
    await card.get_by_role("button", name="4 of 5 stars").click()
    result = await call
    assert (result.status, result.result) == ("completed", {"stars": 4})
    await expect(card.locator(".card-outcome")).to_have_text("You gave 4 of 5 stars on this device")
    await expect(card.get_by_role("button", name="5 of 5 stars")).to_be_disabled()


async def test_a_second_device_sees_the_plugin_card_answered_on_the_other(agent: Agent, open_app: OpenApp) -> None:
    phone, tablet = await open_app(), await open_app()
    call = agent.call("rating", {"subject": "lunch"})
    call_id = await wait_for_card(phone, "rating")
    await wait_for_card(tablet, "rating")
    await tablet.get_by_role("button", name="2 of 5 stars").click()
    assert (await call).result == {"stars": 2}
    card = phone.locator(f'article.card[data-call-id="{call_id}"]')
    await expect(card).to_have_attribute("data-state", "completed")
    await expect(card.locator(".card-outcome")).to_have_text("Done on Linux PC (Chrome)")


async def test_a_tool_whose_plugin_ships_no_renderer_is_still_unsupported(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    result = await agent.call(PLAIN, {})
    assert result.status == "unsupported"
    assert result.result["message"] == f'this App has no renderer for tool "{PLAIN}"'
    await expect(page.locator(f'article.card[data-tool="{PLAIN}"]')).to_contain_text("which this App cannot show")


@pytest.mark.parametrize(
    ("tool", "why"),
    [
        ("no_render", "its module does not export default { render(card, args, context) }"),
        ("syntax_error", "SyntaxError"),  # Chromium's wording of the failed import follows
    ],
)
async def test_a_malformed_renderer_is_answered_unsupported_saying_why(
    tool: str, why: str, agent: Agent, open_app: OpenApp
) -> None:
    page = await open_app()
    result = await agent.call(tool, {})
    assert result.status == "unsupported"
    assert result.result["message"].startswith(f'the App could not load the renderer of tool "{tool}": ')
    assert why in result.result["message"]
    await expect(page.locator(f'article.card[data-tool="{tool}"]')).to_contain_text("could not be loaded")
    await answer_a_choice_still(agent, page)


@pytest.mark.parametrize(
    ("tool", "message"),
    [("throws", "the App could not show this call: cannot draw it"), ("rejects", "the async renderer failed")],
)
async def test_a_renderer_that_throws_fails_its_call_only(
    tool: str, message: str, agent: Agent, open_app: OpenApp
) -> None:
    page = await open_app()
    result = await agent.call(tool, {"what": "it"})
    assert result.status == "failed" and result.result["message"].endswith(message)
    await expect(page.locator(f'article.card[data-tool="{tool}"]')).to_have_attribute("data-state", "failed")
    await answer_a_choice_still(agent, page)


async def answer_a_choice_still(agent: Agent, page: Page) -> None:
    """The App still works after a broken renderer: a built-in card is answered as usual."""
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="staging").click()
    assert (await call).result == {"selected": "staging", "index": 1}
