"""Agent restarts with calls pending, SIGKILL included: a real agent process, a real App over WebSocket.

The agent (tests/agent_process.py: the Runner with its SQLite store) asks the App a choice;
the App shows the card; the agent is killed with SIGKILL and started again on the same data
directory. On start it closes the call it can no longer wait for; the App reconnects saying the
card is still open and gets a ``tool.cancel`` with the reason; a late answer is refused; the store
shows the call ended, nothing pending, and no token.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from lineup_plugin.protocol.calls import CallState
from lineup_plugin.protocol.messages import Error, ToolAck, ToolCancel, ToolList, ToolResult
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession, Timers
from lineup_plugin.transports.wukongim.e2e import AgentKey
from lineup_plugin.transports.wukongim.pairing import Pairings

from .fakes.wukongim import FakeWuKongIM
from .transports.test_e2e import AppSide
from .wsapp import WsApp

AGENT = Path(__file__).with_name("agent_process.py")
TOKEN = "restart-test-token-6f1c2a9d"
RESTARTED = "the agent restarted before an answer arrived; ask again"
RELAY_TIMERS = Timers(connect_timeout=5, send_timeout=5, reconnect_min=0.01, reconnect_max=0.05)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")


@asynccontextmanager
async def agent(data_dir: Path, *options: str) -> AsyncIterator[tuple[asyncio.subprocess.Process, dict[str, Any]]]:
    """Run tests/agent_process.py; yields the process and its first line (port, recovered calls)."""
    env = {**os.environ, "LINEUP_TOKEN": TOKEN, "LINEUP_STORE": "sqlite"}
    with open(data_dir.parent / "agent.log", "ab") as log:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            str(AGENT),
            "--data-dir",
            str(data_dir),
            *options,
            stdout=asyncio.subprocess.PIPE,
            stderr=log,
            env=env,
        )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), 60)
        assert line, f"the agent exited: {(data_dir.parent / 'agent.log').read_text()}"
        yield process, json.loads(line)
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def connect(port: int, **options: Any) -> WsApp:
    return await WsApp.connect(SimpleNamespace(port=port, token=TOKEN), "phone", **options)  # type: ignore[arg-type]


async def settled(app: WsApp) -> None:
    """Return once the agent has handled everything ``app`` sent (it answers in order)."""
    await app.send(ToolList(request=True))
    await app.next("tool.list")


async def test_sigkill_with_a_card_open_closes_it_on_restart_with_the_reason(tmp_path: Path) -> None:
    data_dir = tmp_path / "agent"
    async with asyncio.timeout(120):
        async with agent(data_dir, "--call") as (process, info):
            assert info["recovered"] == []
            app = await connect(info["port"])
            call = await app.next_call()
            await app.send(ToolAck(call_id=call.call_id, stage="waiting_user"))
            await settled(app)

            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL
            code, _, _ = await app.closed()
            assert code == 1006  # the agent vanished without a close frame

        async with agent(data_dir) as (process, info):
            assert info["recovered"] == [{"call_id": call.call_id, "state": "cancelled", "message": RESTARTED}]
            app = await connect(info["port"], open_calls=[call.call_id])
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel) and cancel.call_id == call.call_id
            assert cancel.reason == f"this call already ended (cancelled): {RESTARTED}"

            await app.send(ToolResult(call_id=call.call_id, result={"selected": "staging", "index": 0}))
            error = (await app.next("error")).payload
            assert isinstance(error, Error) and error.code == "call_closed" and error.call_id == call.call_id
            await app.close()

    with SQLiteStore(data_dir / "lineup.sqlite3") as store:
        saved = store.get_call(call.call_id)
        assert saved is not None and saved.state is CallState.CANCELLED
        assert [state for state, _ in saved.history] == [
            CallState.CREATED,
            CallState.DELIVERED,
            CallState.WAITING_USER,
            CallState.CANCELLED,
        ]
        assert store.pending_calls() == []
        events = [event for event, call_id, _, _ in store.audit_log if call_id == call.call_id]
        assert events == ["call.created", "call.delivered", "call.waiting_user", "call.cancelled", "result.refused"]
    for file in data_dir.iterdir():
        assert TOKEN.encode() not in file.read_bytes(), f"the token leaked into {file.name}"


async def test_a_call_answered_before_the_kill_stays_answered(tmp_path: Path) -> None:
    data_dir = tmp_path / "agent"
    async with asyncio.timeout(120):
        async with agent(data_dir, "--call") as (process, info):
            app = await connect(info["port"])
            call = await app.next_call()
            await app.answer(call, selected="production", index=1)
            assert process.stdout is not None
            line = await process.stdout.readline()
            assert json.loads(line)["result"]["status"] == "completed"
            process.send_signal(signal.SIGKILL)
            await process.wait()

        async with agent(data_dir) as (process, info):
            assert info["recovered"] == []
            app = await connect(info["port"], open_calls=[call.call_id])
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel)
            assert cancel.reason == "this call already ended (completed)"
            await app.close()

    with SQLiteStore(data_dir / "lineup.sqlite3") as store:
        saved = store.get_call(call.call_id)
        assert saved is not None and saved.result is not None
        assert saved.result.result == {"selected": "production", "index": 1}


async def test_after_a_sigkill_in_relay_mode_every_paired_device_is_told_at_start_which_calls_ended(
    tmp_path: Path,
) -> None:
    # by relay the App's IM connection stays up across the agent's death: it never says hello again
    data_dir = tmp_path / "agent"
    pairings = Pairings(data_dir, "lineup-agent", "app-user")
    devices = [AppSide("", "") for _ in range(2)]
    for device in devices:
        state, paired = pairings.pair(device.public)
        device.agent_public, device.pairing_id = AgentKey.load(state.agent_key).public, paired.pairing_id
    async with asyncio.timeout(120), FakeWuKongIM() as im:
        options = ClientOptions(uid="app-user", token="", device_flag=1, timers=RELAY_TIMERS)
        session = await ImSession.open(im.ws_url, options)
        stream = session.messages()

        async def next_envelopes(kind: str) -> dict[str, dict[str, Any]]:
            """The next ``kind`` envelope each paired device is sent (by pairing id)."""
            got: dict[str, dict[str, Any]] = {}
            async for message in stream:
                await session.ack(message)
                box = json.loads(message.payload)["e2e"]
                device = next(d for d in devices if d.pairing_id == box["p"])
                envelope = json.loads(device.open(box))
                if envelope["type"] == f"lineup.v1.{kind}":
                    got[device.pairing_id] = envelope
                    if len(got) == len(devices):
                        return got
            raise AssertionError("the App's IM connection closed")

        async with agent(data_dir, "--call", "--relay", im.api_url) as (process, _):
            calls = await next_envelopes("tool.call")
            call_id = next(iter(calls.values()))["payload"]["call_id"]
            process.send_signal(signal.SIGKILL)
            assert await process.wait() == -signal.SIGKILL

        async with agent(data_dir, "--relay", im.api_url) as (process, info):
            assert info["recovered"] == [{"call_id": call_id, "state": "cancelled", "message": RESTARTED}]
            for cancel in (await next_envelopes("tool.cancel")).values():
                assert cancel["payload"]["call_id"] == call_id
                assert cancel["payload"]["reason"] == f"this call already ended (cancelled): {RESTARTED}"
        await session.close()
