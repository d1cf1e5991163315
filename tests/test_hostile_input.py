"""Hostile and broken input found when the plugin was attacked: each defect, as a test that failed before its fix.

Item numbers are those of the hardening issue (see docs/durability.md).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import StoreError
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.base import MAX_ERROR_CHARS
from lineup_plugin.protocol.calls import CallState
from lineup_plugin.protocol.messages import (
    Actor,
    AgentStop,
    ConversationUpdate,
    DeviceHello,
    Error,
    Text,
    ToolCall,
    ToolCancel,
    ToolResult,
)
from lineup_plugin.protocol.session import Change, SaveCall
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.direct.auth import AuthThrottle
from lineup_plugin.transports.direct.server import DirectServer, Limits
from lineup_plugin.transports.memory import MemoryApp
from tests.wsapp import WsApp, encode_from, hello_text, wait_until

TOKEN = "hostile-test-token-0123456789"
CHOICE = {"question": "Deploy where?", "options": ["test", "staging"]}
GUARD = 10  # seconds a test may wait for an event before it fails instead of hanging


def settings(tmp_path: Path, **changes: Any) -> Settings:
    return Settings(**{"host": "127.0.0.1", "port": 0, "token": TOKEN, "data_dir": tmp_path / "data", **changes})


@asynccontextmanager
async def running(tmp_path: Path, hub: Hub | None = None, **options: Any) -> AsyncIterator[DirectServer]:
    hub = hub or Hub(load_registry(load_entrypoints=False))
    changes = options.pop("settings", {})
    async with DirectServer.from_settings(hub, settings(tmp_path, **changes), **options) as server:
        yield server


def raw_result(call_id: str, result_json: str) -> str:
    """A tool.result envelope whose ``result`` is the given JSON text (escapes kept as written)."""
    text = encode_from("phone", ToolResult(call_id=call_id, result={"x": 1}))
    return text.replace('{"x":1}', result_json)


# --- 1. what the store cannot write is refused; a failed write fails one call, loudly ------------------------


@pytest.mark.parametrize(
    "result_json",
    [
        '{"selected": "\\ud83d"}',  # a lone surrogate
        '{"\\udc00": 1}',  # one in a key
        "[" * 40 + "]" * 40,  # nested deeper than the bound
        '{"value": 1e999}',  # not a finite number
    ],
    ids=["lone-surrogate", "surrogate-key", "deep", "infinite"],
)
async def test_an_answer_the_store_cannot_write_is_refused_and_the_store_goes_on(
    tmp_path: Path, result_json: str
) -> None:
    with SQLiteStore(tmp_path / "lineup.sqlite3") as store:
        hub = Hub(load_registry(load_entrypoints=False), store=store)
        app = MemoryApp(hub, "phone")
        await app.connect()
        call = asyncio.create_task(hub.call("choice", CHOICE))
        request = (await app.next("tool.call")).payload
        assert isinstance(request, ToolCall)
        await hub.receive(app, raw_result(request.call_id, result_json))
        error = (await app.next("error")).payload
        assert isinstance(error, Error) and error.code == "bad_message" and "payload.result" in error.message
        assert not call.done()  # the card is still open: the App may answer again
        await app.send_payload(ToolResult(call_id=request.call_id, result={"selected": "test", "index": 0}))
        assert (await call).status == "completed"
        assert store.get_call(request.call_id).state is CallState.COMPLETED  # type: ignore[union-attr]
        second = asyncio.create_task(hub.call("choice", CHOICE))
        again = (await app.next("tool.call")).payload
        assert isinstance(again, ToolCall)
        await app.send_payload(ToolResult(call_id=again.call_id, result={"selected": "staging", "index": 1}))
        assert (await second).status == "completed"
        assert store.pending_calls() == []


@pytest.mark.parametrize(
    ("arguments", "says"),
    [
        ({"question": "\ud800?", "options": ["a", "b"]}, "arguments.question: lone surrogate"),
        ({"question": "q", "options": ["a", "b"], "extra": float("inf")}, "number out of range"),
        ({"question": "q", "options": ["a", json.loads("[" * 40 + "]" * 40)]}, "nested deeper than 32"),
    ],
    ids=["lone-surrogate", "infinite", "deep"],
)
async def test_arguments_the_store_cannot_write_fail_the_call_and_nothing_is_kept(
    tmp_path: Path, arguments: dict[str, Any], says: str, caplog: pytest.LogCaptureFixture
) -> None:
    # e.g. a model's JSON with a lone surrogate (Hermes, MCP and forwarded calls all come through here)
    with SQLiteStore(tmp_path / "lineup.sqlite3") as store:
        hub = Hub(load_registry(load_entrypoints=False), store=store)
        app = MemoryApp(hub, "phone")
        await app.connect()
        result = await hub.call("choice", arguments)
        assert (result.status, result.result["error"]) == ("failed", "invalid_arguments")
        assert says in result.result["message"]
        assert store.get_call(result.call_id) is None and store.pending_calls() == []
        second = asyncio.create_task(hub.call("choice", CHOICE))
        request = (await app.next("tool.call")).payload
        assert isinstance(request, ToolCall)
        await app.send_payload(ToolResult(call_id=request.call_id, result={"selected": "a", "index": 0}))
        assert (await second).status == "completed"
    assert "could not save" not in caplog.text


@pytest.mark.parametrize("field", ["name", "reason"])
async def test_lone_surrogates_in_names_and_reasons_are_refused(field: str) -> None:
    hub = Hub(load_registry(load_entrypoints=False))
    app = MemoryApp(hub, "phone")
    await app.connect()
    payload = ToolResult(call_id="c1", name="x") if field == "name" else ToolCancel(call_id="c1", reason="x")
    text = encode_from("phone", payload).replace(f'"{field}":"x"', f'"{field}":"\\ud800"')
    await hub.receive(app, text)
    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.code == "bad_message" and f"payload.{field}" in error.message


class FailingOn(SQLiteStore):
    """A real store whose writes fail for one call (an I/O error, as on a bad disk sector)."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.poisoned: str | None = None

    def apply(self, changes: Iterable[Change]) -> None:
        changes = list(changes)
        if any(isinstance(c, SaveCall) and c.call.call_id == self.poisoned for c in changes):
            raise StoreError("store failure while writing: disk I/O error")
        super().apply(changes)


async def test_a_failed_store_write_fails_that_call_loudly_and_the_store_keeps_the_others(tmp_path: Path) -> None:
    with FailingOn(tmp_path / "lineup.sqlite3") as store:
        hub = Hub(load_registry(load_entrypoints=False), store=store)
        phone, laptop = MemoryApp(hub, "phone"), MemoryApp(hub, "laptop")
        await phone.connect()
        await laptop.connect()
        first = asyncio.create_task(hub.call("choice", CHOICE))
        request = (await phone.next("tool.call")).payload
        await laptop.next("tool.call")
        assert isinstance(request, ToolCall)
        store.poisoned = request.call_id  # its answer cannot be written
        await phone.send_payload(ToolResult(call_id=request.call_id, result={"selected": "test", "index": 0}))
        result = await first
        assert result.status == "failed" and result.result["error"] == "store_failed"  # the model is told
        for app in (phone, laptop):  # and every App: the card closes with the reason
            notice = (await app.next("tool.cancel")).payload
            assert isinstance(notice, ToolCancel) and "could not save this call" in (notice.reason or "")
        store.poisoned = None
        second = asyncio.create_task(hub.call("choice", CHOICE))
        again = (await phone.next("tool.call")).payload
        assert isinstance(again, ToolCall)
        await phone.send_payload(ToolResult(call_id=again.call_id, result={"selected": "staging", "index": 1}))
        assert (await second).status == "completed"
        assert store.get_call(again.call_id).state is CallState.COMPLETED  # type: ignore[union-attr]


# --- 2. nothing big before the token ------------------------------------------------------------------------


async def test_a_huge_hello_is_refused_before_the_token_is_checked(tmp_path: Path) -> None:
    async with running(tmp_path) as server, connect(f"ws://127.0.0.1:{server.port}/ws", max_size=None) as ws:
        hello = DeviceHello(device_id="x", open_calls=["c"])
        text = encode_from("x", hello).replace('["c"]', json.dumps(["not valid!" * 3] * 20_000))
        assert len(text) > 600_000
        await ws.send(text)
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009  # message too big


async def test_the_error_for_a_bad_hello_is_short_and_names_the_first_problems(tmp_path: Path) -> None:
    async with running(tmp_path) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        text = encode_from("x", DeviceHello(device_id="x", open_calls=["c"])).replace('["c"]', json.dumps([""] * 900))
        await ws.send(text)
        error = codec.decode(await ws.recv()).payload
        assert isinstance(error, Error) and error.code == "bad_message"
        assert len(error.message) <= MAX_ERROR_CHARS and error.message.endswith("and 895 more problems")


# --- 3. a gone socket gives its place back; shutdown does not wait for slow-down turns ----------------------


async def test_a_throttled_hello_whose_socket_is_gone_frees_its_slot_at_once(tmp_path: Path) -> None:
    throttle = AuthThrottle(base=3600.0, cap=3600.0)  # an hour's slow-down after one wrong token
    attacker = {"local_addr": ("127.0.0.2", 0)}  # another address than the owner's
    async with running(tmp_path, throttle=throttle) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws", **attacker) as ws:
            await ws.send(hello_text("guess", "wrong-token-0123456789"))
            assert (await ws.recv()) and server.throttle.failures("127.0.0.2") == 1
        for _ in range(3):  # each waits its hour-long turn; then its socket goes away
            ws = await connect(f"ws://127.0.0.1:{server.port}/ws", **attacker)
            await ws.send(hello_text("guess", "wrong-token-0123456789"))
            await ws.close()
        async with asyncio.timeout(GUARD):
            await wait_until(lambda: server.connections == 0)
        async with asyncio.timeout(GUARD):  # and the owner is served
            owner = await WsApp.connect(server, "owner")
            await owner.close()


async def test_shutdown_does_not_wait_for_hellos_in_their_slow_down_turn(tmp_path: Path) -> None:
    throttle = AuthThrottle(base=3600.0, cap=3600.0)
    hub = Hub(load_registry(load_entrypoints=False))
    server = DirectServer.from_settings(hub, settings(tmp_path), throttle=throttle)
    await server.start()
    throttle.failed("127.0.0.1")
    waiting = [await connect(f"ws://127.0.0.1:{server.port}/ws") for _ in range(3)]
    for ws in waiting:
        await ws.send(hello_text("guess", "wrong-token-0123456789"))
    await wait_until(lambda: server.connections == 3)
    async with asyncio.timeout(GUARD):
        await server.close()
    assert server.connections == 0
    for ws in waiting:
        await ws.close()


async def test_unauthenticated_connections_cannot_starve_the_owner(tmp_path: Path) -> None:
    limits = Limits(max_unauthenticated=3)
    async with running(tmp_path, limits=limits, settings={"max_connections": 8}) as server:
        idle = [await connect(f"ws://127.0.0.1:{server.port}/ws") for _ in range(3)]  # never say hello
        await wait_until(lambda: server.connections == 3)
        owner = await WsApp.connect(server, "owner")  # the App gets in: the oldest idle one made room
        with pytest.raises(ConnectionClosed) as refused:
            await idle[0].recv()
        assert refused.value.rcvd is not None and refused.value.rcvd.code == 1013
        await owner.close()
        for ws in idle[1:]:
            await ws.close()


# --- 6. Host allow-list (DNS rebinding) ---------------------------------------------------------------------


async def test_a_request_for_another_host_name_is_refused(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"allowed_hosts": ["lineup.home.arpa"]}) as server:
        base = f"http://127.0.0.1:{server.port}"
        async with httpx.AsyncClient() as http:
            evil = await http.get(f"{base}/", headers={"Host": f"rebind.evil:{server.port}"})
            assert evil.status_code == 421 and "not this agent" in evil.text
            assert (await http.get(f"{base}/", headers={"Host": f"127.0.0.1:{server.port}"})).status_code == 200
            assert (await http.get(f"{base}/", headers={"Host": f"localhost:{server.port}"})).status_code == 200
            named = await http.get(f"{base}/", headers={"Host": f"lineup.home.arpa:{server.port}"})
            assert named.status_code == 200
            upgrade = {
                "Host": f"rebind.evil:{server.port}",
                "Origin": f"http://rebind.evil:{server.port}",
                "Connection": "Upgrade",
                "Upgrade": "websocket",
                "Sec-WebSocket-Version": "13",
                "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            }
            assert (await http.get(f"{base}/ws", headers=upgrade)).status_code == 421  # no WebSocket either


# --- 8. the generated token is redacted too -----------------------------------------------------------------


async def test_the_generated_token_never_reaches_the_audit_log(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "lineup.sqlite3") as store:
        hub = Hub(load_registry(load_entrypoints=False), store=store)
        async with running(tmp_path, hub, settings={"token": None}) as server:
            app = await WsApp.connect(server, "phone")
            await app.send(AgentStop(reason=f"my token is {server.token}"))
            await wait_until(lambda: any(event == "agent.stop" for event, *_ in store.audit_log))
            await app.close()
        details = [detail for _, _, _, detail in store.audit_log]
        assert "my token is [redacted]" in details and not any(server.token in d for d in details)


# --- 9. logs: no forged lines, no tracebacks for probes -----------------------------------------------------


async def test_a_newline_in_a_refused_device_id_cannot_forge_a_log_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    throttle = AuthThrottle(base=0.001, cap=0.001)
    async with running(tmp_path, throttle=throttle) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        await ws.send(hello_text("phone\nCRITICAL lineup: all your base", "wrong-token-0123456789"))
        await ws.recv()
    refused = [r.getMessage() for r in caplog.records if "wrong token" in r.getMessage()]
    assert refused and all("\n" not in line for line in refused)
    assert "phone\\nCRITICAL" in refused[0]


async def test_probes_that_fail_the_handshake_log_one_short_info_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running(tmp_path) as server:
        for probe in (b"", b"HEAD /ws HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", b"\x16\x03\x01 not http\r\n\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(probe)
            writer.write_eof()
            await reader.read()  # until the server closes
            writer.close()
            await writer.wait_closed()
        await wait_until(lambda: any("handshake" in r.getMessage() for r in caplog.records))
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    lines = [r for r in caplog.records if "handshake" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO and lines[0].exc_info is None


# --- 11. a hello as the seed documents write it -------------------------------------------------------------


async def test_a_hello_that_names_the_device_only_in_sender_id_is_accepted(tmp_path: Path) -> None:
    async with running(tmp_path) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        envelope = codec.envelope(
            DeviceHello(token=TOKEN),
            sender=Actor(kind="device", id="seed-phone"),
            target=Actor(kind="agent", id="lineup-agent"),
            conversation_id="default",
        )
        await ws.send(codec.encode(envelope))
        welcome = codec.decode(await ws.recv())
        assert welcome.kind == "device.welcome" and welcome.payload.device_id == "seed-phone"  # type: ignore[union-attr]


# --- 10. lone surrogates in a hello's open cards or a stop reason ------------------------------------------


async def test_a_lone_surrogate_in_open_calls_is_a_bad_hello_not_a_server_error(tmp_path: Path) -> None:
    async with running(tmp_path) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        hello = hello_text("phone", TOKEN, ["c1"]).replace('"c1"', '"\\ud83d"')
        await ws.send(hello)
        error = codec.decode(await ws.recv()).payload
        assert isinstance(error, Error) and error.code == "bad_message" and "open_calls" in error.message
        with pytest.raises(ConnectionClosed) as closed:
            await ws.recv()
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400  # not 1011


async def test_a_lone_surrogate_in_a_stop_reason_is_refused_and_a_clean_stop_still_works(tmp_path: Path) -> None:
    stops: list[str] = []
    hub = Hub(load_registry(load_entrypoints=False), on_stop=stops.append)
    async with running(tmp_path, hub) as server:
        app = await WsApp.connect(server, "phone")
        await app.ws.send(encode_from("phone", AgentStop(reason="x")).replace('"reason":"x"', '"reason":"\\udfff"'))
        error = (await app.next("error")).payload
        assert isinstance(error, Error) and error.code == "bad_message" and "payload.reason" in error.message
        await app.send(AgentStop(reason="enough"))
        await wait_until(lambda: stops == ["phone"])
        await app.close()


# --- 11. a conversation.update that changes nothing, or not a title a device could show ---------------------


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ('{"title":"\\ud800"}', "lone surrogate"),
        ('{"title":"   "}', "blank"),
        ('{"title":"' + "x" * 201 + '"}', "at most 200"),
        ("{}", "needs a title or closed"),
        ('{"closed":"yes"}', "closed"),
    ],
    ids=["lone-surrogate", "blank", "too-long", "empty", "not-a-bool"],
)
async def test_a_bad_conversation_update_is_refused_and_a_clean_one_still_works(
    tmp_path: Path, payload: str, where: str
) -> None:
    hub = Hub(load_registry(load_entrypoints=False))
    async with running(tmp_path, hub) as server:
        app = await WsApp.connect(server, "phone")
        clean = encode_from("phone", ConversationUpdate(title="x"), conversation_id="app-1")
        await app.ws.send(clean.replace('{"title":"x"}', payload))
        error = (await app.next("error")).payload
        assert isinstance(error, Error) and error.code == "bad_message" and where in error.message
        assert hub.session.history.conversations() == []  # nothing kept
        await app.send(ConversationUpdate(title="Offsite"), conversation_id="app-1")
        await wait_until(lambda: [c.title for c in hub.session.history.conversations()] == ["Offsite"])
        await app.close()


# --- 12. a free-text field of half a megabyte (each field an App sends has a length limit) -------------------

LONG = "y" * 500_000


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda call_id: ToolCancel(call_id=call_id, reason="LONG"), "reason"),
        (lambda call_id: AgentStop(reason="LONG"), "reason"),
        (lambda call_id: ToolResult(call_id=call_id, name="LONG", result={"selected": "test", "index": 0}), "name"),
        (lambda call_id: ToolResult(call_id=call_id, action="LONG", result={"selected": "test", "index": 0}), "action"),
        (lambda call_id: ToolCall(call_id="app-call", name="choice", action="LONG"), "action"),
        (lambda call_id: ToolCall(call_id="app-call", name="choice", risk="LONG"), "risk"),
        (lambda call_id: Text(text="hello", reply_to="LONG"), "reply_to"),
    ],
    ids=["cancel-reason", "stop-reason", "result-name", "result-action", "call-action", "call-risk", "reply-to"],
)
async def test_a_half_megabyte_free_text_field_is_refused_naming_it_and_nothing_of_it_is_kept_or_told(
    tmp_path: Path, make: Any, field: str
) -> None:
    stops: list[str] = []
    with SQLiteStore(tmp_path / "lineup.sqlite3") as store:
        hub = Hub(load_registry(load_entrypoints=False), store=store, on_stop=stops.append)
        async with running(tmp_path, hub) as server:
            phone = await WsApp.connect(server, "phone")
            laptop = await WsApp.connect(server, "laptop")
            asked = asyncio.create_task(hub.call("choice", CHOICE))
            call = await phone.next_call()
            assert (await laptop.next_call()).call_id == call.call_id
            text = encode_from("phone", make(call.call_id))
            await phone.ws.send(text.replace('"LONG"', json.dumps(LONG)))
            error = (await asyncio.wait_for(phone.next("error"), GUARD)).payload
            assert isinstance(error, Error) and error.code == "bad_message"
            assert f"payload.{field}: string should have at most" in error.message and LONG[:100] not in error.message
            await phone.answer(call, selected="test", index=0)  # the call went on as if nothing came
            assert (await asyncio.wait_for(asked, GUARD)).status == "completed"
            while (
                message := codec.decode(told := await asyncio.wait_for(laptop.ws.recv(), GUARD))
            ).kind != "tool.cancel":
                assert LONG[:100] not in told
            assert isinstance(message.payload, ToolCancel) and message.payload.reason == "answered on another device"
            await phone.close()
            await laptop.close()
        assert stops == []
        assert not any(LONG[:100] in str(row) for row in store.audit_log)
    kept = b"".join(path.read_bytes() for path in tmp_path.rglob("*") if path.is_file())
    assert LONG[:100].encode() not in kept
