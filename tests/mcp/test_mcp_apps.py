"""MCP Apps (SEP-1865) with the official client: every tool links its card page, a self-contained
``text/html;profile=mcp-app`` resource built from the App's own modules; the page's two tools are
listed to MCP Apps hosts only, and answer only calls shown there.

The page itself is driven in Chromium inside a host page in ``tests/e2e/test_mcp_apps_host.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest
from mcp import types
from mcp.client.extension import advertise
from mcp.shared.exceptions import MCPError
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import RendererError
from lineup_plugin.runtime.mcp.server import APPS_EXTENSION
from lineup_plugin.runtime.mcp.view import APP_MIME_TYPE, bundle, card_page
from lineup_plugin.runtime.service import LineUpService
from lineup_plugin.tools.renderers import read_module
from lineup_plugin.transports.app_files import packaged_app
from tests.runtime.fake_runtime import FakeRuntime
from tests.wsapp import WsApp

from .conftest import TOKEN, Lineup, stdio_client
from .test_mcp_stdio import CHOICE, body

DEEP: dict = {}
for _ in range(40):
    DEEP = {"x": DEEP}
APPS = [advertise(APPS_EXTENSION, {"mimeTypes": [APP_MIME_TYPE]})]


def apps_client(lineup: Lineup, **options: object):  # type: ignore[no-untyped-def]
    """The official client, saying it renders MCP Apps."""
    return stdio_client(lineup, extensions=APPS, **options)


@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_every_tool_links_its_card_page_and_only_apps_hosts_see_the_pages_tools(
    lineup: Lineup, mode: str
) -> None:
    async with stdio_client(lineup, mode=mode) as client:
        plain = {tool.name: tool for tool in (await client.list_tools()).tools}
    async with apps_client(lineup, mode=mode) as client:
        listed = {tool.name: tool for tool in (await client.list_tools()).tools}
        capabilities = client.session.server_capabilities
    if mode == "auto":  # the SDK says extensions on the 2026-07-28 protocol only
        assert capabilities is not None and APPS_EXTENSION in (capabilities.extensions or {})
    assert {"choice", "confirm", "input", "calculator", "canvas"} <= set(plain)
    for name, tool in plain.items():
        uri = f"ui://lineup/card/{name}"
        assert tool.meta == {"ui": {"resourceUri": uri}, "ui/resourceUri": uri}  # the flat key of earlier drafts too
    assert (
        "lineup_card" not in plain and "lineup_answer" not in plain
    )  # a host without MCP Apps shows its model every tool
    assert set(listed) - set(plain) == {"lineup_card", "lineup_answer"}
    for name in ("lineup_card", "lineup_answer"):
        assert listed[name].meta == {"ui": {"visibility": ["app"]}}


@pytest.mark.parametrize("version", HANDSHAKE_PROTOCOL_VERSIONS)
async def test_the_apps_extension_is_advertised_in_every_handshake_era(lineup: Lineup, version: str) -> None:
    """Read off the wire: the official client's model of a handshake-era answer drops ``extensions``."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lineup_plugin.cli",
        "mcp",
        env=lineup.env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert child.stdin is not None and child.stdout is not None
    params = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
    child.stdin.write(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode())
    child.stdin.write(b"\n")
    await child.stdin.drain()
    answer = json.loads(await asyncio.wait_for(child.stdout.readline(), 60))
    child.stdin.close()
    await asyncio.wait_for(child.wait(), 60)
    assert answer["result"]["protocolVersion"] == version
    assert answer["result"]["capabilities"]["extensions"] == {APPS_EXTENSION: {}}
    assert answer["result"]["capabilities"]["tools"] == {"listChanged": True}


async def test_the_card_page_is_one_self_contained_mcp_app_document(lineup: Lineup) -> None:
    async with apps_client(lineup) as client:
        resources = {str(resource.uri): resource for resource in (await client.list_resources()).resources}
        read = await client.read_resource("ui://lineup/card/choice")
        with pytest.raises(MCPError, match="no LineUp card page at ui://lineup/card/nothing"):
            await client.read_resource("ui://lineup/card/nothing")
    assert {f"ui://lineup/card/{name}" for name in ("choice", "confirm", "input")} <= set(resources)
    assert resources["ui://lineup/card/choice"].mime_type == APP_MIME_TYPE
    [content] = read.contents
    assert isinstance(content, types.TextResourceContents)
    assert content.mime_type == APP_MIME_TYPE and content.meta == {"ui": {"prefersBorder": True}}
    page = content.text
    assert page.startswith("<!doctype html>") and '"tool": "choice"' in page
    assert not re.search(r"<script[^>]*\ssrc=|<link\b|\bhttps?://(?!www\.w3\.org)", page)  # nothing to fetch
    script = page.split('<script type="module">', 1)[1]
    assert not re.search(r"^(import|export)\b", script, re.M)  # one script, no module left to load
    for module in ("cards/choice.js", "cards/card.js", "cards/deck.js", "dom.js", "mcp-view.js"):  # the App's own code
        source = (packaged_app() / module).read_text()
        code = [line for line in source.splitlines() if line and not line.startswith(("import ", "//"))]
        assert all(line.removeprefix("export ") in script for line in code), module


def test_the_bundler_refuses_what_it_does_not_understand(tmp_path: Path) -> None:
    modules = {
        "entry.js": 'import { a } from "./a.js";\nexport const b = a;\n',
        "a.js": 'import * as everything from "./b.js";\nexport const a = 1;\n',
    }
    with pytest.raises(RendererError, match=r"a\.js: cannot bundle 'import \* as everything"):
        bundle(modules.__getitem__, "entry.js")
    with pytest.raises(RendererError, match="an import cycle through entry.js"):
        bundle({"entry.js": 'import { a } from "./entry.js";\n'}.__getitem__, "entry.js")
    with pytest.raises(RendererError, match="only relative paths"):
        bundle({"entry.js": 'import { a } from "https://cdn.example/a.js";\n'}.__getitem__, "entry.js")


def test_a_plugin_renderer_that_cannot_be_bundled_leaves_the_host_card_unsupported(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    no_renderer = "const __default = null;"  # plugin-renderer.js: no renderer, the card says unsupported
    module = tmp_path / "fancy.js"
    module.write_text('import { helper } from "./helper.js";\nexport default { render() {} };\n')
    page = card_page("fancy", label="Fancy", renderer=read_module("fancy", module, "fancy-plugin"))
    assert "./helper.js" not in page and no_renderer in page
    assert "the renderer of fancy is left out of the MCP Apps card: a renderer module imports nothing" in caplog.text
    module.write_text('export default { label: "Fancy", render(card) { card.answer("completed", {}); } };\n')
    page = card_page("fancy", label="Fancy", renderer=read_module("fancy", module, "fancy-plugin"))
    assert 'const __default = { label: "Fancy"' in page and no_renderer not in page


async def test_the_pages_tools_answer_only_calls_shown_in_the_host(lineup: Lineup) -> None:
    async with apps_client(lineup) as client:
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        phone = await app.next_call()
        refused = await client.call_tool(
            "lineup_answer", {"call_id": phone.call_id, "status": "completed", "result": {}}
        )
        assert refused.is_error and "was not shown in this host" in body_text(refused)
        missing = await client.call_tool("lineup_card", {"tool": "choice", "arguments": {"question": "Other?"}})
        assert missing.is_error and "no choice call with these arguments waits" in body_text(missing)

        shown = await client.call_tool("lineup_card", {"tool": "choice", "arguments": CHOICE})
        assert not shown.is_error and shown.structured_content is not None
        call = shown.structured_content["call"]
        assert call["call_id"] == phone.call_id and call["arguments"] == CHOICE and call["name"] == "choice"
        for status, result, why in [
            ("completed", {"index": 0}, "selected"),  # breaks the outputSchema
            ("completed", {"selected": "staging", "index": 0, "deep": DEEP}, "nested deeper than 32 levels"),
            ("expired", {}, "an answer is a status"),
        ]:
            bad = await client.call_tool(
                "lineup_answer", {"call_id": call["call_id"], "status": status, "result": result}
            )
            assert bad.is_error and why in body_text(bad), body_text(bad)
        assert not task.done()  # every bad answer left the call waiting

        applied = await client.call_tool(
            "lineup_answer",
            {"call_id": call["call_id"], "status": "completed", "result": {"selected": "production", "index": 1}},
        )
        assert not applied.is_error
        result = await asyncio.wait_for(task, 30)
        assert result.structured_content == {"selected": "production", "index": 1}
        cancel = await app.next("tool.cancel")
        assert cancel.payload.reason == "answered on another device"  # type: ignore[union-attr]
        late = await client.call_tool("lineup_answer", {"call_id": call["call_id"], "status": "rejected", "result": {}})
        assert late.is_error and "already ended as completed" in body_text(late)
        await app.close()
    assert body(result)["status"] == "completed"


def body_text(result: types.CallToolResult) -> str:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    return block.text


async def test_a_host_card_of_a_forwarded_call_is_answered_through_the_serving_process(lineup: Lineup) -> None:
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=Path(lineup.env["LINEUP_DATA_DIR"]))
    gateway = LineUpService(FakeRuntime(), settings, load_registry(load_entrypoints=False), role="gateway")
    assert gateway.ensure_started("a Hermes gateway, say") and gateway.runner is not None
    try:
        async with apps_client(lineup) as client:
            app = await WsApp.connect(gateway.runner.transport)  # type: ignore[arg-type]
            task = asyncio.create_task(client.call_tool("choice", CHOICE))
            phone = await app.next_call()
            shown = await client.call_tool("lineup_card", {"tool": "choice", "arguments": CHOICE})
            assert not shown.is_error and shown.structured_content is not None
            call = shown.structured_content["call"]
            assert (call["call_id"], call["arguments"]) == (phone.call_id, CHOICE)
            answer = {"selected": "production", "index": 1}
            applied = await client.call_tool(
                "lineup_answer", {"call_id": call["call_id"], "status": "completed", "result": answer}
            )
            assert not applied.is_error
            result = await asyncio.wait_for(task, 30)
            cancel = await app.next("tool.cancel")
            late = await client.call_tool(
                "lineup_answer", {"call_id": call["call_id"], "status": "rejected", "result": {}}
            )
            await app.close()
    finally:
        gateway.stop()
    assert result.structured_content == answer
    assert cancel.payload.reason == "answered on another device"  # type: ignore[union-attr]
    assert late.is_error and "waits no more" in body_text(late)
