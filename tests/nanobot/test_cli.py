"""``nanobot agent -m`` (nanobot's one-shot CLI run, headless) asking through the App: the real command in
a fresh process, on the scripted LLM; the App is a real WebSocket client."""

from __future__ import annotations

import functools
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import anyio
import pytest

from lineup_plugin.protocol.messages import AgentStop, ToolCancel
from tests.e2e.hermes_harness import TOKEN, background, within
from tests.fakes.llm import ScriptedLLM, call, say, tool_messages
from tests.wsapp import WsApp

from .harness import WAIT, lineup_environ, write_config

NANOBOT = str(Path(sys.executable).with_name("nanobot"))
bounded = within(WAIT)


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@contextmanager
def one_shot(home: Path, llm: ScriptedLLM, message: str) -> Iterator[tuple[subprocess.Popen[str], int]]:
    """``nanobot agent -m <message>`` in ``home``; LineUp on a free port, waiting up to 30 s for the App."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    config = write_config(home, llm)
    env = {k: v for k, v in os.environ.items() if not k.startswith("LINEUP_")}
    env.update(HOME=str(home), **{**lineup_environ(home / "lineup", port), "LINEUP_APP_GRACE": "30"})
    with background([NANOBOT, "agent", "-c", str(config), "-m", message, "--no-markdown"], env) as running:
        yield running, port


async def output(running: subprocess.Popen[str]) -> str:
    out, err = await anyio.to_thread.run_sync(functools.partial(running.communicate, timeout=WAIT))
    assert running.returncode == 0, err
    return out


@bounded
async def test_a_one_shot_nanobot_run_asks_on_the_app_and_prints_the_reply(tmp_path: Path, llm: ScriptedLLM) -> None:
    llm.reset(call("choice", question="Colour?", options=["red", "blue"]), say("You picked blue."))
    with one_shot(tmp_path, llm, "pick a colour") as (running, port):
        app = await WsApp.reconnecting(port, TOKEN, attempts=2400)
        card = await app.next_call()
        assert card.origin is not None and (card.origin.kind, card.origin.label) == ("cli", "nanobot cli · direct")
        await app.answer(card, selected="blue", index=1)
        assert "You picked blue." in await output(running)
        await app.close()
    assert tool_messages(llm.requests[1])[0]["json"]["result"] == {"selected": "blue", "index": 1}


@bounded
async def test_the_apps_stop_ends_a_one_shot_runs_card_cancelled_and_the_run_ends_cleanly(
    tmp_path: Path, llm: ScriptedLLM
) -> None:
    llm.reset(call("choice", question="Colour?", options=["red", "blue"]), say("Stopped; nothing picked."))
    with one_shot(tmp_path, llm, "pick a colour") as (running, port):
        app = await WsApp.reconnecting(port, TOKEN, attempts=2400)
        card = await app.next_call()
        await app.send(AgentStop())
        closed = (await app.next("tool.cancel")).payload
        assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
        assert "Stopped; nothing picked." in await output(running)  # the caller's run ends, no traceback
        await app.close()
    assert tool_messages(llm.requests[1])[0]["json"]["status"] == "cancelled"
