"""The reference App over relay, in real Chromium: App ↔ fake WuKongIM ↔ plugin (direct port closed).

Pairing on the "LAN", fallback direct → relay → direct with a card open, every built-in card
answered by relay, end-to-end encryption seen from the server, offline delivery, revocation, the
exported App opened from a pairing link, and notifications while the App is hidden.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from playwright.async_api import Page, expect
from playwright.async_api import TimeoutError as PlaywrightTimeoutError

from lineup_plugin.cli import main as lineup
from lineup_plugin.transports.wukongim.pair_command import export_app, pair_link

from .browser import PHONE
from .conftest import FilesReceived
from .relay_rig import APP_UID, RelayAgent, StaticHost, relay_agent, serve_static
from .test_app_browser import DEPLOY, card, wait_for_card
from .test_media_browser import PNG

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

pytestmark = pytest.mark.browser


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[RelayAgent]:
    """The agent with the direct server and the relay (e2e on)."""
    async for agent in relay_agent(tmp_path):
        yield agent


@pytest.fixture
def static_host(tmp_path: Path) -> Iterator[StaticHost]:
    """The App exported by ``lineup app export`` on a static web server."""
    target = tmp_path / "site"
    assert lineup(["app", "export", str(target)]) == 0
    yield from serve_static(target)


@pytest.fixture
async def context(browser: Browser) -> AsyncIterator[BrowserContext]:
    """A phone-sized browser context (one device); uncaught page errors fail the test."""
    ctx = await browser.new_context(**PHONE)
    errors: list[str] = []
    ctx.on("weberror", lambda error: errors.append(str(error.error)))
    yield ctx
    await ctx.close()
    assert not errors, f"uncaught errors in the page: {errors}"


async def paired_app(context: BrowserContext, agent: RelayAgent, *, init_script: str | None = None) -> Page:
    """Open the App by the direct link and wait until it has paired for the relay."""
    if init_script:
        await context.add_init_script(init_script)
    page = await context.new_page()
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator("#path")).to_have_text("Direct")
    await expect(page.locator(".msg-system")).to_contain_text("Paired")
    return page


async def on_relay(agent: RelayAgent, page: Page) -> None:
    """Close the direct port and wait until the App is connected by relay."""
    await agent.close_direct()
    await expect(page.locator("#path")).to_have_text("Relay")
    await expect(page.locator("#link")).to_have_text("Connected")


def payloads(agent: RelayAgent) -> list[bytes]:
    """Every payload the fake WuKongIM server stored (and so forwarded or served from sync)."""
    return [m.payload for m in agent.im.messages]


# -- pairing and fallback ------------------------------------------------------------------------


async def test_pairing_gives_the_app_relay_settings_and_keys(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    pairing = json.loads(await page.evaluate("localStorage.getItem('lineup.pairing')"))
    state = agent.pairings.state
    assert state is not None and list(state.devices) == [pairing["id"]]
    assert (pairing["uid"], pairing["agent"], pairing["ws"]) == (APP_UID, "lineup-agent", agent.im.ws_url)
    assert pairing["token"] == state.app_token
    assert agent.im.tokens[(APP_UID, 1)] == state.app_token  # registered with the manager token
    assert state.devices[pairing["id"]].app_key != pairing["secret"]  # the App keeps its private key


async def test_fallback_direct_relay_direct_with_a_card_open(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    await on_relay(agent, page)
    await expect(card(page, call_id)).to_have_count(1)  # re-sent by relay, shown once
    await agent.reopen_direct()
    await expect(page.locator("#path")).to_have_text("Direct", timeout=20_000)
    await expect(card(page, call_id)).to_have_count(1)
    await page.get_by_role("button", name="staging").click()
    assert (await call).result == {"selected": "staging", "index": 1}
    second = agent.call("confirm", {"message": "Restart the service?"})
    await on_relay(agent, page)
    await page.get_by_role("button", name="Approve").click()
    assert (await second).result == {"approved": True}
    assert len(await page.locator("article.card").all()) == 2


async def test_two_paired_devices_on_relay_first_answer_wins_and_the_other_is_told(
    agent: RelayAgent, browser: Browser, context: BrowserContext
) -> None:
    phone = await paired_app(context, agent)
    laptop_context = await browser.new_context(**PHONE)
    try:
        laptop = await paired_app(laptop_context, agent)
        await agent.close_direct()
        for page in (phone, laptop):
            await expect(page.locator("#path")).to_have_text("Relay")
            await expect(page.locator("#link")).to_have_text("Connected")
        call = agent.call("choice", DEPLOY)
        call_id = await wait_for_card(laptop, "choice")
        await wait_for_card(phone, "choice")
        await phone.get_by_role("button", name="staging").click()
        assert (await call).result == {"selected": "staging", "index": 1}
        await expect(card(laptop, call_id).locator(".card-outcome")).to_have_text("Chose: staging on Linux PC (Chrome)")
        await expect(card(phone, call_id).locator(".card-outcome")).to_have_text("Chose: staging on this device")
        state = agent.pairings.state
        assert state is not None and len(state.devices) == 2
        # each device got its own copy, sealed for it alone
        pairing_ids = {json.loads(m.payload)["e2e"]["p"] for m in agent.im.messages_from("lineup-agent")}
        assert pairing_ids == set(state.devices)
    finally:
        await laptop_context.close()


async def test_answer_given_while_switching_is_delivered_once(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    call = agent.call("choice", DEPLOY)
    await wait_for_card(page, "choice")
    await agent.close_direct()
    await page.get_by_role("button", name="production").click()  # before the relay is up, maybe
    result = await call
    assert (result.status, result.result) == ("completed", {"selected": "production", "index": 2})


# -- every built-in card over relay --------------------------------------------------------------


async def test_every_builtin_card_is_answered_over_relay(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)

    choice = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="test").click()
    assert (await choice).result == {"selected": "test", "index": 0}

    risky = agent.call("confirm", {"message": "Delete the cache?", "details": "rm -rf /tmp/x", "risk": "restricted"})
    await expect(page.locator("article.card.high-risk")).to_contain_text("High risk")
    await page.get_by_role("button", name="Reject").click()
    assert (await risky).status == "rejected"

    fields = {"type": "object", "properties": {"name": {"type": "string", "title": "Name"}}, "required": ["name"]}
    form = agent.call("input", {"prompt": "Your details", "fields": fields})
    await page.get_by_role("textbox", name="Name", exact=True).fill("Ada")
    await page.locator('article.card[data-tool="input"]').get_by_role("button", name="Send").click()
    assert (await form).result == {"values": {"name": "Ada"}}

    product = await agent.call("calculator", {"a": 6, "b": 7}, action="multiply")
    assert (product.status, product.result) == ("completed", {"value": 42})

    opened = await agent.call("canvas", {"width": 200, "height": 100}, action="open")
    instance = opened.result["instance_id"]
    drawn = await agent.call("canvas", {"instance_id": instance, "path": "M1 1 L9 9"}, action="draw")
    assert drawn.status == "completed"
    await expect(page.locator("svg.board path")).to_have_attribute("d", "M1 1 L9 9")
    assert agent.both.direct.connections == 0  # all of it went by relay


async def test_relay_works_without_webcrypto(agent: RelayAgent, context: BrowserContext) -> None:
    # a page served over http from a LAN address is no secure context: crypto.subtle is missing there
    no_subtle = "Object.defineProperty(Crypto.prototype, 'subtle', {get: () => undefined})"
    page = await paired_app(context, agent, init_script=no_subtle)
    assert await page.evaluate("crypto.subtle === undefined")
    await on_relay(agent, page)
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="staging").click()
    assert (await call).result == {"selected": "staging", "index": 1}


# -- end-to-end encryption -----------------------------------------------------------------------


async def test_the_server_sees_no_plaintext_of_the_call(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    question, options = "Which secret vault holds the launch codes?", ["vault-alpha-9", "vault-omega-3"]
    call = agent.call("choice", {"question": question, "options": options})
    await page.get_by_role("button", name="vault-omega-3").click()
    assert (await call).result == {"selected": "vault-omega-3", "index": 1}
    seen = payloads(agent)
    assert len(seen) >= 4  # hello, welcome..., call, result
    for payload in seen:
        content = json.loads(payload)
        assert set(content) == {"type", "e2e"}, content  # routing and ciphertext only
        text = payload.decode()
        for secret in (question, *options, "selected", "choice", "tool.call"):
            assert secret not in text


async def test_tampered_and_replayed_messages_are_refused(
    agent: RelayAgent, context: BrowserContext, caplog: pytest.LogCaptureFixture
) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    sent = agent.im.messages_from("lineup-agent")[-1]
    # the server replays the agent's last message and a tampered copy of it to the App
    content = json.loads(sent.payload)
    box = content["e2e"]
    flipped = bytearray(base64.urlsafe_b64decode(box["c"] + "=="))
    flipped[0] ^= 1
    tampered = {**content, "e2e": {**box, "c": base64.urlsafe_b64encode(flipped).decode().rstrip("=")}}
    await agent.im.push("lineup-agent", APP_UID, sent.payload)
    await agent.im.push("lineup-agent", APP_UID, json.dumps(tampered).encode())
    await expect(page.locator(".msg-system", has_text="replayed message")).to_have_count(1)
    await expect(page.locator(".msg-system", has_text="does not authenticate")).to_have_count(1)
    await expect(card(page, call_id)).to_have_count(1)
    # and the App's answer replayed to the agent changes nothing (refused before the hub)
    await page.get_by_role("button", name="test").click()
    assert (await call).result == {"selected": "test", "index": 0}
    answer = agent.im.messages_from(APP_UID)[-1]
    with caplog.at_level(logging.WARNING, logger="lineup_plugin.transports.wukongim.relay"):
        replayed = await agent.im.push(APP_UID, "lineup-agent", answer.payload)
        await agent.im.wait_until(lambda: any(a.message_id == replayed.message_id for a in agent.im.recvacks))
    assert f"refused wukongim message {replayed.message_id}: e2e: replayed" in caplog.text


# -- offline delivery ----------------------------------------------------------------------------


async def test_cards_sent_while_offline_arrive_and_ended_ones_close(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    first = agent.call("choice", DEPLOY)
    first_id = await wait_for_card(page, "choice")
    agent.im.close_before_connack = 10_000  # the phone has no network: every login attempt fails
    await agent.im.drop(APP_UID)
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    await agent.hub.cancel(first_id, "the agent was interrupted")
    assert (await first).status == "cancelled"
    sent = len(agent.im.messages_from("lineup-agent"))
    second = agent.call("confirm", {"message": "Ship it?"})
    await agent.im.wait_until(lambda: len(agent.im.messages_from("lineup-agent")) > sent)  # stored, not delivered
    agent.im.close_before_connack = 0  # back online
    await expect(page.locator("#link")).to_have_text("Connected", timeout=20_000)
    await expect(card(page, first_id).locator(".card-outcome")).to_contain_text("Cancelled")
    await expect(card(page, first_id)).to_have_attribute("data-state", "cancelled")
    await page.get_by_role("button", name="Approve").click()
    assert (await second).result == {"approved": True}


async def test_a_new_device_gets_a_long_history_a_page_at_a_time_over_the_relay(
    agent: RelayAgent, context: BrowserContext, static_host: StaticHost
) -> None:
    from .test_history_scroll import scroll_to_the_beginning

    await agent.close_direct()  # away from home: only the relay
    texts = [f"{index:04d} " + "x" * 2_000 for index in range(80)]  # about 160 KB: three pages
    for text in texts:
        await agent.hub.send_text(text)
    page = await context.new_page()
    await page.goto(await pair_link(agent.settings, static_host.url))  # the exported App, a new device
    await expect(page.locator("#path")).to_have_text("Relay")
    messages = page.locator(".msg-agent")
    await expect(messages.last).to_have_text(texts[-1])
    assert 10 < await messages.count() < 40  # the newest page only
    await scroll_to_the_beginning(page)
    assert [text[:4] for text in await messages.all_inner_texts()] == [text[:4] for text in texts]


# -- revocation ----------------------------------------------------------------------------------


async def test_revoked_app_is_refused_with_a_clear_message(
    agent: RelayAgent, context: BrowserContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    await context.clock.install()  # the SDK waits 3 s before it logs in again: the test moves the clock on
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    old_token = agent.pairings.state.app_token  # type: ignore[union-attr]
    for key, value in {
        "LINEUP_WUKONGIM_API_URL": agent.im.api_url,
        "LINEUP_WUKONGIM_UID": "lineup-agent",
        "LINEUP_WUKONGIM_APP_UID": APP_UID,
        "LINEUP_WUKONGIM_MANAGER_TOKEN": agent.settings.wukongim.manager_token,  # type: ignore[union-attr]
    }.items():
        monkeypatch.setenv(key, value)
    assert await asyncio.to_thread(lineup, ["pair", "--revoke", "--data-dir", str(agent.settings.data_dir)]) == 0
    assert agent.im.tokens[(APP_UID, 1)] != old_token
    refused = agent.im.connects
    await agent.im.drop(APP_UID)  # the App logs in again with its old token: refused
    await next_logins(agent, page, refused + 1)
    await expect(page.locator(".msg-system", has_text="revoked")).to_be_visible()
    assert await page.evaluate("localStorage.getItem('lineup.pairing')") is None


async def test_a_message_from_a_revoked_pairing_is_answered_why(agent: RelayAgent, context: BrowserContext) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    agent.pairings.revoke()
    agent.im.tokens[(APP_UID, 1)] = json.loads(await page.evaluate("localStorage.getItem('lineup.pairing')"))["token"]
    await page.get_by_label("Message to the agent").fill("are you there?")
    await page.keyboard.press("Enter")
    await expect(page.locator(".msg-system", has_text="pairing was revoked on the agent")).to_be_visible()


# -- the exported App ----------------------------------------------------------------------------


async def test_exported_app_opened_from_a_pairing_link_connects_by_relay(
    agent: RelayAgent, context: BrowserContext, static_host: StaticHost
) -> None:
    await agent.close_direct()  # away from home: only the relay
    link = await pair_link(agent.settings, static_host.url)
    page = await context.new_page()
    await page.goto(link)
    await expect(page.locator("#path")).to_have_text("Relay")
    await expect(page.locator("#link")).to_have_text("Connected")
    assert "pair=" not in await page.evaluate("location.href")  # the keys left the address bar
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="staging").click()
    assert (await call).result == {"selected": "staging", "index": 1}
    await page.reload()  # the pairing is kept in the exported App's storage
    await expect(page.locator("#path")).to_have_text("Relay")
    await expect(page.locator("#link")).to_have_text("Connected")
    await page.get_by_role("button", name="Disconnect").click()
    await page.get_by_role("button", name="Connect").click()  # no token here: the pairing is enough
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator("#path")).to_have_text("Relay")


def test_export_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("x")
    assert lineup(["app", "export", str(tmp_path)]) == 2
    written = tmp_path / "new"
    assert export_app(written) > 10
    assert (written / "index.html").is_file() and (written / "vendor" / "relay.js").is_file()


# -- notifications -------------------------------------------------------------------------------

NOTIFICATION_STUB = """
window.shown = []; window.asked = 0; window.hidden = false;
window.Notification = class {
  constructor(title, options) { shown.push({title, ...options}); console.log(`notification: ${title}`); }
  close() {}
};
Notification.permission = "default";
Notification.requestPermission = async () => { asked += 1; Notification.permission = "granted"; return "granted"; };
Object.defineProperty(Document.prototype, "visibilityState", {get: () => (window.hidden ? "hidden" : "visible")});
"""


PAGE_STATE = """() => ({
  link: document.querySelector("#link")?.textContent, path: document.querySelector("#path")?.textContent,
  visibility: document.visibilityState, permission: Notification.permission, notifications: shown.length,
  cards: [...document.querySelectorAll("article.card")].map((c) => `${c.dataset.tool} ${c.dataset.callId}`),
  system: [...document.querySelectorAll(".msg-system")].map((m) => m.textContent),
})"""


@contextlib.asynccontextmanager
async def notified(agent: RelayAgent, page: Page) -> AsyncIterator[None]:
    """The block makes the page show a notification (its stub logs one); if none comes, fail saying
    what the page and the hub showed."""
    try:
        async with page.expect_console_message(lambda message: message.text.startswith("notification: ")):
            yield
    except PlaywrightTimeoutError:
        devices = [(peer.device_id, peer.link.name) for peer in agent.hub.peers]
        live = [(call.call_id, str(call.state)) for call in agent.hub.session.calls.all()]
        pytest.fail(f"no notification; the page: {await page.evaluate(PAGE_STATE)}; devices {devices}; live {live}")


async def test_notification_is_asked_once_from_the_bell_and_shown_when_hidden(
    agent: RelayAgent, context: BrowserContext
) -> None:
    page = await paired_app(context, agent, init_script=NOTIFICATION_STUB)
    bell = page.get_by_role("button", name="Notify me of new questions")
    await expect(bell).to_be_visible()
    await expect(page.locator("#notify-hint")).to_contain_text("in the background")
    assert await page.evaluate("asked") == 0  # never on load
    await bell.click()
    await expect(bell).to_be_hidden()
    assert await page.evaluate("asked") == 1
    visible = agent.call("confirm", {"message": "Seen while looking?"})
    await wait_for_card(page, "confirm")
    assert await page.evaluate("shown.length") == 0  # the App is in front: no notification
    await page.get_by_role("button", name="Approve").click()
    await visible
    await on_relay(agent, page)
    await page.evaluate("window.hidden = true")
    async with notified(agent, page):
        call = agent.call("choice", DEPLOY)
    shown: list[dict[str, Any]] = await page.evaluate("shown")
    assert len(shown) == 1
    assert shown[0]["title"] == "The agent asks you to choose"
    assert shown[0]["body"] == DEPLOY["question"]
    await page.get_by_role("button", name="test").click()
    assert (await call).status == "completed"


async def test_notifications_work_with_real_permission_granted(browser: Browser, agent: RelayAgent) -> None:
    ctx = await browser.new_context(**PHONE, permissions=["notifications"])
    try:
        page = await paired_app(ctx, agent)
        assert await page.evaluate("Notification.permission") == "granted"
        await expect(page.get_by_role("button", name="Notify me of new questions")).to_be_hidden()
    finally:
        await ctx.close()


async def test_a_login_the_server_keeps_refusing_in_silence_is_explained(
    agent: RelayAgent, context: BrowserContext
) -> None:
    # WuKongIM v2.2.5 answers a wrong token with no CONNACK and a close: the App cannot tell why
    await context.clock.install()  # the SDK waits 3 s before each new login: the test moves the clock on
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    agent.im.close_before_connack = 10_000
    refused = agent.im.connects
    await agent.im.drop(APP_UID)
    await next_logins(agent, page, refused + 3)  # three closes in a row without a login are told
    await expect(page.locator(".msg-system", has_text="has not let this App log in")).to_be_visible()
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    agent.im.close_before_connack = 0
    await next_logins(agent, page, agent.im.connects + 1)
    await expect(page.locator("#link")).to_have_text("Connected")


async def next_logins(agent: RelayAgent, page: Page, connects: int) -> None:
    """Move the page's clock past the SDK's 3 s wait before each next login until the fake server has
    seen ``connects`` logins in all; each is seen arrive before the clock moves again (a move made
    before the SDK set its timer is lost: the page's clock, which keeps running, fires it 3 s later)."""
    while (seen := agent.im.connects) < connects:
        await page.clock.fast_forward(3_000)
        await asyncio.wait_for(agent.im.wait_until(lambda seen=seen: agent.im.connects > seen), timeout=30)


# -- files over the relay (inline, under the size limit) -------------------------------------------


async def test_a_photo_goes_up_and_an_image_comes_down_over_the_relay(
    agent: RelayAgent, context: BrowserContext
) -> None:
    page = await paired_app(context, agent)
    await on_relay(agent, page)
    photo = PNG + os.urandom(300_000)  # pieces of 32 KiB by relay
    await page.locator("#photo").set_input_files({"name": "receipt.png", "mimeType": "image/png", "buffer": photo})
    await expect(page.locator("#tray")).to_contain_text("receipt.png")
    await page.get_by_label("Message to the agent").fill("what does this receipt say?")
    await page.get_by_role("button", name="Send").click()
    received = agent.hub.on_files
    assert isinstance(received, FilesReceived)
    await expect(page.locator("#tray")).to_be_hidden()
    await received.first()
    assert received[0][0] == "what does this receipt say?"
    (file,) = received[0][1]
    assert file.path.read_bytes() == photo
    await agent.hub.send_file("Here is the chart.", PNG + bytes(40_000), "chart.png", "image/png")
    image = page.get_by_role("img", name="chart.png")
    await expect(image).to_be_visible()
    assert (await image.get_attribute("src") or "").startswith("blob:")  # the inline bytes: :9527 is out of reach
    await page.wait_for_function("img => img.complete && img.naturalWidth === 4", arg=await image.element_handle())
    assert not any(b"receipt" in payload or b"chart.png" in payload for payload in payloads(agent))  # sealed
