"""A WuKongIM user whose client knows only text messages, like a stock TangSengDaoDao app.

It logs in to the fake WuKongIM server with the project's own wkproto client, reads what the
agent sends (failing on anything but a text message) and answers in plain text. Used by the
text-card tests (``tests/transports/test_textmode_relay.py``) and ``docs/text_fallback.py``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio

from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession, Message, Timers
from tests.fakes.wukongim import FakeWuKongIM

FAST = Timers(connect_timeout=5, send_timeout=5, reconnect_min=0.01, reconnect_max=0.05)
GUARD = 10  # seconds to wait for a message before failing instead of hanging


class TextUser:
    """``uid`` on the fake server, talking to ``agent`` in plain text only."""

    def __init__(self, session: ImSession, agent: str) -> None:
        self.session = session
        self.agent = agent
        self._stream = session.messages()

    async def message(self) -> tuple[Message, dict[str, Any]]:
        """The next message pushed to this user (acknowledged), with its decoded content."""
        with anyio.fail_after(GUARD):
            async for message in self._stream:
                await self.session.ack(message)
                return message, json.loads(message.payload)
        raise AssertionError(f"session closed: {self.session.error}")

    async def read(self) -> str:
        """The next text message from the agent (an envelope here fails: this client could not show it)."""
        _, content = await self.message()
        assert content["type"] == 1, f"a text client got content type {content['type']}: {content}"
        return str(content["content"])

    async def say(self, text: str) -> None:
        """Send ``text`` to the agent as a WuKongIM text message."""
        await self.session.send(self.agent, 1, json.dumps({"type": 1, "content": text}).encode())


@asynccontextmanager
async def text_user(server: FakeWuKongIM, uid: str, agent: str) -> AsyncIterator[TextUser]:
    """A :class:`TextUser` logged in as ``uid`` for as long as the block runs."""
    session = await ImSession.open(server.ws_url, ClientOptions(uid=uid, token="", device_flag=0, timers=FAST))
    try:
        yield TextUser(session, agent)
    finally:
        await session.close()
