"""An asyncio WuKongIM client speaking wkproto over WebSocket (``ws://``, ``wss://``) or TCP.

:class:`ImSession` is one authenticated connection: CONNECT with an X25519 key exchange, then
encrypted SEND/SENDACK (correlated by ``clientSeq``), RECV answered by RECVACK, and a PING/PONG
heartbeat. :class:`WuKongIMClient` keeps a session alive, reconnecting with exponential backoff,
and hands every received message to a callback before acknowledging it.

A connection closed between CONNECT and CONNACK is not, by itself, a refused token: WuKongIM
v2.2.5 also closes there for its idle limits (2 s before CONNECT is read, 4 s after), a failed
token lookup or a restart. Only a CONNACK or DISCONNECT reason code, or
:data:`LOGIN_CLOSES_REFUSED` closes in a row each at least ``Timers.login_refused_after`` after
CONNECT (v2.2.5 sends nothing for a bad token and drops the idle connection 4 s later), stops the
client as refused; any other close is retried with backoff.

Failures surface as :class:`~lineup_plugin.errors.RelayError` and its subclasses; socket and
websockets exceptions never leak out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from websockets.asyncio.client import ClientConnection
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidURI

from lineup_plugin.errors import (
    ConfigError,
    RelayAuthError,
    RelayError,
    RelayProtocolError,
    RelayTimeoutError,
    TransportError,
)
from lineup_plugin.transports.wukongim import crypto as wkcrypto
from lineup_plugin.transports.wukongim import proto as wkproto
from lineup_plugin.transports.wukongim.crypto import SessionCipher
from lineup_plugin.transports.wukongim.proto import (
    ConnackPacket,
    ConnectPacket,
    DeviceFlag,
    DisconnectPacket,
    Flags,
    FrameParser,
    Packet,
    PingPacket,
    PongPacket,
    ReasonCode,
    RecvackPacket,
    RecvPacket,
    SendackPacket,
    SendPacket,
)

log = logging.getLogger(__name__)

_AUTH_REASONS = {ReasonCode.AUTH_FAIL, ReasonCode.QUERY_TOKEN_ERROR, ReasonCode.BAN}
_ACK_FLAGS = Flags.NO_PERSIST | Flags.RED_DOT | Flags.SYNC_ONCE
_WS_LIMIT = wkproto.MAX_REMAINING_LENGTH + 5  # header byte + 4 varint bytes
CLIENT_MSG_NO_LENGTH = 32
"""Length of the clientMsgNo :meth:`ImSession.send` makes up (a uuid4 in hex)."""
LOGIN_CLOSES_REFUSED = 3
"""Closes without CONNACK, in a row and each late (see ``Timers.login_refused_after``), that mean
the token was refused."""


@dataclass(frozen=True, slots=True)
class Timers:
    """The client's deadlines and intervals, in seconds.

    The server drops a connection idle for 3 minutes, so ``ping_interval`` must stay well below
    that. Reconnection waits grow from ``reconnect_min`` to ``reconnect_max`` (with jitter). A
    close without CONNACK at least ``login_refused_after`` after CONNECT looks like WuKongIM
    v2.2.5 dropping a refused login (it closes a connection idle for 4 s after CONNECT).
    """

    connect_timeout: float = 10.0
    send_timeout: float = 10.0
    ping_interval: float = 30.0
    pong_timeout: float = 10.0
    reconnect_min: float = 0.5
    reconnect_max: float = 30.0
    login_refused_after: float = 3.5


@dataclass(frozen=True, slots=True)
class ClientOptions:
    """How the agent logs in to WuKongIM (``device_id`` defaults to a fresh random one)."""

    uid: str
    token: str = field(repr=False)
    device_flag: int = DeviceFlag.PC
    device_id: str = ""
    protocol_version: int = wkproto.LATEST_VERSION
    timers: Timers = Timers()

    def __post_init__(self) -> None:
        if not self.uid:
            raise ConfigError("wukongim uid: must not be empty")
        lo, hi = wkproto.OLDEST_VERSION, wkproto.LATEST_VERSION
        if not lo <= self.protocol_version <= hi:
            raise ConfigError(f"wukongim protocol_version: must be {lo} to {hi}, got {self.protocol_version}")
        if not self.device_id:
            object.__setattr__(self, "device_id", f"lineup{uuid.uuid4().hex}")


@dataclass(frozen=True, slots=True)
class Message:
    """A received message with its payload decrypted."""

    message_id: int
    message_seq: int
    client_msg_no: str
    from_uid: str
    channel_id: str
    channel_type: int
    timestamp: int
    payload: bytes
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class SendAck:
    """The server accepted a message: its id, its sequence in the channel, our clientMsgNo."""

    message_id: int
    message_seq: int
    client_msg_no: str


# ---------------------------------------------------------------------------------------------
# links: one byte pipe per transport


class _Link(Protocol):
    """A connected byte pipe; ``recv`` returns one chunk and raises EOFError at the end."""

    framed: bool

    async def send(self, data: bytes) -> None: ...
    async def recv(self) -> bytes: ...
    async def close(self) -> None: ...


class _WebSocketLink:
    framed = True  # one wkproto frame per WebSocket message

    def __init__(self, ws: ClientConnection) -> None:
        self._ws = ws

    async def send(self, data: bytes) -> None:
        await self._ws.send(data)

    async def recv(self) -> bytes:
        try:
            data = await self._ws.recv()
        except ConnectionClosed as exc:
            raise EOFError(_describe_close(exc)) from None
        if isinstance(data, str):
            raise RelayProtocolError("server sent a text frame; wkproto frames are binary")
        return data

    async def close(self) -> None:
        await self._ws.close()


class _TcpLink:
    framed = False

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer

    async def send(self, data: bytes) -> None:
        self._writer.write(data)
        await self._writer.drain()

    async def recv(self) -> bytes:
        data = await self._reader.read(65536)
        if not data:
            raise EOFError("server closed the tcp connection")
        return data

    async def close(self) -> None:
        self._writer.close()
        with contextlib.suppress(OSError):
            await self._writer.wait_closed()


def _describe_close(exc: ConnectionClosed) -> str:
    frame = exc.rcvd or exc.sent
    if frame is None:
        return "connection lost without a close frame"
    detail = f" ({frame.reason})" if frame.reason else ""
    return f"connection closed with code {frame.code}{detail}"


async def _open_link(addr: str, timeout: float) -> _Link:
    """Connect to ``ws://``, ``wss://`` or ``tcp://host:port``; raise RelayError on failure."""
    scheme = urlsplit(addr).scheme
    try:
        async with asyncio.timeout(timeout):
            if scheme in ("ws", "wss"):
                ws = await ws_connect(
                    addr,
                    max_size=_WS_LIMIT,
                    compression=None,
                    ping_interval=None,  # wkproto has its own PING/PONG
                    close_timeout=2,
                )
                return _WebSocketLink(ws)
            if scheme == "tcp":
                parts = urlsplit(addr)
                if parts.hostname is None or parts.port is None:
                    raise RelayError(f"tcp address needs a host and a port: {addr!r}")
                reader, writer = await asyncio.open_connection(parts.hostname, parts.port)
                return _TcpLink(reader, writer)
    except TimeoutError:
        raise RelayTimeoutError(f"cannot reach wukongim at {addr}: timed out") from None
    except (OSError, InvalidHandshake, InvalidURI) as exc:
        raise RelayError(f"cannot reach wukongim at {addr}: {exc}") from None
    raise RelayError(f"unsupported wukongim address {addr!r}: use ws://, wss:// or tcp://")


# ---------------------------------------------------------------------------------------------
# one session


class ImSession:
    """One authenticated wkproto connection. Open it with :meth:`open`.

    Received messages come out of :meth:`messages` (an async iterator that ends when the session
    closes) and must be acknowledged with :meth:`ack`. :attr:`error` says why a closed session
    ended (``None`` after a local :meth:`close`).
    """

    def __init__(
        self,
        link: _Link,
        options: ClientOptions,
        parser: FrameParser,
        connack: ConnackPacket,
        cipher: SessionCipher | None,
        early: list[Packet],
    ) -> None:
        self.options = options
        self.version = parser.version
        self.node_id = connack.node_id
        self.time_diff = connack.time_diff
        self.error: RelayError | None = None
        self._link = link
        self._parser = parser
        self._cipher = cipher
        self._seq = 0
        self._pending: dict[int, asyncio.Future[SendackPacket]] = {}
        self._incoming: asyncio.Queue[Message | None] = asyncio.Queue()
        self._write_lock = asyncio.Lock()
        self._pong = asyncio.Event()
        self._closed = asyncio.Event()
        self._tasks = [
            asyncio.create_task(self._read_loop(early), name="wukongim-reader"),
            asyncio.create_task(self._ping_loop(), name="wukongim-heartbeat"),
        ]

    @classmethod
    async def open(cls, addr: str, options: ClientOptions) -> ImSession:
        """Connect to ``addr`` and log in; raise RelayAuthError, RelayTimeoutError or RelayError.

        A connection closed before CONNACK is a plain :class:`RelayError` whose ``__cause__`` is
        an :class:`EOFError` (the server may close there for reasons other than the token).
        """
        link = await _open_link(addr, options.timers.connect_timeout)
        return await cls._login(link, addr, options)

    @classmethod
    async def _login(cls, link: _Link, addr: str, options: ClientOptions) -> ImSession:
        try:
            return await cls._handshake(link, addr, options)
        except BaseException:
            await link.close()
            raise

    @classmethod
    async def _handshake(cls, link: _Link, addr: str, options: ClientOptions) -> ImSession:
        private_key = wkcrypto.generate_private_key()
        connect = ConnectPacket(
            version=options.protocol_version,
            device_flag=options.device_flag,
            device_id=options.device_id,
            uid=options.uid,
            token=options.token,
            client_timestamp=int(time.time() * 1000),
            client_key=wkcrypto.public_key_b64(private_key),
        )
        parser = FrameParser(options.protocol_version)
        who = f"uid {options.uid!r} (device flag {options.device_flag})"
        try:
            async with asyncio.timeout(options.timers.connect_timeout):
                await link.send(wkproto.encode(connect, options.protocol_version))
                packets: list[Packet] = []
                while not packets:
                    packets = _feed(parser, link, await link.recv())
        except TimeoutError:  # before OSError, of which it is a subclass
            raise RelayTimeoutError(
                f"no CONNACK from {addr} within {options.timers.connect_timeout:g}s for {who}; "
                "wukongim v2 stays silent when it refuses a token"
            ) from None
        except (OSError, ConnectionClosed) as exc:
            raise RelayError(f"wukongim connection lost during login: {exc}") from None
        except EOFError as exc:
            raise RelayError(
                f"wukongim closed the connection before CONNACK ({exc}) for {who}: an idle limit, a "
                "restart or a refused token (v2.2.5 sends no CONNACK on a bad token)"
            ) from exc
        first, rest = packets[0], packets[1:]
        if isinstance(first, DisconnectPacket):
            raise _reason_error("wukongim refused the login", first.reason_code, first.reason)
        if not isinstance(first, ConnackPacket):
            raise RelayProtocolError(f"expected CONNACK, got {type(first).__name__}")
        if first.reason_code != ReasonCode.SUCCESS:
            raise _reason_error(f"wukongim refused the login of {who}", first.reason_code)
        if parser.version < wkproto.OLDEST_VERSION:
            raise RelayProtocolError(
                f"server speaks wkproto version {parser.version}; version {wkproto.OLDEST_VERSION} or later is needed"
            )
        cipher = (
            SessionCipher.from_connack(private_key, first.server_key, first.salt)
            if first.server_key
            else None  # the server runs with encryption disabled
        )
        session = cls(link, options, parser, first, cipher, rest)
        log.info("connected to wukongim %s as %s, protocol %d", addr, who, session.version)
        return session

    # -- sending -------------------------------------------------------------------------------

    async def send(
        self,
        channel_id: str,
        channel_type: int,
        payload: bytes,
        *,
        client_msg_no: str | None = None,
        flags: Flags = Flags.RED_DOT,
    ) -> SendAck:
        """Send one message and wait for its SENDACK; raise RelayError if it is refused."""
        acked = await self.submit(channel_id, channel_type, payload, client_msg_no=client_msg_no, flags=flags)
        return await acked

    async def submit(
        self,
        channel_id: str,
        channel_type: int,
        payload: bytes,
        *,
        client_msg_no: str | None = None,
        flags: Flags = Flags.RED_DOT,
    ) -> Coroutine[None, None, SendAck]:
        """Write one message now, after the ones submitted before it, without waiting for their
        SENDACKs (each names the message it answers by clientSeq, and the server keeps a
        connection's messages in order). Returns what waits for this message's SENDACK: await it,
        or close it. It raises RelayError if the message is refused, or has no SENDACK within
        ``send_timeout`` of being written; this call raises RelayError if it cannot be written."""
        if self._closed.is_set():
            raise self.error or RelayError("wukongim session is closed")
        self._seq = self._seq % 0xFFFFFFFF + 1
        seq = self._seq
        client_msg_no = client_msg_no or uuid.uuid4().hex
        body = self._cipher.encrypt(payload) if self._cipher else payload
        packet = SendPacket(seq, client_msg_no, channel_id, channel_type, body, flags=flags)
        if self._cipher:
            packet = wkcrypto.signed(self._cipher, packet)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[SendackPacket] = loop.create_future()
        self._pending[seq] = future
        try:
            await self._write(packet)
        except BaseException:
            self._pending.pop(seq, None)
            raise
        return self._acked(seq, future, loop.time() + self.options.timers.send_timeout, client_msg_no, channel_id)

    async def _acked(
        self, seq: int, future: asyncio.Future[SendackPacket], deadline: float, client_msg_no: str, channel_id: str
    ) -> SendAck:
        """The SENDACK of the message written as ``seq``, by ``deadline`` (loop time)."""
        try:
            async with asyncio.timeout_at(deadline):
                ack = await future
        except TimeoutError:
            raise RelayTimeoutError(
                f"no SENDACK for message {client_msg_no} to {channel_id!r} within {self.options.timers.send_timeout:g}s"
            ) from None
        finally:
            self._pending.pop(seq, None)
        if ack.reason_code != ReasonCode.SUCCESS:
            raise _reason_error(f"wukongim refused the message to {channel_id!r}", ack.reason_code)
        return SendAck(ack.message_id, ack.message_seq, client_msg_no)

    async def ack(self, message: Message) -> None:
        """Send the RECVACK for ``message``, echoing its header flags as the SDKs do.

        Does nothing on a closed session; raises RelayError (and closes the session) if the
        connection is lost while writing.
        """
        if not self._closed.is_set():
            flags = message.flags & _ACK_FLAGS
            await self._write(RecvackPacket(message.message_id, message.message_seq, flags))

    async def _write(self, packet: Packet) -> None:
        async with self._write_lock:
            try:
                await self._link.send(wkproto.encode(packet, self.version))
            except (OSError, ConnectionClosed) as exc:
                error = RelayError(f"wukongim connection lost while sending: {exc}")
                await self._shutdown(error)
                raise error from None

    # -- receiving -----------------------------------------------------------------------------

    async def messages(self) -> AsyncIterator[Message]:
        """Yield received messages until the session closes."""
        while (message := await self._incoming.get()) is not None:
            yield message

    async def wait_closed(self) -> RelayError | None:
        """Wait until the session is closed; return why (``None`` after a local close)."""
        await self._closed.wait()
        return self.error

    async def _read_loop(self, early: list[Packet]) -> None:
        try:
            packets = early  # frames that arrived in the same chunk as the CONNACK
            while True:
                for packet in packets:
                    self._dispatch(packet)
                packets = _feed(self._parser, self._link, await self._link.recv())
        except EOFError as exc:
            partial = f" in the middle of a frame ({self._parser.pending} bytes)" if self._parser.pending else ""
            await self._shutdown(RelayError(f"wukongim connection lost{partial}: {exc}"))
        except RelayError as exc:
            await self._shutdown(exc)
        except OSError as exc:
            await self._shutdown(RelayError(f"wukongim connection lost: {exc}"))

    def _dispatch(self, packet: Packet) -> None:
        if isinstance(packet, SendackPacket):
            future = self._pending.get(packet.client_seq)
            if future is not None and not future.done():
                future.set_result(packet)
            else:
                log.debug("sendack for unknown clientSeq %d", packet.client_seq)
        elif isinstance(packet, RecvPacket):
            self._incoming.put_nowait(self._open_recv(packet))
        elif isinstance(packet, PongPacket):
            self._pong.set()
        elif isinstance(packet, DisconnectPacket):
            raise _reason_error("wukongim disconnected us", packet.reason_code, packet.reason)
        elif isinstance(packet, ConnackPacket):
            raise RelayProtocolError("unexpected second CONNACK")
        else:
            log.debug("ignoring %s from wukongim", type(packet).__name__)

    def _open_recv(self, packet: RecvPacket) -> Message:
        payload = packet.payload
        if self._cipher is not None:
            wkcrypto.check_msg_key(self._cipher, packet)
            payload = self._cipher.decrypt(payload)
        return Message(
            message_id=packet.message_id,
            message_seq=packet.message_seq,
            client_msg_no=packet.client_msg_no,
            from_uid=packet.from_uid,
            channel_id=packet.channel_id,
            channel_type=packet.channel_type,
            timestamp=packet.timestamp,
            payload=payload,
            flags=packet.flags,
        )

    async def _ping_loop(self) -> None:
        interval, timeout = self.options.timers.ping_interval, self.options.timers.pong_timeout
        while True:
            await asyncio.sleep(interval)
            self._pong.clear()
            try:
                await self._write(PingPacket())
            except RelayError:
                return  # _write has closed the session
            try:
                async with asyncio.timeout(timeout):
                    await self._pong.wait()
            except TimeoutError:
                await self._shutdown(RelayTimeoutError(f"wukongim did not answer PING within {timeout:g}s"))
                return

    # -- closing -------------------------------------------------------------------------------

    async def close(self) -> None:
        """Close the connection; pending sends fail, :meth:`messages` ends."""
        await self._shutdown(None)

    async def _shutdown(self, error: RelayError | None) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        self.error = error
        if error is not None:
            log.warning("%s", error)
        failure = error or RelayError("wukongim session closed")
        for future in self._pending.values():
            if not future.done():
                future.set_exception(failure)
        self._incoming.put_nowait(None)
        current = asyncio.current_task()
        for task in self._tasks:
            if task is not current:
                task.cancel()
        with contextlib.suppress(Exception):
            await self._link.close()


def _feed(parser: FrameParser, link: _Link, data: bytes) -> list[Packet]:
    packets = parser.feed(data)
    if link.framed and parser.pending:
        raise RelayProtocolError(f"truncated frame: a websocket message left {parser.pending} bytes of a partial frame")
    return packets


def _reason_error(context: str, code: int, detail: str = "") -> RelayError:
    text = f"{context}: {wkproto.describe_reason(code)}" + (f": {detail}" if detail else "")
    cls = RelayAuthError if code in _AUTH_REASONS else RelayError
    return cls(text, reason_code=code)


# ---------------------------------------------------------------------------------------------
# the reconnecting client


MessageHandler = Callable[[Message], Awaitable[None]]
StateHandler = Callable[[bool], Awaitable[None]]
AddressSource = str | Callable[[], Awaitable[str]]


class WuKongIMClient:
    """Keeps an :class:`ImSession` alive and feeds received messages to ``on_message``.

    ``addr`` is a fixed address or an async callable asked before every connection attempt
    (e.g. WuKongIM's ``/route``). Each message is acknowledged after ``on_message`` returns (or
    raises: a message that breaks the handler is logged, not re-delivered forever). Login refusals
    and DISCONNECT (kicked, banned) end :meth:`run` with the error; everything else is retried
    with exponential backoff.
    """

    def __init__(
        self,
        options: ClientOptions,
        addr: AddressSource,
        on_message: MessageHandler,
        *,
        on_state: StateHandler | None = None,
    ) -> None:
        self.options = options
        self._addr = addr
        self._on_message = on_message
        self._on_state = on_state
        self._session: ImSession | None = None
        self._connected = asyncio.Event()
        self._stopping = asyncio.Event()

    @property
    def session(self) -> ImSession | None:
        """The live session, if connected."""
        return self._session if self._connected.is_set() else None

    async def wait_connected(self) -> ImSession:
        """Wait until a session is up and return it."""
        while True:
            await self._connected.wait()
            if self._session is not None:
                return self._session

    async def send(
        self, channel_id: str, channel_type: int, payload: bytes, *, client_msg_no: str | None = None
    ) -> SendAck:
        """Send through the live session, waiting up to ``send_timeout`` for one to come up."""
        acked = await self.submit(channel_id, channel_type, payload, client_msg_no=client_msg_no)
        return await acked

    async def submit(
        self, channel_id: str, channel_type: int, payload: bytes, *, client_msg_no: str | None = None
    ) -> Coroutine[None, None, SendAck]:
        """:meth:`ImSession.submit` on the live session, waiting up to ``send_timeout`` for one to come up."""
        try:
            async with asyncio.timeout(self.options.timers.send_timeout):
                session = await self.wait_connected()
        except TimeoutError:
            raise RelayTimeoutError(
                f"not connected to wukongim within {self.options.timers.send_timeout:g}s; "
                f"message to {channel_id!r} not sent"
            ) from None
        return await session.submit(channel_id, channel_type, payload, client_msg_no=client_msg_no)

    async def run(self) -> None:
        """Connect, deliver messages and reconnect until :meth:`close`; raise on fatal errors.

        Fatal are a login refused with a reason code, :data:`LOGIN_CLOSES_REFUSED` late closes
        before CONNACK in a row, and a DISCONNECT (kicked, banned); every other failure, at any
        point, is logged and followed by a reconnection.
        """
        failures = 0
        late_closes = 0  # closes before CONNACK in a row, each long enough after CONNECT
        loop = asyncio.get_running_loop()
        while not self._stopping.is_set():
            connect_sent = loop.time()
            try:
                addr = self._addr if isinstance(self._addr, str) else await self._addr()
                link = await _open_link(addr, self.options.timers.connect_timeout)
                connect_sent = loop.time()
                session = await ImSession._login(link, addr, self.options)
            except RelayAuthError:
                raise
            except RelayError as exc:
                if isinstance(exc.__cause__, EOFError):
                    late = loop.time() - connect_sent >= self.options.timers.login_refused_after
                    late_closes = late_closes + 1 if late else 0
                    if late_closes >= LOGIN_CLOSES_REFUSED:
                        raise self._refused(late_closes) from exc
                log.warning("%s", exc)
                failures += 1
                await self._backoff(failures)
                continue
            failures = late_closes = 0
            try:
                error = await self._serve(session)
            except TransportError as exc:  # e.g. from on_state; the session is closed by now
                log.warning("wukongim session ended: %s", exc)
                error = None
            if error is not None and error.reason_code is not None:
                raise error  # DISCONNECT from the server: kicked or banned; do not fight it
            if not self._stopping.is_set():
                await self._backoff(1)

    def _refused(self, closes: int) -> RelayAuthError:
        after = self.options.timers.login_refused_after
        who = f"uid {self.options.uid!r} (device flag {self.options.device_flag})"
        return RelayAuthError(
            f"wukongim closed the connection before CONNACK {closes} times in a row, each {after:g}s or "
            f"more after CONNECT: the token for {who} was refused (v2 servers send no CONNACK on a bad "
            "token and drop the idle connection)"
        )

    async def _serve(self, session: ImSession) -> RelayError | None:
        self._session = session
        self._connected.set()
        if self._stopping.is_set():
            await session.close()
        try:
            if self._on_state is not None:
                await self._on_state(True)
            async for message in session.messages():
                try:
                    await self._on_message(message)
                except Exception:
                    log.exception("handler failed on wukongim message %d", message.message_id)
                try:
                    await session.ack(message)
                except RelayError as exc:  # the connection went while we handled the message:
                    log.info("no RECVACK for wukongim message %d: %s", message.message_id, exc)
                    # the session is closed now, messages() ends, and the server pushes it again
        finally:
            self._connected.clear()
            self._session = None
            await session.close()
            if self._on_state is not None:
                await self._on_state(False)
        return session.error

    async def _backoff(self, failures: int) -> None:
        timers = self.options.timers
        high = min(timers.reconnect_max, timers.reconnect_min * 2 ** (failures - 1))
        delay = random.uniform(high / 2, high)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._stopping.wait()

    async def close(self) -> None:
        """Stop reconnecting and close the live session; :meth:`run` returns."""
        self._stopping.set()
        if self._session is not None:
            await self._session.close()
