"""Chat conventions in real headless Chromium: Markdown replies (and what stays inert), times, the
feed following new messages, "+ New", unread counts across a reload, the user's messages marked
until the agent has them, and conversations renamed and closed."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import anyio
import pytest
from playwright.async_api import Page, expect

from .conftest import Agent, OpenApp
from .test_history_browser import typed

pytestmark = pytest.mark.browser

MARKDOWN = """**Bold** and *slanted* and `inline code`.

- one
- two

1. first
2. second

Then:

3. third
4. fourth

```
print("hi")
```

[the icon]({url}icon.svg) and {url}index.html (see app.py, not a link)

<script>window.pwned = "script"</script>
<img src=x onerror="window.pwned = 'img'">
[click me](javascript:window.pwned='link')
[data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)"""


async def two_frames(page: Page) -> None:
    """Wait until the browser has drawn two more frames (its scroll events have been dispatched)."""
    await page.evaluate("() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))")


async def at_newest(page: Page) -> None:
    """Wait until the feed is scrolled to its newest message."""
    await page.wait_for_function(
        "() => { const s = document.getElementById('scroller');"
        " return s.scrollHeight - s.scrollTop - s.clientHeight < 2; }"
    )


def csp_reports(page: Page) -> list[str]:
    """Console messages of the page that say the Content Security Policy blocked something (filled as they come)."""
    found: list[str] = []
    page.on("console", lambda message: "Content Security Policy" in message.text and found.append(message.text))
    return found


async def test_agent_markdown_is_drawn_and_html_and_script_links_stay_inert(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    blocked = csp_reports(page)
    await agent.hub.send_text(MARKDOWN.format(url=agent.url))
    reply = page.locator(".msg-agent .md")
    await expect(reply.locator("strong")).to_have_text("Bold")
    await expect(reply.locator("em")).to_have_text("slanted")
    await expect(reply.locator("ul > li")).to_have_text(["one", "two"])
    await expect(reply.locator("ol > li")).to_have_text(["first", "second", "third", "fourth"])
    assert await reply.locator("ol").evaluate_all("(lists) => lists.map((ol) => ol.start)") == [1, 3]
    await expect(reply.locator("pre code")).to_have_text('print("hi")')
    await expect(reply.locator(":not(pre) > code")).to_have_text("inline code")
    links = reply.locator("a")
    await expect(links).to_have_count(2)  # the Markdown link and the bare address; nothing else
    await expect(links.first).to_have_attribute("href", f"{agent.url}icon.svg")
    for index in range(2):
        await expect(links.nth(index)).to_have_attribute("target", "_blank")
        await expect(links.nth(index)).to_have_attribute("rel", "noopener noreferrer")
    await expect(links.nth(1)).to_have_attribute("href", f"{agent.url}index.html")
    # raw HTML is shown as text; the javascript: and data: links are text, not links
    await expect(reply).to_contain_text('<script>window.pwned = "script"</script>')
    await expect(reply).to_contain_text("<img src=x onerror=")
    await expect(reply).to_contain_text("[click me](javascript:window.pwned='link')")
    assert await page.locator("#feed script, #feed img, #feed iframe, #feed [onerror]").count() == 0
    await page.get_by_text("click me").click()
    # a link opens in a new tab that cannot reach back to the App
    async with page.context.expect_page() as opened:
        await links.first.click()
    tab = await opened.value
    await tab.wait_for_load_state()
    assert await tab.evaluate("window.opener") is None
    assert await page.evaluate("window.pwned") is None
    assert blocked == []  # drawn within the App's CSP, nothing had to be blocked


async def test_messages_show_their_time(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await typed(page, "what time is it?")
    await agent.hub.send_text("Late.")
    for row in (page.locator(".msg-row-user"), page.locator(".msg-row-agent")):
        time = row.locator(".msg-meta time")
        await expect(time).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d"))
        await expect(time).to_have_text(re.compile(r"^\d{1,2}[:.]\d\d"))
    # after a reload the times come from the history
    await page.reload()
    await expect(page.locator(".msg-row-agent .msg-meta time")).to_have_attribute("datetime", re.compile(r"^\d{4}-"))


async def test_feed_opens_at_the_newest_and_follows_unless_scrolled_up(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    for index in range(30):
        await agent.hub.send_text(f"message {index}\nwith a second line")
    await expect(page.locator(".msg-agent").last).to_contain_text("message 29")
    await at_newest(page)
    await expect(page.locator(".msg-agent").last).to_be_in_viewport()

    # scrolled up, the view stays where the user is; a button offers the newest
    await page.locator("#scroller").evaluate("(s) => { s.scrollTop = 0; }")
    await two_frames(page)
    await agent.hub.send_text("message 30")
    await expect(page.locator(".msg-agent").last).to_contain_text("message 30")
    await two_frames(page)
    assert await page.locator("#scroller").evaluate("(s) => s.scrollTop") == 0
    jump = page.get_by_role("button", name="New messages")
    await expect(jump).to_be_visible()
    await jump.click()
    await at_newest(page)
    await expect(jump).to_be_hidden()

    # back at the bottom it follows again, and a reload opens at the newest message
    await agent.hub.send_text("message 31")
    await expect(page.locator(".msg-agent").last).to_be_in_viewport()
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await at_newest(page)
    await expect(page.locator(".msg-agent").last).to_be_in_viewport()


async def test_new_conversation_gets_what_is_typed_right_after(agent: Agent, open_app: OpenApp) -> None:
    received: list[tuple[str, str]] = []
    agent.hub.on_text = lambda device_id, text: received.append((agent.hub.text_conversation, text))
    page = await open_app()
    tabs = page.get_by_role("group", name="Conversations")
    await page.get_by_role("button", name="+ New").click()
    await typed(page, "plan the offsite")
    await expect(page.locator(".msg-user:visible")).to_have_text(["plan the offsite"])
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "plan the offsite"])  # nothing "new" in Main
    await expect(page.locator(".msg-user .msg-mark, .msg-row-user .msg-mark")).to_have_count(0)  # taken
    [(conversation, text)] = received
    assert conversation.startswith("app-") and text == "plan the offsite"


async def test_unread_counts_are_right_after_a_reload(agent: Agent, open_app: OpenApp) -> None:
    await agent.hub.name_conversation("side", "Side chat")
    page = await open_app()
    tabs = page.get_by_role("group", name="Conversations")
    await agent.hub.send_text("first", conversation_id="side")
    await agent.hub.send_text("second", conversation_id="side")
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "Side chat (2 new)"])
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "Side chat (2 new)"])

    await tabs.get_by_role("button", name="Side chat").click()
    await expect(page.locator(".msg-agent:visible")).to_have_text(["first", "second"])
    await tabs.get_by_role("button", name="Main").click()
    await page.reload()  # what was read stays read
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "Side chat"])
    await agent.hub.send_text("third", conversation_id="side")
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "Side chat (1 new)"])


async def test_a_message_is_marked_sending_until_the_agent_has_it(agent: Agent, open_app: OpenApp) -> None:
    received: list[str] = []
    arrived = anyio.Event()

    def on_text(device_id: str, text: str) -> None:
        received.append(text)
        arrived.set()

    agent.hub.on_text = on_text
    page = await open_app()
    await agent.server.close()  # the agent is out of reach for a while
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    await typed(page, "are you there?")
    bubble = page.locator(".msg-user")
    await expect(bubble).to_have_attribute("data-state", "pending")
    await expect(page.locator(".msg-row-user .msg-mark")).to_have_text("Sending…")
    await agent.restart_server()
    await expect(page.locator("#link")).to_have_text("Connected", timeout=15_000)
    await expect(bubble).to_have_attribute("data-state", "sent")
    await expect(page.locator(".msg-row-user .msg-mark")).to_have_count(0)
    with anyio.fail_after(10):
        await arrived.wait()
    assert received == ["are you there?"]
    await expect(bubble).to_have_count(1)  # its history entry did not draw it twice


async def test_a_message_typed_offline_survives_the_tab_and_arrives_once(agent: Agent, open_app: OpenApp) -> None:
    received: list[str] = []
    agent.hub.on_text = lambda device_id, text: received.append(text)
    page = await open_app()
    await agent.server.close()
    await expect(page.locator("#link")).to_have_text("Reconnecting…")
    await typed(page, "do not lose me")
    await expect(page.locator(".msg-row-user .msg-mark")).to_have_text("Sending…")
    context = page.context
    await page.close()  # the tab is closed before the agent is back: the text waits in this browser
    await agent.restart_server()
    page = await context.new_page()
    await page.goto(agent.url)
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator(".msg-user")).to_have_text(["do not lose me"])
    await expect(page.locator(".msg-row-user .msg-mark")).to_have_count(0)
    assert received == ["do not lose me"]
    # once arrived it is history: another reload shows it once and sends nothing
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(page.locator(".msg-user")).to_have_text(["do not lose me"])
    assert received == ["do not lose me"]
    assert await page.evaluate("localStorage.getItem('lineup.outbox')") == "[]"


async def test_a_message_too_long_is_marked_not_sent(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await page.get_by_label("Message to the agent").fill("x" * 100_001)
    await page.keyboard.press("Enter")
    await expect(page.locator(".msg-user")).to_have_attribute("data-state", "failed")
    await expect(page.locator(".msg-row-user .msg-mark")).to_contain_text("Not sent: too long")


async def test_conversations_are_renamed_and_closed_on_every_device(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    other = await open_app()
    tabs = page.get_by_role("group", name="Conversations")
    await page.get_by_role("button", name="+ New").click()
    await typed(page, "plan the offsite")
    await expect(other.get_by_role("group", name="Conversations").get_by_role("button")).to_have_count(2)

    await page.get_by_role("button", name="Rename or close this conversation").click()
    dialog = page.get_by_role("dialog", name="This conversation")
    await dialog.get_by_label("Name").fill("Offsite")
    await dialog.get_by_role("button", name="Rename").click()
    await expect(tabs.get_by_role("button")).to_have_text(["Main", "Offsite"])
    for shown in (other, page):
        await expect(shown.get_by_role("group", name="Conversations").get_by_role("button")).to_have_text(
            ["Main", "Offsite"]
        )
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button", name="Offsite")).to_have_attribute("aria-pressed", "true")

    await page.get_by_role("button", name="Rename or close this conversation").click()
    await dialog.get_by_role("button", name="Close conversation").click()
    await expect(tabs.get_by_role("button")).to_have_text(["Main"])
    await expect(tabs.get_by_role("button", name="Main")).to_have_attribute("aria-pressed", "true")
    await expect(other.get_by_role("group", name="Conversations").get_by_role("button")).to_have_text(["Main"])
    await page.reload()
    await expect(page.locator("#link")).to_have_text("Connected")
    await expect(tabs.get_by_role("button")).to_have_text(["Main"])
    # Main cannot be closed
    await page.get_by_role("button", name="Rename or close this conversation").click()
    await expect(dialog.get_by_role("button", name="Close conversation")).to_be_hidden()


async def test_a_huge_deeply_nested_reply_is_drawn_and_the_app_stays_usable(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    deep = "> " * 3000 + "deep\n\n" + "- " * 3000 + "list\n\n" + "[" * 3000 + "x" + "]" * 3000 + "\n\n"
    text = deep + "\U0001f600 " + "word " * 18_000  # ~100,000 characters in all
    await agent.hub.send_text(text)
    reply = page.locator(".msg-agent .md")
    # nested deeper than the parser goes: the whole reply is plain text, nothing of it dropped
    for part in ("deep", "list", "[[[x]]]", "\U0001f600 word word"):
        await expect(reply).to_contain_text(part)
    depth = await reply.evaluate(
        "(el) => { let d = 0; const walk = (n, k) => { d = Math.max(d, k);"
        " for (const c of n.children) walk(c, k + 1); }; walk(el, 0); return d; }"
    )
    assert depth <= 2
    await typed(page, "still here")
    await expect(page.locator(".msg-user")).to_have_text(["still here"])


async def test_retry_now_and_coming_back_to_the_page_reconnect_at_once(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app(url="about:blank", connected=False)
    await page.clock.install()  # the page's timers run on a clock the test can stop
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    for how in ("the button", "the page shown again"):
        # the page's clock stops before the agent goes: no backoff timer fires from now on, so no
        # attempt of its own can be under way when the agent is back (the App waits for a nudge)
        now = await page.evaluate("Date.now()")  # a second ahead: by the time it stops, the page's clock has moved on
        await page.clock.pause_at(datetime.fromtimestamp(now / 1000 + 1, UTC))  # (stopping in the past is refused)
        await agent.server.close()
        await expect(page.locator("#link")).to_have_text("Reconnecting…")
        await agent.restart_server()
        retry = page.get_by_role("button", name="Retry now")
        await expect(retry).to_be_visible()
        if how == "the button":
            await retry.click()
        else:
            await page.evaluate("document.dispatchEvent(new Event('visibilitychange'))")
        await expect(page.locator("#link")).to_have_text("Connected")
        await expect(retry).to_be_hidden()
        await page.clock.resume()
