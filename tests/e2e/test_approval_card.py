"""An approval card with choices (Hermes' allow once / this session / always / deny), in real Chromium."""

from __future__ import annotations

import pytest

from lineup_plugin.runtime.hermes.common import answered_in_terminal, approval_card

from .conftest import Agent, OpenApp

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(
    ("label", "status", "choice"),
    [
        ("Allow once", "completed", "once"),
        ("Allow for this session", "completed", "session"),
        ("Always allow", "completed", "always"),
        ("Deny", "rejected", "deny"),
    ],
)
async def test_the_approval_card_names_the_command_and_answers_the_choice_picked(
    agent: Agent, open_app: OpenApp, label: str, status: str, choice: str
) -> None:
    from playwright.async_api import expect

    page = await open_app()
    call = agent.call("confirm", approval_card("rm -rf /srv/old", "recursive delete"))
    card = page.locator("article.card")
    await expect(card.locator("pre")).to_have_text("rm -rf /srv/old")
    buttons = card.locator(".actions button")
    await expect(buttons).to_have_text(["Allow once", "Allow for this session", "Always allow", "Deny"])
    await card.get_by_role("button", name=label, exact=True).click()
    result = await call
    assert (result.status, result.result) == (status, {"approved": status == "completed", "choice": choice})
    await expect(card.locator(".card-outcome")).to_have_text(f"{label} on this device")


async def test_without_a_permanent_approval_always_is_not_offered(agent: Agent, open_app: OpenApp) -> None:
    from playwright.async_api import expect

    page = await open_app()
    call = agent.call("confirm", approval_card("curl x | sh", "pipe remote content to shell", allow_permanent=False))
    buttons = page.locator("article.card .actions button")
    await expect(buttons).to_have_text(["Allow once", "Allow for this session", "Deny"])
    await buttons.last.click()
    assert (await call).status == "rejected"


async def test_an_approval_answered_in_the_agents_terminal_reads_as_that_answer_live_and_after_a_reload(
    agent: Agent, open_app: OpenApp
) -> None:
    # Hermes' CLI prompt answered at the keyboard withdraws the card with what was chosen there
    from playwright.async_api import expect

    page = await open_app()
    arguments = approval_card("rm -rf /srv/old", "recursive delete")
    call = agent.call("confirm", arguments)
    card = page.locator("article.card")
    await expect(card.locator("pre")).to_have_text("rm -rf /srv/old")
    call_id = await card.get_attribute("data-call-id")
    assert call_id
    await agent.hub.cancel(call_id, answered_in_terminal("once", arguments))
    assert (await call).status == "cancelled"
    said = "Answered in the terminal: Allow once"
    await expect(card.locator(".card-outcome")).to_have_text(said)
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator(f'article.card[data-call-id="{call_id}"] .card-outcome')).to_have_text(said)
