"""How the direct server reads an attached App: each message at once as it arrives, or in turn.

websockets hands every frame to :meth:`AppConnection.process_event` from the transport's
callback, then queues it for ``recv``, where a handler task picks it up a turn of the event loop
later. An App's message is mostly an answer that ends a call, and that task switch, with the
queue around it, cost about 10 µs of a round trip of ~330 µs. So :class:`AppReader` handles a whole text message
the moment it arrives when nothing before it still waits:

- no message of this App queued for ``recv`` and none being handled (order is kept);
- no runtime work of an earlier message still running (a text the runtime is being given);
- within the App's message rate.

So every message of a read that needs no runtime is handled in one callback, and the writes they
cause leave together: pipelined answers no longer pay a turn of the loop each (throughput +30–45%).
The rate bounds what one App hands over at once (its burst, 60 messages by default, then 20 a
second); a text, which goes to the runtime, still holds back what follows it, so Apps typing
cannot keep a new App's hello waiting.

Every other message (over the rate, binary, fragmented, not UTF-8, or behind one of the above)
queues for :meth:`AppReader.run`, which handles them one by one, in order, as before: over the
rate the App is read more slowly, told ``rate_limited`` once, and closed (1008) after
``flood_strikes`` such messages in a row; a binary frame gets ``binary_not_supported``; invalid
UTF-8 fails the connection (1007) in websockets' ``recv``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Protocol

from websockets.asyncio.server import ServerConnection
from websockets.frames import CloseCode, Frame, Opcode
from websockets.protocol import Event
from websockets.typing import Data

from ...ports import Link
from ...protocol.messages import Error
from .auth import TokenBucket

if TYPE_CHECKING:
    from ...hub import Hub
    from ...protocol.outputs import Event as HubEvent

log = logging.getLogger(__name__)

FLOODED = "rate limit exceeded: too many messages"
#: the frames that begin a message (a fragmented one goes on with continuation frames)
_FIRST_FRAMES = (Opcode.TEXT, Opcode.BINARY)


class ClosingLink(Link, Protocol):
    """What the reader needs of the direct server's link (``DirectLink``): a link the agent may be closing."""

    #: the agent closes this link: what the App still sends is not read
    shutting: bool

    def shut(self, code: int, reason: str, *, flush: bool = False) -> None:
        """Start closing with ``code``/``reason`` (after what is queued, with ``flush``)."""


class AppConnection(ServerConnection):
    """A websockets server connection whose App's messages an :class:`AppReader` may take as they arrive."""

    #: takes a whole text message as it arrives, once the App is attached (see :meth:`AppReader.take`)
    reader: AppReader | None = None
    #: messages queued for ``recv`` and not taken by :meth:`next_message` yet
    queued = 0

    def process_event(self, event: Event) -> None:
        """Hand a whole text message to the reader, which may take it now; queue every other for ``recv``."""
        if isinstance(event, Frame) and event.opcode in _FIRST_FRAMES:
            reader = self.reader
            if reader is not None and event.fin and event.opcode is Opcode.TEXT and reader.take(event.data):
                return
            self.queued += 1
        super().process_event(event)

    async def next_message(self) -> Data:
        """The next message queued for ``recv`` (every reader of this connection takes them here)."""
        data = await self.recv()
        self.queued -= 1
        return data


class AppReader:
    """Reads one attached App's messages into the hub (see the module docstring)."""

    def __init__(
        self, hub: Hub, connection: AppConnection, link: ClosingLink, *, rate: float, burst: int, strikes: int
    ) -> None:
        self.hub = hub
        self.connection = connection
        self.link = link
        self._bucket = TokenBucket(rate, burst)
        self._max_strikes = strikes
        #: messages over the rate in a row
        self._strikes = 0
        #: :meth:`run` is handling a message (or has not started): a new one queues behind it
        self._handling = True
        #: the runtime work of a message taken at once (its events), while it runs
        self._running: asyncio.Task[None] | None = None
        connection.reader = self

    def take(self, data: bytes | bytearray | memoryview) -> bool:
        """Handle the text message ``data`` now, as it arrives; False: it must queue (nothing was done)."""
        connection = self.connection
        if self._handling or self._running is not None or connection.queued:
            return False
        if self.link.shutting:
            return True  # the agent closes it: what the App still sends is not read
        try:
            text = str(data, "utf-8")
        except UnicodeDecodeError:
            return False  # recv fails the connection, as for any App
        if not self._bucket.take():
            return False  # run() makes it wait its turn
        self._strikes = 0
        try:
            events = self.hub.receive_now(self.link, text)
        except Exception:  # a bug must cost one message, not the connection
            self._failed()
            return True
        if events:
            self._running = asyncio.create_task(self._run_events(events), name=f"lineup-events-{self.link.name}")
        return True

    async def _run_events(self, events: list[HubEvent]) -> None:
        try:
            await self.hub.run_events(events)
        except Exception:
            self._failed()
        finally:
            self._running = None

    def _failed(self) -> None:
        log.exception("the hub failed on a message from %s", self.link.name)
        self.tell("internal_error", "the agent could not handle this message")

    def tell(self, code: str, message: str) -> None:
        """Send the App an ``error`` ``code`` saying ``message``."""
        self.hub.reply(self.link, Error(code=code, message=message))

    async def run(self) -> None:
        """Handle the messages that queued, in order, until the App closes the connection; then
        wait for the runtime work of the last one taken at once (cancelled with this task)."""
        try:
            await self._read()
        except asyncio.CancelledError:
            if self._running is not None:
                self._running.cancel()
            raise
        finally:
            if self._running is not None:
                await asyncio.gather(self._running, return_exceptions=True)

    async def _read(self) -> None:
        link = self.link
        while True:
            self._handling = False
            data = await self.connection.next_message()
            self._handling = True
            if self._running is not None:  # what came before it reaches the runtime first
                await asyncio.gather(self._running, return_exceptions=True)
            if link.shutting:
                continue  # the agent closes it: drain what the App still sends until its close arrives
            wait = self._bucket.delay()
            if wait > 0:
                self._strikes += 1
                if self._strikes == 1:
                    self.tell("rate_limited", f"over {self._bucket.rate:g} messages per second; slow down")
                if self._strikes > self._max_strikes:
                    log.warning("closing %s: it kept flooding", link.name)
                    link.shut(CloseCode.POLICY_VIOLATION, FLOODED, flush=True)
                    continue
                await asyncio.sleep(wait)  # backpressure: nothing is dropped, this App is read slower
            else:
                self._strikes = 0
            if isinstance(data, bytes):
                self.tell("binary_not_supported", "binary frames are not supported; send JSON text")
                continue
            try:
                await self.hub.receive(link, data)
            except Exception:  # a bug must cost one message, not the connection
                self._failed()
            # One message, then a turn for every other connection: the next message may be read
            # already and would be handled at once, without yielding, so a busy App could take the
            # loop for as long as it keeps sending, and a new App's hello waited behind all of it.
            await asyncio.sleep(0)
