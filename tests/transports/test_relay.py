"""The relay: LineUp envelopes between the hub and the App user over the fake WuKongIM server."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosedOK
from websockets.frames import Close

from lineup_plugin.config.settings import WuKongIMSettings
from lineup_plugin.errors import RelayAuthError, RelayProtocolError, TransportError
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.transports.wukongim import crypto as wkcrypto
from lineup_plugin.transports.wukongim import proto as wkproto
from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession, Timers
from lineup_plugin.transports.wukongim.crypto import SessionCipher
from lineup_plugin.transports.wukongim.proto import ReasonCode, SendPacket
from lineup_plugin.transports.wukongim.relay import Relay, max_envelope_text, wrap_envelope
from tests.fakes.wukongim import FakeWuKongIM, JsSdkApp, break_next_recvack, js_sdk_missing

FAST = Timers(connect_timeout=5, send_timeout=5, reconnect_min=0.01, reconnect_max=0.05)
GUARD = 10  # seconds a test may wait for an event before it fails instead of hanging
AGENT, APP = "lineup-agent", "app-user"


def make_hub(**options: Any) -> Hub:
    return Hub(collect_tools(get_plugin_manager(load_entrypoints=False)), **options)


@asynccontextmanager
async def running_relay(server: FakeWuKongIM, hub: Hub, timers: Timers = FAST, **settings: Any) -> AsyncIterator[Relay]:
    settings.setdefault("text_cards", "never")  # PyApp speaks LineUp without a hello first (text: test_textmode_relay)
    config = WuKongIMSettings(api_url=server.api_url, uid=AGENT, app_uid=APP, **settings)
    relay = Relay(config, hub, timers=timers)
    async with anyio.create_task_group() as tg:
        tg.start_soon(relay.run)
        with anyio.fail_after(GUARD):
            await relay.connected.wait()
        yield relay
        await relay.close()


class PyApp:
    """The App user as a plain Python client: reads LineUp envelopes, sends envelopes and text."""

    def __init__(self, session: ImSession, content_type: int = 9527) -> None:
        self.session = session
        self.content_type = content_type
        self._stream = session.messages()

    async def next(self, kind: str) -> dict[str, Any]:
        with anyio.fail_after(GUARD):
            async for message in self._stream:
                await self.session.ack(message)
                content = json.loads(message.payload)
                assert content["type"] == self.content_type
                if content["envelope"]["type"] == f"lineup.v1.{kind}":
                    return dict(content["envelope"])
        raise AssertionError(f"session closed: {self.session.error}")

    async def send(self, kind: str, payload: dict[str, Any], *, id: str | None = None, **fields: Any) -> str:
        envelope = {
            "v": 1,
            "id": id or f"app_{asyncio.get_running_loop().time()}",
            "type": f"lineup.v1.{kind}",
            "conversation_id": "default",
            "sender": {"kind": "device", "id": "py-app"},
            "target": {"kind": "agent", "id": "lineup-agent"},
            "payload": payload,
            **fields,
        }
        await self.session.send(AGENT, 1, wrap_envelope(json.dumps(envelope), self.content_type))
        return str(envelope["id"])

    async def text(self, text: str) -> None:
        await self.session.send(AGENT, 1, json.dumps({"type": 1, "content": text}).encode())


@asynccontextmanager
async def py_app(server: FakeWuKongIM, uid: str = APP, content_type: int = 9527) -> AsyncIterator[PyApp]:
    session = await ImSession.open(server.ws_url, ClientOptions(uid=uid, token="", device_flag=0, timers=FAST))
    try:
        yield PyApp(session, content_type)
    finally:
        await session.close()


@pytest.fixture
async def server() -> AsyncIterator[FakeWuKongIM]:
    async with FakeWuKongIM() as fake:
        yield fake


# --- calls through the relay -----------------------------------------------------------------


async def test_choice_round_trip_with_a_python_app(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub):
        call = asyncio.create_task(
            hub.agent_call("choice", {"question": "Deploy where?", "options": ["test", "预发布"]})
        )
        request = await app.next("tool.call")
        assert request["payload"]["arguments"]["options"] == ["test", "预发布"]
        await app.send(
            "tool.result", {"call_id": request["payload"]["call_id"], "result": {"selected": "预发布", "index": 1}}
        )
        with anyio.fail_after(GUARD):
            result = await call
    assert (result.status, result.result) == ("completed", {"selected": "预发布", "index": 1})


async def test_a_call_right_after_start_waits_for_the_im_connection_instead_of_failing_no_app(
    server: FakeWuKongIM,
) -> None:
    hub = make_hub()
    config = WuKongIMSettings(api_url=server.api_url, uid=AGENT, app_uid=APP, text_cards="never")
    async with py_app(server) as app, Relay(config, hub, timers=FAST) as relay:
        assert not relay.connected.is_set() and hub.peers == []  # the relay is only starting
        call = asyncio.create_task(hub.agent_call("choice", {"question": "Now?", "options": ["yes", "no"]}))
        request = await app.next("tool.call")
        await app.send("tool.result", {"call_id": request["payload"]["call_id"], "result": {"selected": "yes"}})
        with anyio.fail_after(GUARD):
            result = await call
    assert result.status == "completed"


async def test_an_answer_whose_push_was_lost_on_a_live_link_is_fetched_and_the_call_completes(
    server: FakeWuKongIM,
) -> None:
    hub = make_hub()
    config = WuKongIMSettings(api_url=server.api_url, uid=AGENT, app_uid=APP, text_cards="never")
    async with py_app(server) as app, Relay(config, hub, timers=FAST, sync_every=0.5) as relay:
        with anyio.fail_after(GUARD):
            await relay.connected.wait()
        call = asyncio.create_task(hub.agent_call("choice", {"question": "Lost?", "options": ["yes", "no"]}))
        request = await app.next("tool.call")
        server.lose_pushes[AGENT] = 1  # WuKongIM stores the answer but never pushes it to the agent
        await app.send("tool.result", {"call_id": request["payload"]["call_id"], "result": {"selected": "no"}})
        with anyio.fail_after(GUARD):
            result = await call
        assert relay.connected.is_set() and server.lose_pushes[AGENT] == 0  # the link stayed up throughout
    assert (result.status, result.result["selected"]) == ("completed", "no")


async def test_the_relay_writes_the_next_message_without_waiting_for_the_sendack_of_the_one_before(
    server: FakeWuKongIM,
) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub):
        await app.next("agent.status")  # the greeting after attach has arrived, every SENDACK of it given
        server.answer_sends = False  # WuKongIM holds the SENDACK of what comes now
        for piece in ("one", "two", "three"):
            await hub.send_text(piece)
        with anyio.fail_after(GUARD):  # all three written, none acknowledged (one at a time: only the first)
            await server.wait_until(lambda: len(server.unanswered) == 3)
    assert [wkproto.ChannelType(p.channel_type) for p in server.unanswered] == [wkproto.ChannelType.PERSON] * 3


async def test_the_app_user_is_attached_once_connected(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub) as relay:
        assert [peer.device_id for peer in hub.peers] == ["wukongim:app-user"]
        welcome = await app.next("device.welcome")
        assert welcome["payload"]["device_id"] == "wukongim:app-user"
        assert relay.options.token == ""  # no token, no manager token: tokenAuthOn is off
    assert hub.peers == []


async def test_device_hello_reattaches_and_resends_live_calls(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub):
        call = asyncio.create_task(hub.agent_call("confirm", {"message": "Ship it?"}))
        first = await app.next("tool.call")
        call_id = first["payload"]["call_id"]
        await app.send("device.hello", {"device_id": "py-app", "open_calls": [call_id]})
        await app.next("device.welcome")
        again = await app.next("tool.call")
        assert again["payload"]["call_id"] == call_id
        await app.send("tool.result", {"call_id": call_id, "result": {"approved": True}})
        with anyio.fail_after(GUARD):
            assert (await call).result == {"approved": True}


async def test_a_failed_send_resyncs_the_app_after_reconnecting(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub):
        await app.next("agent.status")  # the greeting after attach has arrived
        server.answer_sends = False
        call = asyncio.create_task(hub.agent_call("choice", {"question": "Which?", "options": ["a", "b"]}))
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: server.unanswered)  # the tool.call is stuck without SENDACK
            server.answer_sends = True
            await server.drop(AGENT)  # ...and fails with the connection
            await server.wait_until(lambda: len(server.logins) == 3)  # app, agent, agent again
        request = await app.next("tool.call")  # re-sent by the re-attach
        await app.send(
            "tool.result", {"call_id": request["payload"]["call_id"], "result": {"selected": "b", "index": 1}}
        )
        with anyio.fail_after(GUARD):
            assert (await call).result == {"selected": "b", "index": 1}


@pytest.mark.parametrize(
    "error",
    [
        ConnectionResetError(104, "Connection reset by peer"),
        ConnectionClosedOK(Close(1000, ""), Close(1000, ""), rcvd_then_sent=True),
    ],
    ids=["reset", "clean-ws-close"],
)
async def test_a_connection_lost_while_a_pushed_message_is_handled_reconnects_the_relay(
    server: FakeWuKongIM, error: BaseException
) -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with py_app(server) as app, running_relay(server, hub) as relay:
        await app.next("agent.status")
        session = relay.client.session
        assert session is not None
        break_next_recvack(session, error)
        await app.text("hello")  # handled, then its RECVACK meets the lost connection
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: len(server.logins) == 3 and server.online(AGENT))
            await relay.connected.wait()
        call = asyncio.create_task(hub.agent_call("choice", {"question": "Still there?", "options": ["y", "n"]}))
        request = await app.next("tool.call")
        await app.send(
            "tool.result", {"call_id": request["payload"]["call_id"], "result": {"selected": "y", "index": 0}}
        )
        with anyio.fail_after(GUARD):
            result = await call
    assert (result.status, result.result) == ("completed", {"selected": "y", "index": 0})
    assert texts == ["hello"]


async def test_what_the_app_sent_while_the_relay_was_away_is_caught_up(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    all_three = asyncio.Event()

    def on_text(device: str, text: str) -> None:
        texts.append(text)
        if len(texts) == 3:
            all_three.set()

    hub = make_hub(on_text=on_text)
    async with py_app(server) as app, running_relay(server, hub) as relay:
        await app.text("before")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: texts == ["before"])
            server.connect_reasons[AGENT] = ReasonCode.RATE_LIMIT  # keep the agent out for a while
            await server.drop(AGENT)
            await server.wait_until(lambda: not relay.connected.is_set())
        await app.text("while away")  # nobody to push it to
        await app.send("text", {"text": "also while away"})
        del server.connect_reasons[AGENT]
        with anyio.fail_after(GUARD):
            await all_three.wait()
    assert texts == ["before", "while away", "also while away"]
    assert [c for c in server.http_calls if c[1] == "/channel/messagesync"][-1][2]["start_message_seq"] > 1


async def test_history_from_before_the_relay_started_is_not_replayed(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    await server.push(APP, AGENT, b'{"type":1,"content":"old news"}')
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with py_app(server) as app, running_relay(server, hub):
        await app.text("fresh")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: texts)
    assert texts == ["fresh"]


async def test_custom_content_type_is_configurable(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server, content_type=4242) as app, running_relay(server, hub, content_type=4242):
        assert (await app.next("device.welcome"))["payload"]["device_id"] == "wukongim:app-user"
    assert json.loads(server.messages_from(AGENT)[0].payload)["type"] == 4242


# --- incoming filtering ----------------------------------------------------------------------


async def test_plain_text_becomes_a_user_message(server: FakeWuKongIM) -> None:
    texts: list[tuple[str, str]] = []
    hub = make_hub(on_text=lambda device, text: texts.append((device, text)))
    async with py_app(server) as app, running_relay(server, hub):
        await app.text("please deploy")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: any(a.uid == AGENT for a in server.recvacks))
    assert texts == [("wukongim:app-user", "please deploy")]


async def test_im_redeliveries_reach_the_hub_once(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with py_app(server) as app, running_relay(server, hub):
        await app.text("once")
        stored = server.messages_from(APP)[-1]
        await server.resend(stored, AGENT)  # same message id: the server's retry
        await app.send("text", {"text": "envelope"}, id="env-1")
        await app.send("text", {"text": "envelope"}, id="env-1")  # the App retried: new message id
        await app.text("last")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: sum(a.uid == AGENT for a in server.recvacks) == 5)
    assert texts == ["once", "envelope", "last"]


async def test_messages_from_other_users_are_ignored(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with py_app(server, uid="stranger") as stranger, running_relay(server, hub):
        await stranger.text("let me in")
        await stranger.send("tool.result", {"call_id": "x", "result": {}})
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: sum(a.uid == AGENT for a in server.recvacks) == 2)
    assert texts == []
    assert [m for m in server.messages_from(AGENT) if m.channel_id == "stranger"] == []  # no answer to strangers


async def test_malformed_envelopes_are_answered_with_an_error(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub):
        await app.send("tool.result", {"result": {}}, id="bad-1")
        error = await app.next("error")
        assert error["payload"]["code"] == "bad_message"
        assert "payload.call_id" in error["payload"]["message"]
        await app.send("text", {"text": "from the future"}, id="v2-1", v=2)
        error = await app.next("error")
        assert error["payload"]["code"] == "unsupported_version"


async def test_non_json_and_unknown_content_are_ignored(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with py_app(server) as app, running_relay(server, hub):
        await app.session.send(AGENT, 1, b"not json")
        await app.session.send(AGENT, 1, b'{"type":2,"url":"image.png"}')
        await app.session.send(AGENT, 1, b'{"type":9527,"envelope":"not an object"}')
        await app.text("still listening")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: sum(a.uid == AGENT for a in server.recvacks) == 4)
    assert texts == ["still listening"]


# --- HTTP API ----------------------------------------------------------------------------------


async def test_manager_token_registers_the_agent_token_and_route_finds_the_server() -> None:
    async with FakeWuKongIM(token_auth=True, manager_token="mgr") as server:
        async with running_relay(server, make_hub(), manager_token="mgr") as relay:
            token = relay.options.token
            assert len(token) >= 24
        assert ("POST", "/user/token", {"uid": AGENT, "token": token, "device_flag": 2, "device_level": 0}) in (
            server.http_calls
        )
        assert ("GET", "/route", {}) in server.http_calls
        assert server.tokens[(AGENT, 2)] == token


async def test_a_wrong_manager_token_stops_the_relay() -> None:
    async with FakeWuKongIM(manager_token="right") as server:
        config = WuKongIMSettings(api_url=server.api_url, uid=AGENT, app_uid=APP, manager_token="wrong")
        with anyio.fail_after(GUARD), pytest.raises(RelayAuthError, match="refused the manager token"):
            await Relay(config, make_hub(), timers=FAST).run()


async def test_a_refused_agent_token_stops_the_relay() -> None:
    # v2.2.5: no CONNACK, the idle connection closed 4 s after CONNECT (here 0.1 s), again and again
    async with FakeWuKongIM(token_auth=True, bad_token_close_after=0.1) as server:
        config = WuKongIMSettings(api_url=server.api_url, uid=AGENT, app_uid=APP, token="wrong", ws_url=server.ws_url)
        timers = Timers(connect_timeout=GUARD, reconnect_min=0.01, reconnect_max=0.05, login_refused_after=0.05)
        with anyio.fail_after(GUARD), pytest.raises(RelayAuthError, match="before CONNACK 3 times in a row"):
            await Relay(config, make_hub(), timers=timers).run()
        assert server.http_calls == []  # ws_url given: no /route
        assert server.connects == 3


async def test_a_close_before_connack_does_not_stop_the_relay(server: FakeWuKongIM) -> None:
    server.close_before_connack = 2  # e.g. the server restarting
    async with running_relay(server, make_hub()) as relay:
        assert relay.connected.is_set()
    assert server.connects == 3


# --- calls too large for one frame ----------------------------------------------------------


def _send_frame(text: str, version: int) -> bytes:
    # the SEND the relay's client makes of one envelope text: wrapped, encrypted, signed, framed
    cipher = SessionCipher(b"0123456789abcdef", b"fedcba9876543210")
    payload = cipher.encrypt(wrap_envelope(text, 9527))
    packet = wkcrypto.signed(cipher, SendPacket(0xFFFFFFFF, uuid.uuid4().hex, APP, 1, payload))
    return wkproto.encode(packet, version)


def _text_of(size: int) -> str:
    return '{"pad":"' + "x" * (size - 10) + '"}'


@pytest.mark.parametrize("version", [3, 4, 5])  # version 2 has no expire field: 4 bytes more room
def test_max_text_fits_one_frame_and_one_byte_more_does_not(version: int) -> None:
    limit = max_envelope_text(APP, 9527)
    assert len(_text_of(limit).encode()) == limit
    assert len(_send_frame(_text_of(limit), version)) <= 1 + 4 + wkproto.MAX_REMAINING_LENGTH
    with pytest.raises(RelayProtocolError, match="exceeds"):
        _send_frame(_text_of(limit + 1), version)


def test_max_text_fits_one_frame_at_version_2() -> None:
    _send_frame(_text_of(max_envelope_text(APP, 9527)), 2)


async def test_a_text_too_large_for_one_frame_is_refused_at_once_and_the_largest_is_sent(
    server: FakeWuKongIM,
) -> None:
    async with running_relay(server, make_hub()) as relay:
        link = relay.link
        assert link.max_text == max_envelope_text(APP, 9527) > 700_000
        with pytest.raises(TransportError, match=f"too large for one WuKongIM frame.*at most {link.max_text}"):
            link.send(_text_of(link.max_text + 1))
        with pytest.raises(TransportError, match="too large"):
            link.send('"' + "预" * (link.max_text // 3 + 1) + '"')  # fewer characters than bytes
        largest = _text_of(link.max_text)
        link.send(largest)
        with anyio.fail_after(GUARD):
            await server.wait_until(
                lambda: any(m.payload == wrap_envelope(largest, 9527) for m in server.messages_from(AGENT))
            )


# --- the official JS SDK as the App ----------------------------------------------------------


@pytest.mark.node
@pytest.mark.skipif(js_sdk_missing() is not None, reason=js_sdk_missing() or "")
async def test_choice_round_trip_with_the_official_js_sdk() -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with FakeWuKongIM(token_auth=True, manager_token="mgr") as server:
        server.tokens[(APP, 1)] = "app-token"
        args = ("--agent", AGENT, "--hello", "--answer-choice", "1")
        async with (
            running_relay(server, hub, manager_token="mgr"),
            JsSdkApp(server.ws_url, APP, "app-token", *args) as app,
        ):
            with anyio.fail_after(GUARD):
                await app.wait_for(
                    "message", where=lambda e: e["content"]["envelope"]["type"] == "lineup.v1.device.welcome"
                )
                result = await hub.agent_call("choice", {"question": "Deploy where?", "options": ["test", "预发布"]})
                call = await app.wait_for(
                    "message", where=lambda e: e["content"]["envelope"]["type"] == "lineup.v1.tool.call"
                )
                await app.command(cmd="text", channel=AGENT, channelType=1, text="thanks")
                await server.wait_until(lambda: texts)
    assert (result.status, result.result) == ("completed", {"selected": "预发布", "index": 1})
    assert call["contentType"] == 9527 and call["fromUID"] == AGENT
    assert call["content"]["envelope"]["payload"]["name"] == "choice"
    assert texts == ["thanks"]
    app_acks = [a for a in server.recvacks if a.uid == APP]
    assert {a.message_id for a in app_acks} >= {int(call["messageID"])}  # the SDK acknowledged the call


async def test_a_call_larger_than_one_wukongim_frame_fails_at_once_saying_so(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server), running_relay(server, hub):
        huge = {"question": "Which one?", "options": ["x" * 200_000 + str(n) for n in range(5)]}
        with anyio.fail_after(GUARD):
            result = await hub.agent_call("choice", huge)
        assert result.status == "failed" and result.result["error"] == "too_large"
        assert "carries" in result.result["message"] and "ask for less" in result.result["message"]
