"""What the App's page costs a phone to load, in real Chromium: one script, no relay library in
direct mode, gzip, and a reload that revalidates the page alone (times: ``benchmarks/phone.py``; a long
history a page at a time: ``test_history_scroll.py``)."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Agent, OpenApp

pytestmark = pytest.mark.browser


async def test_direct_mode_loads_one_compressed_script_and_never_the_relay_library(
    agent: Agent, open_app: OpenApp
) -> None:
    from playwright.async_api import Response, expect

    seen: list[Response] = []
    page = await open_app(init_script=None, connected=False, url="about:blank")
    page.on("response", lambda response: seen.append(response))
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    call = agent.call("confirm", {"message": "Deploy?"})
    await page.get_by_role("button", name="Approve").click()
    assert (await call).status == "completed"

    def paths() -> list[str]:
        return [r.url.removeprefix(agent.url.rstrip("/")).split("?")[0] for r in seen]

    # the first card, and a page with no reply: no module fetched by itself, no vendor/relay.js, and
    # not the Markdown library either (about 100 KB, needed only to draw the agent's replies)
    scripts = [p for p in paths() if p.endswith(".js")]
    assert scripts == ["/app.bundle.js"], paths()
    bundle = next(r for r in seen if "/app.bundle.js" in r.url)
    assert (await bundle.all_headers()).get("content-encoding") == "gzip"
    assert len(paths()) <= 6, paths()  # the page, its style, script and icon, and two API requests

    # the agent's first reply: shown at once as text, then drawn as Markdown once its library is in
    await agent.hub.send_text("**Deployed.**")
    await expect(page.locator(".msg-agent strong")).to_have_text("Deployed.")
    scripts = [p for p in paths() if p.endswith(".js")]
    assert scripts == ["/app.bundle.js", "/vendor/markdown.js"], paths()  # still never the relay library
    library = next(r for r in seen if "/vendor/markdown.js" in r.url)
    assert (await library.all_headers()).get("content-encoding") == "gzip"


async def test_a_page_load_without_a_relay_logs_no_console_error(agent: Agent, open_app: OpenApp) -> None:
    from playwright.async_api import expect

    page = await open_app(connected=False, url="about:blank")
    errors: list[str] = []
    page.on("console", lambda message: message.type == "error" and errors.append(f"{message.text} {message.location}"))
    async with page.expect_response(lambda response: "/api/pair" in response.url) as probe:
        await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    answer = await probe.value
    assert (answer.status, await answer.json()) == (200, {"relay": False})
    call = agent.call("confirm", {"message": "Deploy?"})  # a round trip: the probe's answer was handled
    await page.get_by_role("button", name="Approve").click()
    assert (await call).status == "completed"
    assert errors == []
    paths = await page.evaluate("performance.getEntriesByType('resource').map((entry) => entry.name)")
    assert not any("vendor/relay.js" in path for path in paths)  # no relay: its library is never fetched


async def test_a_reload_revalidates_the_page_alone(agent: Agent, open_app: OpenApp) -> None:
    from playwright.async_api import expect

    page = await open_app()
    call = agent.call("confirm", {"message": "Deploy?"})
    await expect(page.locator("article.card")).to_be_visible()
    cdp = await page.context.new_cdp_session(page)
    await cdp.send("Network.enable")
    received: list[int] = []
    urls: dict[str, str] = {}
    on_the_wire: dict[str, int] = {}  # what the server answered (a 304 is reported 200 from the cache)

    def answered(event: dict[str, Any]) -> None:
        urls[event["requestId"]] = event["response"]["url"]

    def wire(event: dict[str, Any]) -> None:
        on_the_wire[event["requestId"]] = int(event["statusCode"])

    cdp.on("Network.responseReceived", answered)
    cdp.on("Network.responseReceivedExtraInfo", wire)
    cdp.on("Network.loadingFinished", lambda event: received.append(int(event["encodedDataLength"])))
    await page.reload()
    await expect(page.locator("article.card")).to_be_visible()
    await expect(page.locator("#link")).to_have_text("Connected")
    name = {key: url.split("?")[0].rsplit("/", 1)[-1] for key, url in urls.items()}
    fetched = {name.get(key, key): status for key, status in on_the_wire.items()}
    assert fetched.get("") == 304, fetched  # the page: revalidated, not sent again
    assert not {"app.bundle.js", "style.css", "icon.svg"} & set(fetched), fetched  # from the cache
    assert sum(received) <= 10_000
    call.cancel()
