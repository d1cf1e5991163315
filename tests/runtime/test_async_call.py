"""``LineUpService.call``: a LineUp call awaited by an asyncio task (an asyncio runtime's tool), against a real
hub on 127.0.0.1 with real WebSocket Apps (in-memory store)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol.messages import AgentStatus, ToolCancel
from lineup_plugin.runtime import LineUpService, load_settings
from lineup_plugin.transports.direct.server import DirectServer
from tests.runtime.fake_runtime import FakeRuntime
from tests.wsapp import WsApp

CHOICE = {"question": "Ship it?", "options": ["yes", "no"]}


@pytest.fixture
def service(tmp_path: Path) -> Iterator[LineUpService]:
    settings = Settings(host="127.0.0.1", port=0, token="async-call-test-token-01", data_dir=tmp_path, store="memory")
    svc = LineUpService(FakeRuntime(), settings, load_registry(load_entrypoints=False), role="process")
    yield svc
    svc.stop()


def server_of(service: LineUpService) -> DirectServer:
    assert service.ensure_started("test") and service.runner is not None
    assert isinstance(service.runner.transport, DirectServer)
    return service.runner.transport


async def test_an_awaited_call_returns_the_result_json_the_model_reads(service: LineUpService) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        asking = asyncio.create_task(service.call("choice", CHOICE))
        card = await app.next_call()
        assert len(service.awaited_calls()) == 1
        await app.answer(card, selected="no", index=1)
        answer = json.loads(await asking)
    finally:
        await app.close()
    assert (answer["status"], answer["result"]) == ("completed", {"selected": "no", "index": 1})
    assert service.awaited_calls() == []


async def test_cancelling_the_awaiting_task_withdraws_the_card_on_every_device_then_raises(
    service: LineUpService,
) -> None:
    server = server_of(service)
    phone, tablet = await WsApp.connect(server, "phone"), await WsApp.connect(server, "tablet")
    told: list[dict[str, Any]] = []

    def on_cancelled(text: str) -> None:
        told.append(json.loads(text))

    try:
        asking = asyncio.create_task(service.call("choice", CHOICE, on_cancelled=on_cancelled))
        card = await phone.next_call()
        assert (await tablet.next_call()).call_id == card.call_id
        asking.cancel()
        closed = [(await app.next("tool.cancel")).payload for app in (phone, tablet)]
        with pytest.raises(asyncio.CancelledError):
            await asking
    finally:
        await phone.close()
        await tablet.close()
    assert all(isinstance(c, ToolCancel) and c.call_id == card.call_id for c in closed)
    assert [(t["status"], t["call_id"]) for t in told] == [("cancelled", card.call_id)]
    assert service.awaited_calls() == []


async def test_a_withdrawn_call_returns_cancelled_and_its_task_goes_on(service: LineUpService) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        asking = asyncio.create_task(service.call("choice", CHOICE))
        card = await app.next_call()
        [awaited] = service.awaited_calls()
        assert awaited.task is asking
        awaited.withdraw()
        closed = (await app.next("tool.cancel")).payload
        answer = json.loads(await asking)
    finally:
        await app.close()
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert answer["status"] == "cancelled" and not asking.cancelled()


async def test_the_app_hears_when_a_turn_that_asked_ends(service: LineUpService) -> None:
    app = await WsApp.connect(server_of(service), "phone")

    async def turn(fail: bool) -> None:
        service.report_when_done(asyncio.current_task())
        if fail:
            raise ValueError("the turn failed")

    try:
        for fail, state in ((True, "failed"), (False, "idle")):  # failed first: a device is told the state on connect
            task = asyncio.create_task(turn(fail))
            await asyncio.gather(task, return_exceptions=True)
            while True:
                status = (await app.next("agent.status")).payload
                assert isinstance(status, AgentStatus)
                if status.state == state:
                    break
    finally:
        await app.close()


def test_the_seam_reads_settings_from_lineup_variables(tmp_path: Path) -> None:
    settings = load_settings(environ={"LINEUP_PORT": "9531", "LINEUP_DATA_DIR": str(tmp_path)})
    assert (settings.port, settings.data_dir) == (9531, tmp_path)
