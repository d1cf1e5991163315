"""Nothing lost: reconnects re-deliver, duplicates apply once, late answers are refused, restarts recover.

Each test runs on both stores (memory and real SQLite); the restart tests reopen the same SQLite file.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol.calls import Call, CallState, format_timestamp
from lineup_plugin.protocol.messages import Error, ToolCall, ToolCancel, ToolResult
from lineup_plugin.runtime.loop import Runner, _Pending
from lineup_plugin.store import MemoryStore, SQLiteStore, Store
from lineup_plugin.transports.memory import MemoryApp

from .store_helpers import save_call

CHOICE = {"question": "Deploy where?", "options": ["staging", "预发布"]}
ANSWER = {"selected": "预发布", "index": 1}


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    made: Store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "lineup.sqlite3")
    yield made
    made.close()


@pytest.fixture
async def hub(store: Store) -> AsyncIterator[Hub]:
    made = Hub(load_registry(load_entrypoints=False), store=store)
    yield made
    await made.cancel_all("test over")


async def start_call(hub: Hub, app: MemoryApp, **options: float) -> tuple[asyncio.Task[ToolResult], str]:
    """Start a choice call and wait until ``app`` received it."""
    task = asyncio.create_task(hub.call("choice", CHOICE, **options))  # type: ignore[arg-type]
    delivered = await app.next("tool.call")
    assert isinstance(delivered.payload, ToolCall)
    return task, delivered.payload.call_id


async def test_a_reconnecting_device_gets_its_pending_calls_again(hub: Hub) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app)
    await app.disconnect()

    again = MemoryApp(hub, "phone")
    await again.connect(open_calls=[call_id])
    redelivered = await again.next("tool.call")
    assert isinstance(redelivered.payload, ToolCall) and redelivered.payload.call_id == call_id
    await again.send_payload(ToolResult(call_id=call_id, result=ANSWER))
    assert (await task).result == ANSWER


async def test_a_result_sent_twice_is_applied_once(hub: Hub, store: Store) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app)
    envelope_id = await app.send_payload(ToolResult(call_id=call_id, result=ANSWER))
    await app.send_payload(ToolResult(call_id=call_id, result=ANSWER), id=envelope_id)  # the same envelope again
    await app.send_payload(ToolResult(call_id=call_id, result=ANSWER))  # the same answer, a new envelope

    assert (await task).result == ANSWER
    verdict = (await app.next("tool.cancel")).payload  # the device is told how the call ended
    assert isinstance(verdict, ToolCancel) and verdict.outcome is not None and verdict.outcome.device_id == "phone"
    assert app.inbox.empty(), "a repeated identical answer is not an error"
    events = [event for event, cid, *_ in store.audit_log if cid == call_id or event == "duplicate.envelope"]  # type: ignore[attr-defined]
    assert events.count("call.completed") == 1
    # the ended call is the answer's record, not its envelope id: the copy met "the same answer again"
    assert "duplicate.envelope" not in events


async def test_a_different_second_answer_is_refused(hub: Hub) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app)
    await app.send_payload(ToolResult(call_id=call_id, result=ANSWER))
    await app.send_payload(ToolResult(call_id=call_id, result={"selected": "staging", "index": 0}))

    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.code == "call_closed" and error.call_id == call_id
    assert "already ended as completed; this answer was not applied" in error.message
    assert (await task).result == ANSWER


async def test_a_result_after_expiry_is_refused_with_the_reason(hub: Hub, store: Store) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app, deadline=0.05)
    assert (await task).status == "expired"
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.reason == "expired: no answer before the deadline"

    await app.send_payload(ToolResult(call_id=call_id, result=ANSWER))
    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.code == "call_closed"
    assert error.message == "this call already ended as expired; this answer was not applied"  # no call id
    saved = store.get_call(call_id)
    assert saved is not None and saved.state is CallState.EXPIRED


async def test_a_result_after_cancel_is_refused_with_the_reason(hub: Hub, store: Store) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app)
    assert await hub.cancel(call_id, "the user changed the subject")
    assert (await task).status == "cancelled"

    await app.send_payload(ToolResult(call_id=call_id, result=ANSWER))
    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.code == "call_closed"
    assert "already ended as cancelled" in error.message
    saved = store.get_call(call_id)
    assert saved is not None and saved.result is not None and saved.result.status == "cancelled"


async def test_an_interrupted_wait_cancels_the_call_on_the_device(hub: Hub, store: Store) -> None:
    app = MemoryApp(hub, "phone")
    await app.connect()
    task, call_id = await start_call(hub, app)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.reason == "the agent was interrupted"
    saved = store.get_call(call_id)
    assert saved is not None and saved.state is CallState.CANCELLED


# ------------------------------------------------------------------------------------- restarts


def pending_call(call_id: str, *, expires_in: float) -> Call:
    """A call as a killed agent left it: delivered to the App and waiting."""
    request = ToolCall(
        call_id=call_id, name="choice", arguments=CHOICE, expires_at=format_timestamp(time.time() + expires_in)
    )
    call = Call(request=request, conversation_id="default")
    call.advance(CallState.DELIVERED)
    return call


async def test_a_restart_closes_pending_calls_and_tells_the_app_why(tmp_path: Path) -> None:
    path = tmp_path / "lineup.sqlite3"
    with SQLiteStore(path) as before:
        save_call(before, pending_call("waiting", expires_in=600))
        save_call(before, pending_call("overdue", expires_in=-1))

    with SQLiteStore(path) as after:
        hub = Hub(load_registry(load_entrypoints=False), store=after)
        assert sorted(c.call_id for c in hub.recovered) == ["overdue", "waiting"]  # at once, no App needed
        assert after.pending_calls() == []
        assert hub.recover() == []  # once only
        assert after.get_call("waiting").state is CallState.CANCELLED  # type: ignore[union-attr]
        assert after.get_call("overdue").state is CallState.EXPIRED  # type: ignore[union-attr]

        app = MemoryApp(hub, "phone")
        await app.connect(open_calls=["waiting", "overdue", "never-heard-of"])
        reasons = {}
        for _ in range(3):
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel)
            reasons[cancel.call_id] = cancel.reason
        assert reasons == {
            "waiting": "this call already ended (cancelled): the agent restarted before an answer arrived; ask again",
            "overdue": "this call already ended (expired): no answer before the deadline",
            "never-heard-of": "the agent no longer knows this call",
        }

        await app.send_payload(ToolResult(call_id="waiting", result=ANSWER))
        error = (await app.next("error")).payload
        assert isinstance(error, Error) and error.code == "call_closed"
        assert after.get_call("waiting").state is CallState.CANCELLED  # type: ignore[union-attr]


async def test_envelope_ids_seen_before_a_restart_are_still_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "lineup.sqlite3"
    with SQLiteStore(path) as before:
        hub = Hub(load_registry(load_entrypoints=False), store=before)
        app = MemoryApp(hub, "phone")
        await app.connect()
        envelope_id = await app.send_payload(ToolResult(call_id="c1", result=ANSWER))
        assert (await app.next("error")).payload.code == "unknown_call"  # type: ignore[union-attr]

    with SQLiteStore(path) as after:
        hub = Hub(load_registry(load_entrypoints=False), store=after)
        app = MemoryApp(hub, "phone")
        await app.connect()
        await app.send_payload(ToolResult(call_id="c1", result=ANSWER), id=envelope_id)
        assert ("duplicate.envelope", None, "phone", envelope_id) in after.audit_log


async def test_a_call_with_no_app_connected_is_recorded_as_failed(hub: Hub, store: Store) -> None:
    result = await hub.call("choice", CHOICE, call_id="lonely")
    assert (result.status, result.result["error"]) == ("failed", "no_app")
    saved = store.get_call("lonely")
    assert saved is not None and saved.state is CallState.FAILED and saved.result == result
    assert store.pending_calls() == []


def test_an_answer_that_beats_the_interrupt_is_returned_not_lost(tmp_path: Path) -> None:
    # The runtime is interrupted and the answer is applied before the waiting task wakes: the task
    # ends cancelled, but the hub accepted the App's answer (the App is not told otherwise), so the
    # runtime must get that answer, not "cancelled".
    settings = Settings(host="127.0.0.1", port=0, token="race-test-token-0123456789", data_dir=tmp_path, store="memory")
    with Runner(settings, load_registry(load_entrypoints=False)) as runner:

        async def race() -> ToolResult:
            app = MemoryApp(runner.hub, "phone")
            await app.connect()
            pending = _Pending()
            waiting = asyncio.ensure_future(runner._interruptible("choice", CHOICE, "race-1", None, None, pending))
            await app.next("tool.call")
            await pending.interrupt()  # the interrupt, then the answer, both before the waiter wakes up
            await app.send_payload(ToolResult(call_id="race-1", result=ANSWER))
            return await waiting

        result = runner.run(race)
    assert (result.status, result.result) == ("completed", ANSWER)


def test_an_interrupt_that_says_the_question_was_settled_elsewhere_takes_no_later_answer(tmp_path: Path) -> None:
    # The CLI's approval prompt was answered at the keyboard (the interrupt's reason says so), then the
    # App's answer comes before the waiting task wakes: the terminal's answer is the one Hermes took,
    # so the call ends with it at once and the App's answer is not applied (the App is told so).
    settings = Settings(host="127.0.0.1", port=0, token="race-test-token-0123456789", data_dir=tmp_path, store="memory")
    said = "answered in the terminal: Deny"
    with Runner(settings, load_registry(load_entrypoints=False)) as runner:

        async def race() -> tuple[ToolResult, ToolCancel, ToolCancel]:
            app = MemoryApp(runner.hub, "phone")
            await app.connect()
            pending = _Pending()
            waiting = asyncio.ensure_future(runner._interruptible("choice", CHOICE, "race-2", None, None, pending))
            await app.next("tool.call")
            await pending.interrupt(said)
            await app.send_payload(ToolResult(call_id="race-2", result=ANSWER))
            ended, late = (await app.next("tool.cancel")).payload, (await app.next("tool.cancel")).payload
            assert isinstance(ended, ToolCancel) and isinstance(late, ToolCancel)
            return await waiting, ended, late

        result, ended, late = runner.run(race)
    assert (result.status, result.result) == ("cancelled", {"message": said})
    assert ended.reason == said and ended.outcome is not None and ended.outcome.result == {"message": said}
    assert late.call_id == "race-2" and late.outcome is not None and late.outcome.status == "cancelled"
