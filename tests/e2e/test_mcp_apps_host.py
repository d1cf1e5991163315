"""The MCP Apps card page (SEP-1865) in real Chromium, inside a minimal host page that speaks the
spec's postMessage bridge (``tests/fixtures/mcp_host.html``), against ``lineup mcp`` over stdio with
the official MCP client and a WebSocket App as the phone: the card renders in the host, an answer
there completes the MCP call and dismisses the phone's card, an answer on the phone dismisses the
host's card.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import Client, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.message import SessionMessage
from mcp_types import JSONRPCRequest, RequestId
from playwright.async_api import Browser, FrameLocator, Locator, Page, expect

from lineup_plugin.protocol.messages import CallOutcome, ToolCall, ToolCancel
from tests.mcp.conftest import ROOT, Lineup, make_lineup
from tests.mcp.test_mcp_apps import APPS, apps_client
from tests.mcp.test_mcp_stdio import CHOICE
from tests.wsapp import WsApp

from .browser import PHONE

pytestmark = pytest.mark.browser

HOST_PAGE = Path(__file__).parents[1] / "fixtures" / "mcp_host.html"
TRIP_FIELDS = ("city", "country", "hotel", "arrival", "departure", "travellers", "budget", "notes")
FORM = {
    "prompt": "Where to?",
    "fields": {"type": "object", "properties": {"city": {"type": "string", "title": "City"}}, "required": ["city"]},
}


@asynccontextmanager
async def host(
    browser: Browser, client: Client, tool: str, arguments: dict[str, Any], request_id: RequestId | None = None
) -> AsyncIterator[Page]:
    """The test host showing ``tool``'s card page for a call with ``arguments`` (the ``tools/call`` of
    JSON-RPC id ``request_id``, if given); its tools/call go to ``client``."""
    read = await client.read_resource(f"ui://lineup/card/{tool}")
    content = read.contents[0]
    assert isinstance(content, types.TextResourceContents)
    context = await browser.new_context(**PHONE)
    errors: list[str] = []
    try:
        page = await context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))

        async def mcp_call(name: str, args: dict[str, Any]) -> dict[str, Any]:
            result = await client.call_tool(name, args)
            return result.model_dump(mode="json", by_alias=True, exclude_none=True)

        await page.expose_function("mcpCall", mcp_call)
        await page.set_content(HOST_PAGE.read_text())
        await page.evaluate("([html, args, id]) => startView(html, args, id)", [content.text, arguments, request_id])
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the host page: {errors}"


def view(page: Page) -> FrameLocator:
    return page.frame_locator("#view")


async def ended(page: Page, result: types.CallToolResult) -> None:
    """The host tells the page that the MCP call ended with ``result``, as a host must."""
    await page.evaluate(
        "(result) => toolResult(result)", result.model_dump(mode="json", by_alias=True, exclude_none=True)
    )


def stdio_client_transport(lineup: Lineup) -> Any:
    """The stdio transport to ``python -m lineup_plugin.cli mcp`` that :func:`~tests.mcp.conftest.stdio_client` uses."""
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "lineup_plugin.cli", "mcp"], env=lineup.env, cwd=str(ROOT)
    )
    return stdio_client(params)


@pytest.fixture
def lineup(tmp_path: Path) -> Lineup:
    return make_lineup(tmp_path)


@dataclass
class Scene:
    """One waiting MCP call of ``tool``: the phone (a WebSocket App) and the host page both show its card."""

    page: Page
    phone: WsApp
    call: asyncio.Task[types.CallToolResult]
    on_phone: ToolCall

    @property
    def card(self) -> Locator:
        """The host's card of the call."""
        return view(self.page).locator(f'article.card[data-call-id="{self.on_phone.call_id}"]')


@asynccontextmanager
async def scene(browser: Browser, lineup: Lineup, tool: str, arguments: dict[str, Any]) -> AsyncIterator[Scene]:
    async with apps_client(lineup) as client:
        phone = await lineup.app()
        call = asyncio.create_task(client.call_tool(tool, arguments))
        on_phone = await phone.next_call()
        async with host(browser, client, tool, arguments) as page:
            yield Scene(page, phone, call, on_phone)
        await phone.close()


async def test_the_card_renders_in_the_host_and_its_answer_completes_the_mcp_call(
    browser: Browser, lineup: Lineup
) -> None:
    async with scene(browser, lineup, "choice", CHOICE) as it:
        await expect(it.card.get_by_role("heading")).to_have_text("Deploy where?")
        await it.card.get_by_role("button", name="production").click()
        result = await asyncio.wait_for(it.call, 30)
        assert result.structured_content == {"selected": "production", "index": 1}
        cancel = await it.phone.next("tool.cancel")
        verdict = CallOutcome(
            status="completed",
            result={"selected": "production", "index": 1},
            device_id="mcp-host",
            device_name="the MCP host's card",
        )
        assert cancel.payload == ToolCancel(
            call_id=it.on_phone.call_id, reason="answered on another device", outcome=verdict
        )
        await expect(it.card.locator(".card-outcome")).to_have_text("You chose: production — Sending…")
        await ended(it.page, result)  # the host hands the page the call's result: the verdict
        await expect(it.card.locator(".card-outcome")).to_have_text("Chose: production on this device")
        await expect(it.card).to_have_attribute("data-state", "completed")
        seen = await it.page.evaluate("seen")
    assert json.loads(result.content[0].text)["status"] == "completed"  # type: ignore[union-attr]
    said = [method for method in seen if method != "ui/notifications/size-changed"]
    assert said == [
        "ui/initialize",
        "ui/notifications/initialized",
        "tools/call lineup_card",
        "tools/call lineup_answer",
    ]
    assert "ui/notifications/size-changed" in seen  # the host sized its iframe to the card


async def test_a_host_card_answer_that_lost_the_race_is_shown_not_applied(browser: Browser, lineup: Lineup) -> None:
    async with scene(browser, lineup, "choice", CHOICE) as it:
        await expect(it.card.get_by_role("heading")).to_have_text("Deploy where?")
        await it.phone.answer(it.on_phone, selected="staging", index=0)  # the phone first
        result = await asyncio.wait_for(it.call, 30)
        await it.card.get_by_role("button", name="production").click()  # the host has not said it ended yet
        await ended(it.page, result)
        await expect(it.card.locator(".card-outcome")).to_have_text(
            "Not applied: already answered on another device: Chose: staging"
        )
        await expect(it.card).to_have_attribute("data-state", "not-applied")
        await expect(it.card.locator(".card-note")).to_have_count(0)  # no raw refusal with a call id


async def test_an_answer_on_the_phone_shows_on_the_host_card_as_answered_elsewhere(
    browser: Browser, lineup: Lineup
) -> None:
    async with scene(browser, lineup, "input", FORM) as it:
        await expect(it.card.get_by_label("City")).to_be_visible()
        await it.phone.answer(it.on_phone, values={"city": "Lyon"})
        result = await asyncio.wait_for(it.call, 30)
        assert result.structured_content == {"values": {"city": "Lyon"}}
        await ended(it.page, result)
        await expect(it.card).to_have_attribute("data-state", "completed")
        await expect(it.card.locator(".card-outcome")).to_have_text('Sent city: "Lyon" on another device')
        await expect(it.card.get_by_label("City")).to_be_disabled()


async def test_a_host_card_of_a_call_that_failed_says_why(browser: Browser, lineup: Lineup) -> None:
    async with apps_client(lineup) as client:
        result = await client.call_tool("choice", CHOICE)  # no App connected: it fails at once
        assert result.is_error
        async with host(browser, client, "choice", CHOICE) as page:
            await ended(page, result)
            await expect(view(page).locator("#feed")).to_contain_text("failed: no LineUp App is connected")
            await expect(view(page).locator("article.card")).to_have_count(0)


TALL_FORM = {
    "prompt": "Tell us about the trip",
    "fields": {
        "type": "object",
        "properties": {name: {"type": "string", "title": name.capitalize()} for name in TRIP_FIELDS},
        "required": ["city"],
    },
}


async def test_the_card_page_reports_its_contents_height_not_the_frames(browser: Browser, lineup: Lineup) -> None:
    # the host's frame starts 120 px tall; a form several times that must make it grow to the whole card
    async with scene(browser, lineup, "input", TALL_FORM) as it:
        await expect(it.card.get_by_label("Notes")).to_be_visible()
        inside = await (await it.page.locator("#view").element_handle()).content_frame()
        assert inside is not None
        card = "document.querySelector('article.card')"
        card_bottom = await inside.evaluate(f"() => {card}.getBoundingClientRect().bottom")
        assert card_bottom > 300  # several times the frame's first 120 px
        await it.page.wait_for_function("(bottom) => sizes.some((size) => size.height >= bottom)", arg=card_bottom)
        scroll, height = await inside.evaluate("() => [document.documentElement.scrollHeight, innerHeight]")
        assert scroll <= height  # the frame was sized to the content: all of the card shows
        await it.phone.answer(it.on_phone, values={"city": "Lyon"})
        await asyncio.wait_for(it.call, 30)


class SeenCalls:
    """A transport that remembers the JSON-RPC id of each ``tools/call`` its client sends, as a host
    knows the ids of its own requests (what it tells a card page as ``toolInfo.id``)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.ids: list[tuple[RequestId, str]] = []

    async def __aenter__(self) -> tuple[Any, Any]:
        read, write = await self.inner.__aenter__()
        return read, _Recording(write, self.ids)

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return bool(await self.inner.__aexit__(*exc_info))


class _Recording:
    def __init__(self, write: Any, ids: list[tuple[RequestId, str]]) -> None:
        self.write = write
        self.ids = ids

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, JSONRPCRequest) and message.method == "tools/call" and message.params:
            self.ids.append((message.id, str(message.params.get("name"))))
        await self.write.send(item)

    async def aclose(self) -> None:
        await self.write.aclose()

    async def __aenter__(self) -> _Recording:
        await self.write.__aenter__()
        return self

    async def __aexit__(self, *exc_info: Any) -> bool | None:
        return bool(await self.write.__aexit__(*exc_info))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.write, name)


async def test_two_identical_calls_at_once_each_get_their_own_host_card(browser: Browser, lineup: Lineup) -> None:
    seen = SeenCalls(stdio_client_transport(lineup))
    async with Client(seen, mode="legacy", extensions=APPS) as client:  # type: ignore[arg-type]
        phone = await lineup.app()
        first = asyncio.create_task(client.call_tool("choice", CHOICE))
        await phone.next_call()
        second = asyncio.create_task(client.call_tool("choice", CHOICE))
        await phone.next_call()
        (first_id, _), (second_id, _) = [entry for entry in seen.ids if entry[1] == "choice"]
        async with (
            host(browser, client, "choice", CHOICE, second_id) as second_page,
            host(browser, client, "choice", CHOICE, first_id) as first_page,
        ):
            cards = [view(page).locator("article.card") for page in (first_page, second_page)]
            for card in cards:
                await expect(card.get_by_role("heading")).to_have_text("Deploy where?")
            ids = [await card.get_attribute("data-call-id") for card in cards]
            assert ids[0] != ids[1]
            await cards[0].get_by_role("button", name="staging").click()
            await cards[1].get_by_role("button", name="production").click()
            answered = await asyncio.wait_for(asyncio.gather(first, second), 30)
        await phone.close()
    assert [result.structured_content for result in answered] == [
        {"selected": "staging", "index": 0},
        {"selected": "production", "index": 1},
    ]
    assert [json.loads(result.content[0].text)["call_id"] for result in answered] == ids  # type: ignore[union-attr]
