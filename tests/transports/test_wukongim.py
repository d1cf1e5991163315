"""The asyncio WuKongIM client against the fake server, and the official JS SDK against both."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import anyio
import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from lineup_plugin.errors import ConfigError, RelayAuthError, RelayError, RelayProtocolError, RelayTimeoutError
from lineup_plugin.transports.wukongim import crypto as wkcrypto
from lineup_plugin.transports.wukongim import proto as wkproto
from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession, Message, Timers, WuKongIMClient
from lineup_plugin.transports.wukongim.proto import (
    ConnackPacket,
    Flags,
    PacketType,
    ReasonCode,
    RecvPacket,
    SendackPacket,
    Setting,
)
from tests.fakes.wukongim import FakeWuKongIM, JsSdkApp, break_next_recvack, js_sdk_missing

FAST = Timers(
    connect_timeout=5, send_timeout=5, ping_interval=30, pong_timeout=5, reconnect_min=0.01, reconnect_max=0.05
)
GUARD = 10  # seconds a test may wait for an event before it fails instead of hanging


@pytest.fixture
async def server() -> AsyncIterator[FakeWuKongIM]:
    async with FakeWuKongIM() as fake:
        yield fake


def options(uid: str, token: str = "", *, version: int = 5, timers: Timers = FAST) -> ClientOptions:
    return ClientOptions(uid=uid, token=token, protocol_version=version, timers=timers)


async def next_message(session: ImSession) -> Message:
    with anyio.fail_after(GUARD):
        async for message in session.messages():
            return message
    raise AssertionError(f"session closed: {session.error}")


# --- login and version negotiation -----------------------------------------------------------


@pytest.mark.parametrize("version", [2, 3, 4, 5])
async def test_person_message_round_trip_at_every_version(server: FakeWuKongIM, version: int) -> None:
    alice = await ImSession.open(server.ws_url, options("alice", version=version))
    bob = await ImSession.open(server.ws_url, options("bob", version=version))
    try:
        assert alice.version == version
        assert alice.node_id == (1001 if version >= 4 else 0)
        ack = await alice.send("bob", 1, '{"type":1,"content":"你好"}'.encode())
        message = await next_message(bob)
        assert (message.from_uid, message.channel_id, message.channel_type) == ("alice", "alice", 1)
        assert message.payload.decode() == '{"type":1,"content":"你好"}'
        assert (message.message_id, message.message_seq, message.client_msg_no) == (
            ack.message_id,
            ack.message_seq,
            ack.client_msg_no,
        )
        await bob.ack(message)
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: server.recvacks)
        assert server.recvacks[0].message_id == ack.message_id
        assert server.messages[0].payload.decode() == '{"type":1,"content":"你好"}'
    finally:
        await alice.close()
        await bob.close()


@pytest.mark.parametrize("version", [2, 3, 4, 5])
async def test_a_stream_flagged_message_is_delivered_and_the_session_lives(server: FakeWuKongIM, version: int) -> None:
    agent = await ImSession.open(server.ws_url, options("agent", version=version))
    try:
        await server.push("app", "agent", b"chunk", setting=Setting.STREAM, stream_no="s-1")
        await server.push("app", "agent", b"plain")
        assert (await next_message(agent)).payload == b"chunk"
        assert (await next_message(agent)).payload == b"plain"
        await agent.send("app", 1, b"{}")  # the session is still up
    finally:
        await agent.close()


async def test_tcp_works_like_websocket(server: FakeWuKongIM) -> None:
    alice = await ImSession.open(server.tcp_url, options("alice"))
    bob = await ImSession.open(server.ws_url, options("bob"))
    try:
        await alice.send("bob", 1, b'{"type":1,"content":"over tcp"}')
        assert (await next_message(bob)).payload == b'{"type":1,"content":"over tcp"}'
        await bob.send("alice", 1, b'{"type":1,"content":"back"}')
        assert (await next_message(alice)).payload == b'{"type":1,"content":"back"}'
    finally:
        await alice.close()
        await bob.close()


async def test_an_older_server_version_is_adopted() -> None:
    async with FakeWuKongIM(max_version=3) as server:
        session = await ImSession.open(server.ws_url, options("alice", version=5))
        assert (session.version, session.node_id) == (3, 0)
        assert server.logins == [("alice", 2, 3)]
        await session.close()


async def test_a_v3_sendack_with_client_msg_no_is_understood() -> None:
    async with FakeWuKongIM(v3_sendack=True) as server:
        session = await ImSession.open(server.ws_url, options("agent"))
        ack = await session.send("app", 1, b"{}", client_msg_no="cmn-42")
        assert (ack.client_msg_no, ack.message_id) == ("cmn-42", server.messages[0].message_id)
        await session.close()


async def test_unsupported_protocol_version_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="protocol_version: must be 2 to 5, got 6"):
        options("alice", version=6)


async def test_the_senders_other_devices_get_a_copy_without_red_dot(server: FakeWuKongIM) -> None:
    phone = await ImSession.open(server.ws_url, options("alice"))
    laptop = await ImSession.open(server.ws_url, options("alice"))
    bob = await ImSession.open(server.ws_url, options("bob"))
    try:
        await phone.send("bob", 1, b"{}")
        copy = await next_message(laptop)
        assert (copy.channel_id, copy.flags & Flags.RED_DOT) == ("bob", 0)
        assert (await next_message(bob)).flags & Flags.RED_DOT
        assert phone._incoming.empty()  # the sending connection gets nothing back
    finally:
        for session in (phone, laptop, bob):
            await session.close()


async def test_recvack_echoes_the_header_flags(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.ws_url, options("agent"))
    try:
        await server.push("app", "agent", b"{}", flags=Flags.SYNC_ONCE | Flags.RED_DOT)
        await session.ack(await next_message(session))
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: server.recvacks)
        assert server.recvacks[0].flags == Flags.SYNC_ONCE | Flags.RED_DOT
    finally:
        await session.close()


async def test_unacknowledged_messages_are_pushed_again(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.ws_url, options("agent"))
    try:
        stored = await server.push("app", "agent", b"{}")
        first = await next_message(session)
        assert await server.redeliver("agent") == 1
        again = await next_message(session)
        assert first == again and again.message_id == stored.message_id
    finally:
        await session.close()


async def test_a_server_without_encryption_is_spoken_to_in_clear() -> None:
    async with FakeWuKongIM(encryption=False) as server:
        session = await ImSession.open(server.ws_url, options("agent"))
        await session.send("app", 1, b'{"type":1,"content":"plain"}')
        assert server.messages[0].payload == b'{"type":1,"content":"plain"}'
        await session.close()


# --- refusals --------------------------------------------------------------------------------


async def test_registered_token_is_accepted() -> None:
    async with FakeWuKongIM(token_auth=True) as server:
        server.tokens[("agent", 2)] = "secret"
        session = await ImSession.open(server.ws_url, options("agent", "secret"))
        await session.close()


async def test_v2_silence_on_a_bad_token_times_out_with_a_hint() -> None:
    async with FakeWuKongIM(token_auth=True, bad_token="silent") as server:
        timers = Timers(connect_timeout=0.2)
        with pytest.raises(RelayTimeoutError, match="no CONNACK .* stays silent when it refuses a token"):
            await ImSession.open(server.ws_url, options("agent", "wrong", timers=timers))


@pytest.mark.parametrize("url", ["ws_url", "tcp_url"])
async def test_one_close_without_connack_is_a_relay_error_not_a_refusal(url: str) -> None:
    async with FakeWuKongIM(token_auth=True, bad_token="close") as server:
        with pytest.raises(RelayError, match="closed the connection before CONNACK.*for uid 'agent'") as info:
            await ImSession.open(getattr(server, url), options("agent", "wrong"))
    assert not isinstance(info.value, RelayAuthError)
    assert isinstance(info.value.__cause__, EOFError)


async def test_the_fake_closes_a_bad_token_login_without_connack_after_a_configurable_delay() -> None:
    assert FakeWuKongIM().bad_token_close_after == 4.0  # v2.2.5's idle limit after CONNECT
    async with FakeWuKongIM(token_auth=True, bad_token_close_after=0.01) as server:
        with anyio.fail_after(GUARD), pytest.raises(RelayError, match="closed the connection before CONNACK") as info:
            await ImSession.open(server.ws_url, options("agent", "wrong", timers=Timers(connect_timeout=GUARD)))
    assert isinstance(info.value.__cause__, EOFError)  # closed, not timed out
    assert server.connects == 1 and server.logins == []


async def test_closes_right_after_connect_are_retried_until_the_login_succeeds(server: FakeWuKongIM) -> None:
    server.close_before_connack = 3  # idle limits, a failed token lookup, a restart...

    async def ignore(message: Message) -> None:
        pass

    client = WuKongIMClient(options("agent"), server.ws_url, ignore)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        with anyio.fail_after(GUARD):
            await client.wait_connected()
        await client.close()
    assert server.connects == 4
    assert server.logins == [("agent", 2, 5)]


async def test_repeated_closes_long_after_connect_mean_the_token_was_refused() -> None:
    timers = Timers(connect_timeout=GUARD, reconnect_min=0.01, reconnect_max=0.05, login_refused_after=0.05)

    async def ignore(message: Message) -> None:
        pass

    async with FakeWuKongIM(token_auth=True, bad_token_close_after=0.1) as server:
        client = WuKongIMClient(options("agent", "wrong", timers=timers), server.ws_url, ignore)
        with anyio.fail_after(GUARD), pytest.raises(RelayAuthError, match="3 times in a row.*uid 'agent'"):
            await client.run()
    assert server.connects == 3


async def test_early_closes_do_not_count_towards_a_refusal() -> None:
    timers = Timers(connect_timeout=GUARD, reconnect_min=0.01, reconnect_max=0.05, login_refused_after=GUARD)

    async def ignore(message: Message) -> None:
        pass

    async with FakeWuKongIM(token_auth=True, bad_token_close_after=None) as server:
        server.tokens[("agent", 2)] = "secret"
        server.close_before_connack = 5
        client = WuKongIMClient(options("agent", "secret", timers=timers), server.ws_url, ignore)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run)
            with anyio.fail_after(GUARD):
                await client.wait_connected()
            await client.close()
    assert server.connects == 6


async def test_v3_auth_fail_reason_is_an_auth_error() -> None:
    async with FakeWuKongIM(token_auth=True, bad_token="connack") as server:
        with pytest.raises(RelayAuthError, match=r"authentication failed \(wrong uid or token\) \(reason 2\)") as info:
            await ImSession.open(server.ws_url, options("agent", "wrong"))
        assert info.value.reason_code == ReasonCode.AUTH_FAIL


@pytest.mark.parametrize(
    ("reason", "error", "text"),
    [
        (ReasonCode.BAN, RelayAuthError, r"banned \(reason 19\)"),
        (ReasonCode.RATE_LIMIT, RelayError, r"rate limited \(reason 22\)"),
        (ReasonCode.SYSTEM_ERROR, RelayError, r"server system error \(reason 15\)"),
        (99, RelayError, r"unrecognised reason \(reason 99\)"),
    ],
)
async def test_connack_reason_codes_become_clear_errors(
    server: FakeWuKongIM, reason: int, error: type[RelayError], text: str
) -> None:
    server.connect_reasons["agent"] = reason
    with pytest.raises(error, match=text) as info:
        await ImSession.open(server.ws_url, options("agent"))
    assert info.value.reason_code == reason


@pytest.mark.parametrize(
    ("reason", "text"),
    [
        (ReasonCode.CHANNEL_NOT_EXIST, r"the channel does not exist \(reason 5\)"),
        (ReasonCode.RATE_LIMIT, r"rate limited \(reason 22\)"),
        (ReasonCode.SEND_BAN, r"sending is banned for this user \(reason 25\)"),
    ],
)
async def test_sendack_reason_codes_become_clear_errors(server: FakeWuKongIM, reason: int, text: str) -> None:
    session = await ImSession.open(server.ws_url, options("agent"))
    try:
        server.send_reasons["agent"] = reason
        with pytest.raises(RelayError, match=f"refused the message to 'app': {text}") as info:
            await session.send("app", 1, b"{}")
        assert info.value.reason_code == reason
        await session.send("app", 1, b"{}")  # the session survives a refused message
    finally:
        await session.close()


async def test_group_send_without_membership_is_refused(server: FakeWuKongIM) -> None:
    server.groups["team"] = {"someone-else"}
    session = await ImSession.open(server.ws_url, options("agent"))
    try:
        with pytest.raises(RelayError, match=r"not a subscriber of the channel \(reason 3\)"):
            await session.send("team", 2, b"{}")
    finally:
        await session.close()


async def test_missing_sendack_times_out(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.ws_url, options("agent", timers=Timers(send_timeout=0.2)))
    try:
        server.answer_sends = False
        with pytest.raises(RelayTimeoutError, match="no SENDACK for message .* to 'app' within 0.2s"):
            await session.send("app", 1, b"{}")
    finally:
        await session.close()


# --- bad server input ------------------------------------------------------------------------


async def closed_by(server: FakeWuKongIM, data: bytes) -> RelayError | None:
    session = await ImSession.open(server.ws_url, options("agent"))
    await server.inject("agent", data)
    with anyio.fail_after(GUARD):
        return await session.wait_closed()


async def test_truncated_frame_closes_the_session_with_a_clear_error(server: FakeWuKongIM) -> None:
    frame = wkproto.encode(SendackPacket(1, 1, 1, 1))
    error = await closed_by(server, frame[:-3])
    assert isinstance(error, RelayProtocolError)
    assert "truncated frame" in str(error)


async def test_tcp_close_inside_a_frame_is_reported(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.tcp_url, options("agent"))
    await server.inject("agent", wkproto.encode(SendackPacket(1, 1, 1, 1))[:5])
    await server.drop("agent")
    with anyio.fail_after(GUARD):
        error = await session.wait_closed()
    assert "connection lost in the middle of a frame (5 bytes)" in str(error)


async def test_oversized_length_closes_the_session_with_a_clear_error(server: FakeWuKongIM) -> None:
    error = await closed_by(server, bytes([PacketType.RECV << 4]) + b"\xff\xff\xff\x7f")
    assert isinstance(error, RelayProtocolError)
    assert "exceeds the 1048576-byte limit" in str(error)


async def test_bad_msg_key_closes_the_session_with_a_clear_error(server: FakeWuKongIM) -> None:
    forged = RecvPacket("app", "app", 1, "forged-1", 7, 1, 1_700_000_000, b"AAAA", msg_key="0" * 32)
    error = await closed_by(server, wkproto.encode(forged))
    assert isinstance(error, RelayProtocolError)
    assert "bad msgKey on RECV message 'forged-1'" in str(error)


async def test_a_pending_send_fails_when_the_session_breaks(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.ws_url, options("agent"))
    server.answer_sends = False
    sending = asyncio.create_task(session.send("app", 1, b"{}"))
    with anyio.fail_after(GUARD):
        await server.wait_until(lambda: server.connections and not server.answer_sends)
        await server.inject("agent", b"\xf0\x00")  # frame type 15 does not exist
        with pytest.raises(RelayProtocolError, match="unknown frame type 15"):
            await sending


async def test_a_garbled_connack_is_a_protocol_error(server: FakeWuKongIM) -> None:
    server.connack_override = wkproto.encode(SendackPacket(1, 1, 1, 1))
    with pytest.raises(RelayProtocolError, match="expected CONNACK, got SendackPacket"):
        await ImSession.open(server.ws_url, options("agent"))


async def test_a_short_salt_is_a_protocol_error(server: FakeWuKongIM) -> None:
    key = wkcrypto.public_key_b64(wkcrypto.generate_private_key())
    server.connack_override = wkproto.encode(ConnackPacket(0, 1, key, "short", 5, 1), 5)
    with pytest.raises(RelayProtocolError, match="salt must have 16 characters"):
        await ImSession.open(server.ws_url, options("agent"))


async def test_a_server_below_version_2_is_refused(server: FakeWuKongIM) -> None:
    key = wkcrypto.public_key_b64(wkcrypto.generate_private_key())
    server.connack_override = wkproto.encode(ConnackPacket(0, 1, key, "s" * 16, server_version=1), 1)
    with pytest.raises(RelayProtocolError, match="server speaks wkproto version 1; version 2 or later is needed"):
        await ImSession.open(server.ws_url, options("agent"))


async def test_unanswered_ping_closes_the_session(server: FakeWuKongIM) -> None:
    server.answer_pings = False
    session = await ImSession.open(
        server.ws_url, options("agent", timers=Timers(ping_interval=0.01, pong_timeout=0.05))
    )
    with anyio.fail_after(GUARD):
        error = await session.wait_closed()
    assert isinstance(error, RelayTimeoutError)
    assert "did not answer PING within 0.05s" in str(error)


async def test_answered_pings_keep_the_session(server: FakeWuKongIM) -> None:
    session = await ImSession.open(server.ws_url, options("agent", timers=Timers(ping_interval=0.01)))
    with anyio.fail_after(GUARD):
        await server.wait_until(lambda: server.pings >= 3)
    assert session.error is None
    await session.send("app", 1, b"{}")
    await session.close()


async def test_unreachable_server_is_a_relay_error() -> None:
    async with FakeWuKongIM() as server:
        url = server.ws_url
    with pytest.raises(RelayError, match="cannot reach wukongim at ws://127.0.0.1"):
        await ImSession.open(url, options("agent"))


# --- the reconnecting client -----------------------------------------------------------------


async def test_client_reconnects_after_the_connection_drops(server: FakeWuKongIM) -> None:
    received: list[bytes] = []
    states: list[bool] = []

    async def on_message(message: Message) -> None:
        received.append(message.payload)

    async def on_state(up: bool) -> None:
        states.append(up)

    client = WuKongIMClient(options("agent"), server.ws_url, on_message, on_state=on_state)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        with anyio.fail_after(GUARD):
            await client.wait_connected()
            await server.drop("agent")
            await server.wait_until(lambda: len(server.logins) == 2 and server.online("agent"))
            await client.wait_connected()
            await client.send("app", 1, b'{"type":1,"content":"after"}')
            await server.push("app", "agent", b"hello")
            await server.wait_until(lambda: server.recvacks)
        await client.close()
    assert states == [True, False, True, False]
    assert received == [b"hello"]
    assert server.messages_from("agent")[0].payload == b'{"type":1,"content":"after"}'


async def test_client_retries_until_the_server_answers(server: FakeWuKongIM) -> None:
    attempts = 0

    async def address() -> str:
        nonlocal attempts
        attempts += 1
        return "ws://127.0.0.1:1" if attempts < 3 else server.ws_url

    async def ignore(message: Message) -> None:
        pass

    client = WuKongIMClient(options("agent"), address, ignore)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        with anyio.fail_after(GUARD):
            await client.wait_connected()
        await client.close()
    assert attempts == 3


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        ConnectionClosedOK(Close(1000, ""), Close(1000, ""), rcvd_then_sent=True),
    ],
    ids=["reset", "clean-ws-close"],
)
async def test_a_connection_lost_while_acknowledging_a_message_reconnects(
    server: FakeWuKongIM, error: BaseException
) -> None:
    received: list[bytes] = []

    async def on_message(message: Message) -> None:
        received.append(message.payload)

    client = WuKongIMClient(options("agent"), server.ws_url, on_message)
    with anyio.fail_after(GUARD):
        running = asyncio.create_task(client.run())
        break_next_recvack(await client.wait_connected(), error)
        await server.push("app", "agent", b"first")
        await server.wait_until(lambda: len(server.logins) == 2 and server.online("agent"))
        assert not running.done()  # run() did not die with the RECVACK's error
        second = await server.push("app", "agent", b"second")
        await server.wait_until(lambda: server.recvacks)
        await client.close()
        await running
    assert received == [b"first", b"second"]
    assert [ack.message_id for ack in server.recvacks] == [second.message_id]


async def test_a_failing_handler_does_not_stop_delivery(server: FakeWuKongIM) -> None:
    seen: list[bytes] = []

    async def on_message(message: Message) -> None:
        seen.append(message.payload)
        if message.payload == b"boom":
            raise ValueError("handler bug")

    client = WuKongIMClient(options("agent"), server.ws_url, on_message)
    async with anyio.create_task_group() as tg:
        tg.start_soon(client.run)
        with anyio.fail_after(GUARD):
            await client.wait_connected()
            await server.push("app", "agent", b"boom")
            await server.push("app", "agent", b"fine")
            await server.wait_until(lambda: len(server.recvacks) == 2)
        await client.close()
    assert seen == [b"boom", b"fine"]


async def test_kick_ends_the_client_with_the_reason(server: FakeWuKongIM) -> None:
    async def ignore(message: Message) -> None:
        pass

    client = WuKongIMClient(options("agent"), server.ws_url, ignore)
    with anyio.fail_after(GUARD):
        running = asyncio.create_task(client.run())
        await client.wait_connected()
        await server.kick("agent", ReasonCode.CONNECT_KICK, "login in other device")
        with pytest.raises(RelayError, match="kicked.*reason 12.*login in other device"):
            await running


async def test_login_refusal_ends_the_client(server: FakeWuKongIM) -> None:
    server.connect_reasons["agent"] = ReasonCode.AUTH_FAIL

    async def ignore(message: Message) -> None:
        pass

    with anyio.fail_after(GUARD), pytest.raises(RelayAuthError, match="reason 2"):
        await WuKongIMClient(options("agent"), server.ws_url, ignore).run()


async def test_send_without_a_connection_times_out() -> None:
    async def ignore(message: Message) -> None:
        pass

    client = WuKongIMClient(options("agent", timers=Timers(send_timeout=0.05)), "ws://127.0.0.1:1", ignore)
    with pytest.raises(RelayTimeoutError, match="not connected to wukongim within 0.05s"):
        await client.send("app", 1, b"{}")


# --- the official JS SDK ---------------------------------------------------------------------

needs_js = pytest.mark.skipif(js_sdk_missing() is not None, reason=js_sdk_missing() or "")


@pytest.mark.node
@needs_js
async def test_js_sdk_and_python_client_exchange_custom_content() -> None:
    async with FakeWuKongIM(token_auth=True) as server:
        server.tokens[("app-user", 1)] = "app-token"
        server.tokens[("agent", 2)] = "agent-token"
        agent = await ImSession.open(server.ws_url, options("agent", "agent-token"))
        async with JsSdkApp(server.ws_url, "app-user", "app-token") as app:
            with anyio.fail_after(GUARD):
                await app.wait_for("status", status=1, reasonCode=1)
                assert server.logins[-1] == ("app-user", 1, 2)  # the SDK speaks version 2 as web

                envelope = {"v": 1, "id": "e1", "type": "lineup.v1.text", "payload": {"text": "预发布?"}}
                ack = await agent.send("app-user", 1, json.dumps({"type": 9527, "envelope": envelope}).encode())
                got = await app.wait_for("message", contentType=9527)
                assert got["content"]["envelope"] == envelope
                assert (got["fromUID"], got["channelID"], got["messageID"]) == ("agent", "agent", str(ack.message_id))
                await server.wait_until(lambda: any(a.uid == "app-user" for a in server.recvacks))

                reply = {"v": 1, "id": "e2", "type": "lineup.v1.text", "payload": {"text": "好"}}
                await app.command(cmd="send", channel="agent", channelType=1, envelope=reply)
                message = await next_message(agent)
                assert json.loads(message.payload) == {"envelope": reply, "type": 9527}
                assert (message.from_uid, message.channel_id) == ("app-user", "app-user")
                await app.wait_for("sendack", reasonCode=1)

                await app.command(cmd="text", channel="agent", channelType=1, text="hello agent")
                text = await next_message(agent)
                assert json.loads(text.payload) == {"content": "hello agent", "type": 1}
        await agent.close()


@pytest.mark.node
@needs_js
async def test_js_sdk_sees_a_refused_token() -> None:
    async with (
        FakeWuKongIM(token_auth=True, bad_token="connack") as server,
        JsSdkApp(server.ws_url, "app-user", "wrong") as app,
    ):
        with anyio.fail_after(GUARD):
            await app.wait_for("status", status=3, reasonCode=2)
