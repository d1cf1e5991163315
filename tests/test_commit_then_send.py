"""Commit, then send: no ``tool.call`` and no terminal notice leaves before the row it depends on is committed.

One test per transport (memory, direct, relay). A spy store records what each committed batch
wrote; a spy on the transport's link — where the hub hands a message over, before any queue or
socket — checks, for every ``tool.call`` and every ``tool.cancel`` handed over, that the call's
row was committed first, with the state the message announces (delivered for a call, the
terminal state for a notice). Swapping the hub's commit and send fails all three.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import TERMINAL, CallState
from lineup_plugin.protocol.messages import ToolCall, ToolCancel, ToolResult
from lineup_plugin.protocol.session import Change, SaveCall
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.memory import MemoryApp

QUESTION = {"question": "Deploy where?", "options": ["test", "staging"]}
ANSWER = {"selected": "staging", "index": 1}


class SpyStore(SQLiteStore):
    """A real SQLite store that remembers the state of each call as of its last commit."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.committed: dict[str, CallState] = {}

    def apply(self, changes: Iterable[Change]) -> None:
        changes = list(changes)
        super().apply(changes)
        assert not self._db.in_transaction
        for change in changes:
            if isinstance(change, SaveCall):
                self.committed[change.call.call_id] = change.call.state


class Wire:
    """What left on the wire, each message checked against the store when it left."""

    def __init__(self, store: SpyStore) -> None:
        self.store = store
        self.left: list[str] = []
        self.broken: list[str] = []

    def check(self, text: str) -> None:
        payload = codec.decode(text).payload
        if isinstance(payload, ToolCall):
            state = self.store.committed.get(payload.call_id)
            self.left.append(f"tool.call {payload.call_id}")
            if state is None or state == CallState.CREATED:
                self.broken.append(f"tool.call {payload.call_id} left with its row {state or 'missing'}")
        elif isinstance(payload, ToolCancel):
            state = self.store.committed.get(payload.call_id)
            self.left.append(f"tool.cancel {payload.call_id}")
            if state not in TERMINAL:
                self.broken.append(f"tool.cancel {payload.call_id} left with its row {state or 'missing'}")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SpyStore]:
    with SpyStore(tmp_path / "lineup.sqlite3") as spy:
        yield spy


@contextmanager
def spying(monkeypatch: pytest.MonkeyPatch, target: Any, name: str, store: SpyStore, text_of: Any) -> Iterator[Wire]:
    wire = Wire(store)
    original = getattr(target, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        text = text_of(*args, **kwargs)
        if text is not None:
            wire.check(text)
        return original(*args, **kwargs)

    monkeypatch.setattr(target, name, spy)
    yield wire


async def ask_answer_and_cancel(hub: Hub, answer: Any, dismissed: Any) -> None:
    """A call answered on one device (the other is told), then a call the agent cancels."""
    task = asyncio.create_task(hub.call("choice", QUESTION))
    call_id = await answer(task)
    assert (await task).status == "completed"
    await dismissed(call_id)
    second = asyncio.create_task(hub.call("choice", QUESTION))
    await dismissed(None)
    second.cancel()  # the runtime is interrupted: the call is cancelled on every device
    with pytest.raises(asyncio.CancelledError):
        await second


async def test_memory_transport_commits_before_it_sends(store: SpyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    hub = Hub(load_registry(load_entrypoints=False), store=store)
    with spying(monkeypatch, MemoryApp, "send", store, lambda self, text: text) as wire:
        phone, laptop = MemoryApp(hub, "phone"), MemoryApp(hub, "laptop")
        await phone.connect()
        await laptop.connect()

        async def answer(task: asyncio.Task[ToolResult]) -> str:
            call = (await phone.next("tool.call")).payload
            assert isinstance(call, ToolCall)
            await phone.send_payload(ToolResult(call_id=call.call_id, result=ANSWER))
            return call.call_id

        async def dismissed(call_id: str | None) -> None:
            message = await laptop.next("tool.cancel" if call_id else "tool.call")
            assert call_id is None or message.payload.call_id == call_id  # type: ignore[union-attr]

        await ask_answer_and_cancel(hub, answer, dismissed)
        await laptop.next("tool.cancel")
    assert len(wire.left) == 8 and wire.broken == [], wire.left  # the verdict goes to the answering device too


async def test_direct_transport_commits_before_it_sends(
    store: SpyStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lineup_plugin.config.settings import Settings
    from lineup_plugin.transports.direct.server import DirectLink, DirectServer
    from tests.wsapp import WsApp

    hub = Hub(load_registry(load_entrypoints=False), store=store)
    settings = Settings(host="127.0.0.1", port=0, token="t" * 32, data_dir=tmp_path)
    with spying(monkeypatch, DirectLink, "send", store, lambda self, text: text) as wire:
        async with DirectServer.from_settings(hub, settings) as server:
            phone = await WsApp.connect(server, "phone", token=settings.token)
            laptop = await WsApp.connect(server, "laptop", token=settings.token)

            async def answer(task: asyncio.Task[ToolResult]) -> str:
                call = (await phone.next("tool.call")).payload
                assert isinstance(call, ToolCall)
                await phone.send(ToolResult(call_id=call.call_id, result=ANSWER))
                return call.call_id

            async def dismissed(call_id: str | None) -> None:
                message = await laptop.next("tool.cancel" if call_id else "tool.call")
                assert call_id is None or message.payload.call_id == call_id  # type: ignore[union-attr]

            await ask_answer_and_cancel(hub, answer, dismissed)
            await laptop.next("tool.cancel")
            await phone.close()
            await laptop.close()
    assert len(wire.left) == 8 and wire.broken == [], wire.left  # the verdict goes to the answering device too


async def test_relay_transport_commits_before_it_sends(store: SpyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from lineup_plugin.transports.wukongim.relay import RelayLink
    from tests.fakes.wukongim import FakeWuKongIM
    from tests.transports.test_relay import GUARD, py_app, running_relay

    hub = Hub(load_registry(load_entrypoints=False), store=store)
    with spying(monkeypatch, RelayLink, "send", store, lambda self, text: text) as wire:
        async with FakeWuKongIM() as server, py_app(server) as app, running_relay(server, hub):

            async def answer(task: asyncio.Task[ToolResult]) -> str:
                request = await app.next("tool.call")
                call_id = str(request["payload"]["call_id"])
                await app.send("tool.result", {"call_id": call_id, "result": ANSWER})
                return call_id

            async def dismissed(call_id: str | None) -> None:
                if call_id is None:  # one App user on the relay: the second call reaches it
                    await app.next("tool.call")

            task = asyncio.create_task(hub.call("choice", QUESTION))
            await answer(task)
            with anyio.fail_after(GUARD):
                assert (await task).status == "completed"
            second = asyncio.create_task(hub.call("choice", QUESTION))
            await dismissed(None)
            second.cancel()
            with pytest.raises(asyncio.CancelledError):
                await second
            cancel = await app.next("tool.cancel")
            assert cancel["payload"]["reason"] == "the agent was interrupted"
    assert len(wire.left) == 4 and wire.broken == [], wire.left  # the verdict goes to the answering device too
