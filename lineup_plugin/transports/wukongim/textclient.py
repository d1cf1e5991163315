"""The relay's side of :mod:`~lineup_plugin.transports.wukongim.textmode`: text cards over WuKongIM.

For an App user whose client shows only text, :class:`TextClient` turns the envelopes the hub
sends into WuKongIM text messages (``{"type": 1, "content": "..."}``) and the user's text replies
into ``tool.result`` envelopes, handed to the hub as if the user's device had sent them (the
session core checks them like any answer). The relay calls :meth:`TextClient.send` from its
sender task, in the order the hub sent, and :meth:`TextClient.reply` for each text the user sent.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from ...errors import RelayError
from ...protocol import codec
from ...protocol.messages import Actor
from .textmode import CardAnswer, Output, Say, TextCardsSetting, TextMode

if TYPE_CHECKING:
    from ...hub import Hub
    from ...ports import Link
    from ...protocol.calls import Call
    from .client import Message

log = logging.getLogger(__name__)

TEXT_CONTENT_TYPE = 1
"""WuKongIM's built-in text content: ``{"type": 1, "content": "..."}``."""
CUT_NOTE = "\n… (cut: too long for one message)"


def text_payload(text: str) -> bytes:
    """The message payload of a WuKongIM text message (a lone surrogate, not valid UTF-8, becomes "?")."""
    return json.dumps({"type": TEXT_CONTENT_TYPE, "content": text}, ensure_ascii=False).encode("utf-8", "replace")


def fitted(text: str, limit: int) -> str:
    """``text``, cut with a note when its payload would be over ``limit`` bytes (one WuKongIM frame)."""
    if len(text_payload(text)) <= limit:
        return text
    low, high = 0, len(text)
    while low < high:  # the longest prefix that fits with the note
        middle = (low + high + 1) // 2
        if len(text_payload(text[:middle] + CUT_NOTE)) <= limit:
            low = middle
        else:
            high = middle - 1
    return text[:low] + CUT_NOTE


def _content_type(payload: bytes) -> object:
    try:
        content = json.loads(payload)
    except ValueError:
        return None
    return content.get("type") if isinstance(content, dict) else None


def _ending(call: Call) -> str:
    message = call.result.result.get("message") if call.result is not None else None
    return message if isinstance(message, str) else str(call.state)


class TextClient:
    """Text cards for the relay's App user ``uid`` on ``link``: :attr:`mode` decides what to say and answer.

    ``send_text(uid, text)`` sends one WuKongIM text message (raising RelayError when it cannot);
    answers go to ``hub`` as messages of ``link``, whose ``max_text`` bounds one message.
    ``content_type`` is the custom content type of LineUp envelopes.
    """

    def __init__(
        self,
        setting: TextCardsSetting,
        *,
        hub: Hub,
        link: Link,
        uid: str,
        max_text: int,
        content_type: int,
        send_text: Callable[[str, str], Awaitable[None]],
    ) -> None:
        self.mode = TextMode(setting)
        self.hub = hub
        self.link = link
        self.uid = uid
        self.max_text = max_text
        self.content_type = content_type
        self.send_text = send_text
        #: set once the user's recent messages were looked at (see :meth:`recall`)
        self._recalled = asyncio.Event()

    @property
    def active(self) -> bool:
        """Whether the App user gets text instead of envelopes."""
        return self.mode.active

    def declare(self) -> None:
        """The App user's client sent a LineUp envelope: it draws cards itself."""
        if self.mode.active and self.mode.setting == "auto":
            log.info("relay: %s sent a LineUp envelope; cards go as envelopes from now on", self.uid)
        self.mode.declare()

    async def recall(self, messages: list[Message]) -> None:
        """Look at the App user's recent ``messages`` (from before the agent started), once.

        An envelope among them declares LineUp support. Else, for a text client, the cards the
        agent's previous run left open (closed when this one started) are said to be closed.
        Until this is done, :meth:`wanted` waits (with the setting ``auto``): a LineUp App that
        spoke before the agent started must not get its first card as text.
        """
        try:
            if any(m.from_uid == self.uid and _content_type(m.payload) == self.content_type for m in messages):
                self.declare()
            elif self.mode.active and self.hub.recovered:
                ended = [(call.request, _ending(call)) for call in self.hub.recovered]
                await self._apply(self.uid, self.mode.closed_by_restart(ended), None)
        finally:
            self._recalled.set()

    async def wanted(self) -> bool:
        """Whether the App user gets text; with ``auto``, known once the recent messages were looked at."""
        if self.mode.setting == "auto" and not self.mode.declared:
            await self._recalled.wait()
        return self.mode.active

    async def send(self, uid: str, text: str) -> None:
        """Say what the encoded envelope ``text`` from the hub means to a person, as text to ``uid``."""
        await self._apply(uid, self.mode.from_agent(text), None)

    async def reply(self, text: str, message: Message) -> bool:
        """Read the user's ``text`` as an answer to their open card; False if it is not one."""
        outputs = self.mode.from_user(text)
        if outputs is None:
            return False
        await self._apply(message.from_uid, outputs, f"wukongim_{message.message_id}")
        return True

    async def _apply(self, uid: str, outputs: list[Output], envelope_id: str | None) -> None:
        for output in outputs:
            if isinstance(output, Say):
                try:
                    await self.send_text(uid, fitted(output.text, self.max_text))
                except RelayError as exc:  # the relay re-syncs once back: the open card is asked again
                    log.info("relay text to %s failed: %s", uid, exc)
            elif isinstance(output, CardAnswer):
                await self._answer(uid, output, envelope_id)

    async def _answer(self, uid: str, answer: CardAnswer, envelope_id: str | None) -> None:
        hub = self.hub
        envelope = codec.envelope(
            answer.result,
            sender=Actor(kind="human", id=uid),
            target=hub.agent,
            conversation_id=hub.conversation_id,
            id=envelope_id or f"textmode_{answer.result.call_id}",
        )
        await hub.handle(self.link, envelope)
