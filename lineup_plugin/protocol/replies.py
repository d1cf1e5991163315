"""The agent's replies while they are being written: what each App has been shown of them.

A runtime that streams (Hermes' gateway edits a message as the model writes it) reports the
whole text so far each time; :class:`Replies` turns that into the pieces to send
(``message.delta``, numbered by ``seq``) and, at the end, the one ``text`` that settles the
message under the same ``message_id``. A reply whose run stops before it is settled is
settled as ``interrupted`` with what was written, and anything the runtime still reports for
it afterwards is ignored. Sans-I/O: no clock, no sockets.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .messages import MAX_TEXT, MessageDelta, Text

#: how many ended replies are remembered, so that late edits of them are ignored
ENDED_KEPT = 256


@dataclass
class _Open:
    text: str = ""
    seq: int = 0


class Replies:
    """The replies being streamed, by ``message_id``."""

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}
        self._interrupted: OrderedDict[str, None] = OrderedDict()

    @property
    def open(self) -> list[str]:
        """The ids of the replies still being written."""
        return list(self._open)

    def update(self, message_id: str, text: str) -> MessageDelta | None:
        """Reply ``message_id`` now reads ``text``: the piece to send, or None (nothing new, or it ended).

        A text that extends what was shown is sent as the new end only; one that does not (the
        runtime rewrote the start) is sent whole with ``replace``. Text past :data:`MAX_TEXT` is cut.
        """
        if message_id in self._interrupted:
            return None
        text = text[:MAX_TEXT]
        reply = self._open.setdefault(message_id, _Open())
        if text == reply.text and reply.seq:
            return None
        if text.startswith(reply.text):
            delta = MessageDelta(message_id=message_id, seq=reply.seq, text=text[len(reply.text) :])
        else:
            delta = MessageDelta(message_id=message_id, seq=reply.seq, text=text, replace=True)
        reply.text = text
        reply.seq += 1
        return delta

    def settle(self, message_id: str, text: str) -> Text | None:
        """Reply ``message_id`` is complete as ``text``: the ``text`` message, or None if it was interrupted."""
        if message_id in self._interrupted:
            return None
        self._open.pop(message_id, None)
        return Text(text=text[:MAX_TEXT], message_id=message_id)

    def interrupt(self) -> list[Text]:
        """The run stopped: settle every open reply as ``interrupted`` with what it reads now."""
        ended = [Text(text=reply.text, message_id=mid, interrupted=True) for mid, reply in self._open.items()]
        for message in ended:
            assert message.message_id is not None
            self._interrupted[message.message_id] = None
        while len(self._interrupted) > ENDED_KEPT:
            self._interrupted.popitem(last=False)
        self._open.clear()
        return ended
