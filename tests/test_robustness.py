"""Bad input of every kind over the direct transport, while good Apps keep being served and nothing is lost.

One scenario on a real DirectServer with a real SQLite store: the agent keeps asking the user's
good App (which answers every card) while a passive App watches, and meanwhile other clients
send malformed JSON, binary frames, wrong types, an unknown kind and version, an oversized frame,
a flood, read nothing, open too many connections and guess tokens. Each gets its own clear error
or close reason; the good Apps are never disconnected; every call ends with the answer the good
App gave, in the agent and in the store; no token reaches the store. (tests/transports/test_direct.py
tests each breach on its own.)
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol.calls import CallState
from lineup_plugin.protocol.messages import Error, Text, ToolCall, ToolCancel, ToolList, ToolResult
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.direct.auth import AuthThrottle
from lineup_plugin.transports.direct.reading import FLOODED
from lineup_plugin.transports.direct.server import QUEUE_FULL, TOO_MANY, DirectServer, Limits

from .wsapp import WsApp, encode_from, wait_until

TOKEN = "robustness-token-0123456789"
WRONG_TOKENS = [f"wrong-guess-{n}-{secrets.token_hex(4)}" for n in range(5)]
CHOICE = {"question": "Deploy where?", "options": ["test", "staging", "production"]}
MAX_CONNECTIONS = 8
MIN_CALLS = 12


class Answerer:
    """The good App: answers every card it is shown, and remembers what it answered."""

    def __init__(self, app: WsApp) -> None:
        self.app = app
        self.answers: dict[str, dict[str, Any]] = {}
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            message = await self.app.recv()
            if isinstance(message.payload, ToolCall):
                index = len(self.answers) % 3
                answer = {"selected": CHOICE["options"][index], "index": index}  # type: ignore[index]
                self.answers[message.payload.call_id] = answer
                await self.app.answer(message.payload, **answer)


class Watcher:
    """A passive App of the same user: sees every card and sees it dismissed."""

    def __init__(self, app: WsApp) -> None:
        self.app = app
        self.calls: list[str] = []
        self.cancels: dict[str, str | None] = {}
        self.task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        while True:
            payload = (await self.app.recv()).payload
            if isinstance(payload, ToolCall):
                self.calls.append(payload.call_id)
            elif isinstance(payload, ToolCancel):
                self.cancels[payload.call_id] = payload.reason


def raw_envelope(device_id: str, **changes: Any) -> str:
    """A valid ``tool.list`` envelope from ``device_id`` with ``changes`` applied (to make it invalid)."""
    message = json.loads(encode_from(device_id, ToolList()))
    message.update(changes)
    return json.dumps(message)


async def error_then_still_served(app: WsApp, frame: str | bytes) -> Error:
    """Send a bad ``frame``; return the error it got, after checking the connection still works."""
    await app.ws.send(frame)
    error = (await app.next("error")).payload
    assert isinstance(error, Error)
    await app.send(ToolList(request=True))
    await app.next("tool.list")
    return error


async def bad_frames(server: DirectServer) -> None:
    app = await WsApp.connect(server, "bad-frames")
    error = await error_then_still_served(app, '{"v": 1, "id": "x", "type": ')
    assert error.code == "bad_message" and error.message.startswith("message: malformed JSON")
    error = await error_then_still_served(app, b"\x00\xffbinary")
    assert (error.code, error.message) == ("binary_not_supported", "binary frames are not supported; send JSON text")
    wrong_type = raw_envelope("bad-frames", type="lineup.v1.tool.result", payload={"call_id": 5, "status": "maybe"})
    error = await error_then_still_served(app, wrong_type)
    assert error.code == "bad_message" and "payload.call_id: input should be a valid string" in error.message
    assert "payload.status" in error.message
    error = await error_then_still_served(app, raw_envelope("bad-frames", type="lineup.v1.tool.explode"))
    assert (error.code, error.message) == ("bad_message", "type: unknown kind 'tool.explode'")
    error = await error_then_still_served(app, raw_envelope("bad-frames", v=2))
    assert (error.code, error.message) == (
        "unsupported_version",
        "unsupported protocol version 2: this side speaks v1 only",
    )
    error = await error_then_still_served(app, "[1, 2, 3]")
    assert (error.code, error.message) == ("bad_message", "message: expected a JSON object, got list")
    await app.close()


async def oversized(server: DirectServer) -> None:
    app = await WsApp.connect(server, "oversized")
    await app.ws.send("x" * (server.options.max_frame_bytes + 1))
    code, reason, _ = await app.closed()
    assert code == 1009 and f"exceeds limit of {server.options.max_frame_bytes} bytes" in reason


async def flood(server: DirectServer) -> None:
    app = await WsApp.connect(server, "flooder")
    try:
        for index in range(2000):
            await app.send(Text(text=f"spam {index}"))
    except ConnectionClosed:
        pass
    code, reason, before = await app.closed()
    errors = {m.payload.code for m in before if isinstance(m.payload, Error)}
    assert (code, reason) == (1008, FLOODED)
    assert errors == {"rate_limited"}


async def slow_reader(server: DirectServer) -> None:
    slow = await WsApp.connect(server, "slow-reader", max_queue=1, compression=None)
    link = next(p.link for p in server.hub.peers if p.device_id == "slow-reader")
    for _ in range(1000):  # big agent messages until the kernel buffers towards it are full
        if link.close_reason is not None:  # type: ignore[attr-defined]
            break
        await server.hub.send_text(secrets.token_urlsafe(48_000))
        await asyncio.sleep(0)
    code, reason, _ = await slow.closed()
    assert (code, reason) == (1008, QUEUE_FULL)


async def too_many_connections(server: DirectServer) -> None:
    await wait_until(lambda: server.connections == 2)  # the good Apps; the breaches before are gone
    fillers = []  # connections that never say hello: they have a budget of their own
    while server.connections < 2 + server.limits.max_unauthenticated:
        before = server.connections
        fillers.append(await connect(f"ws://127.0.0.1:{server.port}/ws"))
        await wait_until(lambda: server.connections > before)  # noqa: B023 - awaited before the loop goes on
    async with connect(f"ws://127.0.0.1:{server.port}/ws"):  # one more gets a slot: the oldest is ended
        try:
            await fillers[0].recv()
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and (closed.rcvd.code, closed.rcvd.reason) == (1013, TOO_MANY)
        else:
            raise AssertionError("the oldest connection that never said hello was kept")
    for filler in fillers:
        await filler.close()
    await wait_until(lambda: server.connections == 2)
    apps = [await WsApp.connect(server, f"tablet-{n}") for n in range(MAX_CONNECTIONS - 2)]  # all the slots
    async with connect(f"ws://127.0.0.1:{server.port}/ws") as extra:
        try:
            await extra.recv()
        except ConnectionClosed as closed:
            assert closed.rcvd is not None and (closed.rcvd.code, closed.rcvd.reason) == (1013, TOO_MANY)
        else:
            raise AssertionError("the connection over max_connections was served")
    for app in apps:
        await app.close()
    await wait_until(lambda: server.connections == 2)


async def wrong_tokens(server: DirectServer) -> None:
    for attempt, token in enumerate(WRONG_TOKENS, start=1):
        app = await WsApp.connect(server, "guesser", token=token, welcome=False)
        code, reason, before = await app.closed()
        assert (code, reason) == (4401, "wrong token")
        assert [m.payload for m in before] == [Error(code="auth_failed", message="wrong token")]
        assert server.throttle.failures("127.0.0.1") == attempt
    garbage = await connect(f"ws://127.0.0.1:{server.port}/ws")
    await garbage.send("hello?")
    code, reason, _ = await WsApp(garbage, "garbage").closed()
    assert code == 4400 and reason.startswith("bad hello: message: malformed JSON")


async def test_bad_input_of_every_kind_leaves_the_good_apps_served_and_loses_nothing(tmp_path: Path) -> None:
    settings = Settings(
        host="127.0.0.1",
        port=0,
        token=TOKEN,
        data_dir=tmp_path / "data",
        max_frame_bytes=16_384,
        max_queue=8,
        max_connections=MAX_CONNECTIONS,
    )
    store = SQLiteStore(settings.database, secrets=[TOKEN])
    hub = Hub(load_registry(load_entrypoints=False), store=store, deadline=60)
    limits = Limits(message_rate=50, message_burst=20, flood_strikes=10, hello_timeout=30, max_unauthenticated=4)
    results: dict[str, ToolResult] = {}
    breaches_done = asyncio.Event()

    async def agent() -> None:
        while len(results) < MIN_CALLS or not breaches_done.is_set():
            result = await hub.call("choice", CHOICE)
            results[result.call_id] = result
            await asyncio.sleep(0.05)  # pacing, not synchronisation: keeps the good App well under the rate

    async with (
        asyncio.timeout(120),
        DirectServer.from_settings(hub, settings, limits=limits, throttle=AuthThrottle(base=0.001, cap=0.01)) as server,
    ):
        answerer = Answerer(await WsApp.connect(server, "good-phone", compression=None))
        watcher = Watcher(await WsApp.connect(server, "good-laptop", compression=None))
        asking = asyncio.create_task(agent())
        breaches: list[Callable[[DirectServer], Awaitable[None]]] = [
            bad_frames,
            oversized,
            flood,
            slow_reader,
            too_many_connections,
            wrong_tokens,
        ]
        for breach in breaches:
            await breach(server)
            assert not asking.done(), f"the agent stopped during {breach.__name__}"
            assert {p.device_id for p in hub.peers} >= {"good-phone", "good-laptop"}, breach.__name__
        breaches_done.set()
        await asking

        again = await WsApp.connect(server, "good-tablet")  # the server still takes new Apps
        await again.close()
        assert answerer.app.ws.close_code is None and watcher.app.ws.close_code is None
        for task in (answerer.task, watcher.task):
            task.cancel()
        await answerer.app.close()
        await watcher.app.close()

    assert len(results) >= MIN_CALLS
    for call_id, result in results.items():
        assert (result.status, result.result) == ("completed", answerer.answers[call_id])
        assert call_id in watcher.calls and watcher.cancels[call_id] == "answered on another device"
    try:
        assert store.pending_calls() == []
        for call_id, result in results.items():
            saved = store.get_call(call_id)
            assert saved is not None and saved.state is CallState.COMPLETED and saved.result == result
        called = {call_id for event, call_id, _, _ in store.audit_log if event == "call.created"}
        assert called == set(results), "no call was created by bad input"
        completed = [call_id for event, call_id, _, _ in store.audit_log if event == "call.completed"]
        assert sorted(completed) == sorted(results), "each call completed exactly once"
    finally:
        store.close()
    stored = b"".join(path.read_bytes() for path in settings.data_dir.iterdir())
    for token in (TOKEN, *WRONG_TOKENS):
        assert token.encode() not in stored
