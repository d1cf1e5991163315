"""Streamed replies and files both ways in the reference App, in real headless Chromium against the
real direct server and hub (the Hermes gateway versions are in ``test_hermes.py``)."""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.media import MediaStore
from lineup_plugin.transports.direct.server import DirectServer

from .browser import PHONE
from .conftest import TOKEN, FilesReceived
from .test_accessibility import AXE, violations

pytestmark = pytest.mark.browser

#: a 4×4 red PNG
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAEklEQVR4nGP4z8CAB+GTG8HSALfKY52fTcuYAAAAAElFTkSuQmCC"
)
LIMIT = 256 * 1024


@pytest.fixture
async def media_agent(tmp_path: Path) -> AsyncIterator[DirectServer]:
    """A hub that keeps files (up to 256 KiB, images and text) behind a started DirectServer."""
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, store="memory", max_file_bytes=LIMIT)
    hub = Hub(load_registry(load_entrypoints=False), media=MediaStore.from_settings(settings), on_files=FilesReceived())
    server = DirectServer.from_settings(hub, settings)
    await server.start()
    try:
        yield server
    finally:
        await server.close()


@pytest.fixture
async def page(browser: Browser, media_agent: DirectServer) -> AsyncIterator[Page]:
    """The App on a phone-sized screen, connected; uncaught page errors fail the test."""
    context = await browser.new_context(**PHONE)
    errors: list[str] = []
    try:
        page = await context.new_page()
        page.on("pageerror", lambda error: errors.append(str(error)))
        await page.goto(media_agent.connect_link)
        await expect(page.locator("#link")).to_have_text("Connected")
        yield page
    finally:
        await context.close()
    assert not errors, f"uncaught errors in the page: {errors}"


async def test_a_streamed_reply_grows_in_one_bubble_then_settles(media_agent: DirectServer, page: Page) -> None:
    hub = media_agent.hub
    reply = page.locator('.msg[data-message-id="m1"]')
    await hub.stream_text("m1", "Checking the")
    await expect(reply).to_have_text("Checking the")
    await expect(reply).to_have_attribute("data-state", "streaming")
    await expect(reply).to_have_attribute("aria-busy", "true")
    await hub.stream_text("m1", "Checking the deploy log")
    await expect(reply).to_have_text("Checking the deploy log")
    await hub.send_text("Checking the deploy log: all green.", message_id="m1")
    await expect(reply).to_have_text("Checking the deploy log: all green.")
    await expect(reply).to_have_attribute("data-state", "settled")
    await expect(page.locator(".msg-agent")).to_have_count(1)  # one message, not one per piece
    assert await reply.get_attribute("aria-busy") is None


async def test_a_stopped_reply_is_marked_interrupted(media_agent: DirectServer, page: Page) -> None:
    hub = media_agent.hub
    await hub.stream_text("m2", "Counting: one, two,")
    reply = page.locator('.msg[data-message-id="m2"]')
    await expect(reply).to_have_attribute("data-state", "streaming")
    await hub.set_status("interrupted")
    await expect(reply).to_have_attribute("data-state", "interrupted")
    await expect(reply).to_contain_text("Counting: one, two,")
    await expect(reply.locator(".msg-note")).to_have_text("Interrupted — the reply stopped here.")
    await expect(page.locator("#agent-status")).to_have_text("Interrupted")


async def test_an_image_from_the_agent_is_shown_and_loads_through_the_keyed_link(
    media_agent: DirectServer, page: Page
) -> None:
    await media_agent.hub.send_file("Here is the chart.", PNG, "chart.png", "image/png")
    image = page.get_by_role("img", name="chart.png")
    await expect(image).to_be_visible()
    await expect(page.locator(".msg-agent").last).to_contain_text("Here is the chart.")
    await page.wait_for_function("img => img.complete && img.naturalWidth === 4", arg=await image.element_handle())
    link = page.get_by_role("link", name="chart.png")
    assert (await link.get_attribute("download")) == "chart.png"


async def test_a_photo_sent_from_the_app_reaches_the_agent_whole(media_agent: DirectServer, page: Page) -> None:
    photo = PNG + os.urandom(100_000)
    await page.locator("#photo").set_input_files({"name": "receipt.png", "mimeType": "image/png", "buffer": photo})
    await expect(page.locator("#tray")).to_contain_text("receipt.png")
    await page.get_by_label("Message to the agent").fill("what does this receipt say?")
    await page.get_by_role("button", name="Send").click()
    received = media_agent.hub.on_files
    assert isinstance(received, FilesReceived)
    await received.first()
    text, (file,) = received[0]
    assert text == "what does this receipt say?"
    assert (file.name, file.mime) == ("receipt.png", "image/png")
    assert file.sha256 == hashlib.sha256(photo).hexdigest() and file.path.read_bytes() == photo
    await expect(page.locator("#tray")).to_be_hidden()
    await expect(page.locator(".msg-user").get_by_role("img", name="receipt.png")).to_be_visible()


@pytest.mark.parametrize(
    ("upload", "reason"),
    [
        ({"name": "big.png", "mimeType": "image/png", "buffer": PNG + bytes(LIMIT)}, "the agent takes files up to"),
        ({"name": "tool.exe", "mimeType": "application/x-msdownload", "buffer": b"MZ"}, "are not accepted"),
        ({"name": "fake.png", "mimeType": "image/png", "buffer": b"<svg/>"}, "is not a valid image/png image"),
    ],
    ids=["too-large", "wrong-type", "not-an-image"],
)
async def test_a_refused_file_is_not_sent_and_the_app_says_why(
    media_agent: DirectServer, page: Page, upload: dict[str, object], reason: str
) -> None:
    await page.locator("#file").set_input_files(upload)  # type: ignore[arg-type]
    await page.get_by_role("button", name="Send").click()
    await expect(page.locator(".msg-system")).to_contain_text("Not sent:")
    await expect(page.locator(".msg-system")).to_contain_text(reason)
    await expect(page.locator(".msg-user")).to_have_attribute("data-state", "failed")
    assert media_agent.hub.on_files == []
    root = media_agent.hub.media.root if media_agent.hub.media else None
    assert root is not None and not [p for p in root.rglob("*") if p.is_file()]


@pytest.mark.node
@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_replies_files_and_the_tray_have_no_accessibility_violation(
    browser: Browser, media_agent: DirectServer, scheme: str
) -> None:
    if not AXE.is_file():
        pytest.skip("axe-core is not installed (npm ci in tests/js)")
    context = await browser.new_context(**PHONE, color_scheme=scheme, bypass_csp=True)  # axe is injected inline
    try:
        page = await context.new_page()
        await page.goto(media_agent.connect_link)
        await expect(page.locator("#link")).to_have_text("Connected")
        hub = media_agent.hub
        await hub.stream_text("m1", "Half a reply")
        await hub.set_status("interrupted")
        await hub.stream_text("m2", "Still being written")
        await hub.send_file("A chart", PNG, "chart.png", "image/png")
        await hub.send_file("", b"a,b\n", "data.csv", "text/csv")
        await page.locator("#file").set_input_files({"name": "notes.txt", "mimeType": "text/plain", "buffer": b"hi"})
        await expect(page.get_by_role("img", name="chart.png")).to_be_visible()
        await expect(page.locator("#tray")).to_contain_text("notes.txt")
        assert await violations(page) == []
    finally:
        await context.close()


async def test_retry_on_a_message_not_sent_tries_again(media_agent: DirectServer, page: Page) -> None:
    program = {"name": "tool.exe", "mimeType": "application/x-msdownload", "buffer": b"MZ"}
    await page.locator("#file").set_input_files(program)  # type: ignore[arg-type]
    await page.get_by_label("Message to the agent").fill("run this")
    await page.get_by_role("button", name="Send").click()
    mark = page.locator(".msg-row-user .msg-mark")
    await expect(mark).to_contain_text("Not sent: ")
    await expect(page.locator(".msg-system")).to_have_count(1)
    await mark.get_by_role("button", name="Retry").click()
    await expect(page.locator(".msg-system")).to_have_count(2)  # the upload was tried again, and refused again
    await expect(mark).to_contain_text("are not accepted")
    await expect(page.locator(".msg-user")).to_have_count(1)  # the same message, not a second one
    assert media_agent.hub.on_files == []
