"""A protocol-faithful fake WuKongIM server for tests (wkproto over WebSocket and TCP, plus HTTP).

It follows WuKongIM v2.2.5 (``internal/user/handler``, WuKongIMGoProto v1.2.3) where the relay
and the official JS SDK can tell the difference:

* CONNECT: token checked per (uid, device flag) when ``token_auth`` is on; the version is capped
  at 5, CONNACK carries the server version only when the client asked for more than 3 and a node
  id from version 4; X25519 + ``md5hex(base64(secret))[:16]`` key and a 16-character salt. A bad
  token gets, as v2.2.5, no CONNACK and the connection closed ``bad_token_close_after`` seconds
  later (``bad_token="silent"``; 4 s, the server's idle limit after CONNECT; ``None`` never
  closes), or at once (``"close"``), or CONNACK reason 2 (``"connack"``, as v3).
  :attr:`close_before_connack` closes the next logins right after CONNECT whatever the token
  (what an idle limit, a failed token lookup or a restart looks like to the client).
* SEND: msgKey verified and payload decrypted, else SENDACK reason 9; person channels are
  routed to the target uid (seen there with ``channel_id`` = the sender) and copied to the
  sender's other connections with RedDot cleared, never back to the sending connection; SENDACK
  echoes ``clientSeq`` and the SEND's header flags (and, with ``v3_sendack``, the clientMsgNo
  that v3 appends).
* RECV is encrypted and signed per recipient connection, with version-dependent fields and the
  setting byte (with streamNo and topic) copied from the SEND, as v2.2.5 does; every
  RECVACK is recorded and unacknowledged messages can be re-pushed (:meth:`redeliver`).
* HTTP: ``/route``, ``/user/token``, ``/message/send``, ``/channel``, ``/channel/subscriber_add``,
  ``/channel/messagesync`` (pull up, or the last messages) and ``/health``; with ``manager_token``
  set every call needs the ``token`` header, as the real API middleware does.

Tests watch it through :attr:`messages`, :attr:`recvacks`, :attr:`http_calls` and
:meth:`wait_until`, and break it on purpose with :meth:`inject`, :meth:`drop`, :meth:`kick`, :attr:`lose_pushes`,
:attr:`connect_reasons`, :attr:`send_reasons`, :attr:`connack_override`, :attr:`answer_sends`
and :attr:`answer_pings`. :class:`JsSdkApp` runs the official JS SDK against it (``tests/js/app.mjs``).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from lineup_plugin.errors import RelayProtocolError
from lineup_plugin.transports.wukongim import crypto as wkcrypto
from lineup_plugin.transports.wukongim import proto as wkproto
from lineup_plugin.transports.wukongim.client import ImSession
from lineup_plugin.transports.wukongim.crypto import SessionCipher
from lineup_plugin.transports.wukongim.proto import (
    ChannelType,
    ConnackPacket,
    ConnectPacket,
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
    Setting,
)

NODE_ID = 1001


@dataclass
class StoredMessage:
    """A message the fake accepted (payload in clear)."""

    message_id: int
    message_seq: int
    client_msg_no: str
    from_uid: str
    channel_id: str
    channel_type: int
    payload: bytes
    timestamp: int
    flags: Flags
    setting: Setting = Setting.NONE
    stream_no: str = ""
    topic: str = ""


@dataclass(frozen=True)
class RecvAck:
    """A RECVACK the fake received."""

    uid: str
    device_id: str
    message_id: int
    message_seq: int
    flags: Flags


@dataclass
class FakeConnection:
    """One client connection to the fake."""

    server: FakeWuKongIM
    write: Callable[[bytes], Any]
    abort: Callable[[], Any]
    framed: bool
    parser: FrameParser = field(default_factory=FrameParser)
    uid: str = ""
    device_id: str = ""
    device_flag: int = 0
    version: int = wkproto.LATEST_VERSION
    cipher: SessionCipher | None = None
    authed: bool = False
    unacked: dict[int, bytes] = field(default_factory=dict)

    async def send(self, packet: Packet) -> None:
        """Encode ``packet`` at this connection's version and write it as one frame."""
        await self.write(wkproto.encode(packet, self.version))

    async def feed(self, data: bytes) -> None:
        """Handle bytes from the client."""
        for packet in self.parser.feed(data):
            await self.server._on_packet(self, packet)


class FakeWuKongIM:
    """An in-process WuKongIM stand-in listening on 127.0.0.1 (WS, TCP and HTTP on port 0)."""

    def __init__(
        self,
        *,
        token_auth: bool = False,
        bad_token: Literal["silent", "close", "connack"] = "silent",
        bad_token_close_after: float | None = 4.0,
        encryption: bool = True,
        manager_token: str | None = None,
        max_version: int = wkproto.LATEST_VERSION,
        v3_sendack: bool = False,
    ) -> None:
        self.token_auth = token_auth
        self.bad_token = bad_token
        self.bad_token_close_after = bad_token_close_after
        self.close_before_connack = 0
        self.connects = 0  # CONNECT packets received, accepted or not
        self._timers: list[asyncio.TimerHandle] = []
        self.encryption = encryption
        self.manager_token = manager_token
        self.max_version = max_version
        self.v3_sendack = v3_sendack
        self.tokens: dict[tuple[str, int], str] = {}
        self.groups: dict[str, set[str]] = {}
        self.connect_reasons: dict[str, int] = {}
        self.send_reasons: dict[str, int] = {}
        self.answer_pings = True
        self.answer_sends = True
        #: per uid, how many of the next pushes to it are lost (stored, never pushed: a live link's loss)
        self.lose_pushes: dict[str, int] = {}
        #: per uid, seconds its SENDACKs take to come back (a client that far from the server); the
        #: message is stored and pushed at once
        self.ack_delays: dict[str, float] = {}
        self.unanswered: list[SendPacket] = []
        self.connack_override: bytes | None = None
        self.pings = 0
        self.connections: list[FakeConnection] = []
        self.messages: list[StoredMessage] = []
        self.recvacks: list[RecvAck] = []
        self.http_calls: list[tuple[str, str, Any]] = []
        self.logins: list[tuple[str, int, int]] = []  # uid, device flag, negotiated version
        self._ids = itertools.count(1_900_000_000_000_000_001)
        self._seqs: dict[tuple[str, int], int] = {}
        self._changed = asyncio.Condition()
        self._ws: Server | None = None
        self._tcp: asyncio.Server | None = None
        self._http: asyncio.Server | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    async def __aenter__(self) -> FakeWuKongIM:
        self._ws = await serve(self._serve_ws, "127.0.0.1", 0, compression=None, ping_interval=None, max_size=2**21)
        self._tcp = await asyncio.start_server(self._serve_tcp, "127.0.0.1", 0)
        self._http = await asyncio.start_server(self._serve_http, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        for timer in self._timers:
            timer.cancel()
        for conn in list(self.connections):
            await conn.abort()
        for server in (self._ws, self._tcp, self._http):
            if server is not None:
                server.close()
        if self._ws is not None:
            await self._ws.wait_closed()

    @staticmethod
    def _port(server: Server | asyncio.Server | None) -> int:
        assert server is not None, "the fake is not started"
        port: int = next(iter(server.sockets)).getsockname()[1]
        return port

    @property
    def ws_url(self) -> str:
        """``ws://127.0.0.1:<port>``."""
        return f"ws://127.0.0.1:{self._port(self._ws)}"

    @property
    def tcp_url(self) -> str:
        """``tcp://127.0.0.1:<port>``."""
        return f"tcp://127.0.0.1:{self._port(self._tcp)}"

    @property
    def api_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self._port(self._http)}"

    # -- observation -------------------------------------------------------------------------

    async def wait_until(self, predicate: Callable[[], object]) -> None:
        """Wait until ``predicate()`` is true; it is re-checked on every change of the fake."""
        async with self._changed:
            await self._changed.wait_for(predicate)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()

    def online(self, uid: str) -> list[FakeConnection]:
        """The authenticated connections of ``uid``."""
        return [c for c in self.connections if c.authed and c.uid == uid]

    def messages_from(self, uid: str) -> list[StoredMessage]:
        """Accepted messages sent by ``uid``."""
        return [m for m in self.messages if m.from_uid == uid]

    # -- sabotage ----------------------------------------------------------------------------

    async def inject(self, uid: str, data: bytes) -> None:
        """Write raw ``data`` to every connection of ``uid`` (for bad-input tests)."""
        for conn in self.online(uid):
            await conn.write(data)

    async def drop(self, uid: str) -> None:
        """Cut every connection of ``uid`` without a word."""
        for conn in self.online(uid):
            await conn.abort()

    async def kick(self, uid: str, reason_code: int = ReasonCode.CONNECT_KICK, reason: str = "") -> None:
        """Send DISCONNECT to every connection of ``uid``."""
        for conn in self.online(uid):
            await conn.send(DisconnectPacket(reason_code, reason))

    async def resend(self, stored: StoredMessage, uid: str) -> None:
        """Push ``stored`` to ``uid`` again, same message id (what the server's retry looks like)."""
        channel_id = stored.from_uid if stored.channel_type == ChannelType.PERSON else stored.channel_id
        for conn in self.online(uid):
            await self._push(conn, stored, channel_id, stored.flags)

    async def redeliver(self, uid: str) -> int:
        """Re-push every unacknowledged RECV of ``uid`` (the server's messageRetry); returns how many."""
        count = 0
        for conn in self.online(uid):
            for frame in list(conn.unacked.values()):
                await conn.write(frame)
                count += 1
        return count

    # -- wkproto -----------------------------------------------------------------------------

    async def _serve_ws(self, ws: ServerConnection) -> None:
        async def write(data: bytes) -> None:
            with contextlib.suppress(ConnectionClosed):
                await ws.send(data)

        async def abort() -> None:
            ws.transport.abort()

        conn = FakeConnection(self, write, abort, framed=True)
        with contextlib.suppress(ConnectionClosed):
            async for data in ws:
                if isinstance(data, str) or not await self._feed(conn, data):
                    break
        await self._gone(conn)

    async def _serve_tcp(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async def write(data: bytes) -> None:
            writer.write(data)
            with contextlib.suppress(OSError):
                await writer.drain()

        async def abort() -> None:
            writer.transport.abort()

        conn = FakeConnection(self, write, abort, framed=False)
        with contextlib.suppress(OSError):
            while data := await reader.read(65536):
                if not await self._feed(conn, data):
                    break
        writer.close()
        await self._gone(conn)

    async def _feed(self, conn: FakeConnection, data: bytes) -> bool:
        try:
            await conn.feed(data)
        except RelayProtocolError:
            return False  # the real server drops a connection that sends garbage
        return not (conn.framed and conn.parser.pending)

    async def _gone(self, conn: FakeConnection) -> None:
        if conn in self.connections:
            self.connections.remove(conn)
        await self._notify()

    async def _on_packet(self, conn: FakeConnection, packet: Packet) -> None:
        if isinstance(packet, ConnectPacket):
            await self._on_connect(conn, packet)
        elif not conn.authed:
            await conn.abort()
        elif isinstance(packet, SendPacket):
            await self._on_send(conn, packet)
        elif isinstance(packet, RecvackPacket):
            conn.unacked.pop(packet.message_id, None)
            self.recvacks.append(RecvAck(conn.uid, conn.device_id, packet.message_id, packet.message_seq, packet.flags))
        elif isinstance(packet, PingPacket):
            self.pings += 1
            if self.answer_pings:
                await conn.send(PongPacket())
        await self._notify()

    async def _on_connect(self, conn: FakeConnection, packet: ConnectPacket) -> None:
        conn.uid, conn.device_id, conn.device_flag = packet.uid, packet.device_id, packet.device_flag
        conn.version = min(packet.version, self.max_version)
        conn.parser.version = conn.version
        server_version = conn.version if packet.version > 3 else None
        self.connects += 1
        if self.close_before_connack > 0:
            self.close_before_connack -= 1
            await conn.abort()
            return
        if self.token_auth and self.tokens.get((packet.uid, packet.device_flag)) != packet.token:
            if self.bad_token == "connack":
                await conn.send(ConnackPacket(0, ReasonCode.AUTH_FAIL, server_version=server_version))
            elif self.bad_token == "close":
                await conn.abort()
            elif self.bad_token_close_after is not None:  # v2.2.5: no answer, idle close 4 s later
                loop = asyncio.get_running_loop()
                self._timers.append(loop.call_later(self.bad_token_close_after, lambda: loop.create_task(conn.abort())))
            return
        reason = self.connect_reasons.get(packet.uid, ReasonCode.SUCCESS)
        if self.encryption and not packet.client_key:
            reason = ReasonCode.CLIENT_KEY_IS_EMPTY
        if reason != ReasonCode.SUCCESS:
            await conn.send(ConnackPacket(0, reason, server_version=server_version))
            return
        server_key = salt = ""
        if self.encryption:
            private_key = wkcrypto.generate_private_key()
            salt = wkcrypto.random_salt()
            conn.cipher = SessionCipher(wkcrypto.derive_aes_key(private_key, packet.client_key), salt.encode())
            server_key = wkcrypto.public_key_b64(private_key)
        time_diff = int(time.time() * 1000) - packet.client_timestamp
        conn.authed = True
        self.connections.append(conn)
        self.logins.append((conn.uid, conn.device_flag, conn.version))
        if self.connack_override is not None:
            await conn.write(self.connack_override)
            return
        await conn.send(ConnackPacket(time_diff, ReasonCode.SUCCESS, server_key, salt, server_version, NODE_ID))

    async def _on_send(self, conn: FakeConnection, packet: SendPacket) -> None:
        if not self.answer_sends:
            self.unanswered.append(packet)
            return
        reason = self.send_reasons.pop(conn.uid, ReasonCode.SUCCESS)
        payload = packet.payload
        if reason == ReasonCode.SUCCESS and conn.cipher is not None:
            try:
                wkcrypto.check_msg_key(conn.cipher, packet)
                payload = conn.cipher.decrypt(packet.payload)
            except RelayProtocolError:
                reason = ReasonCode.PAYLOAD_DECODE_ERROR
        if reason == ReasonCode.SUCCESS:
            reason = self._send_permission(conn.uid, packet.channel_id, packet.channel_type)
        if reason != ReasonCode.SUCCESS:
            await conn.send(SendackPacket(0, packet.client_seq, 0, reason, packet.flags))
            return
        stored = self._store(
            conn.uid, packet.channel_id, packet.channel_type, payload, packet.client_msg_no, packet.flags
        )
        # v2.2.5 copies the sender's setting byte into the RECVs it pushes (event_pushonline.go)
        stored.setting, stored.stream_no, stored.topic = packet.setting, packet.stream_no, packet.topic
        echo = packet.client_msg_no if self.v3_sendack else ""  # v3 appends it, v2 never
        ack = SendackPacket(
            stored.message_id, packet.client_seq, stored.message_seq, ReasonCode.SUCCESS, packet.flags, echo
        )
        delay = self.ack_delays.get(conn.uid, 0.0)
        if delay > 0:
            loop = asyncio.get_running_loop()
            self._timers.append(loop.call_later(delay, lambda: loop.create_task(conn.send(ack))))
        else:
            await conn.send(ack)
        await self._fan_out(stored, exclude=conn)

    def _send_permission(self, uid: str, channel_id: str, channel_type: int) -> int:
        if channel_type == ChannelType.GROUP:
            if channel_id not in self.groups:
                return ReasonCode.CHANNEL_NOT_EXIST
            if uid not in self.groups[channel_id]:
                return ReasonCode.SUBSCRIBER_NOT_EXIST
        elif channel_type != ChannelType.PERSON:
            return ReasonCode.NOT_SUPPORT_CHANNEL_TYPE
        return ReasonCode.SUCCESS

    def _store(
        self, from_uid: str, channel_id: str, channel_type: int, payload: bytes, client_msg_no: str, flags: Flags
    ) -> StoredMessage:
        # Person channels share one sequence per pair of users (the server's "a@b" channel).
        key = ("@".join(sorted((from_uid, channel_id))), channel_type)
        if channel_type != ChannelType.PERSON:
            key = (channel_id, channel_type)
        self._seqs[key] = self._seqs.get(key, 0) + 1
        stored = StoredMessage(
            message_id=next(self._ids),
            message_seq=self._seqs[key],
            client_msg_no=client_msg_no,
            from_uid=from_uid,
            channel_id=channel_id,
            channel_type=channel_type,
            payload=payload,
            timestamp=int(time.time()),
            flags=flags,
        )
        self.messages.append(stored)
        return stored

    async def _fan_out(self, stored: StoredMessage, *, exclude: FakeConnection | None) -> None:
        if stored.channel_type == ChannelType.PERSON:
            targets = [(c, stored.from_uid, stored.flags) for c in self.online(stored.channel_id)]
            own = stored.flags & ~Flags.RED_DOT  # the sender's other devices: no red dot
            targets += [(c, stored.channel_id, own) for c in self.online(stored.from_uid)]
        else:
            members = self.groups.get(stored.channel_id, set())
            targets = [(c, stored.channel_id, stored.flags) for c in self.connections if c.authed and c.uid in members]
        for conn, channel_id, flags in targets:
            if self.lose_pushes.get(conn.uid, 0) > 0:
                self.lose_pushes[conn.uid] -= 1
                continue
            if conn is not exclude:
                await self._push(conn, stored, channel_id, flags)

    async def _push(self, conn: FakeConnection, stored: StoredMessage, channel_id: str, flags: Flags) -> None:
        payload = conn.cipher.encrypt(stored.payload) if conn.cipher else stored.payload
        packet = RecvPacket(
            from_uid=stored.from_uid,
            channel_id=channel_id,
            channel_type=stored.channel_type,
            client_msg_no=stored.client_msg_no,
            message_id=stored.message_id,
            message_seq=stored.message_seq,
            timestamp=stored.timestamp,
            payload=payload,
            setting=stored.setting,
            stream_no=stored.stream_no,
            stream_id=stored.message_id,  # as v2.2.5 fills it
            topic=stored.topic,
            flags=Flags(flags),
        )
        if conn.cipher is not None:
            packet = wkcrypto.signed(conn.cipher, packet)
        frame = wkproto.encode(packet, conn.version)
        if not flags & Flags.NO_PERSIST:
            conn.unacked[stored.message_id] = frame
        await conn.write(frame)

    async def push(
        self,
        from_uid: str,
        to_uid: str,
        payload: bytes,
        *,
        client_msg_no: str = "",
        flags: Flags = Flags.RED_DOT,
        setting: Setting = Setting.NONE,
        stream_no: str = "",
    ) -> StoredMessage:
        """Deliver a person message as if ``from_uid`` sent it (like ``POST /message/send``)."""
        stored = self._store(
            from_uid, to_uid, ChannelType.PERSON, payload, client_msg_no or f"push{time.time_ns()}", flags
        )
        stored.setting, stored.stream_no = setting, stream_no
        await self._fan_out(stored, exclude=None)
        await self._notify()
        return stored

    # -- HTTP --------------------------------------------------------------------------------

    async def _serve_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            request_line, *header_lines = head.decode("latin-1").split("\r\n")
            method, target, _ = request_line.split(" ", 2)
            headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            status, reply = await self._route_http(method, target, headers, body)
        except (asyncio.IncompleteReadError, ValueError, json.JSONDecodeError) as exc:
            status, reply = 400, {"msg": f"bad request: {exc}", "status": 400}
        data = json.dumps(reply).encode()
        writer.write(
            f"HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {len(data)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + data
        )
        with contextlib.suppress(OSError):
            await writer.drain()
        writer.close()

    async def _route_http(self, method: str, target: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        url = urlsplit(target)
        data: Any = json.loads(body) if body else {}
        self.http_calls.append((method, url.path, data))
        await self._notify()
        if self.manager_token and headers.get("token") != self.manager_token:
            return 401, {"msg": "unauthorized", "status": 401}
        route = (method, url.path)
        if route == ("GET", "/health"):
            return 200, {"status": "ok"}
        if route == ("GET", "/route"):
            assert parse_qs(url.query).get("uid"), "/route needs ?uid="
            return 200, {"tcp_addr": self.tcp_url.removeprefix("tcp://"), "ws_addr": self.ws_url, "wss_addr": ""}
        if route == ("POST", "/user/token"):
            if not data.get("uid") or not data.get("token"):
                return 400, {"msg": "uid and token must not be empty", "status": 400}
            self.tokens[(data["uid"], int(data.get("device_flag", 0)))] = data["token"]
            return 200, {"status": 200}
        if route in (("POST", "/channel"), ("POST", "/channel/subscriber_add")):
            members = self.groups.setdefault(data["channel_id"], set())
            if data.get("reset"):
                members.clear()
            members.update(data.get("subscribers") or [])
            return 200, {"status": 200}
        if route == ("POST", "/channel/messagesync"):
            return 200, self._sync(data)
        if route == ("POST", "/message/send"):
            stored = self._store(
                data.get("from_uid") or "____system",
                data["channel_id"],
                int(data["channel_type"]),
                base64.b64decode(data["payload"]),
                data.get("client_msg_no") or f"api{time.time_ns()}",
                Flags.RED_DOT if (data.get("header") or {}).get("red_dot") else Flags.NONE,
            )
            await self._fan_out(stored, exclude=None)
            return 200, {
                "status": 200,
                "data": {"message_id": stored.message_id, "client_msg_no": stored.client_msg_no},
            }
        return 404, {"msg": f"no route {method} {url.path}", "status": 404}

    def _sync(self, data: Any) -> dict[str, Any]:
        # /channel/messagesync, pull_mode 1 (up) or start=end=0 (the last `limit` messages).
        login, peer, limit = data["login_uid"], data["channel_id"], int(data.get("limit") or 100)
        start, end = int(data.get("start_message_seq") or 0), int(data.get("end_message_seq") or 0)
        pair = [m for m in self.messages if m.channel_type == 1 and {m.from_uid, m.channel_id} == {login, peer}]
        if start == 0 and end == 0:
            page = pair[-limit:]
        else:
            page = [m for m in pair if m.message_seq >= start and (end == 0 or m.message_seq < end)][:limit]
        return {
            "start_message_seq": start,
            "end_message_seq": end,
            "more": int(len(page) == limit),
            "messages": [
                {
                    "header": {"no_persist": 0, "red_dot": int(bool(m.flags & Flags.RED_DOT)), "sync_once": 0},
                    "setting": int(m.setting),
                    "message_id": m.message_id,
                    "message_idstr": str(m.message_id),
                    "client_msg_no": m.client_msg_no,
                    "message_seq": m.message_seq,
                    "from_uid": m.from_uid,
                    "channel_id": "@".join(sorted((m.from_uid, m.channel_id))),
                    "channel_type": m.channel_type,
                    "timestamp": m.timestamp,
                    "payload": base64.b64encode(m.payload).decode(),
                }
                for m in page
            ],
        }


# ---------------------------------------------------------------------------------------------
# the official JS SDK as an App user

JS_DIR = Path(__file__).resolve().parents[1] / "js"


def js_sdk_missing() -> str | None:
    """Why the JS SDK cannot run here, or None if it can."""
    if shutil.which("node") is None:
        return "node is not installed"
    if not (JS_DIR / "node_modules" / "wukongimjssdk").is_dir():
        return "tests/js/node_modules is missing: run `npm ci --prefix tests/js`"
    return None


class JsSdkApp:
    """``tests/js/app.mjs`` (wukongimjssdk 1.0.4 under Node) as a subprocess: events out, commands in."""

    def __init__(self, addr: str, uid: str, token: str = "", *args: str) -> None:
        self.argv = [addr, uid, token, *args]
        self.events: list[dict[str, Any]] = []
        self._process: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None
        self._changed = asyncio.Condition()

    async def __aenter__(self) -> JsSdkApp:
        node = shutil.which("node")
        assert node is not None
        self._process = await asyncio.create_subprocess_exec(
            node,
            "--import",
            "./wk-register.mjs",
            "app.mjs",
            *self.argv,
            cwd=JS_DIR,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._process is not None and self._reader is not None
        if self._process.returncode is None:
            self._process.kill()
        await self._process.wait()
        await self._reader

    async def _read(self) -> None:
        assert self._process is not None and self._process.stdout is not None
        async for line in self._process.stdout:
            event = json.loads(line)
            async with self._changed:
                self.events.append(event)
                self._changed.notify_all()
        async with self._changed:
            self.events.append({"event": "exit"})
            self._changed.notify_all()

    async def wait_for(
        self, event: str, where: Callable[[dict[str, Any]], bool] = lambda _: True, **fields: Any
    ) -> dict[str, Any]:
        """The first event named ``event`` whose fields include ``fields`` and that satisfies ``where``."""

        def match() -> dict[str, Any] | None:
            for item in self.events:
                if item["event"] == "exit" and event != "exit":
                    raise AssertionError(f"the JS SDK app exited; events: {self.events}")
                if item["event"] == event and all(item.get(k) == v for k, v in fields.items()) and where(item):
                    return item
            return None

        async with self._changed:
            await self._changed.wait_for(lambda: match() is not None)
        found = match()
        assert found is not None
        return found

    async def command(self, **command: Any) -> None:
        """Send one command line to the app (see tests/js/app.mjs)."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.write(json.dumps(command).encode() + b"\n")
        await self._process.stdin.drain()


# ---------------------------------------------------------------------------------------------
# breaking the client's side of a connection


class _RecvackBreaker:
    """Wraps a session's byte pipe: the first RECVACK written raises ``error`` (the connection
    "drops" exactly while a pushed message is being acknowledged); everything else passes."""

    def __init__(self, link: Any, error: BaseException) -> None:
        self.link = link
        self.error = error
        self.framed: bool = link.framed
        self.broken = False

    async def send(self, data: bytes) -> None:
        if not self.broken and data and data[0] >> 4 == wkproto.PacketType.RECVACK:
            self.broken = True
            raise self.error
        await self.link.send(data)

    async def recv(self) -> bytes:
        data: bytes = await self.link.recv()
        return data

    async def close(self) -> None:
        await self.link.close()


def break_next_recvack(session: ImSession, error: BaseException) -> None:
    """Make ``session``'s next RECVACK write fail with ``error`` (a reset, a closed WebSocket)."""
    session._link = _RecvackBreaker(session._link, error)  # fault injection
