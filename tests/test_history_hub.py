"""History through the real hub, direct server and SQLite: restarts, hostile hellos over a real WebSocket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import MAX_SEQ, DeviceHello, Error, History, HistoryOlder, Text
from lineup_plugin.transports.direct.server import DirectServer
from tests.wsapp import WsApp, encode_from

TOKEN = "history-test-token-0123456789"


@asynccontextmanager
async def serving(tmp_path: Path, **changes: Any) -> AsyncIterator[DirectServer]:
    """A hub on the SQLite store of ``tmp_path`` (the same file each time) behind a direct server."""
    settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, **changes)
    hub = Hub.from_settings(settings, load_registry(load_entrypoints=False))
    try:
        async with DirectServer.from_settings(hub, settings) as server:
            yield server
    finally:
        hub.store.close()


async def catch_up(server: DirectServer, device_id: str, **hello: Any) -> list[History]:
    """Connect as ``device_id`` with a hello asking for the history; the history messages it gets."""
    async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
        await ws.send(encode_from(device_id, DeviceHello(device_id=device_id, token=TOKEN, **hello)))
        found: list[History] = []
        while True:
            message = codec.decode(await ws.recv())
            if message.kind == "history":
                assert isinstance(message.payload, History)
                found.append(message.payload)
                if not message.payload.more:
                    return found


async def test_history_and_seqs_survive_an_agent_restart(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        await server.hub.send_text("before the restart")
        [before] = await catch_up(server, "phone", last_seq=0)
    async with serving(tmp_path) as server:
        await server.hub.send_text("after the restart")
        [after] = await catch_up(server, "tablet", last_seq=0)
        [only_new] = await catch_up(server, "phone", last_seq=before.head, history_id=before.history_id)

    assert [(e.seq, e.text) for e in after.entries] == [(1, "before the restart"), (2, "after the restart")]
    assert after.history_id == before.history_id
    assert [e.text for e in only_new.entries] == ["after the restart"]


async def test_another_store_is_another_history_and_the_device_is_told_to_start_over(tmp_path: Path) -> None:
    async with serving(tmp_path / "one") as server:
        await server.hub.send_text("from the first agent")
        [first] = await catch_up(server, "phone", last_seq=0)
    async with serving(tmp_path / "two") as server:
        await server.hub.send_text("from the second agent")
        [second] = await catch_up(server, "phone", last_seq=first.head, history_id=first.history_id)

    assert second.reset and second.history_id != first.history_id
    assert [e.text for e in second.entries] == ["from the second agent"]


@pytest.mark.parametrize("last_seq", [-1, MAX_SEQ + 1, 10**40, "12", 3.0, True, [1], {"seq": 1}])
async def test_a_hostile_last_seq_is_refused_with_a_clear_reason_and_nothing_else_is_told(
    tmp_path: Path, last_seq: object
) -> None:
    async with serving(tmp_path) as server:
        await server.hub.send_text("private")
        hello = json.loads(encode_from("evil", DeviceHello(device_id="evil", token=TOKEN)))
        hello["payload"]["last_seq"] = last_seq
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(json.dumps(hello))
            error = codec.decode(await ws.recv())
            with pytest.raises(ConnectionClosed) as closed:
                await ws.recv()
        assert error.kind == "error" and "payload.last_seq" in error.payload.message  # type: ignore[union-attr]
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4400
        assert not server.hub.peers


async def test_a_seq_from_the_future_gets_everything_kept_with_reset(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        await server.hub.send_text("one")
        [history] = await catch_up(server, "phone", last_seq=MAX_SEQ)

    assert history.reset and [e.text for e in history.entries] == ["one"]


async def test_replayed_text_envelope_is_kept_once(tmp_path: Path) -> None:
    async with serving(tmp_path) as server:
        app = await WsApp.connect(server)
        text = encode_from(app.device_id, Text(text="hello"), id="msg-once")
        for _ in range(3):
            await app.ws.send(text)
        await app.send(Text(text="marker"), id="msg-marker")
        while True:  # one connection is handled in order: once the marker is shown, the resends were handled
            shown = (await app.next("history")).payload
            assert isinstance(shown, History)
            if shown.entries[0].ref == "msg-marker":
                break
        [history] = await catch_up(server, "tablet", last_seq=0)
        await app.close()

    assert [(e.event, e.ref) for e in history.entries] == [("text.in", "msg-once"), ("text.in", "msg-marker")]


async def test_older_pages_over_a_real_websocket_from_sqlite_after_a_restart(tmp_path: Path) -> None:
    """A new device gets the newest page; each ``history.older`` the page before, read from the SQLite file."""
    async with serving(tmp_path) as server:
        for index in range(120):
            await server.hub.send_text(f"{index:04d} " + "x" * 1_500)
    # after a restart: the pages come from the file, not from memory
    async with serving(tmp_path) as server, connect(f"ws://127.0.0.1:{server.port}/ws") as ws:

        async def page() -> tuple[History, int]:
            while True:
                text = await ws.recv()
                message = codec.decode(text)
                if isinstance(message.payload, History):
                    return message.payload, len(text.encode() if isinstance(text, str) else text)

        await ws.send(encode_from("phone", DeviceHello(device_id="phone", token=TOKEN, last_seq=0, newest_first=True)))
        first, size = await page()
        assert first.earlier and size <= 64_000
        got, more = [first.entries], first.earlier
        while more:
            before = got[-1][0].seq
            await ws.send(encode_from("phone", HistoryOlder(before=before, history_id=first.history_id)))
            older, size = await page()
            assert older.before == before and older.older and size <= 64_000
            got.append(older.entries)
            more = older.earlier
        await ws.send(encode_from("phone", HistoryOlder(before=first.head + 5)))
        error = codec.decode(await ws.recv()).payload
        assert isinstance(error, Error) and error.code == "unknown_history"
    texts = [str(entry.text)[:4] for entries in reversed(got) for entry in entries]
    assert len(got) > 2 and texts == [f"{index:04d}" for index in range(120)]
