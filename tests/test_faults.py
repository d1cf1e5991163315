"""The fault rig, small form (the large one is ``python -m benchmarks.faults``): nothing lost, nothing run twice.

A real agent process (``tests/rig/agent.py``: hubs, SQLite stores, direct servers) and Apps over
real WebSockets through a fault proxy that drops, delays, duplicates, reorders and truncates frames
and cuts connections; the agent SIGKILLs itself at named points of the call lifecycle and is
started again on the same directory; its store fails (disk full, I/O error). After each run the
rig checks that every call started ended exactly once with the same status for the caller, in
the store and on the App (see ``tests/rig/driver.py``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import sys
from pathlib import Path

import pytest

from lineup_plugin.hub import Hub
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol.calls import CallState
from lineup_plugin.protocol.messages import ToolCall, ToolCancel, ToolResult
from lineup_plugin.protocol.session import SaveCall
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.memory import MemoryApp

from .rig.agent import POINTS
from .rig.driver import Generation, RigReport, run_rig
from .rig.proxy import FaultPlan, FaultProxy

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL")

QUESTION = {"question": "Deploy where?", "options": ["staging", "production"]}


def holds(report: RigReport) -> None:
    assert report.problems == [], report.table()
    assert (report.lost, report.duplicated, report.disagree) == (0, 0, 0), report.table()
    assert report.calls > 0
    assert 0 < report.max_rss_kib < 256 * 1024, "the agent's peak RSS stays bounded"


async def test_network_faults_lose_nothing_and_run_nothing_twice(tmp_path: Path) -> None:
    plan = FaultPlan.mixed(seed=7, rate=0.3)
    report = await run_rig(tmp_path, apps=2, calls=12, generations=[], plan=plan, deadline=1.0)
    holds(report)
    assert {"drop", "delay", "duplicate", "reorder"} <= plan.counts.keys(), plan.counts


async def test_kill_9_at_named_points_then_restart_loses_nothing(tmp_path: Path) -> None:
    kills = [
        "start_call.after@2",
        "apply.before.delivered@3",
        "send.after.tool.call@2",
        "receive.after.tool.ack@2",
        "apply.before.completed@1",
        "apply.after.completed@1",
        "caller.before_result@1",
    ]
    generations = [Generation(kill=kill) for kill in kills]
    report = await run_rig(
        tmp_path, apps=2, calls=12, generations=generations, plan=FaultPlan(), concurrency=1, deadline=1.0
    )
    holds(report)
    assert report.faults["kill -9"] == len(kills)


async def test_store_faults_with_network_faults_lose_nothing(tmp_path: Path) -> None:
    generations = [
        Generation(kill="apply.after.waiting_user@4", store_fault="disk_full@2+3"),
        Generation(store_fault="io_error@3"),
    ]
    plan = FaultPlan.mixed(seed=3, rate=0.1)
    report = await run_rig(tmp_path, apps=2, calls=8, generations=generations, plan=plan, deadline=1.0)
    holds(report)
    assert report.points.get("fault.io_error") == 1


def test_every_kill_point_is_named_once() -> None:
    assert len(POINTS) == len(set(POINTS)) >= 20


async def test_truncated_frames_and_cut_connections_lose_nothing(tmp_path: Path) -> None:
    """Frames cut in their middle and connections cut: the agent drops those connections and serves
    the App's next ones; what the App sent whole counts, the rest is redelivered or expires."""
    plan = FaultPlan(seed=5, truncate=0.15, cut=0.1)
    report = await run_rig(tmp_path, apps=2, calls=6, generations=[], plan=plan, deadline=1.0)
    holds(report)
    assert plan.counts["truncate"] > 0 and plan.counts["cut"] > 0, plan.counts


async def test_an_unserializable_value_at_commit_fails_the_call_loudly(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    hub = Hub(collect_tools(get_plugin_manager(load_entrypoints=False)), store=store)
    app = MemoryApp(hub, "phone")
    await app.connect()
    await app.next("device.welcome")
    caller = asyncio.create_task(hub.call("choice", QUESTION))
    call = (await app.next("tool.call")).payload
    assert isinstance(call, ToolCall)

    def unserializable(saved: object) -> None:
        json.dumps(object())

    store._save_row = unserializable  # type: ignore[method-assign]
    try:
        await app.send_payload(ToolResult(call_id=call.call_id, result={"selected": "staging", "index": 0}))
    finally:
        del store._save_row
    result = await asyncio.wait_for(caller, 10)  # a guard: the caller is woken by this very input
    assert result.status == "failed" and result.result["error"] == "store_failed"
    await hub.send_text("the store works again")  # any flush writes what waited (a timer does it too)
    saved = store.get_call(call.call_id)
    assert saved is not None and saved.state is CallState.FAILED


async def test_the_proxy_passes_a_clean_connection_through(tmp_path: Path) -> None:
    echo_seen: list[bytes] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read(100)
        echo_seen.append(data)
        writer.write(data)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    proxy = FaultProxy(server.sockets[0].getsockname()[1], FaultPlan(), frames=False)
    await proxy.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
        writer.write(b"hello")
        assert await reader.read(100) == b"hello"
        writer.close()
    finally:
        await proxy.close()
        server.close()
    assert echo_seen == [b"hello"]


async def test_a_failure_told_while_the_disk_is_full_is_written_once_it_is_not(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    hub = Hub(collect_tools(get_plugin_manager(load_entrypoints=False)), store=store, deadline=0.2)
    app = MemoryApp(hub, "phone")
    await app.connect()
    await app.next("device.welcome")
    caller = asyncio.create_task(hub.call("choice", QUESTION))
    call = (await app.next("tool.call")).payload
    assert isinstance(call, ToolCall)
    real_apply = store.apply
    failing = [3]  # the expiry's commit, its salvage, the failure's commit

    def apply(changes: object) -> None:
        changes = list(changes)  # type: ignore[call-overload]
        if failing[0] and any(isinstance(change, SaveCall) for change in changes):
            failing[0] -= 1
            raise_full = sqlite3.OperationalError("database or disk is full")

            def full(saved: object) -> None:
                raise raise_full

            store._save_row = full  # type: ignore[method-assign]
        try:
            real_apply(changes)
        finally:
            store.__dict__.pop("_save_row", None)

    store.apply = apply  # type: ignore[method-assign]
    result = await caller  # the deadline passes: the expiry cannot be written
    assert result.status == "failed" and result.result["error"] == "store_failed"
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.call_id == call.call_id
    assert failing == [0]
    # the disk has room again: the next call commits
    other = asyncio.create_task(hub.call("choice", QUESTION))
    second = (await app.next("tool.call")).payload
    assert isinstance(second, ToolCall)
    await app.send_payload(ToolResult(call_id=second.call_id, result={"selected": "staging", "index": 0}))
    assert (await other).status == "completed"
    saved = store.get_call(call.call_id)
    assert saved is not None and saved.state is CallState.FAILED, f"the store has {saved and saved.state}"
