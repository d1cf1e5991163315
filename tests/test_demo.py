"""The scripted demo agent, driven by a real WebSocket App."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.demo import Demo
from lineup_plugin.errors import LineUpError
from lineup_plugin.protocol.messages import AgentStop, Text, ToolCall
from tests.mcp.conftest import make_lineup, stdio_client
from tests.mcp.test_mcp_stdio import CHOICE, body
from tests.wsapp import WsApp

ANSWERS: dict[tuple[str, str | None], dict[str, Any]] = {
    ("choice", None): {"selected": "preview", "index": 1},
    ("confirm", None): {"approved": True},
    ("input", None): {"values": {"name": "Ada", "age": 36}},
    ("calculator", "add"): {"value": 42},
    ("canvas", "open"): {"instance_id": "canvas-1"},
}
FINAL = "That was every built-in tool."


def demo(tmp_path: Path, lines: list[str]) -> Demo:
    settings = Settings(host="127.0.0.1", port=0, token="demo-test-token-0123456789", data_dir=tmp_path)
    return Demo(settings, registry=load_registry(load_entrypoints=False), out=lines.append)


async def play(app: WsApp) -> tuple[list[ToolCall], list[str]]:
    """Answer every card until the script's last message; returns the calls and the agent's texts."""
    calls: list[ToolCall] = []
    texts: list[str] = []
    while not (texts and texts[-1].startswith(FINAL)):
        message = await app.recv()
        if isinstance(message.payload, ToolCall):
            call = message.payload
            calls.append(call)
            await app.answer(call, **ANSWERS.get((call.name, call.action), {"ok": True}))
        elif isinstance(message.payload, Text):
            texts.append(message.payload.text)
    return calls, texts


async def test_demo_script_uses_every_builtin_tool_and_replies_to_each(tmp_path: Path) -> None:
    lines: list[str] = []
    async with demo(tmp_path, lines) as running:
        assert lines[2].strip() == running.server.connect_link
        app = await WsApp.connect(running.server, "phone")
        calls, texts = await play(app)
        await app.close()
    assert [(c.name, c.action) for c in calls] == [
        ("choice", None),
        ("confirm", None),
        ("input", None),
        ("calculator", "add"),
        ("canvas", "open"),
        ("canvas", "draw"),
        ("canvas", "draw"),
        ("canvas", "undo"),
        ("canvas", "close"),
    ]
    assert calls[1].arguments["risk"] == "user_confirmation"
    assert set(calls[2].arguments["fields"]["properties"]) == {"name", "age", "newsletter"}
    assert all(c.arguments["instance_id"] == "canvas-1" for c in calls[5:])
    assert texts[0].startswith("Hi!")
    for expected in ("You picked preview.", "Restarting it (pretend).", "Nice to meet you, Ada.", "19 + 23 = 42."):
        assert any(expected in text for text in texts), expected
    assert 'choice → completed {"selected": "preview", "index": 1}' in lines
    assert 'canvas.undo → completed {"ok": true}' in lines
    assert running.finished == 1


async def test_again_replays_the_script_and_cancels_an_open_card(tmp_path: Path) -> None:
    lines: list[str] = []
    async with demo(tmp_path, lines) as running:
        app = await WsApp.connect(running.server, "phone")
        await play(app)
        await app.send(Text(text="again"))
        assert (await app.next("text")).payload.text.startswith("Hi!")  # type: ignore[union-attr]
        open_card = await app.next_call()
        await app.send(Text(text="Again "))
        cancel = await app.next("tool.cancel")
        assert cancel.payload.call_id == open_card.call_id  # type: ignore[union-attr]
        assert (await app.next("text")).payload.text.startswith("Hi!")  # type: ignore[union-attr]
        replayed = await app.next_call()
        assert replayed.name == "choice" and replayed.call_id != open_card.call_id
        await app.close()
    assert lines.count("script restarted") == 1


async def test_stop_ends_the_run_until_again(tmp_path: Path) -> None:
    lines: list[str] = []
    async with demo(tmp_path, lines) as running:
        app = await WsApp.connect(running.server, "phone")
        card = await app.next_call()
        await app.send(AgentStop())
        assert (await app.next("tool.cancel")).payload.call_id == card.call_id  # type: ignore[union-attr]
        assert (await app.next("text")).payload.text.startswith("Stopped.")  # type: ignore[union-attr]
        await app.send(Text(text="hello?"))
        assert "only a script" in (await app.next("text")).payload.text  # type: ignore[union-attr]
        await app.send(Text(text="again"))
        assert (await app.next_call()).name == "choice"
        await app.close()
    assert "script stopped" in lines


async def test_lineup_mcp_on_the_demos_data_dir_forwards_its_calls_to_the_demo(tmp_path: Path) -> None:
    # the demo serves like any LineUp process: it holds the data directory's server lock and opens
    # the forwarding socket, so `lineup mcp` there asks the demo's App instead of dying StoreBusyError
    lines: list[str] = []
    async with demo(tmp_path, lines) as running:
        app = await WsApp.connect(running.server, "phone")
        lineup = make_lineup(tmp_path)
        async with asyncio.timeout(120), stdio_client(lineup) as client:
            asked = asyncio.create_task(client.call_tool("choice", CHOICE))
            while True:  # the demo's own script asks too: answer only the forwarded card
                call = await app.next_call()
                if call.arguments == CHOICE:
                    break
            await app.answer(call, selected="production", index=1)
            result = await asked
        await app.close()
    assert not result.is_error and result.structured_content == {"selected": "production", "index": 1}
    assert body(result)["call_id"] == call.call_id


async def test_a_second_demo_on_the_same_data_dir_is_refused_naming_the_first(tmp_path: Path) -> None:
    async with demo(tmp_path, []):
        with pytest.raises(LineUpError, match=r"already serves .*pid \d+ \(demo\)"):
            demo(tmp_path, [])
    async with demo(tmp_path, []):  # the lock went with the first
        pass
