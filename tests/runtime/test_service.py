"""The runtime-neutral service: server ownership, the blocking call and the hub's callbacks, on a fake runtime."""

from __future__ import annotations

import asyncio
import io
import json
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import failure
from lineup_plugin.protocol.messages import AgentStatus, AgentStop, FileStored, Text, ToolCancel, ToolList
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.runtime import load_settings
from lineup_plugin.runtime.lock import ServerLock
from lineup_plugin.runtime.service import (
    INTERACTIVE_APP_GRACE,
    NOT_TAKING_MESSAGES,
    STOPPED_BY_USER,
    LineUpService,
    app_grace,
)
from lineup_plugin.transports.direct.server import DirectServer
from tests.runtime.fake_runtime import FakeRuntime
from tests.test_media import PNG, upload
from tests.wsapp import WsApp

CHOICE = {"question": "Ship it?", "options": ["yes", "no"]}
FLASHLIGHT = {
    "name": "flashlight",
    "type": "action",
    "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}},
}


@pytest.fixture
def runtime() -> FakeRuntime:
    return FakeRuntime()


@pytest.fixture
def service(tmp_path: Path, runtime: FakeRuntime) -> Iterator[LineUpService]:
    settings = Settings(host="127.0.0.1", port=0, token="service-test-token-0123", data_dir=tmp_path, store="memory")
    svc = LineUpService(runtime, settings, load_registry(load_entrypoints=False), role="process")
    yield svc
    svc.stop()


def server_of(service: LineUpService) -> DirectServer:
    assert service.ensure_started("test") and service.runner is not None
    assert isinstance(service.runner.transport, DirectServer)
    return service.runner.transport


def call(service: LineUpService, name: str, flat_args: dict[str, Any], deadline: float = 30) -> Any:
    """A tool call as a runtime's worker thread makes it, never interrupted."""
    return service.call_blocking(
        name, flat_args, is_interrupted=lambda: False, heartbeat=lambda: None, deadline=deadline
    )


async def next_status(app: WsApp, state: str) -> AgentStatus:
    """Read ``agent.status`` messages until one is in ``state`` (a device is sent the current one on connect)."""
    while True:
        status = (await app.next("agent.status")).payload
        assert isinstance(status, AgentStatus)
        if status.state == state:
            return status


def test_settings_and_registry_given_as_functions_are_made_on_first_use(tmp_path: Path, runtime: FakeRuntime) -> None:
    made: list[str] = []

    def settings() -> Settings:
        made.append("settings")
        return Settings(data_dir=tmp_path, store="memory")

    def registry() -> Any:
        made.append("registry")
        return load_registry(load_entrypoints=False)

    svc = LineUpService(runtime, settings, registry, tools=[{"name": "choice"}])
    assert svc.function_schemas() == [{"name": "choice"}] and made == []
    assert svc.deadline_for("choice") == 600.0 and made == ["settings"]
    assert svc.registry.get("confirm") is not None and made == ["settings", "registry"]
    assert {schema["name"] for schema in svc.function_schemas()} >= {"choice", "confirm"}  # the registry's, once loaded


@pytest.mark.usefixtures("impatient")
def test_a_call_in_a_process_that_does_not_own_the_server_fails_naming_the_owner(service: LineUpService) -> None:
    other = ServerLock(service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        result = call(service, "choice", {}, deadline=1)
        line = service.status_line(show_link=True)
        assert not service.serving
    finally:
        other.release()
    assert (result.status, result.result["error"]) == ("failed", "not_owner")
    assert "served by another Fake process (pid" in result.result["message"]
    assert "(gateway)" in result.result["message"]
    assert line.startswith("the App is served by another Fake process (pid") and "(gateway)" in line


def test_the_first_process_to_need_the_server_owns_it_until_it_stops(service: LineUpService) -> None:
    port = server_of(service).port
    assert service.ensure_started("again")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert not ServerLock(service.settings.data_dir).acquire("cli")
    service.stop()
    assert not service.serving
    later = ServerLock(service.settings.data_dir)
    assert later.acquire("cli")
    later.release()


def test_the_role_given_at_start_is_written_in_the_lock_until_stop(service: LineUpService) -> None:
    assert service.ensure_started("test", role="gateway")
    assert service.role == "gateway"
    owner = service.lock.owner()
    assert owner is not None and owner.role == "gateway"
    service.stop()
    assert service.role == "process"


def test_no_app_connected_is_a_clear_failure_not_a_hidden_tool(service: LineUpService) -> None:
    result = call(service, "choice", {"question": "?", "options": ["a"]}, deadline=5)
    assert result.status == "failed"
    assert result.result == failure("x", "choice", "failed", result.result["message"], error="no_app").result
    assert "no LineUp App is connected" in result.result["message"]


def test_the_status_line_says_where_the_app_is_and_the_link_only_when_asked(service: LineUpService) -> None:
    server = server_of(service)
    assert service.status_line(show_link=False) == f"direct mode: the App at {server.url} (0 devices connected)."
    assert service.status_line(show_link=True).endswith(f"\nOpen {server.connect_link} on your phone.")


async def test_the_app_shows_waiting_input_during_a_call_then_running(service: LineUpService) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        blocking = asyncio.create_task(asyncio.to_thread(call, service, "choice", CHOICE))
        waiting = await next_status(app, "waiting_input")
        card = await app.next_call()
        await app.answer(card, selected="yes", index=0)
        await next_status(app, "running")
        result = await blocking
    finally:
        await app.close()
    assert waiting.detail == "choice"
    assert (result.status, result.result) == ("completed", {"selected": "yes", "index": 0})


async def test_app_text_goes_to_the_runtime_and_the_app_hears_when_nobody_takes_it(
    service: LineUpService, runtime: FakeRuntime
) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        await app.send(Text(text="hello"))
        runtime.taking = False
        await app.send(Text(text="anyone?"))
        refused = (await app.next("text")).payload
    finally:
        await app.close()
    assert runtime.messages == [("phone", "hello"), ("phone", "anyone?")]
    assert isinstance(refused, Text) and refused.text == NOT_TAKING_MESSAGES


async def test_files_reach_the_runtime_in_the_conversation_they_were_sent_in_and_a_refusal_goes_there(
    service: LineUpService, runtime: FakeRuntime
) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        stored = await upload(app, PNG)
        assert isinstance(stored, FileStored)
        await app.send(Text(text="what is this?", attachments=[stored.file]), conversation_id="trip")
        runtime.taking = False
        await app.send(Text(text="and this?", attachments=[stored.file]), conversation_id="trip")
        refused = await app.next("text")
    finally:
        await app.close()
    assert [text.splitlines()[-1] for _, text in runtime.messages] == ["what is this?", "and this?"]
    assert "saved at" in runtime.messages[0][1]  # the file named, for an agent with file tools
    assert runtime.conversations == ["trip", "trip"]
    assert isinstance(refused.payload, Text) and refused.payload.text == NOT_TAKING_MESSAGES
    assert refused.conversation_id == "trip"


async def test_the_stop_button_interrupts_the_run_then_closes_the_open_cards(
    service: LineUpService, runtime: FakeRuntime
) -> None:
    app = await WsApp.connect(server_of(service), "phone")
    try:
        blocking = asyncio.create_task(asyncio.to_thread(call, service, "choice", CHOICE))
        card = await app.next_call()
        await app.send(AgentStop())
        closed = (await app.next("tool.cancel")).payload
        interrupted_before_close = list(runtime.interrupts)
        result = await blocking
    finally:
        await app.close()
    assert interrupted_before_close == [None]
    assert isinstance(closed, ToolCancel) and (closed.call_id, closed.reason) == (card.call_id, STOPPED_BY_USER)
    assert (result.status, result.result["message"]) == ("cancelled", STOPPED_BY_USER)


async def test_tools_an_app_declares_become_runtime_tools_and_the_runtime_is_told(
    service: LineUpService, runtime: FakeRuntime
) -> None:
    service.bridge.sync()
    app = await WsApp.connect(server_of(service), "phone")
    try:
        await app.next("tool.list")
        await app.send(ToolList(tools=[ToolDefinition.model_validate(FLASHLIGHT)], request=True))
        await app.next("tool.list")  # answered once the declared tools are registered
        assert runtime.refreshed.is_set() and "flashlight" in runtime.tools
    finally:
        await app.close()  # the App's tools go with it


# ------------------------------------------------------------------ the grace after the server starts


@pytest.fixture
def graceful(tmp_path: Path, runtime: FakeRuntime) -> Iterator[LineUpService]:
    """A service whose calls wait up to 60 s for an App after the server's start."""
    settings = Settings(
        host="127.0.0.1", port=0, token="service-test-token-0123", data_dir=tmp_path, store="memory", app_grace=60
    )
    svc = LineUpService(runtime, settings, load_registry(load_entrypoints=False), role="process")
    yield svc
    svc.stop()


def test_app_grace_unset_is_two_minutes_on_a_terminal_and_none_elsewhere() -> None:
    assert app_grace(None, interactive=True) == INTERACTIVE_APP_GRACE == 120.0
    assert app_grace(None, interactive=False) == 0.0
    assert app_grace(5.0, interactive=False) == 5.0


async def test_a_call_that_starts_the_server_waits_for_an_app_to_connect(graceful: LineUpService) -> None:
    waiting = threading.Event()  # set by the call's heartbeat: it is waiting for an App

    def first_call() -> Any:
        return graceful.call_blocking(
            "choice", CHOICE, is_interrupted=lambda: False, heartbeat=waiting.set, deadline=30
        )

    blocking = asyncio.create_task(asyncio.to_thread(first_call))
    assert await asyncio.to_thread(waiting.wait, 30)
    assert graceful.runner is not None and not graceful.app_connected
    app = await WsApp.connect(server_of(graceful), "phone")
    try:
        card = await app.next_call()
        await app.answer(card, selected="no", index=1)
        result = await blocking
    finally:
        await app.close()
    assert (result.status, result.result) == ("completed", {"selected": "no", "index": 1})


async def test_an_interrupt_ends_the_wait_for_an_app_with_cancelled(graceful: LineUpService) -> None:
    waiting, interrupted = threading.Event(), threading.Event()

    def first_call() -> Any:
        return graceful.call_blocking(
            "choice", CHOICE, is_interrupted=interrupted.is_set, heartbeat=waiting.set, deadline=30
        )

    blocking = asyncio.create_task(asyncio.to_thread(first_call))
    assert await asyncio.to_thread(waiting.wait, 30)
    interrupted.set()
    result = await blocking
    assert result.status == "cancelled"


def test_once_the_grace_is_over_a_call_with_no_app_fails_at_once(
    graceful: LineUpService, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert graceful.ensure_started("test")
    monkeypatch.setattr(graceful, "_started_at", graceful._started_at - 61)
    heartbeats: list[None] = []
    result = graceful.call_blocking(
        "choice", CHOICE, is_interrupted=lambda: False, heartbeat=lambda: heartbeats.append(None), deadline=30
    )
    assert (result.status, result.result["error"], heartbeats) == ("failed", "no_app", [])


# ------------------------------------------------------------------ what a call says when it cannot be served


def test_a_port_in_use_is_a_failed_result_with_the_reason_not_an_exception(
    tmp_path: Path, runtime: FakeRuntime
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        settings = Settings(host="127.0.0.1", port=port, token="service-test-token-0123", data_dir=tmp_path)
        svc = LineUpService(runtime, settings, load_registry(load_entrypoints=False), role="process")
        result = call(svc, "choice", CHOICE)
    assert (result.status, result.result["error"]) == ("failed", "start_failed")
    assert result.result["message"].startswith("the LineUp App cannot be served from this process: cannot listen on")
    assert not svc.serving and not svc.lock.held  # the next call tries again


@pytest.mark.usefixtures("impatient")
def test_not_owner_names_the_program_that_serves_the_app(service: LineUpService) -> None:
    other = ServerLock(service.settings.data_dir)
    assert other.acquire("gateway", command="hermes gateway run")
    try:
        result = call(service, "choice", CHOICE)
    finally:
        other.release()
    assert (result.status, result.result["error"]) == ("failed", "not_owner")
    assert "(gateway), `hermes gateway run`" in result.result["message"]


class Terminal(io.StringIO):
    """A stderr a person watches."""

    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("may_print", [True, False], ids=["normal", "quiet"])
def test_the_link_and_qr_code_are_printed_on_a_terminal_unless_the_runtime_is_quiet(
    service: LineUpService, runtime: FakeRuntime, monkeypatch: pytest.MonkeyPatch, may_print: bool
) -> None:
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    monkeypatch.setattr(runtime, "may_print", lambda: may_print)
    server = server_of(service)
    assert (server.connect_link in terminal.getvalue()) is may_print
    assert (terminal.getvalue() == "") is not may_print


# LineUpService.call: the call awaited by an asyncio task (an asyncio runtime's tool) ------------------


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
            await next_status(app, state)
    finally:
        await app.close()


def test_the_seam_reads_settings_from_lineup_variables(tmp_path: Path) -> None:
    settings = load_settings(environ={"LINEUP_PORT": "9531", "LINEUP_DATA_DIR": str(tmp_path)})
    assert (settings.port, settings.data_dir) == (9531, tmp_path)
