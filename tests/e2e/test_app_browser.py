"""The reference App in real headless Chromium, against the real direct server and hub."""

from __future__ import annotations

import re

import anyio
import pytest
from playwright.async_api import Locator, Page, expect

from .conftest import TOKEN, Agent, OpenApp

pytestmark = pytest.mark.browser

DEPLOY = {"question": "Deploy to which environment?", "options": ["test", "staging", "production"]}


def card(page: Page, call_id: str) -> Locator:
    """The card of one call."""
    return page.locator(f'article.card[data-call-id="{call_id}"]')


async def wait_for_card(page: Page, tool: str) -> str:
    """The call id of the (only) card of ``tool`` once it is shown."""
    locator = page.locator(f'article.card[data-tool="{tool}"]')
    await expect(locator).to_have_count(1)
    call_id = await locator.get_attribute("data-call-id")
    assert call_id
    return call_id


async def test_page_loads_from_the_plugins_port(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app(agent.url, connected=False)
    response = await page.request.get(agent.url)
    assert response.ok
    assert response.headers["content-type"].startswith("text/html")
    await expect(page).to_have_title("LineUp")
    await expect(page.get_by_label("Agent address")).to_have_value(f"127.0.0.1:{agent.server.port}")
    await expect(page.get_by_role("button", name="Connect")).to_be_visible()


async def test_connects_with_the_token_typed_in(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app(agent.url, connected=False)
    await page.get_by_label("Token").fill(TOKEN)
    await page.get_by_role("button", name="Connect").click()
    await expect(page.locator("#link")).to_have_text("Connected")
    device_id = await page.evaluate("localStorage.getItem('lineup.device_id')")
    assert [peer.device_id for peer in agent.hub.peers] == [device_id]


async def test_token_is_gone_from_the_address_bar_after_load(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await expect(page).to_have_url(agent.url)
    assert TOKEN not in await page.evaluate("location.href")


async def test_wrong_token_shows_a_clear_error(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app(f"{agent.url}#token=not-the-right-token-at-all", connected=False)
    await expect(page.get_by_role("alert")).to_contain_text("Wrong token — check the token printed by the agent")
    await expect(page.get_by_label("Token")).to_be_focused()
    assert not agent.hub.connected
    assert await page.evaluate("localStorage.getItem('lineup.token')") is None


async def test_unreachable_server_shows_a_clear_error(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app(agent.url, connected=False)
    await page.get_by_label("Agent address").fill("127.0.0.1:9")  # discard port: nothing listens
    await page.get_by_label("Token").fill(TOKEN)
    await page.get_by_role("button", name="Connect").click()
    await expect(page.get_by_role("alert")).to_contain_text("Cannot reach the agent at 127.0.0.1:9")


async def test_choice_click_delivers_the_selection_to_the_agent(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="staging").click()
    result = await call
    assert (result.status, result.result) == ("completed", {"selected": "staging", "index": 1})
    await expect(page.locator("article.card .card-outcome")).to_have_text("Chose: staging on this device")
    await expect(page.get_by_role("button", name="production")).to_be_disabled()


async def test_confirm_reject_delivers_rejected(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    arguments = {"message": "Delete the cache?", "details": "rm -rf /var/cache/app", "risk": "restricted"}
    call = agent.call("confirm", arguments)
    shown = page.locator("article.card.high-risk")
    await expect(shown).to_contain_text("High risk: restricted action")
    await expect(shown.locator("pre")).to_have_text("rm -rf /var/cache/app")
    await page.get_by_role("button", name="Reject").click()
    result = await call
    assert (result.status, result.result) == ("rejected", {"approved": False})


async def test_confirm_approved_with_the_keyboard_delivers_approved(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("confirm", {"message": "Restart the service?"})
    await page.get_by_role("button", name="Approve").focus()
    await page.keyboard.press("Enter")
    result = await call
    assert (result.status, result.result) == ("completed", {"approved": True})


async def test_input_form_returns_the_typed_values(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    fields = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name"},
            "age": {"type": "integer", "title": "Age", "minimum": 0},
            "plan": {"enum": ["free", "pro"], "title": "Plan"},
            "news": {"type": "boolean", "title": "Newsletter"},
        },
        "required": ["name", "plan"],
    }
    call = agent.call("input", {"prompt": "Your details", "fields": fields})
    send = page.locator("article.card").get_by_role("button", name="Send")
    await send.click()
    await expect(page.locator(".field-error").first).to_have_text("This field is required.")
    assert not call.done()
    await page.get_by_role("textbox", name="Name", exact=True).fill("Ada")
    await page.get_by_role("spinbutton", name="Age").fill("36")
    await page.get_by_role("combobox", name="Plan").select_option("pro")
    await page.get_by_role("checkbox", name="Newsletter").check()
    await send.click()
    result = await call
    assert result.status == "completed"
    assert result.result == {"values": {"name": "Ada", "age": 36, "plan": "pro", "news": True}}


async def test_input_without_fields_asks_one_text_and_can_be_cancelled(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("input", {"prompt": "What should the release be called?"})
    await expect(page.get_by_label("Your answer")).to_be_visible()
    await page.locator("article.card").get_by_role("button", name="Cancel").click()
    result = await call
    assert result.status == "cancelled"


async def test_calculator_returns_the_computed_value(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    result = await agent.call("calculator", {"a": 6, "b": 7}, action="multiply")
    assert (result.status, result.result) == ("completed", {"value": 42})
    await expect(page.locator("article.card .calc")).to_have_text("6 × 7 = 42")


async def test_calculator_division_by_zero_fails(agent: Agent, open_app: OpenApp) -> None:
    await open_app()
    result = await agent.call("calculator", {"a": 1, "b": 0}, action="divide")
    assert (result.status, result.result["message"]) == ("failed", "division by zero")


async def test_canvas_open_and_draw_renders_a_path(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    opened = await agent.call("canvas", {"width": 400, "height": 300}, action="open")
    assert opened.status == "completed"
    instance = opened.result["instance_id"]
    assert opened.result["message"] == f"instance_id: {instance}"
    drawn = await agent.call(
        "canvas", {"instance_id": instance, "path": "M10 10 L390 290", "color": "red", "width": 4}, action="draw"
    )
    assert drawn.status == "completed"
    path = page.locator("svg.board path")
    await expect(path).to_have_count(1)
    await expect(path).to_have_attribute("d", "M10 10 L390 290")
    await expect(path).to_have_attribute("stroke", "red")
    await agent.call("canvas", {"instance_id": instance}, action="undo")
    await expect(path).to_have_count(0)


async def test_canvas_unknown_instance_fails(agent: Agent, open_app: OpenApp) -> None:
    await open_app()
    result = await agent.call("canvas", {"instance_id": "nope", "path": "M0 0 L1 1"}, action="draw")
    assert result.status == "failed"
    assert "unknown canvas instance_id" in result.result["message"]


async def test_unknown_app_tool_is_answered_unsupported(agent: Agent, open_app: OpenApp) -> None:
    agent.hub.registry.add(
        {"name": "barcode_scan", "type": "action", "description": "scan a barcode", "inputSchema": {"type": "object"}},
        source="test",
    )
    page = await open_app()
    result = await agent.call("barcode_scan", {})
    assert result.status == "unsupported"
    assert "no renderer" in result.result["message"]
    await expect(page.locator('article.card[data-tool="barcode_scan"]')).to_contain_text("cannot show")


async def test_second_device_sees_the_answer_that_won_and_where_when_the_first_answers(
    agent: Agent, open_app: OpenApp
) -> None:
    first, second = await open_app(), await open_app()
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(second, "choice")
    await first.get_by_role("button", name="test").click()
    assert (await call).result == {"selected": "test", "index": 0}
    await expect(card(second, call_id).locator(".card-outcome")).to_have_text("Chose: test on Linux PC (Chrome)")
    await expect(card(second, call_id)).to_have_class(re.compile(r"\bdismissed\b"))
    await expect(second.get_by_role("button", name="staging")).to_be_disabled()


async def test_expired_call_greys_its_card_with_the_reason(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    result = await agent.call("choice", DEPLOY, deadline=0.2)
    assert result.status == "expired"
    await expect(page.locator("article.card .card-outcome")).to_have_text("Expired: no answer before the deadline")
    await expect(page.get_by_role("button", name="test")).to_be_disabled()


async def test_reload_mid_call_shows_the_card_again_and_one_answer_completes_it(
    agent: Agent, open_app: OpenApp
) -> None:
    page = await open_app()
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(card(page, call_id)).to_have_count(1)
    await page.get_by_role("button", name="production").click()
    result = await call
    assert (result.status, result.result) == ("completed", {"selected": "production", "index": 2})
    await expect(card(page, call_id)).to_have_count(1)


async def test_dropped_connection_reconnects_and_keeps_the_open_card(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await page.evaluate(
        """() => { window.linkStates = [];
           new MutationObserver(() => linkStates.push(document.getElementById('link').textContent))
             .observe(document.getElementById('link'), {childList: true, characterData: true, subtree: true}); }"""
    )
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    for peer in agent.hub.peers:
        peer.link.close(1000, "test drops the connection")
    await page.wait_for_function("linkStates.includes('Reconnecting…')")
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(card(page, call_id)).to_have_count(1)
    await page.get_by_role("button", name="staging").click()
    assert (await call).result == {"selected": "staging", "index": 1}


async def test_chat_text_goes_both_ways(agent: Agent, open_app: OpenApp) -> None:
    received: list[tuple[str, str]] = []
    arrived = anyio.Event()

    def on_text(device_id: str, text: str) -> None:
        received.append((device_id, text))
        arrived.set()

    agent.hub.on_text = on_text
    page = await open_app()
    await page.get_by_label("Message to the agent").fill("hello agent")
    await page.keyboard.press("Enter")
    with anyio.fail_after(10):
        await arrived.wait()
    assert [text for _, text in received] == ["hello agent"]
    await expect(page.locator(".msg-user")).to_have_text("hello agent")
    await agent.hub.send_text("hello human")
    await expect(page.locator(".msg-agent")).to_have_text("hello human")


async def test_status_badge_shows_the_agent_state_and_stop_reaches_the_agent(agent: Agent, open_app: OpenApp) -> None:
    stopped = anyio.Event()
    agent.hub.on_stop = lambda device_id: stopped.set()
    page = await open_app()
    stop = page.get_by_role("button", name="Stop")
    await expect(stop).to_be_hidden()
    await agent.hub.set_status("thinking")
    await expect(page.locator("#agent-status")).to_have_text("Thinking…")
    await stop.click()
    await expect(page.locator(".msg-system")).to_have_text("Asked the agent to stop.")
    with anyio.fail_after(10):
        await stopped.wait()


async def test_answer_given_while_reconnecting_is_delivered_after_reconnect(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    await agent.server.close()
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    await page.get_by_role("button", name="staging").click()
    assert not call.done()
    await agent.restart_server()
    await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    assert (await call).result == {"selected": "staging", "index": 1}
    await expect(card(page, call_id)).to_have_count(1)


async def test_card_of_a_call_that_ended_while_offline_is_closed_on_reconnect(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    await agent.server.close()
    await agent.hub.cancel(call_id, "the agent was interrupted")
    assert (await call).status == "cancelled"
    await agent.restart_server()
    outcome = card(page, call_id).locator(".card-outcome")
    await expect(outcome).to_have_text("Cancelled: the agent was interrupted", timeout=15_000)
    await expect(card(page, call_id)).to_have_attribute("data-state", "cancelled")


async def test_app_works_where_crypto_random_uuid_is_missing(agent: Agent, open_app: OpenApp) -> None:
    # plain http on a LAN address is not a secure context: browsers leave crypto.randomUUID out there
    page = await open_app(init_script="delete Crypto.prototype.randomUUID")
    assert await page.evaluate("typeof crypto.randomUUID") == "undefined"
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="test").click()
    assert (await call).result == {"selected": "test", "index": 0}


async def test_a_card_names_the_agent_session_that_asks(agent: Agent, open_app: OpenApp) -> None:
    from lineup_plugin.protocol.messages import Origin

    page = await open_app()
    call = agent.call("choice", DEPLOY, origin=Origin(kind="cron", label="nightly-report"))
    call_id = await wait_for_card(page, "choice")
    await expect(card(page, call_id).locator(".card-origin")).to_have_text("Cron job · nightly-report")
    await page.get_by_role("button", name="test").click()
    assert (await call).status == "completed"
    plain = agent.call("choice", DEPLOY)  # one agent session: nothing to name
    await expect(page.locator("article.card")).to_have_count(2)
    assert await page.locator("article.card .card-origin").count() == 1
    await page.get_by_role("button", name="staging").last.click()
    assert (await plain).status == "completed"
