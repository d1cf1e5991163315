"""A long history in real headless Chromium, a page at a time: a new device gets only the newest page
(≤ 64 KB) and the waiting card at connect; scrolling up asks for the older pages one by one
(``history.older``), each shown above in order, nothing twice or missing, while the message the
user was looking at stays where it was on the screen."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from .conftest import Agent, OpenApp

if TYPE_CHECKING:
    from playwright.async_api import Page

pytestmark = pytest.mark.browser

#: what the page records: every state the line above the oldest message took
WATCH_TOP_LINE = """
window.topStates = [];
new MutationObserver(() => {
  const line = document.querySelector(".feed-top");
  const state = line ? line.dataset.state : "";
  if (window.topStates.at(-1) !== state) window.topStates.push(state);
}).observe(document, { subtree: true, attributes: true, attributeFilter: ["data-state"] });
"""

#: the user scrolls to the top: the oldest agent message shown (its first four characters) and where
#: it is on the screen then (measured before any scroll handler runs)
TO_THE_TOP = """() => {
  const el = document.querySelector(".msg-agent");
  document.getElementById("scroller").scrollTop = 0;
  return [el.textContent.slice(0, 4), el.getBoundingClientRect().top];
}"""

#: whether the message starting with ``looked_at`` is ``top`` px from the top of the screen (± a pixel)
STILL_THERE = """([lookedAt, top]) => {
  const el = [...document.querySelectorAll(".msg-agent")].find((el) => el.textContent.startsWith(lookedAt));
  return Math.abs(el.getBoundingClientRect().top - top) < 1;
}"""


def kind(frame: str) -> str:
    return str(json.loads(frame)["type"]).removeprefix("lineup.v1.")


async def test_a_new_device_gets_the_newest_page_then_the_older_ones_as_the_user_scrolls_up(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import expect

    await open_app()  # a first device, so the agent's messages are kept for the next
    texts = [f"{index:04d} " + "x" * 2_000 for index in range(300)]  # about 600 KB of history
    for text in texts:
        await agent.hub.send_text(text)
    call = agent.call("confirm", {"message": "Deploy now?"})
    page = await open_app(connected=False, url="about:blank", init_script=WATCH_TOP_LINE)
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Network.enable")
    received: list[str] = []
    asked: list[dict[str, Any]] = []
    last_page = anyio.Event()

    def on_received(event: dict[str, Any]) -> None:
        frame = event["response"]["payloadData"]
        received.append(frame)
        payload = json.loads(frame)["payload"]
        if kind(frame) == "history" and payload.get("before") is not None and not payload["earlier"]:
            last_page.set()

    cdp.on("Network.webSocketFrameReceived", on_received)

    def on_sent(event: dict[str, Any]) -> None:
        frame = json.loads(event["response"]["payloadData"])
        if frame.get("type") == "lineup.v1.history.older":
            asked.append(frame["payload"])

    cdp.on("Network.webSocketFrameSent", on_sent)
    await page.goto(agent.link)
    await expect(page.locator("article.card")).to_be_visible()

    # at connect: one history page of at most 64 KB, the card, and nothing older
    [first] = [json.loads(frame)["payload"] for frame in received if kind(frame) == "history"]
    first_page = [e["text"][:4] for e in first["entries"] if e["event"] == "text.out"]
    assert first["earlier"] and 10 < len(first_page) < 40
    assert first_page == [text[:4] for text in texts[-len(first_page) :]]
    messages = page.locator(".msg-agent")
    await expect(messages).to_have_count(len(first_page))
    assert sum(len(frame.encode()) for frame in received) < 100_000  # not the 600 KB
    assert max(len(frame.encode()) for frame in received if kind(frame) == "history") <= 64_000
    assert asked == []  # the user is at the newest message: nothing older asked for

    # the user scrolls to the top, again and again: one page each time, above, the view held
    shown = len(first_page)
    while not await page.locator(".feed-top", has_text="Beginning of the conversation").is_visible():
        looked_at, top = await page.evaluate(TO_THE_TOP)
        await expect(messages).not_to_have_count(shown)  # the older page came, above
        assert await page.evaluate(STILL_THERE, [looked_at, top])  # what the user looked at has not moved
        shown = await messages.count()
    await expect(page.locator(".feed-top")).to_have_text("Beginning of the conversation")
    # each once, in order
    assert [text[:4] for text in await messages.all_inner_texts()] == [text[:4] for text in texts]

    with anyio.fail_after(10):  # the browser's report of the last frames, a backstop only
        await last_page.wait()
    befores = [request["before"] for request in asked]
    assert len(befores) >= 8 and befores == sorted(befores, reverse=True) and len(set(befores)) == len(befores)
    answers = [json.loads(frame)["payload"] for frame in received if kind(frame) == "history"][1:]
    assert [answer["before"] for answer in answers] == befores  # one page per request, one request at a time
    assert all(len(frame.encode()) <= 64_000 for frame in received if kind(frame) == "history")
    assert not answers[-1]["earlier"] and all(answer["earlier"] for answer in answers[:-1])
    states = await page.evaluate("window.topStates")
    assert "loading" in states and states[-1] == "start"

    # a reload draws what this device showed, older pages included, in order
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator(".msg-agent")).to_have_count(len(texts))
    assert [text[:4] for text in await page.locator(".msg-agent").all_inner_texts()] == [t[:4] for t in texts]
    call.cancel()


async def scroll_to_the_beginning(page: Page) -> None:
    """The user scrolls up until the beginning of the conversation is shown."""
    from playwright.async_api import expect

    while not await page.locator(".feed-top", has_text="Beginning of the conversation").is_visible():
        before = await page.evaluate("document.querySelector('.msg-agent').textContent")
        await page.evaluate(TO_THE_TOP)
        await expect(page.locator(".msg-agent").first).not_to_have_text(before)  # the older page came


async def test_a_card_answered_long_after_it_was_asked_shows_its_outcome_once_its_older_page_comes(
    agent: Agent, open_app: OpenApp
) -> None:
    """The history comes newest page first: how the call ended can come before the call itself."""
    from playwright.async_api import expect

    first = await open_app()
    call = agent.call("choice", {"question": "Which colour?", "options": ["red", "blue"]})
    await expect(first.locator("article.card")).to_be_visible()
    texts = [f"{index:04d} " + "x" * 2_000 for index in range(60)]  # two pages between the call and its answer
    for text in texts[:50]:
        await agent.hub.send_text(text)
    await first.get_by_role("button", name="blue").click()
    assert (await call).result["selected"] == "blue"
    for text in texts[50:]:
        await agent.hub.send_text(text)

    page = await open_app()  # a new device: the answer is in its first page, the call in an older one
    await expect(page.locator("article.card")).to_have_count(0)
    await scroll_to_the_beginning(page)
    shown = page.locator("article.card")
    await expect(shown).to_have_count(1)
    await expect(shown.locator(".card-outcome")).to_have_text("Chose: blue on Linux PC (Chrome)")
    await expect(shown.get_by_role("button", name="red")).to_be_disabled()
    assert [text[:4] for text in await page.locator(".msg-agent").all_inner_texts()] == [t[:4] for t in texts]


async def test_a_device_back_after_a_long_absence_gets_what_it_missed_between_what_it_showed_and_the_newest(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import expect

    page = await open_app()
    before = [f"old {index}" for index in range(5)]
    for text in before:
        await agent.hub.send_text(text)
    await expect(page.locator(".msg-agent")).to_have_count(len(before))
    await agent.server.close()  # the device is away
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    missed = [f"{index:04d} " + "x" * 2_000 for index in range(100)]  # about 200 KB: the newest page and more
    for text in missed:
        await agent.hub.send_text(text)
    await agent.restart_server()
    await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    await expect(page.locator(".msg-agent")).to_have_count(len(before) + len(missed))  # all it missed, pushed
    shown = await page.locator(".msg-agent").all_inner_texts()
    assert [text[:6] for text in shown] == [text[:6] for text in before + missed]  # in order, each once
    await page.reload()  # kept in that order too
    await expect(page.locator(".msg-agent")).to_have_count(len(before) + len(missed))
    assert [text[:6] for text in await page.locator(".msg-agent").all_inner_texts()] == [t[:6] for t in shown]


async def test_one_request_at_a_time_and_a_lost_answer_is_asked_again_after_the_reconnect(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import expect

    from lineup_plugin.protocol.messages import HistoryOlder

    await open_app()
    texts = [f"{index:04d} " + "x" * 2_000 for index in range(60)]
    for text in texts:
        await agent.hub.send_text(text)
    page = await open_app()
    timeline = agent.hub.session.history
    answer = timeline.older
    held: list[HistoryOlder] = []

    def hold(link: object, request: HistoryOlder, stored: object, *, ref: str | None = None) -> None:
        held.append(request)  # the agent does not answer (the answer is lost)

    timeline.older = hold  # type: ignore[method-assign,assignment]
    typed: list[str] = []
    ping = anyio.Event()

    def on_text(device_id: str, text: str) -> None:
        typed.append(text)
        ping.set()

    agent.hub.on_text = on_text

    await page.evaluate(TO_THE_TOP)
    await expect(page.locator(".feed-top")).to_have_text("Loading earlier messages…")
    for top in (400, 0, 300, 0):  # the user scrolls down and up again while the page is on its way
        await page.evaluate(f"document.getElementById('scroller').scrollTop = {top}")
        await page.evaluate("new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")
    await page.get_by_label("Message to the agent").fill("ping")
    await page.keyboard.press("Enter")
    with anyio.fail_after(10):
        await ping.wait()  # what the App sent before the ping has arrived too (one WebSocket, in order)
    assert len(held) == 1  # one request in flight, not one per scroll

    timeline.older = answer  # type: ignore[method-assign]
    for peer in agent.hub.peers:
        peer.link.close(1000, "the test drops the connection with the answer")
    await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    await page.evaluate(TO_THE_TOP)
    await scroll_to_the_beginning(page)
    assert [text[:4] for text in await page.locator(".msg-agent").all_inner_texts()] == [t[:4] for t in texts]
    assert held[0].before > 1
