"""The wkproto codec and crypto, held to bytes produced by the official JS SDK's own code."""

from __future__ import annotations

import base64
import contextlib
import json
import struct
import subprocess
from dataclasses import replace

import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey
from hypothesis import given
from hypothesis import strategies as st

from lineup_plugin.errors import RelayProtocolError
from lineup_plugin.transports.wukongim import crypto as wkcrypto
from lineup_plugin.transports.wukongim import proto as wkproto
from lineup_plugin.transports.wukongim.crypto import SessionCipher
from lineup_plugin.transports.wukongim.proto import (
    ConnackPacket,
    ConnectPacket,
    DisconnectPacket,
    Flags,
    FrameParser,
    OtherPacket,
    PacketType,
    PingPacket,
    PongPacket,
    RecvackPacket,
    RecvPacket,
    SendackPacket,
    SendPacket,
    Setting,
)
from tests.fakes.wukongim import JS_DIR, js_sdk_missing

# Printed by tests/js/known-answers.mjs: the SDK's curve25519-js, md5-typescript, CryptoJS and
# Proto.encode on RFC 7748's private keys (section 6.1) and fixed packet fields.
KNOWN = {
    "client_public_b64": "hSDwCYkwp1R0i33ctD73Wg2/Og0mOBr066SpjqqbTmo=",
    "server_public_b64": "3p7bfXt9wbTTW2HC7OQ1Nz+DQ8hbeGdNrfx+FG+IK08=",
    "shared_hex": "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742",
    "aes_key": "0c15fdbf4d09bc6c",
    "salt": "abcdefghij012345",
    "aes_plain": '{"type":1,"content":"预发布"}',
    "aes_cipher_b64": "GojbkI9zULwgjMJmC2VTvrXxyLkLPbj9xYX2oiz0LXLC1v/0wWaaYNItNFYKP8QL",
    "connect_hex": (
        "105102010008646576696365315700086170702d757365720003746f6b0000018bcfe5687b002c6853"
        "447743596b777031523069333363744437335767322f4f67306d4f427230363653706a717162546d6f3d"
    ),
    "send_payload": '{"type":1,"content":"预发布"}',
    "send_hex": (
        "327600000000070005636d6e2d3100056167656e740100203738653735356436303663313632626230"
        "636335643837316330616662393265476f6a626b49397a554c77676a4d4a6d4332565476725878794c"
        "6b4c50626a39785958326f697a304c584c4331762f3077576161594e49744e46594b5038514c"
    ),
    "recvack_hex": "620c112210f47de981150000002a",
}
CLIENT_PRIVATE = bytes.fromhex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a")
SERVER_PRIVATE = bytes.fromhex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb")


def _cipher() -> SessionCipher:
    return SessionCipher(KNOWN["aes_key"].encode(), KNOWN["salt"].encode())


# --- varint ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, "00"), (127, "7f"), (128, "8001"), (16383, "ff7f"), (16384, "808001")],
)
def test_varint_matches_the_mqtt_examples(value: int, encoded: str) -> None:
    assert wkproto.encode_varint(value) == bytes.fromhex(encoded)
    assert wkproto.decode_varint(bytes.fromhex(encoded)) == (value, len(encoded) // 2)


def test_varint_of_the_frame_limit_round_trips() -> None:
    limit = wkproto.MAX_REMAINING_LENGTH
    assert wkproto.decode_varint(wkproto.encode_varint(limit)) == (limit, 3)


def test_varint_incomplete_asks_for_more() -> None:
    assert wkproto.decode_varint(b"\x80\x80") is None


def test_varint_longer_than_four_bytes_is_refused() -> None:
    with pytest.raises(RelayProtocolError, match="longer than 4 bytes"):
        wkproto.decode_varint(b"\xff\xff\xff\xff\x01")


def test_oversized_length_is_refused_before_the_body_arrives() -> None:
    header = bytes([PacketType.RECV << 4]) + b"\x81\x80\x40"  # 1 MiB + 1
    with pytest.raises(RelayProtocolError, match="exceeds the 1048576-byte limit"):
        FrameParser().feed(header)


# --- key exchange and AES ----------------------------------------------------------------------


def test_public_key_matches_rfc7748_and_the_sdk() -> None:
    client = X25519PrivateKey.from_private_bytes(CLIENT_PRIVATE)
    assert wkcrypto.public_key_b64(client) == KNOWN["client_public_b64"]


def test_session_key_matches_the_sdk_derivation() -> None:
    client = X25519PrivateKey.from_private_bytes(CLIENT_PRIVATE)
    server = X25519PrivateKey.from_private_bytes(SERVER_PRIVATE)
    assert wkcrypto.derive_aes_key(client, KNOWN["server_public_b64"]) == KNOWN["aes_key"].encode()
    assert wkcrypto.derive_aes_key(server, KNOWN["client_public_b64"]) == KNOWN["aes_key"].encode()


def test_session_cipher_from_connack_truncates_the_salt() -> None:
    client = X25519PrivateKey.from_private_bytes(CLIENT_PRIVATE)
    cipher = SessionCipher.from_connack(client, KNOWN["server_public_b64"], KNOWN["salt"] + "xyz")
    assert cipher == _cipher()


def test_short_salt_is_refused() -> None:
    client = X25519PrivateKey.from_private_bytes(CLIENT_PRIVATE)
    with pytest.raises(RelayProtocolError, match="salt must have 16 characters"):
        SessionCipher.from_connack(client, KNOWN["server_public_b64"], "short")


@pytest.mark.parametrize("bad_key", ["not base64!", base64.b64encode(b"\x00" * 32).decode()])
def test_bad_server_key_is_refused(bad_key: str) -> None:
    with pytest.raises(RelayProtocolError, match="bad X25519 public key"):
        wkcrypto.derive_aes_key(X25519PrivateKey.generate(), bad_key)


def test_aes_matches_cryptojs() -> None:
    cipher = _cipher()
    plain = KNOWN["aes_plain"].encode()
    assert cipher.encrypt(plain) == KNOWN["aes_cipher_b64"].encode()
    assert cipher.decrypt(KNOWN["aes_cipher_b64"].encode()) == plain


@pytest.mark.parametrize("garbage", [b"!!!", base64.b64encode(b"0123456789abcdef" * 2), b"YWJj"])
def test_undecryptable_payload_is_a_clear_error(garbage: bytes) -> None:
    with pytest.raises(RelayProtocolError, match="cannot be decrypted"):
        _cipher().decrypt(garbage)


# --- frames against the SDK's encoder ----------------------------------------------------------


def test_connect_matches_the_sdk_encoder() -> None:
    packet = ConnectPacket(
        version=2,
        device_flag=1,
        device_id="device1W",
        uid="app-user",
        token="tok",
        client_timestamp=1700000000123,
        client_key=KNOWN["client_public_b64"],
    )
    assert wkproto.encode(packet, 2).hex() == KNOWN["connect_hex"]
    assert wkproto.decode(bytes.fromhex(KNOWN["connect_hex"]), 2) == packet


def test_send_matches_the_sdk_encoder_including_the_msg_key() -> None:
    cipher = _cipher()
    payload = cipher.encrypt(KNOWN["send_payload"].encode())
    unsigned = SendPacket(
        client_seq=7,
        client_msg_no="cmn-1",
        channel_id="agent",
        channel_type=1,
        payload=payload,
        flags=Flags.RED_DOT,
    )
    packet = wkcrypto.signed(cipher, unsigned)
    assert wkproto.encode(packet, 2).hex() == KNOWN["send_hex"]
    decoded = wkproto.decode(bytes.fromhex(KNOWN["send_hex"]), 2)
    assert decoded == packet
    assert isinstance(decoded, SendPacket)
    wkcrypto.check_msg_key(cipher, decoded)
    assert cipher.decrypt(decoded.payload).decode() == KNOWN["send_payload"]


def test_recvack_matches_the_sdk_encoder() -> None:
    packet = RecvackPacket(1234567890123456789, 42, Flags.RED_DOT)
    assert wkproto.encode(packet).hex() == KNOWN["recvack_hex"]


def test_sendack_layout() -> None:
    # SENDACK = 40 11 <i64 id> <u32 clientSeq> <u32 seq> <u8 reason>
    packet = SendackPacket(message_id=5, client_seq=7, message_seq=9, reason_code=1)
    expected = "4011" + "0000000000000005" + "00000007" + "00000009" + "01"
    assert wkproto.encode(packet).hex() == expected


def test_ping_and_pong_are_single_bytes() -> None:
    assert wkproto.encode(PingPacket()) == b"\x70"
    assert wkproto.encode(PongPacket()) == b"\x80"
    assert FrameParser().feed(b"\x80\x70") == [PongPacket(), PingPacket()]


# --- version-dependent fields --------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4, 5])
def test_connack_fields_follow_the_version(version: int) -> None:
    server_version = version if version > 3 else None
    packet = ConnackPacket(
        time_diff=-12,
        reason_code=1,
        server_key=KNOWN["server_public_b64"],
        salt=KNOWN["salt"],
        server_version=server_version,
        node_id=1001 if version >= 4 else 0,
    )
    frame = wkproto.encode(packet, version)
    assert frame[0] == (0x21 if server_version else 0x20)
    assert wkproto.decode(frame, version) == packet


def test_connack_of_an_older_server_is_read_at_its_version() -> None:
    # We asked for 5; a server that speaks 3 answers with serverVersion 3 and no nodeId.
    packet = ConnackPacket(0, 1, "k", "s" * 16, server_version=3)
    assert wkproto.decode(wkproto.encode(packet, 3), 5) == packet


def test_failed_connack_may_stop_before_the_node_id() -> None:
    frame = wkproto.encode(ConnackPacket(0, 2, server_version=5), 3)
    assert wkproto.decode(frame, 5) == ConnackPacket(0, 2, server_version=5)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("version", [2, 3, 4, 5])
def test_recv_round_trips_at_every_version(version: int, stream: bool) -> None:
    with_stream = stream and version < 5  # version 5 has no stream fields in RECV
    packet = RecvPacket(
        from_uid="app",
        channel_id="app",
        channel_type=1,
        client_msg_no="c1",
        message_id=2**62,
        message_seq=3,
        timestamp=1_700_000_000,
        payload=b"cGF5bG9hZA==",
        msg_key="k",
        setting=Setting.TOPIC | (Setting.STREAM if stream else Setting.NONE),
        expire=60 if version >= 3 else 0,
        stream_no="s9" if with_stream else "",
        stream_id=2**63 + 1 if with_stream else 0,
        stream_flag=1 if with_stream else 0,
        topic="t",
        flags=Flags.RED_DOT | Flags.SYNC_ONCE,
    )
    assert wkproto.decode(wkproto.encode(packet, version), version) == packet


def test_recv_expire_field_exists_from_version_3() -> None:
    packet = RecvPacket("a", "a", 1, "c", 1, 1, 1, b"p", expire=0)
    assert len(wkproto.encode(packet, 3)) == len(wkproto.encode(packet, 2)) + 4


@pytest.mark.parametrize("version", [2, 4])
def test_stream_fields_exist_below_version_5(version: int) -> None:
    packet = SendPacket(1, "c", "ch", 1, b"p", setting=Setting.STREAM, stream_no="s1")
    assert wkproto.decode(wkproto.encode(packet, version), version) == packet
    # version 5 dropped the streamNo string (2-byte length + "s1")
    assert len(wkproto.encode(packet, 4)) == len(wkproto.encode(packet, 5)) + 4


def _goproto_1_2_3_stream_recv_body() -> bytes:
    # A RECV body as WuKongIMGoProto v1.2.3 (WuKongIM v2.2.5) writes it at version 4 with the
    # STREAM setting, built field by field from recv.go rather than with our encoder.
    def string(value: bytes) -> bytes:
        return struct.pack(">h", len(value)) + value

    return (
        bytes([Setting.STREAM])
        + string(b"key")
        + string(b"app")
        + string(b"app")
        + bytes([1])  # channelType
        + struct.pack(">I", 0)  # expire (v3+)
        + string(b"cmn")
        + bytes([2])  # streamFlag: end
        + string(b"stream-7")
        + struct.pack(">Q", 2**40 + 5)  # streamId
        + struct.pack(">q", 99)  # messageId
        + struct.pack(">I", 3)  # messageSeq
        + struct.pack(">i", 1_700_000_000)
        + b"cGF5bG9hZA=="
    )


def test_recv_stream_fields_are_read_in_the_goproto_1_2_3_layout() -> None:
    body = _goproto_1_2_3_stream_recv_body()
    frame = bytes([PacketType.RECV << 4]) + wkproto.encode_varint(len(body)) + body
    packet = wkproto.decode(frame, 4)
    assert isinstance(packet, RecvPacket)
    assert (packet.stream_flag, packet.stream_no, packet.stream_id) == (2, "stream-7", 2**40 + 5)
    assert (packet.message_id, packet.message_seq, packet.payload) == (99, 3, b"cGF5bG9hZA==")
    assert wkproto.encode(packet, 4) == frame


def test_string_lengths_are_signed_int16_as_the_server_reads_them() -> None:
    wkproto.encode(DisconnectPacket(1, "x" * 0x7FFF))
    with pytest.raises(RelayProtocolError, match="too long"):
        wkproto.encode(DisconnectPacket(1, "x" * 0x8000))
    body = b"\x01" + b"\x80\x00" + b"x" * 0x8000  # a length the server would read as -32768
    frame = bytes([PacketType.DISCONNECT << 4]) + wkproto.encode_varint(len(body)) + body
    with pytest.raises(RelayProtocolError, match="'reason' has a negative length"):
        wkproto.decode(frame)


def test_disconnect_and_unused_types_decode() -> None:
    packet = DisconnectPacket(12, "login in other device")
    assert wkproto.decode(wkproto.encode(packet)) == packet
    other = OtherPacket(PacketType.EVENT, b"\x00\x01x")
    assert wkproto.decode(wkproto.encode(other)) == other


# --- msgKey ------------------------------------------------------------------------------------


def test_recv_msg_key_is_checked() -> None:
    cipher = _cipher()
    payload = cipher.encrypt(b'{"type":1,"content":"hi"}')
    unsigned = RecvPacket("app", "app", 1, "c1", 99, 1, 1_700_000_000, payload)
    signed = wkcrypto.signed(cipher, unsigned)
    wkcrypto.check_msg_key(cipher, signed)
    tampered = replace(signed, message_seq=2)
    with pytest.raises(RelayProtocolError, match="bad msgKey on RECV message 'c1'"):
        wkcrypto.check_msg_key(cipher, tampered)


# --- bad input ---------------------------------------------------------------------------------


def test_truncated_frame_is_reported_by_decode() -> None:
    frame = wkproto.encode(SendackPacket(1, 2, 3, 1))
    with pytest.raises(RelayProtocolError, match="truncated frame"):
        wkproto.decode(frame[:-1])


def test_short_body_names_the_missing_field() -> None:
    body = bytes(8)  # messageId only
    frame = bytes([PacketType.SENDACK << 4]) + wkproto.encode_varint(len(body)) + body
    with pytest.raises(RelayProtocolError, match="truncated SENDACK: body ends inside field 'clientSeq'"):
        wkproto.decode(frame)


def test_trailing_bytes_after_the_known_fields_are_ignored() -> None:
    body = wkproto.encode(RecvackPacket(1, 1))[2:] + b"future field"
    frame = bytes([PacketType.RECVACK << 4]) + wkproto.encode_varint(len(body)) + body
    assert wkproto.decode(frame) == RecvackPacket(1, 1)


def test_v3_sendack_with_a_client_msg_no_decodes() -> None:
    packet = SendackPacket(message_id=5, client_seq=7, message_seq=9, reason_code=1, client_msg_no="cmn-1")
    assert wkproto.encode(packet).hex().startswith("4018")
    assert wkproto.decode(wkproto.encode(packet)) == packet


@pytest.mark.parametrize("header", [0x00, 0xD0, 0xF0])
def test_unknown_frame_type_is_refused(header: int) -> None:
    with pytest.raises(RelayProtocolError, match="unknown frame type"):
        FrameParser().feed(bytes([header, 0]))


def test_non_utf8_string_is_refused() -> None:
    body = b"\x01" + b"\x00\x02\xff\xfe"
    frame = bytes([PacketType.DISCONNECT << 4]) + wkproto.encode_varint(len(body)) + body
    with pytest.raises(RelayProtocolError, match="'reason' is not utf-8"):
        wkproto.decode(frame)


def test_stream_parser_reassembles_split_frames() -> None:
    frames = wkproto.encode(SendackPacket(1, 2, 3, 1)) + b"\x80" + wkproto.encode(RecvackPacket(4, 5))
    parser = FrameParser()
    got = []
    for byte in frames:
        got += parser.feed(bytes([byte]))
    assert got == [SendackPacket(1, 2, 3, 1), PongPacket(), RecvackPacket(4, 5)]
    assert parser.pending == 0


@given(st.binary(max_size=64))
def test_arbitrary_bytes_never_crash_the_parser(data: bytes) -> None:
    with contextlib.suppress(RelayProtocolError):
        FrameParser(2).feed(data)


@given(
    st.builds(
        RecvPacket,
        from_uid=st.text(max_size=20),
        channel_id=st.text(max_size=20),
        channel_type=st.integers(0, 255),
        client_msg_no=st.text(max_size=40),
        message_id=st.integers(-(2**63), 2**63 - 1),
        message_seq=st.integers(0, 2**32 - 1),
        timestamp=st.integers(-(2**31), 2**31 - 1),
        payload=st.binary(max_size=100),
        msg_key=st.text(max_size=32),
    ),
    st.integers(2, 5),
)
def test_recv_round_trips(packet: RecvPacket, version: int) -> None:
    assert wkproto.decode(wkproto.encode(packet, version), version) == packet


# --- the vectors above really are the SDK's -----------------------------------------------------


@pytest.mark.node
@pytest.mark.skipif(js_sdk_missing() is not None, reason=js_sdk_missing() or "")
def test_vectors_are_reproduced_by_the_sdk() -> None:
    out = subprocess.run(
        ["node", "--import", "./wk-register.mjs", "known-answers.mjs"],
        cwd=JS_DIR,
        capture_output=True,
        check=True,
        text=True,
        timeout=30,
    ).stdout
    assert json.loads(out) == KNOWN
