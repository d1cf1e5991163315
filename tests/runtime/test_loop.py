"""The background runner: a hub and a real DirectServer on a daemon thread, driven from blocking code."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Iterator
from pathlib import Path

import anyio
import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import TransportError
from lineup_plugin.protocol.messages import ToolCancel
from lineup_plugin.runtime.loop import Runner
from lineup_plugin.transports.direct.server import DirectServer
from tests.wsapp import WsApp

CHOICE = {"question": "Ship it?", "options": ["yes", "no"]}


def make_settings(tmp_path: Path, **changes: object) -> Settings:
    values: dict[str, object] = {
        "host": "127.0.0.1",
        "port": 0,
        "token": "runner-test-token-0123456789",
        "data_dir": tmp_path / "data",
        "store": "memory",
    }
    return Settings.model_validate({**values, **changes})


@pytest.fixture
def runner(tmp_path: Path) -> Iterator[Runner]:
    with Runner(make_settings(tmp_path), load_registry(load_entrypoints=False)) as running:
        yield running


def server_of(runner: Runner) -> DirectServer:
    """The runner's transport, which the settings make a DirectServer."""
    assert isinstance(runner.transport, DirectServer)
    return runner.transport


async def test_call_blocking_returns_the_apps_answer(runner: Runner) -> None:
    app = await WsApp.connect(server_of(runner), "phone")
    blocking = asyncio.create_task(asyncio.to_thread(runner.call_blocking, "choice", CHOICE, poll=0.02))
    call = await app.next_call()
    await app.answer(call, selected="yes", index=0)
    result = await blocking
    assert (result.call_id, result.status) == (call.call_id, "completed")
    assert result.result == {"selected": "yes", "index": 0}
    await app.close()


async def test_interrupt_cancels_the_call_on_every_device_and_returns_cancelled(runner: Runner) -> None:
    phone = await WsApp.connect(server_of(runner), "phone")
    laptop = await WsApp.connect(server_of(runner), "laptop")
    interrupted = threading.Event()
    beats: list[None] = []
    blocking = asyncio.create_task(
        asyncio.to_thread(
            runner.call_blocking,
            "choice",
            CHOICE,
            is_interrupted=interrupted.is_set,
            heartbeat=lambda: beats.append(None),
            poll=0.02,
        )
    )
    call = await phone.next_call()
    assert (await laptop.next_call()).call_id == call.call_id
    interrupted.set()
    result = await blocking
    assert (result.call_id, result.status) == (call.call_id, "cancelled")
    assert result.result["message"] == "the agent was interrupted"
    for app in (phone, laptop):
        cancel = (await app.next("tool.cancel")).payload
        assert isinstance(cancel, ToolCancel)
        assert (cancel.call_id, cancel.reason) == (call.call_id, "the agent was interrupted")
        await app.close()
    assert beats


class Withdrawn(threading.Event):
    """An interrupt check that says why (as the CLI's approval prompt answered at the keyboard does)."""

    reason = "answered in the terminal: Allow once"

    def __call__(self) -> bool:
        return self.is_set()


async def test_an_interrupt_that_says_why_tells_every_device_and_the_result_so(runner: Runner) -> None:
    phone = await WsApp.connect(server_of(runner), "phone")
    withdrawn = Withdrawn()
    blocking = asyncio.create_task(
        asyncio.to_thread(runner.call_blocking, "choice", CHOICE, is_interrupted=withdrawn, poll=0.02)
    )
    call = await phone.next_call()
    withdrawn.set()
    result = await blocking
    assert (result.status, result.result["message"]) == ("cancelled", Withdrawn.reason)
    cancel = (await phone.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and (cancel.call_id, cancel.reason) == (call.call_id, Withdrawn.reason)
    assert cancel.outcome is not None and cancel.outcome.result == {"message": Withdrawn.reason}
    await phone.close()


def test_call_already_interrupted_sends_nothing(runner: Runner) -> None:
    result = runner.call_blocking("choice", CHOICE, is_interrupted=lambda: True)
    assert result.status == "cancelled"
    assert runner.run(_pending_count, runner) == 0


async def _pending_count(runner: Runner) -> int:
    return len(runner.hub.store.pending_calls())


def test_call_without_any_app_fails_saying_so(runner: Runner) -> None:
    result = runner.call_blocking("choice", CHOICE)
    assert (result.status, result.result.get("error")) == ("failed", "no_app")


async def test_stop_cancels_live_calls_and_closes_the_apps(tmp_path: Path) -> None:
    runner = Runner(make_settings(tmp_path), load_registry(load_entrypoints=False))
    runner.start()
    app = await WsApp.connect(server_of(runner), "phone")
    blocking = asyncio.create_task(asyncio.to_thread(runner.call_blocking, "choice", CHOICE, poll=0.02))
    call = await app.next_call()
    await asyncio.to_thread(runner.stop)
    result = await blocking
    assert (result.status, result.result["message"]) == ("cancelled", "the agent is shutting down")
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel)
    assert (cancel.call_id, cancel.reason) == (call.call_id, result.result["message"])
    assert (await app.closed())[:2] == (1001, "the agent is shutting down")
    assert not runner.running


def test_calls_after_stop_fail_as_not_running(tmp_path: Path) -> None:
    runner = Runner(make_settings(tmp_path), load_registry(load_entrypoints=False))
    runner.start()
    runner.stop()
    result = runner.call_blocking("choice", CHOICE)
    assert (result.status, result.result["error"]) == ("failed", "not_running")
    with pytest.raises(TransportError, match="not running"):
        runner.hub  # noqa: B018


def test_start_raises_when_the_port_is_taken_and_leaves_no_thread(tmp_path: Path, runner: Runner) -> None:
    second = Runner(make_settings(tmp_path, port=server_of(runner).port), load_registry(load_entrypoints=False))
    before = set(threading.enumerate())
    with pytest.raises(TransportError, match="cannot listen on"):
        second.start()
    assert not second.running
    assert [t.name for t in set(threading.enumerate()) - before] == []


def test_run_and_submit_execute_on_the_loop_thread(runner: Runner) -> None:
    async def where() -> str:
        return threading.current_thread().name

    assert runner.run(where) == "lineup-hub"
    assert runner.submit(where).result(5) == "lineup-hub"


def test_stop_cancels_every_task_the_runner_started_and_ends_its_thread(tmp_path: Path) -> None:
    before = set(threading.enumerate())
    runner = Runner(make_settings(tmp_path), load_registry(load_entrypoints=False))
    runner.start()
    started = threading.Event()

    async def forever() -> None:
        started.set()
        await anyio.sleep_forever()

    future = runner.submit(forever)
    assert started.wait(5)
    runner.stop()
    assert future.cancelled()
    assert set(threading.enumerate()) - before == set()
    with pytest.raises(TransportError, match="not running"):
        runner.submit(forever)


def test_the_transport_follows_the_settings_and_describes_itself(runner: Runner) -> None:
    server = server_of(runner)
    assert runner.transport.describe() == f"direct mode: the App at {server.url}"
    assert runner.transport.connect_link == server.connect_link


def test_a_submitted_function_is_called_on_the_loop_thread_not_the_callers(runner: Runner) -> None:
    called_on: list[str] = []

    def func() -> Awaitable[None]:  # a plain function returning an awaitable: its own body runs on the loop
        called_on.append(threading.current_thread().name)
        return asyncio.sleep(0)

    runner.run(func)
    assert called_on == ["lineup-hub"]
