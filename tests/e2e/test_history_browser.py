"""History and conversations in real headless Chromium: reload, a second device, reconnects, retention."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import Page, expect

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol.outputs import Batch, DevicesChanged
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.direct.server import DirectServer

from .conftest import TOKEN, Agent, OpenApp
from .test_app_browser import DEPLOY, card, wait_for_card

pytestmark = pytest.mark.browser


async def typed(page: Page, text: str) -> None:
    """The user types ``text`` and sends it."""
    await page.get_by_label("Message to the agent").fill(text)
    await page.keyboard.press("Enter")


async def conversation_so_far(agent: Agent, page: Page) -> tuple[str, str]:
    """A user message, an agent reply, a choice answered here and a canvas with one stroke; (choice id, board id)."""
    texts: list[str] = []
    arrived = anyio.Event()

    def on_text(device_id: str, text: str) -> None:
        texts.append(text)
        arrived.set()

    agent.hub.on_text = on_text
    await typed(page, "deploy the release")
    with anyio.fail_after(10):
        await arrived.wait()
    await agent.hub.send_text("Which environment?")
    call = agent.call("choice", DEPLOY)
    call_id = await wait_for_card(page, "choice")
    await page.get_by_role("button", name="staging").click()
    assert (await call).status == "completed"
    opened = await agent.call("canvas", {"width": 200, "height": 100}, action="open")
    board = opened.result["instance_id"]
    drawn = await agent.call("canvas", {"instance_id": board, "path": "M10 10 L190 90", "color": "red"}, action="draw")
    assert drawn.status == "completed"
    await expect(page.locator("svg.board path")).to_have_count(1)
    return call_id, board


async def shows_the_conversation(page: Page, call_id: str, *, outcome: str) -> None:
    """The page shows the conversation of :func:`conversation_so_far` once, rebuilt from the history."""
    await expect(page.locator(".msg-user")).to_have_text(["deploy the release"])
    await expect(page.locator(".msg-agent")).to_have_text(["Which environment?"])
    answered = card(page, call_id)
    await expect(answered).to_have_count(1)
    await expect(answered.locator(".card-outcome")).to_have_text(outcome)  # the answer that won, and where
    await expect(answered.get_by_role("button", name="staging")).to_be_disabled()
    path = page.locator("svg.board path")
    await expect(path).to_have_count(1)
    await expect(path).to_have_attribute("d", "M10 10 L190 90")
    await expect(path).to_have_attribute("stroke", "red")


async def test_reload_mid_conversation_shows_history_answer_device_and_canvas(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call_id, _ = await conversation_so_far(agent, page)
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await shows_the_conversation(page, call_id, outcome="Chose: staging on this device")
    # what comes next is live, once
    await agent.hub.send_text("Deployed.")
    await expect(page.locator(".msg-agent")).to_have_text(["Which environment?", "Deployed."])


async def test_second_device_catches_up_from_zero_with_who_answered_where(agent: Agent, open_app: OpenApp) -> None:
    first = await open_app()
    call_id, _ = await conversation_so_far(agent, first)
    second = await open_app()
    await shows_the_conversation(second, call_id, outcome="Chose: staging on Linux PC (Chrome)")  # no raw device id
    # both follow what comes next: the second device's text reaches the first one too
    await typed(second, "thanks")
    await expect(first.locator(".msg-user")).to_have_text(["deploy the release", "thanks"])
    await expect(second.locator(".msg-user")).to_have_text(["deploy the release", "thanks"])


async def test_a_canvas_the_app_answers_by_itself_is_never_not_applied_on_another_device(
    agent: Agent, open_app: OpenApp
) -> None:
    """Every device answers a canvas open at once, and one answer wins: no person's answer lost, so no
    device says "Not applied" or greys the board, live or caught up from the history."""
    first = await open_app()
    second = await open_app()
    opened = await agent.call("canvas", {"width": 200, "height": 100}, action="open")
    await agent.call("canvas", {"instance_id": opened.result["instance_id"], "path": "M1 1 L9 9"}, action="draw")
    third = await open_app()  # from the history
    for page in (first, second, third):
        board = page.locator('article.card[data-tool="canvas"]')
        await expect(board.locator(".card-outcome")).to_have_text(re.compile(r"^Done on (this device|Linux PC)"))
        await expect(board).not_to_have_class(re.compile(r"\bdismissed\b"))
        await expect(page.locator("svg.board path")).to_have_count(1)


async def test_device_resuming_from_a_later_seq_gets_only_what_it_missed(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await agent.hub.send_text("one")
    await agent.hub.send_text("two")
    await expect(page.locator(".msg-agent")).to_have_text(["one", "two"])
    seq = await page.evaluate("JSON.parse(localStorage.getItem('lineup.history.lineup-agent')).seq")
    assert seq == agent.hub.session.history.head
    await agent.server.close()  # the connection drops for a while
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    await agent.hub.send_text("three")  # nobody is attached: only the history has it
    await agent.restart_server()
    await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    await expect(page.locator(".msg-agent")).to_have_text(["one", "two", "three"])

    # the device closes the App; later it opens it again, from the seq it kept. Until the agent has
    # seen the connection end, "four" may still reach the closing page (Chromium runs its renderer a
    # moment after page.close()), which keeps it: then nothing is missed. So "four" waits for the detach.
    context = page.context
    gone = anyio.Event()

    def watch(batch: Batch[Any]) -> None:
        if any(isinstance(event, DevicesChanged) and not event.attached for event in batch.events):
            gone.set()

    agent.hub.watchers.append(watch)
    await page.close()
    with anyio.fail_after(15):
        await gone.wait()
    await agent.hub.send_text("four")
    page = await context.new_page()
    frames: list[dict[str, Any]] = []
    page.on("websocket", lambda ws: ws.on("framereceived", lambda frame: frames.append(json.loads(frame))))
    await page.goto(agent.url)
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator(".msg-agent")).to_have_text(["one", "two", "three", "four"])
    caught_up = [f["payload"] for f in frames if f["type"] == "lineup.v1.history"]
    assert [[e["text"] for e in h["entries"]] for h in caught_up] == [["four"]]
    assert caught_up[0]["head"] == agent.hub.session.history.head and not caught_up[0]["reset"]


async def test_no_duplicates_on_reconnect(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    call_id, _ = await conversation_so_far(agent, page)
    for _ in range(3):
        for peer in agent.hub.peers:
            peer.link.close(1000, "test drops the connection")
        await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    await agent.hub.send_text("after the drops")
    await expect(page.locator(".msg-agent")).to_have_text(["Which environment?", "after the drops"])
    await expect(page.locator(".msg-user")).to_have_text(["deploy the release"])
    await expect(card(page, call_id)).to_have_count(1)
    await expect(page.locator("svg.board")).to_have_count(1)
    await expect(page.locator("svg.board path")).to_have_count(1)


@pytest.fixture
async def small_agent(tmp_path: Path) -> AsyncIterator[Agent]:
    """An agent whose SQLite store keeps 3 history entries."""
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, history_limit=3)
    store = SQLiteStore(settings.database, retention=settings.retention)
    hub = Hub(load_registry(load_entrypoints=False), store=store, retention=settings.retention)
    server = DirectServer.from_settings(hub, settings)
    await server.start()
    try:
        yield Agent(hub, server, server.port)
    finally:
        await server.close()
        store.close()


async def test_retention_bound_is_honoured(small_agent: Agent, browser: object) -> None:
    from playwright.async_api import Browser

    from .browser import PHONE

    assert isinstance(browser, Browser)
    for number in range(1, 8):
        await small_agent.hub.send_text(f"message {number}")
    context = await browser.new_context(**PHONE)
    try:
        page = await context.new_page()
        await page.goto(small_agent.link)
        await expect(page.locator("#link")).to_have_text("Connected")
        await expect(page.locator(".msg-agent")).to_have_text(["message 5", "message 6", "message 7"])
        assert small_agent.hub.store.history_head() == 7
        kept = small_agent.hub.store.history_after(0, oldest_at=float("-inf"), limit=100)
        assert [entry.seq for entry in kept] == [5, 6, 7]  # the file holds no more than the bound
    finally:
        await context.close()


async def test_several_conversations_are_listed_and_switched(agent: Agent, open_app: OpenApp) -> None:
    texts: list[tuple[str, str]] = []

    async def on_text(device_id: str, text: str) -> None:
        texts.append((agent.hub.text_conversation, text))
        await agent.hub.send_text(f"echo: {text}", conversation_id=agent.hub.text_conversation)

    agent.hub.on_text = on_text
    await agent.hub.name_conversation("hermes-cli-1", "CLI: release notes")
    await agent.hub.send_text("Drafting the notes.", conversation_id="hermes-cli-1")
    page = await open_app()
    tabs = page.get_by_role("group", name="Conversations")
    # "Main" is chosen: the CLI's text is hidden, its tab says something new is there
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "CLI: release notes (1 new)"])
    await expect(page.locator(".msg-agent:visible")).to_have_count(0)

    await tabs.get_by_role("button", name="CLI: release notes").click()
    await expect(page.locator(".msg-agent:visible")).to_have_text(["Drafting the notes."])
    # a card of the CLI conversation says which conversation it belongs to
    call = agent.call("choice", DEPLOY, conversation_id="hermes-cli-1")
    call_id = await wait_for_card(page, "choice")
    await expect(card(page, call_id).locator(".card-conversation")).to_have_text("CLI: release notes")
    await page.get_by_role("button", name="test").click()
    assert (await call).result["selected"] == "test"

    # a new conversation made in the App: its text and the reply stay in it
    await page.get_by_role("button", name="+ New").click()
    await typed(page, "plan the offsite")
    await expect(page.locator(".msg-agent:visible")).to_have_text(["echo: plan the offsite"])
    ((conversation, text),) = texts
    assert conversation.startswith("app-") and text == "plan the offsite"
    await expect(tabs.get_by_role("button", pressed=True)).to_have_text("plan the offsite")

    await tabs.get_by_role("button", name="Main").click()
    await expect(page.locator(".msg:visible")).to_have_count(0)
    # after a reload the list and each conversation come back from the history
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button")).to_have_count(3)
    await tabs.get_by_role("button", name="CLI: release notes").click()
    await expect(page.locator(".msg-agent:visible")).to_have_text(["Drafting the notes."])
    await expect(card(page, call_id)).to_contain_text("Chose: test")


async def test_an_untitled_conversation_is_named_by_its_first_message_or_when_it_began_never_by_its_id(
    agent: Agent, open_app: OpenApp
) -> None:
    await agent.hub.send_text("Nightly report ready.", conversation_id="cron-7f3a9c")  # a session with no title
    page = await open_app()
    tabs = page.get_by_role("group", name="Conversations")
    began = re.compile(r"^Conversation of .*\d.* \(1 new\)$")  # the date and time of its first entry
    await expect(tabs.get_by_role("button")).to_have_text(["Main", began])
    assert "7f3a9c" not in await tabs.inner_text()

    await tabs.get_by_role("button", name=re.compile("^Conversation of ")).click()
    await typed(page, "what changed since yesterday?")
    await expect(tabs.get_by_role("button", pressed=True)).to_have_text("what changed since yesterday?")
    await typed(page, "and the day before?")  # a later message leaves the name as it is
    await expect(page.locator(".msg-user:visible")).to_have_count(2)
    await expect(tabs.get_by_role("button", pressed=True)).to_have_text("what changed since yesterday?")

    # from the history after a reload: its first message still names it, until the agent titles it
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button", pressed=True)).to_have_text("what changed since yesterday?")
    await agent.hub.name_conversation("cron-7f3a9c", "Nightly report")
    await expect(tabs.get_by_role("button", pressed=True)).to_have_text("Nightly report")
