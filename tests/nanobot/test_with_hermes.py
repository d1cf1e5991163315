"""One App for nanobot and Hermes: a nanobot process and Hermes processes on one LineUp data directory.

nanobot runs here (the real ``nanobot-ai``, see :mod:`.harness`); Hermes is the installed ``hermes``
command of the dev environment (``$HERMES_BIN``, default ``.venv/bin/hermes``: ``scripts/test``
installs it), in fresh processes. Both read the same LineUp settings (port, token, data directory,
SQLite store) and talk to one scripted LLM, the only fake part. Whichever serves the App, the
other forwards its cards there; when the serving one is killed, the other takes over.
"""

from __future__ import annotations

import functools
import os
import signal
import socket
import subprocess
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

from lineup_plugin.protocol.messages import ToolCall, ToolCancel
from lineup_plugin.runtime.nanobot.runtime import installed
from tests.e2e.hermes_harness import TOKEN, ask_then_answer, background, cli_home, within
from tests.wsapp import WsApp

from .harness import WAIT, Nanobot, nanobot_session

REPO = Path(__file__).resolve().parents[2]
bounded = within(WAIT * 2)


def hermes_bin() -> str:
    """The ``hermes`` command of the dev environment (it cannot be installed next to nanobot-ai)."""
    path = os.environ.get("HERMES_BIN") or str(REPO / ".venv" / "bin" / "hermes")
    if not os.access(path, os.X_OK):
        raise AssertionError(f"no hermes command at {path}: run scripts/test, or set HERMES_BIN")
    return path


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Nanobot, Path, int]]:
    """nanobot and a Hermes home on one LineUp data directory and port (Hermes' home holds the data)."""
    root = tmp_path_factory.mktemp("shared")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    with nanobot_session(root / "nanobot", data_dir=root / "hermes" / "lineup", port=port) as nanobot:
        home = cli_home(SimpleNamespace(llm=nanobot.llm), root / "hermes", port)  # type: ignore[arg-type]
        config = home / "config.yaml"
        config.write_text(config.read_text(encoding="utf-8").replace("store: memory", "store: sqlite"), "utf-8")
        yield nanobot, home, port


def hermes(*command: str, home: Path) -> AbstractContextManager[subprocess.Popen[str]]:
    """``hermes <command>`` in the background in ``home``; killed at the end if still running."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    return background([hermes_bin(), *command], {**env, "HERMES_HOME": str(home), "HOME": str(home)})


async def app_on(port: int, open_calls: list[str] | None = None) -> WsApp:
    """The App connecting to whichever process serves ``port``, trying again while nothing listens."""
    return await WsApp.reconnecting(port, TOKEN, attempts=2400, open_calls=open_calls)


async def card_of(app: WsApp, kind: str) -> ToolCall:
    """The next card, which must come from a session of ``kind``."""
    card = await app.next_call()
    assert card.origin is not None and card.origin.kind == kind, card.origin
    return card


@bounded
async def test_a_hermes_chat_asks_through_the_app_nanobot_serves(shared: tuple[Nanobot, Path, int]) -> None:
    nanobot, home, port = shared
    nanobot.llm.reset(*[ask_then_answer] * 4)
    assert installed().service.ensure_started("test")  # nanobot serves the App
    app = await app_on(port)
    with hermes("chat", "--toolsets", "lineup", "-Q", "-q", "pick a colour", home=home) as chat:
        card = await card_of(app, "chat")
        assert card.origin is not None and card.origin.label == "hermes chat"
        await app.answer(card, selected="blue", index=1)
        out, err = await anyio.to_thread.run_sync(functools.partial(chat.communicate, timeout=WAIT))
        assert chat.returncode == 0, err
        assert "pick a colour: blue" in out
    await app.close()


@bounded
async def test_nanobot_asks_through_a_hermes_gateway_and_takes_over_when_it_is_killed(
    shared: tuple[Nanobot, Path, int],
) -> None:
    nanobot, home, port = shared
    nanobot.llm.reset(*[ask_then_answer] * 4)
    installed().service.stop()  # the Hermes gateway serves the App
    with hermes("gateway", "run", home=home) as gateway:
        app = await app_on(port)
        await nanobot.agent.send("chat-1", "pick a colour")
        card = await card_of(app, "gateway")  # forwarded by nanobot
        assert card.origin is not None and card.origin.label == "nanobot telegram · chat-1"
        gateway.send_signal(signal.SIGKILL)
        await app.closed()
        app = await app_on(port, open_calls=[card.call_id])  # now served by nanobot
        again = await card_of(app, "gateway")
        assert (again.call_id, again.arguments) == (card.call_id, card.arguments)
        await app.answer(again, selected="green", index=2)
        assert (await nanobot.agent.reply("chat-1")).endswith("pick a colour: green")
        assert installed().service.serving
        await app.close()
    assert gateway.returncode == -signal.SIGKILL


@bounded
async def test_stop_in_nanobot_withdraws_its_card_from_the_app_a_hermes_gateway_serves(
    shared: tuple[Nanobot, Path, int],
) -> None:
    nanobot, home, port = shared
    nanobot.llm.reset(*[ask_then_answer] * 4)
    installed().service.stop()
    with hermes("gateway", "run", home=home):
        app = await app_on(port)
        await nanobot.agent.send("chat-2", "pick a colour")
        card = await card_of(app, "gateway")  # forwarded by nanobot
        await nanobot.agent.send("chat-2", "/stop")
        closed = (await app.next("tool.cancel")).payload
        assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
        assert await nanobot.agent.reply("chat-2") == "Stopped 1 task(s)."
        await nanobot.agent.send("chat-2", "and now?")
        assert (await nanobot.agent.reply("chat-2")).endswith(": cancelled")  # the model read cancelled
        await app.close()
