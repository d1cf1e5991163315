"""The real nanobot agent (``nanobot-ai`` from PyPI) with LineUp's tools, driven as its gateway drives it.

:func:`nanobot_session` writes a nanobot ``config.json`` whose model is the scripted LLM (the only
fake part: an OpenAI-compatible ``custom`` provider on 127.0.0.1), sets LineUp's settings as a
nanobot user does (``LINEUP_*`` variables) and starts nanobot's ``AgentLoop.run()`` on a thread of
its own with its own event loop, as ``nanobot gateway`` does. Messages go in through nanobot's
message bus as a chat channel's would (``/stop`` included); replies are read off the bus.
nanobot finds LineUp's tools through their ``nanobot.tools`` entry points.

The App is :class:`tests.wsapp.WsApp`, a real WebSocket client.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import threading
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import anyio

from tests.e2e.hermes_harness import TOKEN
from tests.fakes.llm import MODEL, ScriptedLLM

T = TypeVar("T")
#: how long a test waits for nanobot's reply before it fails (instead of hanging)
WAIT = 60.0


def write_config(home: Path, llm: ScriptedLLM) -> Path:
    """A nanobot ``config.json`` in ``home``: its workspace there, the scripted model as a custom provider."""
    config = {
        "agents": {
            "defaults": {"workspace": str(home / "workspace"), "model": MODEL, "provider": "custom", "timezone": "UTC"}
        },
        "providers": {"custom": {"apiKey": "scripted", "apiBase": llm.base_url}},
    }
    home.mkdir(parents=True, exist_ok=True)
    path = home / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def lineup_environ(data_dir: Path, port: int = 0) -> dict[str, str]:
    """LineUp's settings for a nanobot process, as ``LINEUP_*`` variables: 127.0.0.1, a SQLite store in ``data_dir``."""
    return {
        "LINEUP_HOST": "127.0.0.1",
        "LINEUP_PORT": str(port),
        "LINEUP_TOKEN": TOKEN,
        "LINEUP_DATA_DIR": str(data_dir),
        "LINEUP_APP_GRACE": "0",
    }


@dataclass
class Agent:
    """One nanobot ``AgentLoop`` running (``run()``) on nanobot's thread, with its message bus."""

    nanobot: Nanobot
    agent_loop: Any
    replies: dict[str, queue.Queue[str]] = field(default_factory=dict)
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    async def send(self, chat_id: str, text: str, channel: str = "telegram") -> None:
        """A message from chat ``chat_id`` of ``channel``, as nanobot's channel would publish it."""
        from nanobot.bus.events import InboundMessage

        message = InboundMessage(channel=channel, chat_id=chat_id, sender_id="user-1", content=text)
        await anyio.to_thread.run_sync(self.nanobot.run, self.agent_loop.bus.publish_inbound(message))

    async def reply(self, chat_id: str) -> str:
        """nanobot's next final reply to chat ``chat_id`` (progress lines are skipped)."""
        return await anyio.to_thread.run_sync(self.replies.setdefault(chat_id, queue.Queue()).get, True, WAIT)

    async def route_replies(self) -> None:
        """Sort the bus's final replies by chat (as nanobot's channel manager would deliver them)."""
        while True:
            message = await self.agent_loop.bus.consume_outbound()
            if message.event is None:  # a final reply (progress lines carry an event)
                self.replies.setdefault(message.chat_id, queue.Queue()).put(message.content)

    def close(self) -> None:
        """Shut the loop down as nanobot's gateway does (``AgentLoop.aclose``: its turns are cancelled)."""
        self.agent_loop.stop()
        self.nanobot.run(self.agent_loop.aclose())

        async def end() -> None:
            for task in self.tasks:
                task.cancel()
            await asyncio.gather(*self.tasks, return_exceptions=True)

        self.nanobot.run(end())


@dataclass
class Nanobot:
    """nanobot's thread and event loop, the scripted LLM, and the main agent loop."""

    home: Path
    llm: ScriptedLLM
    loop: asyncio.AbstractEventLoop
    main: Agent | None = None

    def run(self, coroutine: Coroutine[Any, Any, T], timeout: float = WAIT) -> T:
        """Run ``coroutine`` on nanobot's event loop and wait for its result (from a worker thread)."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def start_agent(self) -> Agent:
        """A new ``AgentLoop`` on the config with a bus of its own, running as ``nanobot gateway`` runs it."""
        from nanobot.agent.loop import AgentLoop
        from nanobot.agent.tools.registry import ToolRegistry
        from nanobot.bus.queue import MessageBus
        from nanobot.config.loader import load_config

        async def make() -> Any:
            return AgentLoop.from_config(
                load_config(self.home / "config.json"), MessageBus(), tool_registry=ToolRegistry()
            )

        async def start(agent: Agent) -> list[asyncio.Task[Any]]:
            return [asyncio.create_task(agent.agent_loop.run()), asyncio.create_task(agent.route_replies())]

        agent = Agent(self, self.run(make()))
        agent.tasks = self.run(start(agent))
        return agent

    @property
    def agent(self) -> Agent:
        """The main agent loop."""
        assert self.main is not None
        return self.main


@contextmanager
def nanobot_session(home: Path, *, data_dir: Path | None = None, port: int = 0) -> Iterator[Nanobot]:
    """nanobot with LineUp's tools in ``home`` (also its ``HOME``); LineUp's data in ``data_dir`` (default:
    ``home/lineup``), the App on ``port`` (default: any free one). Stopped at the end."""
    from lineup_plugin.runtime.nanobot.runtime import uninstall

    saved = dict(os.environ)
    os.environ.update(HOME=str(home), **lineup_environ(data_dir or home / "lineup", port))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="nanobot", daemon=True)
    thread.start()
    with ScriptedLLM() as llm:
        write_config(home, llm)
        env = Nanobot(home, llm, loop)
        try:
            env.main = env.start_agent()
            yield env
        finally:
            if env.main is not None:
                env.main.close()
            uninstall()
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            os.environ.clear()
            os.environ.update(saved)
