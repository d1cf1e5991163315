"""``lineup mcp`` over stdio, driven by the official MCP client, answered by a WebSocket App."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from mcp import types

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol.messages import AgentStop, ToolList
from lineup_plugin.runtime.base import STATUS_HINTS
from lineup_plugin.runtime.service import LineUpService
from tests.runtime.fake_runtime import FakeRuntime
from tests.wsapp import WsApp

from .conftest import TOKEN, Lineup, stdio_client, until

CHOICE = {"question": "Deploy where?", "options": ["staging", "production"]}
TORCH = {
    "name": "torch",
    "type": "action",
    "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}},
}


def body(result: types.CallToolResult) -> dict:
    """The JSON text of a tool result."""
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return json.loads(block.text)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_lists_the_catalog_with_input_and_output_schemas(lineup: Lineup, mode: str) -> None:
    async with stdio_client(lineup, mode=mode) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        version = client.session.protocol_version
    assert (version == "2026-07-28") == (mode == "auto")  # the stateless protocol, or the handshake era
    assert {"choice", "confirm", "input"} <= set(tools)
    choice = tools["choice"]
    assert choice.input_schema["type"] == "object" and "options" in choice.input_schema["properties"]
    assert choice.output_schema is not None and choice.output_schema["required"] == ["selected", "index"]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_choice_answered_on_the_app_is_structured_content_after_progress(lineup: Lineup, mode: str) -> None:
    progressed = asyncio.Event()
    messages: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        messages.append(message)
        progressed.set()

    async with stdio_client(lineup, mode=mode) as client:
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE, progress_callback=on_progress))
        call = await app.next_call()
        await asyncio.wait_for(progressed.wait(), 30)
        await app.answer(call, selected="staging", index=0)
        result = await asyncio.wait_for(task, 30)
        await app.close()
    assert call.name == "choice" and call.arguments == CHOICE
    assert not result.is_error
    assert result.structured_content == {"selected": "staging", "index": 0}
    assert body(result)["status"] == "completed" and body(result)["call_id"] == call.call_id
    assert messages[0] == "waiting for the user to answer choice"


async def test_cancelling_the_request_cancels_the_card_on_the_app(lineup: Lineup) -> None:
    async with stdio_client(lineup) as client:
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        call = await app.next_call()
        task.cancel()
        cancel = (await asyncio.wait_for(app.next("tool.cancel"), 30)).payload
        await app.close()
    assert cancel.call_id == call.call_id  # type: ignore[union-attr]
    assert cancel.reason == "the agent was interrupted"  # type: ignore[union-attr]
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_expiry_is_an_error_with_the_expired_hint(lineup: Lineup) -> None:
    lineup.env["LINEUP_DEADLINES"] = json.dumps({"choice": 0.5})
    async with stdio_client(lineup) as client:
        app = await lineup.app()
        result = await asyncio.wait_for(client.call_tool("choice", CHOICE), 30)
        call = await app.next_call()
        await app.close()
    assert result.is_error and result.structured_content is None
    assert body(result)["status"] == "expired" and body(result)["call_id"] == call.call_id
    assert body(result)["hint"] == STATUS_HINTS["expired"]


async def test_no_app_connected_fails_clearly(lineup: Lineup) -> None:
    async with stdio_client(lineup) as client:
        result = await asyncio.wait_for(client.call_tool("choice", CHOICE), 30)
    assert result.is_error
    answer = body(result)
    assert answer["status"] == "failed" and answer["result"]["error"] == "no_app"
    assert "App" in answer["result"]["message"] and answer["hint"] == STATUS_HINTS["failed"]


async def test_an_app_declaring_a_tool_announces_list_changed(lineup: Lineup) -> None:
    async with stdio_client(lineup) as client:
        before = {tool.name for tool in (await client.list_tools()).tools}
        app = await lineup.app()
        await app.send(ToolList.model_validate({"tools": [TORCH]}))
        await until(lambda: "notifications/tools/list_changed" in lineup.notifications, lineup.changed)
        after = {tool.name for tool in (await client.list_tools()).tools}
        await app.close()
    assert "torch" not in before and after == before | {"torch"}


async def test_the_connect_link_goes_to_stderr_and_nothing_to_stdout(lineup: Lineup) -> None:
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lineup_plugin.cli",
        "mcp",
        env=lineup.env,
        stdin=asyncio.subprocess.DEVNULL,  # the client leaves at once: the server stops
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(child.communicate(), 60)
    assert child.returncode == 0 and stdout == b""
    assert f"/#token={TOKEN} on your phone" in stderr.decode()


async def test_a_toolset_tool_takes_its_action_among_the_flat_arguments(lineup: Lineup) -> None:
    async with stdio_client(lineup) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("calculator", {"action": "add", "a": 2, "b": 3}))
        call = await app.next_call()
        await app.answer(call, value=5)
        result = await asyncio.wait_for(task, 30)
        await app.close()
    assert "add" in tools["calculator"].input_schema["properties"]["action"]["enum"]
    assert tools["calculator"].output_schema is None  # per action, not one for the tool
    assert (call.name, call.action, call.arguments) == ("calculator", "add", {"a": 2, "b": 3})
    assert not result.is_error and result.structured_content == {"value": 5}


async def test_calls_go_through_the_process_that_serves_the_app_and_its_app_answers(lineup: Lineup) -> None:
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=Path(lineup.env["LINEUP_DATA_DIR"]))
    gateway = LineUpService(FakeRuntime(), settings, load_registry(load_entrypoints=False), role="gateway")
    assert gateway.ensure_started("a Hermes gateway, say") and gateway.runner is not None
    try:
        async with stdio_client(lineup) as client:
            listed = {tool.name for tool in (await client.list_tools()).tools}
            app = await WsApp.connect(gateway.runner.transport)  # type: ignore[arg-type]
            task = asyncio.create_task(client.call_tool("choice", CHOICE))
            call = await app.next_call()
            await app.answer(call, selected="production", index=1)
            result = await asyncio.wait_for(task, 30)
            await app.close()
    finally:
        gateway.stop()
    assert "choice" in listed
    assert call.origin is not None and call.origin.kind == "mcp"
    assert not result.is_error and result.structured_content == {"selected": "production", "index": 1}


async def test_the_app_stop_button_ends_the_call_cancelled(lineup: Lineup) -> None:
    async with stdio_client(lineup) as client:
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        call = await app.next_call()
        await app.send(AgentStop())
        result = await asyncio.wait_for(task, 30)
        await app.close()
    answer = body(result)
    assert result.is_error and answer["status"] == "cancelled" and answer["call_id"] == call.call_id
    assert answer["result"]["message"] == "stopped by the user" and answer["hint"] == STATUS_HINTS["cancelled"]
