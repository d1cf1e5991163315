"""Forwarding: the agent's processes that do not serve the App ask through the one that does.

Hermes runs the plugin in every process sharing a home (the gateway, each CLI, ``hermes chat
-q``, cron jobs), but one process serves the App (:mod:`.lock`). That process also listens on
a Unix socket in the data directory (:func:`socket_path`, mode 0600 in a 0700 directory; on
Linux the peer's uid must be ours too) and every other process forwards its LineUp calls there.
The channel carries JSON lines, modelled once in :mod:`lineup_plugin.protocol.forward` (the lines,
their codec and the hand-over policy, all sans-I/O); this module holds the sockets, the token
file and the threads.

One connection per call (or per status or reply, which get no answer: the App shows them as the
serving process's own). The token (``<data_dir>/forward.token``, mode 0600, new at each
start) is compared in constant time; a peer that says nothing for :data:`HELLO_TIMEOUT`
seconds, sends a wrong token, a line too long, nested too deep or not a JSON object, a text over
:data:`~lineup_plugin.protocol.messages.MAX_TEXT` characters, or during its call anything but a
cancel or an answer of that call, is told why and closed (an open call is then withdrawn). A call id
belongs to the connection that asked it: another connection asking the same id while it waits,
or asking for a call this process made itself, is refused (and its leaving cancels nothing).

**Hand-over.** The call keeps its id across processes. When the serving process stops, it lets
go of the forwarded calls without ending them (:meth:`Hub.release
<lineup_plugin.hub.Hub.release>`) and closes their connections; when it is killed, the
connections just drop. Either way the forwarder tries to serve itself (the OS freed the lock)
or forwards to whichever process serves now, with the same call id: the new server recovered
the call from the shared store (``handover_grace``) and waits on it again, so the card the App
shows stays answerable and an answer given meanwhile is not lost. A forwarder that goes away
with its call still open has the call cancelled on every device.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import socket
import struct
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HandedOverError, LineUpError, OwnerUnreachable, ProtocolError
from ..ports import Link
from ..private import private_dir, write_private
from ..protocol.base import bounded
from ..protocol.forward import (
    FORWARDER,
    MAX_LINE,
    MAX_REASON,
    SERVER_DURING_CALL,
    SERVER_HELLO,
    SERVER_REQUEST,
    AnswerLine,
    CallLine,
    CancelLine,
    ConversationRef,
    ErrorLine,
    Hello,
    Interrupt,
    Line,
    ResultLine,
    StatusLine,
    TextLine,
    decode_line,
    encode_line,
)
from ..protocol.live import INTERRUPTED, interrupt_reason
from ..protocol.messages import MAX_TEXT, Origin, ToolResult
from .base import Conversation

log = logging.getLogger(__name__)

SOCKET_FILE = "forward.sock"
TOKEN_FILE = "forward.token"
#: seconds a new connection has to say hello
HELLO_TIMEOUT = 5.0
#: forwarded calls served at once (a connection over it is refused)
MAX_FORWARDED = 256
#: a Unix socket path longer than this does not fit ``sockaddr_un`` everywhere
_MAX_SOCKET_PATH = 100
#: why a forwarded call is cancelled when its process goes away while it is open
ASKER_GONE = "the agent process that asked has ended"
#: why a forwarded call is cancelled when its process sends a line the server refuses (it is told why)
ASKER_REFUSED = "the agent process that asked sent a line LineUp cannot take"


def socket_path(data_dir: Path) -> Path:
    """Where the serving process listens: ``<data_dir>/forward.sock``.

    A data directory too deep for a socket path gets one in a private (0700) directory of the
    system's temporary directory, named after the data directory, so every process finds it.
    """
    path = data_dir / SOCKET_FILE
    if len(os.fsencode(path)) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(data_dir.resolve())).hexdigest()[:16]
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"lineup-{uid}-{digest}" / SOCKET_FILE


def _private_dir(path: Path) -> None:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if hasattr(os, "getuid") and path.stat().st_uid != os.getuid():
        raise LineUpError(f"lineup: {path} belongs to another user; refusing to put the forwarding socket there")
    private_dir(path)


def _peer_uid(sock: socket.socket | None) -> int | None:
    """The uid of the process at the other end of a Unix socket (None where the OS does not say)."""
    if sock is None or not hasattr(socket, "SO_PEERCRED"):
        return None
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except OSError:
        return None
    _pid, uid, _gid = struct.unpack("3i", raw)
    return int(uid)


class ForwardLink:
    """One forwarding connection as a :class:`~lineup_plugin.ports.Link` of the serving hub's process:
    :meth:`send` queues one encoded line (a ``result``, an ``interrupt``) without waiting,
    :meth:`close` says why in an ``error`` line and ends the connection."""

    #: the longest line either side sends
    max_text: int | None = MAX_LINE

    def __init__(self, writer: asyncio.StreamWriter, name: str) -> None:
        self.writer = writer
        self.name = name

    def send(self, text: str) -> None:
        """Queue one encoded line (its newline included)."""
        self.writer.write(text.encode("ascii"))

    def put(self, line: Line) -> None:
        """Queue one line."""
        self.writer.write(encode_line(line))

    def close(self, code: int, reason: str) -> None:
        """Say why (``code`` is not sent: the line protocol has none) and close the connection."""
        with contextlib.suppress(Exception):
            self.put(ErrorLine(message=bounded(reason)))
        self.writer.close()


if TYPE_CHECKING:

    def _a_link(link: ForwardLink) -> Link:
        """Never called: the type checker holds :class:`ForwardLink` to the ``ports.Link`` it is."""
        return link


# ------------------------------------------------------------------------------ the server


class ForwardServer:
    """The serving process's end: a Unix socket where the other processes' calls arrive (async).

    An async context manager entered on the hub's loop (:class:`~.loop.Runner` ``services``).
    Leaving it lets go of the calls still open (they are handed over, not ended) and removes
    the socket and the token file.
    """

    def __init__(self, hub: Any, data_dir: Path) -> None:
        self.hub = hub
        self.data_dir = data_dir
        self.path = socket_path(data_dir)
        self.token_path = data_dir / TOKEN_FILE
        self._token = ""
        self._server: asyncio.AbstractServer | None = None
        self._links: set[ForwardLink] = set()
        #: the forwarded calls now waited on: call id -> its connection
        self.open_calls: dict[str, ForwardLink] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._closing = False

    async def __aenter__(self) -> ForwardServer:
        _private_dir(self.data_dir)
        _private_dir(self.path.parent)
        self._token = secrets.token_urlsafe(32)
        write_private(self.token_path, self._token.encode("ascii"))  # a new file each time, renamed in place
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # left by a process that was killed: we hold the lock, so it is stale
        old_umask = os.umask(0o177)
        try:
            self._server = await asyncio.start_unix_server(self._accept, path=os.fspath(self.path), limit=MAX_LINE)
        finally:
            os.umask(old_umask)
        self.path.chmod(0o600)
        log.info("lineup: other processes forward their calls through %s", self.path)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        self._closing = True
        server, self._server = self._server, None
        if server is not None:
            server.close()
        handed = [call_id for call_id in list(self.open_calls) if self.hub.release(call_id)]
        if handed:
            log.info("lineup: %d forwarded call(s) handed over to the next serving process", len(handed))
        for link in list(self._links):
            link.writer.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(server.wait_closed(), 1.0)
        for path in (self.path, self.token_path):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()

    def interrupt_all(self, reason: str) -> int:
        """Tell every process waiting on a forwarded call to interrupt its run (the App's stop); how many."""
        links = set(self.open_calls.values())
        for link in links:
            with contextlib.suppress(Exception):
                link.put(Interrupt(reason=reason[:MAX_REASON]))
        return len(links)

    # one connection ------------------------------------------------------------------

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        link = ForwardLink(writer, f"forward:{id(writer):x}")
        self._links.add(link)
        try:
            await self._serve(reader, link)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the peer went away, or this server is closing
        except ProtocolError as exc:  # a bad line: said why, then closed
            link.close(1008, str(exc))
        finally:
            self._links.discard(link)
            self._tasks.discard(task)
            writer.close()

    async def _read(self, reader: asyncio.StreamReader, *, cut_is_end: bool = False) -> bytes | None:
        """The next line; None at the end of the stream (also in the middle of a line, if ``cut_is_end``: a
        process killed while it wrote); ProtocolError for a line cut off or too long."""
        try:
            return await reader.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            if not exc.partial or cut_is_end:
                return None
            raise ProtocolError("the line was cut off") from None
        except asyncio.LimitOverrunError:
            raise ProtocolError(f"a line is longer than {MAX_LINE} bytes") from None

    async def _serve(self, reader: asyncio.StreamReader, link: ForwardLink) -> None:
        uid = _peer_uid(link.writer.get_extra_info("socket"))
        if uid is not None and hasattr(os, "getuid") and uid != os.getuid():
            raise ProtocolError("the forwarding socket serves this user's processes only")
        try:
            raw = await asyncio.wait_for(self._read(reader), HELLO_TIMEOUT)
        except TimeoutError:
            raise ProtocolError(f"no hello within {HELLO_TIMEOUT:g} s") from None
        if raw is None:
            return
        hello = decode_line(raw, *SERVER_HELLO)
        assert isinstance(hello, Hello)
        if not secrets.compare_digest(hello.token.encode(), self._token.encode()):
            raise ProtocolError("wrong token: read it from the data directory's forward.token")
        raw = await self._read(reader)
        if raw is None:
            return
        request = decode_line(raw, *SERVER_REQUEST)
        if isinstance(request, StatusLine | TextLine):
            await self._notice(request)
            return
        assert isinstance(request, CallLine)
        if len(self.open_calls) >= MAX_FORWARDED:
            raise ProtocolError(f"too many forwarded calls at once (at most {MAX_FORWARDED})")
        where = await self._conversation(request.conversation)
        call_id = request.call_id
        log.info("lineup: forwarded call %s (%s) from pid %s", call_id, request.name, hello.pid)
        self._check_claim(call_id)
        self.open_calls[call_id] = link
        options: dict[str, Any] = {"call_id": call_id, "origin": request.origin, "detached": True}
        deadline = float(request.deadline) if request.deadline is not None else None
        call = self.hub.agent_call(request.name, request.arguments, conversation_id=where, deadline=deadline, **options)
        waiting = asyncio.ensure_future(call)
        try:
            result = await self._until_result(reader, call_id, waiting)
        finally:
            self.open_calls.pop(call_id, None)
            if not waiting.done():
                waiting.cancel()
            # handed over while this connection was being closed: its end is read here, or asyncio
            # would log "Task exception was never retrieved" for a hand-over that went as it should
            waiting.add_done_callback(_read_end)
        if result is not None:
            link.put(ResultLine(result=result))
            await link.writer.drain()

    def _check_claim(self, call_id: str) -> None:
        """A forwarder may ask a call id that is new, or wait again on a forwarded call no other
        connection waits on (the hand-over); ProtocolError for anything else: the call is another's."""
        if call_id in self.open_calls:
            raise ProtocolError(f"call_id: {call_id!r} is another connection's call")
        known = self.hub.stored_call(call_id)
        if known is not None and not known.forwarded:
            raise ProtocolError(f"call_id: {call_id!r} is a call this process made, not a forwarded one")

    async def _answer(self, call_id: str, answer: AnswerLine) -> None:
        """The forwarding process's own surface answered its call (an MCP Apps host's card), as a device would."""
        if answer.result.call_id != call_id:
            log.info("lineup: a forwarded answer for another call was refused (call %s)", call_id)
            return
        refused = await self.hub.answer_from(answer.surface, answer.result)
        if refused is not None:
            log.info("lineup: the answer to %s from %s was refused: %s", call_id, answer.surface, refused)

    async def _conversation(self, conversation: ConversationRef | None) -> str | None:
        """The conversation a line names (titled on the App as it says); None: the default one."""
        if conversation is not None and conversation.title:
            await self.hub.name_conversation(conversation.id, conversation.title)
        return conversation.id if conversation is not None else None

    async def _notice(self, request: StatusLine | TextLine) -> None:
        """Another process's session status or reply, shown on the App."""
        where = await self._conversation(request.conversation)
        if isinstance(request, TextLine):
            await self.hub.send_text(request.text, conversation_id=where)
        else:
            await self.hub.set_status(request.state, request.detail, conversation_id=where)

    async def _until_result(
        self, reader: asyncio.StreamReader, call_id: str, waiting: asyncio.Future[ToolResult]
    ) -> ToolResult | None:
        """The call's end, reading the forwarder's cancels and answers meanwhile; None if it went away or was
        handed over; ProtocolError (the call withdrawn) for a line that is neither."""
        reading: asyncio.Task[bytes | None] | None = None
        try:
            while True:
                if reading is None:
                    reading = asyncio.ensure_future(self._read(reader, cut_is_end=True))
                pending: set[asyncio.Future[Any]] = {waiting, reading}
                await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    try:
                        return waiting.result()
                    except HandedOverError:
                        return None
                try:
                    raw = reading.result()
                    line = _during_call(call_id, raw) if raw is not None else None
                except ProtocolError:  # told why, then closed: its call ends with it
                    await self._withdraw(call_id, waiting, ASKER_REFUSED)
                    raise
                reading = None
                if line is None:  # the asking process is gone: nobody will read an answer
                    await self._withdraw(call_id, waiting, ASKER_GONE)
                    return None
                if isinstance(line, CancelLine):
                    await self.hub.cancel(call_id, INTERRUPTED if line.reason is None else line.reason)
                else:
                    await self._answer(call_id, line)
        finally:
            if reading is not None and not reading.done():
                reading.cancel()

    async def _withdraw(self, call_id: str, waiting: asyncio.Future[ToolResult], reason: str) -> None:
        """Cancel a forwarded call whose asker will not read its result (unless this server is closing:
        then the call is handed over) and wait for its end."""
        if self._closing:
            return
        await self.hub.cancel(call_id, reason)
        with contextlib.suppress(Exception):
            await waiting


def _during_call(call_id: str, raw: bytes) -> CancelLine | AnswerLine:
    """A line the forwarder sent while its call ``call_id`` is open: a cancel or an answer of that call;
    ProtocolError saying why not."""
    line = decode_line(raw, *SERVER_DURING_CALL)
    assert isinstance(line, CancelLine | AnswerLine)
    if isinstance(line, CancelLine) and line.call_id is not None and line.call_id != call_id:
        raise ProtocolError(f"call_id: {line.call_id!r} is not this connection's call")
    return line


def conversation_ref(conversation: Conversation | None) -> ConversationRef | None:
    """The ``conversation`` field of a line (None when ``conversation`` is None)."""
    if conversation is None:
        return None
    return ConversationRef.model_construct(id=conversation.id, title=conversation.title)


def _read_end(task: asyncio.Future[Any]) -> None:
    """Mark the end of a forwarded call's task as seen (a hand-over, a cancel: nobody waits for it)."""
    if not task.cancelled():
        task.exception()


# ---------------------------------------------------------------------------- the forwarder


@dataclass
class Forwarded:
    """A call this process forwarded and waits on: what it asked, and its connection."""

    name: str
    arguments: dict[str, Any]
    started: float
    sock: socket.socket
    lock: threading.Lock = field(default_factory=threading.Lock)

    def send(self, line: Line) -> None:
        """Write one line on the call's connection (threads take turns)."""
        with self.lock:
            self.sock.sendall(encode_line(line))


class Forwarder:
    """A process that does not serve: forwards one call at a time per thread, blocking (see the module docstring)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.path = socket_path(data_dir)
        self._lock = threading.Lock()
        #: the calls forwarded now, by call id
        self._open: dict[str, Forwarded] = {}

    def open_calls(self) -> dict[str, Forwarded]:
        """The calls this process has forwarded and still waits on."""
        with self._lock:
            return dict(self._open)

    def answer(self, call_id: str, result: ToolResult, surface: str) -> bool:
        """Answer this process's own forwarded call ``call_id`` from ``surface``; False when it waits no more."""
        with self._lock:
            forwarded = self._open.get(call_id)
        if forwarded is None:
            return False
        try:
            forwarded.send(AnswerLine.model_construct(op="answer", surface=surface, result=result))
        except OSError:
            return False
        return True

    def _connect(self, timeout: float) -> socket.socket:
        """A connection to the serving process's socket, hello said; OwnerUnreachable if there is none."""
        try:
            token = (self.data_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            raise OwnerUnreachable(f"no forwarding token: {exc}") from None
        try:
            sock.settimeout(timeout)
            sock.connect(os.fspath(self.path))
            sock.sendall(encode_line(Hello(token=token, pid=os.getpid())))
        except OSError as exc:
            sock.close()
            raise OwnerUnreachable(f"cannot reach the serving process: {exc}") from None
        return sock

    def notify(self, message: StatusLine | TextLine, timeout: float = 1.0) -> None:
        """Send a ``status`` or ``text`` line to the serving process (no answer); OwnerUnreachable if none.
        A text is cut to :data:`MAX_TEXT` characters, as the serving process cuts its own replies."""
        if isinstance(message, TextLine) and len(message.text) > MAX_TEXT:
            message = message.model_copy(update={"text": message.text[:MAX_TEXT]})
        if isinstance(message, StatusLine) and message.detail is not None and len(message.detail) > MAX_REASON:
            message = message.model_copy(update={"detail": bounded(message.detail)})
        with self._connect(timeout) as sock:
            try:
                sock.sendall(encode_line(message))
            except OSError as exc:
                raise OwnerUnreachable(f"the serving process went away: {exc}") from None

    def call(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        call_id: str,
        deadline: float,
        origin: Origin | None,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None] | None = None,
        on_interrupt: Callable[[str], None] | None = None,
        poll: float = 0.25,
        conversation: Conversation | None = None,
    ) -> ToolResult:
        """Forward the call and block until its result; raises :class:`OwnerUnreachable` to try again.

        ``is_interrupted`` is polled every ``poll`` seconds: once true the call is cancelled
        there, with the check's reason (the result says how it ended). ``on_interrupt`` is told when the serving process
        asks this one to interrupt its run (the App's stop button).
        """
        request = CallLine.model_construct(
            op="call",
            call_id=call_id,
            name=name,
            arguments=arguments,
            deadline=max(0.0, deadline),
            origin=origin,
            conversation=conversation_ref(conversation),
        )
        with self._connect(HELLO_TIMEOUT) as sock:
            forwarded = Forwarded(name, arguments, time.time(), sock)
            try:
                forwarded.send(request)
            except OSError as exc:
                raise OwnerUnreachable(f"the serving process went away: {exc}") from None
            with self._lock:
                self._open[call_id] = forwarded
            try:
                return self._wait(forwarded, call_id, is_interrupted, heartbeat, on_interrupt, poll)
            finally:
                with self._lock:
                    self._open.pop(call_id, None)

    def _wait(
        self,
        forwarded: Forwarded,
        call_id: str,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None] | None,
        on_interrupt: Callable[[str], None] | None,
        poll: float,
    ) -> ToolResult:
        sock = forwarded.sock
        sock.settimeout(poll)
        buffer = b""
        cancelled = False
        while True:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                chunk = None
            except OSError as exc:
                raise OwnerUnreachable(f"the serving process went away: {exc}") from None
            if chunk == b"":
                raise OwnerUnreachable("the serving process went away")
            if chunk:
                buffer += chunk
                if len(buffer) > MAX_LINE + 1:
                    raise LineUpError("the serving process sent a line that is too long")
                while b"\n" in buffer:
                    raw, _, buffer = buffer.partition(b"\n")
                    try:
                        line = decode_line(raw + b"\n", *FORWARDER)
                    except ProtocolError as exc:
                        raise LineUpError(f"the serving process sent a line that is not valid: {exc}") from None
                    if isinstance(line, ResultLine):
                        return line.result
                    if isinstance(line, Interrupt) and on_interrupt is not None:
                        on_interrupt(line.reason)
                    elif isinstance(line, ErrorLine):
                        raise LineUpError(f"the serving process refused the call: {line.message}")
            if heartbeat is not None:
                heartbeat()
            if not cancelled and is_interrupted():
                cancelled = True
                try:
                    reason = bounded(interrupt_reason(is_interrupted))  # a line's reason is at most MAX_REASON
                    forwarded.send(CancelLine(call_id=call_id, reason=reason))
                except OSError as exc:
                    raise OwnerUnreachable(f"the serving process went away: {exc}") from None


def platform_supported() -> bool:
    """Whether this OS gives forwarding what it needs: Unix sockets with file modes (not Windows)."""
    return hasattr(socket, "AF_UNIX") and sys.platform != "win32"
