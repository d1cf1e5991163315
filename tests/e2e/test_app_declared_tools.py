"""A tool one App device declared is that device's: the reference App open on another device never
answers it ``unsupported`` first (issue 22, item 3), in real Chromium beside a WebSocket App."""

from __future__ import annotations

import asyncio

import pytest
from playwright.async_api import expect

from lineup_plugin.protocol.messages import ToolList
from tests.wsapp import WsApp

from .conftest import Agent, OpenApp

pytestmark = pytest.mark.browser

TORCH = {
    "name": "torch",
    "type": "action",
    "description": "Turn the phone's torch on or off",
    "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
}


async def test_a_tool_one_device_declared_is_answered_there_not_unsupported_by_the_reference_app(
    agent: Agent, open_app: OpenApp
) -> None:
    page = await open_app()  # the reference App: it renders no "torch"
    async with asyncio.timeout(60):
        torch = await WsApp.connect(agent.server, "torch-phone")
        await torch.next("tool.list")  # the welcome's
        await torch.send(ToolList.model_validate({"tools": [TORCH], "request": True}))
        await torch.next("tool.list")  # the agent's answer: the declaration is applied
        asked = agent.call("torch", {"on": True})
        call = await torch.next_call()
        await torch.answer(call, on=True)
        result = await asked
    assert (result.status, result.result) == ("completed", {"on": True})
    await expect(page.locator(f'article.card[data-call-id="{call.call_id}"]')).to_have_count(0)  # never shown there
    await torch.close()
