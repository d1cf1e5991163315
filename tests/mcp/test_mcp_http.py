"""``lineup mcp --http`` driven by the official MCP client over streamable HTTP, answered by a WebSocket App."""

from __future__ import annotations

import asyncio
import signal

import httpx
import pytest
from mcp import Client

from lineup_plugin.protocol.messages import ToolList

from .conftest import Lineup, http_child, http_server, until
from .test_mcp_stdio import CHOICE, TORCH, body


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_lists_tools_and_a_choice_answered_on_the_app(lineup: Lineup, mode: str) -> None:
    async with http_server(lineup) as url, Client(url, mode=mode) as client:  # type: ignore[arg-type]
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        call = await app.next_call()
        await app.answer(call, selected="production", index=1)
        result = await asyncio.wait_for(task, 30)
        await app.close()
    assert tools["choice"].output_schema is not None and "confirm" in tools
    assert not result.is_error and result.structured_content == {"selected": "production", "index": 1}
    assert body(result)["call_id"] == call.call_id


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_cancelling_the_request_cancels_the_card_on_the_app(lineup: Lineup, mode: str) -> None:
    async with http_server(lineup) as url, Client(url, mode=mode) as client:  # type: ignore[arg-type]
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        call = await app.next_call()
        task.cancel()
        cancel = (await asyncio.wait_for(app.next("tool.cancel"), 30)).payload
        await app.close()
    assert cancel.call_id == call.call_id  # type: ignore[union-attr]
    assert cancel.reason == "the agent was interrupted"  # type: ignore[union-attr]


async def test_sigterm_ends_lineup_mcp_http_cleanly_without_a_traceback(lineup: Lineup) -> None:
    async with http_child(lineup) as (child, url), Client(url, mode="legacy") as client:  # type: ignore[arg-type]
        assert "choice" in {tool.name for tool in (await client.list_tools()).tools}
        child.send_signal(signal.SIGTERM)  # with a client connected
        assert child.stderr is not None
        said = (await asyncio.wait_for(child.stderr.read(), 60)).decode()
        assert await asyncio.wait_for(child.wait(), 60) == 0
    assert "Traceback" not in said and "ERROR" not in said and "CancelledError" not in said, said


async def test_no_app_connected_fails_clearly(lineup: Lineup) -> None:
    async with http_server(lineup) as url, Client(url, mode="legacy") as client:
        result = await asyncio.wait_for(client.call_tool("confirm", {"message": "Deploy?"}), 30)
    assert result.is_error and body(result)["result"]["error"] == "no_app"


async def test_an_app_declaring_a_tool_announces_list_changed(lineup: Lineup) -> None:
    async with http_server(lineup) as url, Client(url, mode="legacy", message_handler=lineup.on_message) as client:
        app = await lineup.app()
        await app.send(ToolList.model_validate({"tools": [TORCH]}))
        await until(lambda: "notifications/tools/list_changed" in lineup.notifications, lineup.changed)
        after = {tool.name for tool in (await client.list_tools()).tools}
        await app.close()
    assert "torch" in after


async def test_a_2026_client_hears_of_a_declared_tool_on_its_listen_stream(lineup: Lineup) -> None:
    async with http_server(lineup) as url, Client(url, mode="auto") as client:
        async with client.listen(tools_list_changed=True) as subscription:
            app = await lineup.app()
            await app.send(ToolList.model_validate({"tools": [TORCH]}))
            event = await asyncio.wait_for(anext(aiter(subscription)), 30)
            after = {tool.name for tool in (await client.list_tools(cache_mode="bypass")).tools}
            await app.close()
        version = client.session.protocol_version
    assert version == "2026-07-28"
    assert type(event).__name__ == "ToolsListChanged" and "torch" in after


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "probe", "version": "1"}},
}


@pytest.mark.parametrize("address", ["127.0.0.2", "127.0.0.1"])
async def test_a_dns_rebinding_host_or_a_foreign_origin_is_refused_on_every_loopback_address(
    lineup: Lineup, address: str
) -> None:
    # the MCP SDK checks Host and Origin only on 127.0.0.1, localhost and ::1: a page that rebound
    # its own name to 127.0.0.2 could ask the phone and read the answer
    lineup.env["LINEUP_ALLOWED_HOSTS"] = "lineup.home.arpa"
    async with http_server(lineup, f"{address}:0") as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
        async with httpx.AsyncClient() as http:
            rebound = {**headers, "Host": f"rebind.evil:{port}", "Origin": f"http://rebind.evil:{port}"}
            refused = await http.post(url, json=INITIALIZE, headers=rebound)
            assert refused.status_code == 421 and "rebind.evil" in refused.text
            foreign = {**headers, "Origin": "http://evil.example"}
            refused = await http.post(url, json=INITIALIZE, headers=foreign)
            assert refused.status_code == 403 and "evil.example" in refused.text
            named = {**headers, "Host": f"lineup.home.arpa:{port}", "Origin": f"http://lineup.home.arpa:{port}"}
            assert (await http.post(url, json=INITIALIZE, headers=named)).status_code == 200  # allowed_hosts
        async with Client(url, mode="legacy") as client:  # a local client is served
            assert "choice" in {tool.name for tool in (await client.list_tools()).tools}
