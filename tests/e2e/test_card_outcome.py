"""A card shows the outcome the agent got, on every device, live and after a reload, in real Chromium.

Two devices answer one card at once, round after round: whichever answer the session takes is the
one every card shows, with the device it came from; the other device's card says its answer was
not applied. Answers given while the App is offline are shown as not sent, then concluded.
"""

from __future__ import annotations

import asyncio

import pytest

from .conftest import Agent, OpenApp

pytestmark = pytest.mark.browser

ROUNDS = 20


def expected(text: str, what: str, *, won: bool) -> bool:
    """Whether a card's outcome text agrees with the agent's result ``what`` (``won``: its device's answer won)."""
    if won:
        return text == f"{what} on this device"
    lost = text.startswith("Not applied: already answered on ") and text.endswith(f": {what}")
    unanswered = text.endswith(f"{what} on Linux PC (Chrome)")  # its answer never left: the verdict came first
    return lost or unanswered


async def test_two_devices_answer_one_card_at_once_and_every_card_shows_the_agents_result(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import expect

    approving, rejecting = await open_app(), await open_app()
    outcomes: list[tuple[str, str]] = []  # (question, what the agent got)
    for round_ in range(ROUNDS):
        question = f"Round {round_}: deploy?"
        call = agent.call("confirm", {"message": question})
        cards = [page.locator("article.card", has_text=question) for page in (approving, rejecting)]
        for card in cards:
            await expect(card.get_by_role("button", name="Approve")).to_be_enabled()
        await asyncio.gather(
            cards[0].get_by_role("button", name="Approve").dispatch_event("click"),
            cards[1].get_by_role("button", name="Reject").dispatch_event("click"),
        )
        result = await call
        what = "Approved" if result.status == "completed" else "Rejected"
        assert result.status in ("completed", "rejected")
        outcomes.append((question, what))
        for index, card in enumerate(cards):
            outcome = card.locator(".card-outcome")
            await expect(outcome).not_to_have_text("Sending…", use_inner_text=True)
            await expect(card).not_to_have_attribute("data-state", "sending")
            won = (index == 0) == (what == "Approved")
            text = await outcome.inner_text()
            assert expected(text, what, won=won), (round_, index, text, what)
    for page in (approving, rejecting):
        await page.reload()
        await expect(page.locator("#link")).to_have_text("Connected")
    for question, what in outcomes:
        for index, page in enumerate((approving, rejecting)):
            card = page.locator("article.card", has_text=question)
            await expect(card).not_to_have_attribute("data-state", "sending")
            text = await card.locator(".card-outcome").inner_text()
            won = (index == 0) == (what == "Approved")
            assert expected(text, what, won=won), ("after reload", question, index, text, what)


async def test_an_answer_given_offline_shows_not_sent_then_the_verdict(agent: Agent, open_app: OpenApp) -> None:
    from playwright.async_api import expect

    page = await open_app()
    call = agent.call("choice", {"question": "Which colour?", "options": ["red", "blue"]})
    card = page.locator("article.card")
    await expect(card.get_by_role("button", name="red")).to_be_enabled()
    await agent.server.close()  # the agent's server goes away: the App reconnects meanwhile
    await expect(page.locator("#link")).not_to_have_text("Connected")
    await card.get_by_role("button", name="red").click()
    await expect(card.locator(".card-outcome")).to_have_text(
        "You chose: red — Not sent yet: it goes when the App is connected again"
    )
    assert not call.done()
    await agent.restart_server()
    result = await call
    assert (result.status, result.result) == ("completed", {"selected": "red", "index": 0})
    await expect(card.locator(".card-outcome")).to_have_text("Chose: red on this device")


async def test_an_answer_given_offline_to_a_call_that_ended_meanwhile_is_shown_not_applied(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import expect

    from lineup_plugin.protocol.messages import ToolResult

    page = await open_app()
    call = agent.call("choice", {"question": "Which colour?", "options": ["red", "blue"]})
    card = page.locator("article.card")
    await expect(card.get_by_role("button", name="red")).to_be_enabled()
    call_id = await card.get_attribute("data-call-id")
    assert call_id is not None
    await agent.server.close()
    await expect(page.locator("#link")).not_to_have_text("Connected")
    await card.get_by_role("button", name="red").click()  # queued: not sent
    blue = ToolResult(call_id=call_id, name="choice", result={"selected": "blue", "index": 1})
    assert await agent.hub.answer_from("mcp-host", blue) is None  # meanwhile, on another surface
    assert (await call).result == {"selected": "blue", "index": 1}
    await agent.restart_server()
    await expect(card.locator(".card-outcome")).to_have_text(
        "Not applied: already answered on the MCP host's card: Chose: blue"
    )
    await expect(card.locator(".card-note")).to_have_count(0)  # no raw refusal under it
    await page.reload()  # the same after a reload
    await expect(page.locator("article.card .card-outcome")).to_have_text(
        "Not applied: already answered on the MCP host's card: Chose: blue"
    )
