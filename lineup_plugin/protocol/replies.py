"""The agent's replies while they are being written: what each App has been shown of them.

A runtime that streams (Hermes' gateway edits a message as the model writes it) reports the
whole text so far each time; :class:`Replies` turns that into the pieces to send
(``message.delta``, numbered by ``seq``) and, at the end, the one ``text`` that settles the
message under the same ``message_id``. A reply whose run stops before it is settled is
settled as ``interrupted`` with what was written, and anything the runtime still reports for
it afterwards is ignored. A reply settled again with the text it was settled with sends nothing
(a runtime that needs a final edit, as Hermes' gateway does, settles the last text twice).
Sans-I/O: no clock, no sockets.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .messages import MAX_TEXT, MessageDelta, Text

#: how many ended replies are remembered, so that late edits of them are ignored (interrupted)
#: and settling one again with the same text sends nothing
ENDED_KEPT = 256


@dataclass
class _Open:
    text: str = ""
    seq: int = 0


class Replies:
    """The replies being streamed, by ``message_id``."""

    def __init__(self) -> None:
        self._open: dict[str, _Open] = {}
        #: the text each recently ended reply was settled with (None: interrupted), newest last
        self._ended: OrderedDict[str, str | None] = OrderedDict()

    @property
    def open(self) -> list[str]:
        """The ids of the replies still being written."""
        return list(self._open)

    def update(self, message_id: str, text: str) -> MessageDelta | None:
        """Reply ``message_id`` now reads ``text``: the piece to send, or None (nothing new, or it ended).

        A text that extends what was shown is sent as the new end only; one that does not (the
        runtime rewrote the start) is sent whole with ``replace``. Text past :data:`MAX_TEXT` is cut.
        """
        if message_id in self._ended and self._ended[message_id] is None:
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
        """Reply ``message_id`` is complete as ``text``: the ``text`` message, or None when there is
        nothing to send (it was interrupted, or it was settled with this very text already)."""
        text = text[:MAX_TEXT]
        if message_id in self._ended and self._ended[message_id] in (None, text):
            return None
        self._open.pop(message_id, None)
        self._end(message_id, text)
        return Text(text=text, message_id=message_id)

    def interrupt(self) -> list[Text]:
        """The run stopped: settle every open reply as ``interrupted`` with what it reads now."""
        ended = [Text(text=reply.text, message_id=mid, interrupted=True) for mid, reply in self._open.items()]
        for message_id in self._open:
            self._end(message_id, None)
        self._open.clear()
        return ended

    def _end(self, message_id: str, text: str | None) -> None:
        self._ended[message_id] = text
        self._ended.move_to_end(message_id)
        while len(self._ended) > ENDED_KEPT:
            self._ended.popitem(last=False)
