"""WuKongIM's binary client protocol ("wkproto"), sans I/O.

Packets are frozen dataclasses; :func:`encode` turns one into the bytes of one frame and
:class:`FrameParser` turns received bytes back into packets. The crypto helpers implement the
X25519 + AES-128-CBC scheme the official SDKs use. Nothing here touches a socket.

Wire facts (WuKongIMGoProto v1.2.3; details in ``shared/reference/wukongim-protocol.md``):

* a frame is one header byte ``type << 4 | flags``, an MQTT-style varint "remaining length"
  (at most 4 bytes, at most 1 MiB) and the body; PING and PONG are the bare bytes 0x70 / 0x80;
* integers are big-endian, a string is a length and UTF-8 bytes, the payload is the rest of the
  body; the length is read as a *signed* int16 (GoProto ``Decoder.Binary``), so no string field
  may exceed 32,767 bytes;
* some fields exist only from a protocol version on (``expire`` from 3, ``nodeId`` from 4), so
  encoding and decoding take the version negotiated on CONNECT;
* the stream fields of RECV (protocol 2 to 4, setting bit STREAM) are ``u8 streamFlag, string
  streamNo, u64 streamId`` in GoProto v1.2.3, which WuKongIM v2.2.5 writes (GoProto v1.0.0 and
  wukongimjssdk 1.0.4 still read the old ``string, u32, u8``). The server copies the sender's
  setting byte into the RECVs it pushes, so a stream-flagged SEND reaches us with these fields.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass, replace

from lineup_plugin.errors import RelayProtocolError

LATEST_VERSION = 5
"""The newest wkproto version this codec speaks (WuKongIM v2 ``LatestVersion``)."""
OLDEST_VERSION = 2
"""The oldest version we accept; wukongimjssdk 1.0.4 speaks 2."""
MAX_REMAINING_LENGTH = 1024 * 1024
"""Largest body a frame may carry (the server refuses bigger ones)."""
MAX_STRING_LENGTH = 0x7FFF
"""Longest string field: the server reads string lengths as a signed int16."""


class PacketType(enum.IntEnum):
    """The frame type in the high nibble of the header byte."""

    CONNECT = 1
    CONNACK = 2
    SEND = 3
    SENDACK = 4
    RECV = 5
    RECVACK = 6
    PING = 7
    PONG = 8
    DISCONNECT = 9
    SUB = 10
    SUBACK = 11
    EVENT = 12


class Flags(enum.IntFlag):
    """Header flags in the low nibble (on CONNACK bit 0 means "has server version")."""

    NONE = 0
    NO_PERSIST = 0x01
    RED_DOT = 0x02
    SYNC_ONCE = 0x04
    DUP = 0x08


class Setting(enum.IntFlag):
    """The setting byte of SEND and RECV."""

    NONE = 0
    TOPIC = 0x08
    STREAM = 0x02
    NO_ENCRYPT = 0x10
    SIGNAL = 0x20
    RECEIPT = 0x80


class ChannelType(enum.IntEnum):
    """Channel types used by the relay (the server knows more, up to 12)."""

    PERSON = 1
    GROUP = 2


class DeviceFlag(enum.IntEnum):
    """The device class a connection logs in as; tokens are stored per (uid, device flag)."""

    APP = 0
    WEB = 1
    PC = 2


class ReasonCode(enum.IntEnum):
    """Reason codes of CONNACK, SENDACK and DISCONNECT (WuKongIMGoProto ``common.go``)."""

    UNKNOWN = 0
    SUCCESS = 1
    AUTH_FAIL = 2
    SUBSCRIBER_NOT_EXIST = 3
    IN_BLACKLIST = 4
    CHANNEL_NOT_EXIST = 5
    USER_NOT_ON_NODE = 6
    SENDER_OFFLINE = 7
    MSG_KEY_ERROR = 8
    PAYLOAD_DECODE_ERROR = 9
    FORWARD_SEND_PACKET_ERROR = 10
    NOT_ALLOW_SEND = 11
    CONNECT_KICK = 12
    NOT_IN_WHITELIST = 13
    QUERY_TOKEN_ERROR = 14
    SYSTEM_ERROR = 15
    CHANNEL_ID_ERROR = 16
    NODE_MATCH_ERROR = 17
    NODE_NOT_MATCH = 18
    BAN = 19
    NOT_SUPPORT_HEADER = 20
    CLIENT_KEY_IS_EMPTY = 21
    RATE_LIMIT = 22
    NOT_SUPPORT_CHANNEL_TYPE = 23
    DISBAND = 24
    SEND_BAN = 25


_REASON_TEXT = {
    ReasonCode.UNKNOWN: "unknown error",
    ReasonCode.SUCCESS: "success",
    ReasonCode.AUTH_FAIL: "authentication failed (wrong uid or token)",
    ReasonCode.SUBSCRIBER_NOT_EXIST: "the sender is not a subscriber of the channel",
    ReasonCode.IN_BLACKLIST: "the sender is on the channel's blacklist",
    ReasonCode.CHANNEL_NOT_EXIST: "the channel does not exist",
    ReasonCode.USER_NOT_ON_NODE: "the user is not on this server node",
    ReasonCode.SENDER_OFFLINE: "the sender is offline",
    ReasonCode.MSG_KEY_ERROR: "msgKey mismatch (the message was altered or mis-signed)",
    ReasonCode.PAYLOAD_DECODE_ERROR: "the server could not verify or decrypt the payload",
    ReasonCode.FORWARD_SEND_PACKET_ERROR: "the server failed to forward the message",
    ReasonCode.NOT_ALLOW_SEND: "sending to this channel is not allowed",
    ReasonCode.CONNECT_KICK: "kicked: the same user logged in on another device",
    ReasonCode.NOT_IN_WHITELIST: "the sender is not on the channel's whitelist",
    ReasonCode.QUERY_TOKEN_ERROR: "the server could not look up the token",
    ReasonCode.SYSTEM_ERROR: "server system error",
    ReasonCode.CHANNEL_ID_ERROR: "bad channel id",
    ReasonCode.NODE_MATCH_ERROR: "server node match error",
    ReasonCode.NODE_NOT_MATCH: "server node does not match",
    ReasonCode.BAN: "banned",
    ReasonCode.NOT_SUPPORT_HEADER: "unsupported header",
    ReasonCode.CLIENT_KEY_IS_EMPTY: "the client key is empty",
    ReasonCode.RATE_LIMIT: "rate limited",
    ReasonCode.NOT_SUPPORT_CHANNEL_TYPE: "unsupported channel type",
    ReasonCode.DISBAND: "the channel was disbanded",
    ReasonCode.SEND_BAN: "sending is banned for this user",
}


def describe_reason(code: int) -> str:
    """Return ``"<text> (reason <code>)"`` for a reason code, known or not."""
    try:
        text = _REASON_TEXT[ReasonCode(code)]
    except ValueError:
        text = "unrecognised reason"
    return f"{text} (reason {code})"


# ---------------------------------------------------------------------------------------------
# packets


@dataclass(frozen=True, slots=True)
class ConnectPacket:
    """CONNECT: the client's login, carrying its X25519 public key (``client_key``, base64)."""

    version: int
    device_flag: int
    device_id: str
    uid: str
    token: str
    client_timestamp: int
    client_key: str
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class ConnackPacket:
    """CONNACK: the login verdict, the server's public key and the AES IV (``salt``).

    ``server_version`` is sent only when the client asked for a version above 3, ``node_id``
    only from version 4.
    """

    time_diff: int
    reason_code: int
    server_key: str = ""
    salt: str = ""
    server_version: int | None = None
    node_id: int = 0
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class SendPacket:
    """SEND: a message from the client; ``payload`` is already encrypted (base64 bytes)."""

    client_seq: int
    client_msg_no: str
    channel_id: str
    channel_type: int
    payload: bytes
    msg_key: str = ""
    setting: Setting = Setting.NONE
    expire: int = 0
    stream_no: str = ""
    topic: str = ""
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class SendackPacket:
    """SENDACK: the server's verdict on the SEND with the same ``client_seq``.

    WuKongIM v3 appends the SEND's ``client_msg_no`` (a string after the reason code) when it
    has one; v2 never does.
    """

    message_id: int
    client_seq: int
    message_seq: int
    reason_code: int
    flags: Flags = Flags.NONE
    client_msg_no: str = ""


@dataclass(frozen=True, slots=True)
class RecvPacket:
    """RECV: a message pushed by the server; ``payload`` is encrypted (base64 bytes)."""

    from_uid: str
    channel_id: str
    channel_type: int
    client_msg_no: str
    message_id: int
    message_seq: int
    timestamp: int
    payload: bytes
    msg_key: str = ""
    setting: Setting = Setting.NONE
    expire: int = 0
    stream_no: str = ""
    stream_id: int = 0
    stream_flag: int = 0
    topic: str = ""
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class RecvackPacket:
    """RECVACK: the client's receipt for one RECV (echo the RECV's header flags)."""

    message_id: int
    message_seq: int
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class PingPacket:
    """PING: the single byte 0x70."""


@dataclass(frozen=True, slots=True)
class PongPacket:
    """PONG: the single byte 0x80."""


@dataclass(frozen=True, slots=True)
class DisconnectPacket:
    """DISCONNECT: the server closes the session (e.g. kicked by another login)."""

    reason_code: int
    reason: str = ""
    flags: Flags = Flags.NONE


@dataclass(frozen=True, slots=True)
class OtherPacket:
    """A valid frame of a type this client does not use (SUB, SUBACK, EVENT): body kept raw."""

    packet_type: PacketType
    body: bytes
    flags: Flags = Flags.NONE


Packet = (
    ConnectPacket
    | ConnackPacket
    | SendPacket
    | SendackPacket
    | RecvPacket
    | RecvackPacket
    | PingPacket
    | PongPacket
    | DisconnectPacket
    | OtherPacket
)


# ---------------------------------------------------------------------------------------------
# primitives


def encode_varint(value: int) -> bytes:
    """Encode a remaining length: 7 bits a byte, low bits first, 0x80 = more follows."""
    if not 0 <= value <= MAX_REMAINING_LENGTH:
        raise RelayProtocolError(f"frame body of {value} bytes exceeds {MAX_REMAINING_LENGTH}")
    out = bytearray()
    while True:
        digit, value = value & 0x7F, value >> 7
        out.append(digit | (0x80 if value else 0))
        if not value:
            return bytes(out)


def decode_varint(data: bytes | bytearray, offset: int = 0) -> tuple[int, int] | None:
    """Decode a remaining length at ``offset``; return ``(value, bytes used)``.

    Returns ``None`` when ``data`` ends before the varint does; raises on a varint longer than
    4 bytes or a value above :data:`MAX_REMAINING_LENGTH`.
    """
    value = 0
    for index in range(4):
        if offset + index >= len(data):
            return None
        digit = data[offset + index]
        value |= (digit & 0x7F) << (7 * index)
        if not digit & 0x80:
            if value > MAX_REMAINING_LENGTH:
                raise RelayProtocolError(f"frame length {value} exceeds the {MAX_REMAINING_LENGTH}-byte limit")
            return value, index + 1
    raise RelayProtocolError("frame length varint is longer than 4 bytes")


class _Writer:
    def __init__(self) -> None:
        self.buf = bytearray()

    def u8(self, value: int) -> None:
        self.buf += struct.pack(">B", value)

    def u32(self, value: int) -> None:
        self.buf += struct.pack(">I", value)

    def i32(self, value: int) -> None:
        self.buf += struct.pack(">i", value)

    def i64(self, value: int) -> None:
        self.buf += struct.pack(">q", value)

    def u64(self, value: int) -> None:
        self.buf += struct.pack(">Q", value)

    def string(self, value: str) -> None:
        raw = value.encode()
        if len(raw) > MAX_STRING_LENGTH:
            raise RelayProtocolError(f"string field of {len(raw)} bytes is too long")
        self.buf += struct.pack(">H", len(raw)) + raw

    def raw(self, value: bytes) -> None:
        self.buf += value


class _Reader:
    def __init__(self, body: bytes, what: str) -> None:
        self.body = body
        self.pos = 0
        self.what = what

    def _take(self, size: int, field: str) -> bytes:
        end = self.pos + size
        if end > len(self.body):
            raise RelayProtocolError(f"truncated {self.what}: body ends inside field {field!r}")
        chunk = self.body[self.pos : end]
        self.pos = end
        return chunk

    def _unpack(self, fmt: str, field: str) -> int:
        value: int = struct.unpack(fmt, self._take(struct.calcsize(fmt), field))[0]
        return value

    def u8(self, field: str) -> int:
        return self._unpack(">B", field)

    def u32(self, field: str) -> int:
        return self._unpack(">I", field)

    def i32(self, field: str) -> int:
        return self._unpack(">i", field)

    def i64(self, field: str) -> int:
        return self._unpack(">q", field)

    def u64(self, field: str) -> int:
        return self._unpack(">Q", field)

    def string(self, field: str) -> str:
        size = self._unpack(">h", field)  # signed, as the server reads it
        if size < 0:
            raise RelayProtocolError(f"{self.what} field {field!r} has a negative length ({size})")
        raw = self._take(size, field)
        try:
            return raw.decode()
        except UnicodeDecodeError:
            raise RelayProtocolError(f"{self.what} field {field!r} is not utf-8") from None

    def rest(self) -> bytes:
        chunk = self.body[self.pos :]
        self.pos = len(self.body)
        return chunk

    @property
    def remaining(self) -> int:
        return len(self.body) - self.pos


# ---------------------------------------------------------------------------------------------
# bodies


def _has_stream(setting: int, version: int) -> bool:
    # Stream fields exist for 2 <= version < 5 only (v5 moved streaming elsewhere).
    return bool(setting & Setting.STREAM) and 2 <= version < 5


def _encode_body(packet: Packet, version: int) -> tuple[PacketType, int, bytes]:
    w = _Writer()
    match packet:
        case ConnectPacket():
            w.u8(packet.version)
            w.u8(packet.device_flag)
            w.string(packet.device_id)
            w.string(packet.uid)
            w.string(packet.token)
            w.i64(packet.client_timestamp)
            w.string(packet.client_key)
            return PacketType.CONNECT, packet.flags, bytes(w.buf)
        case ConnackPacket():
            if packet.server_version is not None:
                w.u8(packet.server_version)
            w.i64(packet.time_diff)
            w.u8(packet.reason_code)
            w.string(packet.server_key)
            w.string(packet.salt)
            if version >= 4:
                w.u64(packet.node_id)
            has_version = 0x01 if packet.server_version is not None else 0
            return PacketType.CONNACK, has_version, bytes(w.buf)
        case SendPacket():
            w.u8(packet.setting)
            w.u32(packet.client_seq)
            w.string(packet.client_msg_no)
            if _has_stream(packet.setting, version):
                w.string(packet.stream_no)
            w.string(packet.channel_id)
            w.u8(packet.channel_type)
            if version >= 3:
                w.u32(packet.expire)
            w.string(packet.msg_key)
            if packet.setting & Setting.TOPIC:
                w.string(packet.topic)
            w.raw(packet.payload)
            return PacketType.SEND, packet.flags, bytes(w.buf)
        case SendackPacket():
            w.i64(packet.message_id)
            w.u32(packet.client_seq)
            w.u32(packet.message_seq)
            w.u8(packet.reason_code)
            if packet.client_msg_no:
                w.string(packet.client_msg_no)
            return PacketType.SENDACK, packet.flags, bytes(w.buf)
        case RecvPacket():
            w.u8(packet.setting)
            w.string(packet.msg_key)
            w.string(packet.from_uid)
            w.string(packet.channel_id)
            w.u8(packet.channel_type)
            if version >= 3:
                w.u32(packet.expire)
            w.string(packet.client_msg_no)
            if _has_stream(packet.setting, version):
                w.u8(packet.stream_flag)
                w.string(packet.stream_no)
                w.u64(packet.stream_id)
            w.i64(packet.message_id)
            w.u32(packet.message_seq)
            w.i32(packet.timestamp)
            if packet.setting & Setting.TOPIC:
                w.string(packet.topic)
            w.raw(packet.payload)
            return PacketType.RECV, packet.flags, bytes(w.buf)
        case RecvackPacket():
            w.i64(packet.message_id)
            w.u32(packet.message_seq)
            return PacketType.RECVACK, packet.flags, bytes(w.buf)
        case DisconnectPacket():
            w.u8(packet.reason_code)
            w.string(packet.reason)
            return PacketType.DISCONNECT, packet.flags, bytes(w.buf)
        case OtherPacket():
            return packet.packet_type, packet.flags, packet.body
    raise TypeError(f"cannot encode {type(packet).__name__}")  # PING/PONG handled by caller


def encode(packet: Packet, version: int = LATEST_VERSION) -> bytes:
    """Return the bytes of one frame carrying ``packet`` under protocol ``version``."""
    if isinstance(packet, PingPacket):
        return bytes([PacketType.PING << 4])
    if isinstance(packet, PongPacket):
        return bytes([PacketType.PONG << 4])
    packet_type, flags, body = _encode_body(packet, version)
    return bytes([packet_type << 4 | (flags & 0x0F)]) + encode_varint(len(body)) + body


def _decode_connack(r: _Reader, flags: int, version: int) -> ConnackPacket:
    server_version = r.u8("serverVersion") if flags & 0x01 else None
    time_diff = r.i64("timeDiff")
    reason_code = r.u8("reasonCode")
    server_key = r.string("serverKey")
    salt = r.string("salt")
    effective = min(version, server_version) if server_version is not None else version
    # nodeId follows only from version 4; a failed CONNACK may stop early, which is fine.
    node_id = r.u64("nodeId") if effective >= 4 and r.remaining >= 8 else 0
    return ConnackPacket(time_diff, reason_code, server_key, salt, server_version, node_id)


def _decode_send(r: _Reader, flags: Flags, version: int) -> SendPacket:
    setting = Setting(r.u8("setting"))
    client_seq = r.u32("clientSeq")
    client_msg_no = r.string("clientMsgNo")
    stream_no = r.string("streamNo") if _has_stream(setting, version) else ""
    channel_id = r.string("channelId")
    channel_type = r.u8("channelType")
    expire = r.u32("expire") if version >= 3 else 0
    msg_key = r.string("msgKey")
    topic = r.string("topic") if setting & Setting.TOPIC else ""
    return SendPacket(
        client_seq=client_seq,
        client_msg_no=client_msg_no,
        channel_id=channel_id,
        channel_type=channel_type,
        payload=r.rest(),
        msg_key=msg_key,
        setting=setting,
        expire=expire,
        stream_no=stream_no,
        topic=topic,
        flags=flags,
    )


def _decode_recv(r: _Reader, flags: Flags, version: int) -> RecvPacket:
    setting = Setting(r.u8("setting"))
    msg_key = r.string("msgKey")
    from_uid = r.string("fromUid")
    channel_id = r.string("channelId")
    channel_type = r.u8("channelType")
    expire = r.u32("expire") if version >= 3 else 0
    client_msg_no = r.string("clientMsgNo")
    stream_no, stream_id, stream_flag = "", 0, 0
    if _has_stream(setting, version):
        stream_flag = r.u8("streamFlag")
        stream_no = r.string("streamNo")
        stream_id = r.u64("streamId")
    message_id = r.i64("messageId")
    message_seq = r.u32("messageSeq")
    timestamp = r.i32("timestamp")
    topic = r.string("topic") if setting & Setting.TOPIC else ""
    return RecvPacket(
        from_uid=from_uid,
        channel_id=channel_id,
        channel_type=channel_type,
        client_msg_no=client_msg_no,
        message_id=message_id,
        message_seq=message_seq,
        timestamp=timestamp,
        payload=r.rest(),
        msg_key=msg_key,
        setting=setting,
        expire=expire,
        stream_no=stream_no,
        stream_id=stream_id,
        stream_flag=stream_flag,
        topic=topic,
        flags=flags,
    )


def _decode_body(packet_type: PacketType, flags: int, body: bytes, version: int) -> Packet:
    r = _Reader(body, packet_type.name)
    header = Flags(flags)
    packet: Packet
    if packet_type is PacketType.CONNECT:
        packet = ConnectPacket(
            version=r.u8("version"),
            device_flag=r.u8("deviceFlag"),
            device_id=r.string("deviceId"),
            uid=r.string("uid"),
            token=r.string("token"),
            client_timestamp=r.i64("clientTimestamp"),
            client_key=r.string("clientKey"),
            flags=header,
        )
    elif packet_type is PacketType.CONNACK:
        packet = _decode_connack(r, flags, version)
    elif packet_type is PacketType.SEND:
        return _decode_send(r, header, version)
    elif packet_type is PacketType.SENDACK:
        packet = SendackPacket(r.i64("messageId"), r.u32("clientSeq"), r.u32("messageSeq"), r.u8("reasonCode"), header)
        if r.remaining:
            packet = replace(packet, client_msg_no=r.string("clientMsgNo"))
    elif packet_type is PacketType.RECV:
        return _decode_recv(r, header, version)
    elif packet_type is PacketType.RECVACK:
        packet = RecvackPacket(r.i64("messageId"), r.u32("messageSeq"), header)
    elif packet_type is PacketType.DISCONNECT:
        packet = DisconnectPacket(r.u8("reasonCode"), r.string("reason"), header)
    else:
        return OtherPacket(packet_type, r.rest(), header)
    # Bytes after the known fields are ignored, as WuKongIMGoProto and the JS SDK do: a newer
    # server may append fields (v3 did so to SENDACK).
    return packet


def _packet_type(header: int) -> PacketType:
    try:
        return PacketType(header >> 4)
    except ValueError:
        raise RelayProtocolError(f"unknown frame type {header >> 4} (header byte {header:#04x})") from None


class FrameParser:
    """Incremental frame splitter and decoder for a byte stream (TCP) or messages (WebSocket).

    ``feed`` bytes, get back every complete packet; a partial frame stays buffered. ``version``
    starts as the version we speak and is negotiated down by the handshake itself: a CONNECT
    (seen by a server) or a CONNACK carrying a server version lowers it for the frames after it.
    """

    def __init__(self, version: int = LATEST_VERSION) -> None:
        self.version = version
        self._buf = bytearray()

    @property
    def pending(self) -> int:
        """Number of buffered bytes that do not make a whole frame yet."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Packet]:
        """Add ``data`` and decode every frame it completes; raise on malformed input."""
        self._buf += data
        packets: list[Packet] = []
        while self._buf:
            packet_type = _packet_type(self._buf[0])
            if packet_type in (PacketType.PING, PacketType.PONG):
                del self._buf[:1]
                packets.append(PingPacket() if packet_type is PacketType.PING else PongPacket())
                continue
            length = decode_varint(self._buf, 1)
            if length is None:
                break
            size, used = length
            end = 1 + used + size
            if len(self._buf) < end:
                break
            header, body = self._buf[0], bytes(self._buf[1 + used : end])
            del self._buf[:end]
            packet = _decode_body(packet_type, header & 0x0F, body, self.version)
            if isinstance(packet, ConnectPacket):
                self.version = min(self.version, packet.version)
            elif isinstance(packet, ConnackPacket) and packet.server_version is not None:
                self.version = min(self.version, packet.server_version)
            packets.append(packet)
        return packets


def decode(data: bytes, version: int = LATEST_VERSION) -> Packet:
    """Decode exactly one whole frame (e.g. one WebSocket message carrying one frame)."""
    parser = FrameParser(version)
    packets = parser.feed(data)
    if parser.pending:
        raise RelayProtocolError(f"truncated frame: {parser.pending} bytes do not make a whole frame")
    if len(packets) != 1:
        raise RelayProtocolError(f"expected one frame, got {len(packets)}")
    return packets[0]
