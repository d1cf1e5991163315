"""The App's status view in real headless Chromium: the agent's metering from GET /api/stats."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from lineup_plugin import Hub, load_registry
from lineup_plugin.store import SQLiteStore

from .conftest import Agent, Open, OpenApp, serving
from .test_accessibility import violations
from .test_app_browser import DEPLOY

pytestmark = [pytest.mark.browser, pytest.mark.node]


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    """The e2e agent with a durable store (the memory store keeps no times to meter)."""
    with SQLiteStore(tmp_path / "lineup.sqlite3") as store:
        async with serving(Hub(load_registry(load_entrypoints=False), store=store), tmp_path) as agent:
            yield agent


async def answered_and_declined(agent: Agent, page: Page) -> None:
    """One choice answered on ``page``, one confirm rejected there."""
    call = agent.call("choice", DEPLOY)
    await page.get_by_role("button", name="staging").click()
    await call
    call = agent.call("confirm", {"message": "Delete the branch?"})
    await page.get_by_role("button", name="Reject").click()
    await call


async def test_the_status_view_shows_calls_times_and_error_rate_per_tool_and_device(
    agent: Agent, open_app: OpenApp
) -> None:
    page = await open_app()
    await answered_and_declined(agent, page)
    device_id = await page.evaluate("localStorage.getItem('lineup.device_id')")
    await page.get_by_role("button", name="Tool usage").click()
    dialog = page.get_by_role("dialog", name="Tool usage")
    await expect(dialog).to_be_visible()
    await expect(dialog.locator(".stats-summary")).to_contain_text("2 calls")
    by_tool = dialog.get_by_role("table", name="By tool")
    await expect(by_tool.get_by_role("row")).to_have_count(3)  # the header, choice completed, confirm rejected
    await expect(by_tool.get_by_role("row", name="choice")).to_contain_text("completed1")
    await expect(by_tool.get_by_role("row", name="confirm")).to_contain_text("rejected1")
    errors = dialog.get_by_role("table", name="Error rate (failed or unsupported)")
    await expect(errors.get_by_role("row", name="choice")).to_contain_text("0.0 %")
    devices = dialog.get_by_role("table", name="By device")
    mine = devices.get_by_role("row").filter(has=page.get_by_title(device_id))
    await expect(mine.first).to_contain_text("This devicecards received2")
    await expect(mine).to_have_count(3)  # cards received, completed, rejected

    await dialog.get_by_label("Period").select_option(label="Last hour")
    await expect(dialog.locator(".stats-summary")).to_contain_text("2 calls")
    await dialog.get_by_role("button", name="Close").click()
    await expect(dialog).to_be_hidden()


async def test_another_device_reads_by_its_name_not_its_id(agent: Agent, open_app: OpenApp) -> None:
    first = await open_app()
    await answered_and_declined(agent, first)
    device_id = await first.evaluate("localStorage.getItem('lineup.device_id')")
    name = agent.hub.session.devices.name_of(device_id)
    assert name and device_id not in name  # what the App said in its hello ("Linux PC (Chrome)"...)
    second = await open_app()
    await second.get_by_role("button", name="Tool usage").click()
    devices = second.get_by_role("dialog", name="Tool usage").get_by_role("table", name="By device")
    rows = devices.get_by_role("row").filter(has=second.get_by_title(device_id))
    await expect(rows).to_have_count(3)
    for index in range(3):
        await expect(rows.nth(index).get_by_role("rowheader")).to_have_text(name)


async def test_a_new_call_shows_after_refresh(agent: Agent, open_app: OpenApp) -> None:
    page = await open_app()
    await page.get_by_role("button", name="Tool usage").click()
    dialog = page.get_by_role("dialog", name="Tool usage")
    await expect(dialog.locator(".stats-summary")).to_have_text("0 calls")
    call = agent.call("calculator", {"a": 2, "b": 3}, action="add")  # answered by the App at once, under the dialog
    assert (await call).result == {"value": 5}
    await dialog.get_by_role("button", name="Refresh").click()
    await expect(dialog.get_by_role("table", name="By tool")).to_contain_text("calculator")


@pytest.mark.parametrize("scheme", ["light", "dark"])
async def test_the_status_view_has_no_accessibility_violation(agent: Agent, open_themed: Open, scheme: str) -> None:
    page = await open_themed(scheme)
    await answered_and_declined(agent, page)
    await page.get_by_role("button", name="Tool usage").click()
    await expect(page.get_by_role("table", name="By device")).to_be_visible()
    assert await violations(page) == []
