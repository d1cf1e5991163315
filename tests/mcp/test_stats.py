"""``lineup stats``: metering per tool, status and device, from the store's audit log."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from lineup_plugin.cli import main
from lineup_plugin.errors import ConfigError, StoreBusyError
from lineup_plugin.protocol.calls import Call
from lineup_plugin.protocol.messages import ToolCall, ToolResult
from lineup_plugin.stats import compute, format_table, parse_since
from lineup_plugin.store import AuditRecord, SQLiteStore, read_call_audit

from ..store_helpers import audit, save_call
from .conftest import Lineup, stdio_client
from .test_mcp_stdio import CHOICE


def rec(at: float, event: str, call_id: str, device: str | None = None, detail: str = "", tool: str | None = None):
    return AuditRecord(at, event, call_id, device, detail, tool)


RECORDS = [
    rec(90.0, "call.completed", "old", "phone"),  # created before the records begin: not counted
    rec(100.0, "call.created", "c1", detail="choice"),
    rec(100.1, "call.delivered", "c1", "phone"),
    rec(100.1, "call.delivered", "c1", "tablet"),
    rec(102.0, "call.completed", "c1", "phone"),
    rec(110.0, "call.created", "c2", detail="choice"),
    rec(110.1, "call.delivered", "c2", "phone"),
    rec(114.0, "call.completed", "c2", "tablet"),
    rec(120.0, "call.created", "c3", detail="choice"),
    rec(120.1, "call.delivered", "c3", "phone"),
    rec(180.0, "call.expired", "c3"),
    rec(200.0, "call.failed", "c4", detail="no_app", tool="confirm"),
    rec(210.0, "call.created", "c5", detail="input"),
]


def test_counts_times_and_error_rate_per_tool_and_status() -> None:
    stats = compute(RECORDS)
    choice, confirm, input_ = stats.tools["choice"], stats.tools["confirm"], stats.tools["input"]
    assert stats.calls == 5 and choice.calls == 3
    assert choice.statuses["completed"].count == 2 and choice.statuses["completed"].seconds == [2.0, 4.0]
    assert choice.statuses["completed"].p50 == 2.0 and choice.statuses["completed"].p95 == 4.0
    assert choice.statuses["expired"].count == 1 and choice.statuses["expired"].p50 == 60.0
    assert choice.error_rate == 0.0 and confirm.error_rate == 1.0
    assert confirm.statuses["failed"].count == 1 and input_.statuses["open"].count == 1


def test_devices_count_deliveries_and_their_own_answers() -> None:
    devices = compute(RECORDS).devices
    assert devices["phone"].delivered == 3 and devices["tablet"].delivered == 1
    assert devices["phone"].statuses["completed"].seconds == [2.0]
    assert devices["tablet"].statuses["completed"].seconds == [4.0]


def test_json_and_table_show_the_same_figures() -> None:
    stats = compute(RECORDS, since=100.0)
    data = stats.as_json()
    assert data["calls"] == 5 and data["since"] == "1970-01-01T00:01:40+00:00"
    assert data["tools"]["choice"]["statuses"]["completed"] == {"count": 2, "p50": 2.0, "p95": 4.0}
    assert data["devices"]["tablet"] == {
        "name": None,
        "delivered": 1,
        "statuses": {"completed": {"count": 1, "p50": 4.0, "p95": 4.0}},
    }
    rows = [line.split() for line in format_table(stats).splitlines()]
    assert ["choice", "completed", "2", "2.0s", "4.0s"] in rows and ["confirm", "(all)", "1", "100.0%"] in rows


def test_a_device_is_named_as_people_call_it_once_it_answered() -> None:
    named = [
        *RECORDS,
        AuditRecord(300.0, "call.created", "c6", None, "choice", "choice"),
        AuditRecord(300.1, "call.delivered", "c6", "phone", "", "choice", "Pixel 7 (Chrome)"),
        AuditRecord(301.0, "call.completed", "c6", "phone", "", "choice", "Pixel 7 (Chrome)"),
    ]
    stats = compute(named)
    assert stats.devices["phone"].name == "Pixel 7 (Chrome)"
    assert stats.devices["tablet"].name is None  # its one answer's call is no longer known by name
    assert stats.as_json()["devices"]["phone"]["name"] == "Pixel 7 (Chrome)"
    table = format_table(stats)
    assert "Pixel 7 (Chrome) (phone)  (delivered)  4" in table and "\ntablet " in table


def test_the_store_names_the_device_that_answered_each_call(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    call = Call(request=ToolCall(call_id="c1", name="choice"), conversation_id="default", created_at=100.0)
    save_call(store, call)
    audit(store, "call.created", call_id="c1", detail="choice")
    audit(store, "call.delivered", call_id="c1", device_id="phone")
    call.finish(ToolResult(call_id="c1", name="choice", status="completed", result={"selected": "a"}), now=101.0)
    call.answered_by, call.answered_name = "phone", "Pixel 7 (Chrome)"
    save_call(store, call)
    audit(store, "call.completed", call_id="c1", device_id="phone")
    audit(store, "call.created", call_id="c2", detail="confirm")  # a call the store does not keep
    page, _ = store.call_audit_page()
    store.close()
    for records in (page, read_call_audit(tmp_path / "lineup.sqlite3")):
        assert [(r.event, r.tool, r.answered_name) for r in records] == [
            ("call.created", "choice", "Pixel 7 (Chrome)"),
            ("call.delivered", "choice", "Pixel 7 (Chrome)"),
            ("call.completed", "choice", "Pixel 7 (Chrome)"),
            ("call.created", None, None),
        ]
        assert compute(records).devices["phone"].name == "Pixel 7 (Chrome)"


def test_since_takes_durations_and_iso_times() -> None:
    assert parse_since("1h30m", now=10_000.0) == 10_000.0 - 5400
    assert parse_since("7d", now=1e6) == 1e6 - 7 * 86400
    assert parse_since("2026-11-30T12:00:00Z") == datetime(2026, 11, 30, 12, tzinfo=UTC).timestamp()
    with pytest.raises(ConfigError, match="--since"):
        parse_since("yesterday")


def test_reads_the_store_file_and_refuses_while_it_is_held(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    audit(store, "call.created", call_id="c1", detail="choice")
    audit(store, "call.completed", call_id="c1", device_id="phone")
    with pytest.raises(StoreBusyError, match="in use"):
        read_call_audit(tmp_path / "lineup.sqlite3")
    store.close()
    records = read_call_audit(tmp_path / "lineup.sqlite3")
    assert [(r.event, r.call_id, r.device_id) for r in records] == [
        ("call.created", "c1", None),
        ("call.completed", "c1", "phone"),
    ]
    assert read_call_audit(tmp_path / "lineup.sqlite3", since=records[-1].at + 1) == []


async def test_stats_of_a_choice_answered_through_lineup_mcp(
    lineup: Lineup, capsys: pytest.CaptureFixture[str]
) -> None:
    async with stdio_client(lineup) as client:
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        await app.answer(await app.next_call(), selected="staging", index=0)
        await asyncio.wait_for(task, 30)
        await app.close()
    assert main(["stats", "--json", "--data-dir", lineup.env["LINEUP_DATA_DIR"], "--since", "1h"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["calls"] == 1 and data["tools"]["choice"]["statuses"]["completed"]["count"] == 1
    assert data["devices"]["phone"]["delivered"] == 1


async def test_calls_refused_for_bad_arguments_are_counted_by_lineup_stats(
    lineup: Lineup, capsys: pytest.CaptureFixture[str]
) -> None:
    async with stdio_client(lineup) as client:
        refused = await client.call_tool("choice", {"question": "Where?", "options": "staging"})
        hostile = await client.call_tool("choice", {"options": ["a", "b"], "question": {"deep": [[[[1]]]]}})
    for result in (refused, hostile):
        assert result.is_error and json.loads(result.content[0].text)["result"]["error"] == "invalid_arguments"
    assert main(["stats", "--json", "--data-dir", lineup.env["LINEUP_DATA_DIR"], "--since", "1h"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["calls"] == 2
    choice = data["tools"]["choice"]
    assert choice["statuses"]["failed"]["count"] == 2 and choice["error_rate"] == 1.0


def test_stats_while_a_process_serves_says_who(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lineup_plugin.runtime.lock import ServerLock

    lock = ServerLock(tmp_path)
    assert lock.acquire("mcp")
    with SQLiteStore(tmp_path / "lineup.sqlite3"):
        assert main(["stats", "--data-dir", str(tmp_path)]) == 1
    lock.release()
    error = capsys.readouterr().err
    assert "in use by the process serving the App" in error and "(mcp)" in error


async def test_stats_while_lineup_mcp_holds_the_store_are_asked_of_it(
    lineup: Lineup, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    del lineup.env["LINEUP_TOKEN"]  # the child generates one in the data dir; lineup stats reads it there
    data_dir = Path(lineup.env["LINEUP_DATA_DIR"])
    async with stdio_client(lineup) as client:
        await client.list_tools()  # the child serves the App (and holds the store) by now
        lineup.app_server.token = (data_dir / "token").read_text().strip()
        app = await lineup.app()
        task = asyncio.create_task(client.call_tool("choice", CHOICE))
        await app.answer(await app.next_call(), selected="staging", index=0)
        await asyncio.wait_for(task, 30)
        with pytest.raises(StoreBusyError):
            read_call_audit(data_dir / "lineup.sqlite3")  # the store is held: the file cannot be read
        monkeypatch.setenv("LINEUP_PORT", lineup.env["LINEUP_PORT"])
        monkeypatch.setenv("LINEUP_HOST", "0.0.0.0")  # asked on the loopback address
        assert await asyncio.to_thread(main, ["stats", "--json", "--data-dir", str(data_dir)]) == 0
        data = json.loads(capsys.readouterr().out)
        assert data["calls"] == 1 and data["tools"]["choice"]["statuses"]["completed"]["count"] == 1
        assert data["devices"]["phone"]["statuses"]["completed"]["count"] == 1
        assert await asyncio.to_thread(main, ["stats", "--since", "1h", "--data-dir", str(data_dir)]) == 0
        table = [line.split() for line in capsys.readouterr().out.splitlines()]
        assert table[3][:3] == ["choice", "completed", "1"] and ["choice", "(all)", "1", "0.0%"] in table
        await app.close()


def test_stats_while_held_by_a_server_with_another_token_say_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "token").write_text("a-token-the-server-does-not-have\n")
    (tmp_path / "token").chmod(0o600)
    monkeypatch.setenv("LINEUP_PORT", "9")  # nothing listens on the discard port
    with SQLiteStore(tmp_path / "lineup.sqlite3"):
        assert main(["stats", "--data-dir", str(tmp_path)]) == 1
    error = capsys.readouterr().err
    assert "in use by the process serving the App" in error
    assert "cannot ask the server at http://127.0.0.1:9/api/stats" in error


async def test_the_server_answers_its_metering_to_the_token_only(tmp_path: Path) -> None:
    from lineup_plugin import Hub, load_registry
    from tests.transports.test_direct import TOKEN as SERVER_TOKEN
    from tests.transports.test_direct import http_get, running

    bearer = {"Authorization": f"Bearer {SERVER_TOKEN}"}
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    audit(store, "call.created", call_id="c1", detail="choice")
    audit(store, "call.completed", call_id="c1", device_id="phone")
    async with running(tmp_path, hub=Hub(load_registry(load_entrypoints=False), store=store)) as server:
        status, _, body = await http_get(server.port, "/api/stats")
        assert status == 401 and "missing token" in json.loads(body)["error"]
        status, headers, body = await http_get(server.port, "/api/stats", bearer)
        assert status == 200 and headers["content-type"] == "application/json"
        assert json.loads(body)["tools"]["choice"]["statuses"]["completed"]["count"] == 1
        status, _, body = await http_get(server.port, "/api/stats?since=9999999999", bearer)
        assert status == 200 and json.loads(body)["calls"] == 0
        for bad in ("yesterday", "nan", "inf", "1e999"):
            status, _, body = await http_get(server.port, f"/api/stats?since={bad}", bearer)
            assert status == 400 and "since: expected seconds since the epoch" in json.loads(body)["error"]
    store.close()
    async with running(tmp_path / "memory") as server:  # a hub with the memory store
        status, _, body = await http_get(server.port, "/api/stats", bearer)
        assert status == 503 and "store: memory" in json.loads(body)["error"]


async def test_a_since_no_date_can_show_is_refused_400_not_500(tmp_path: Path) -> None:
    """``since=1e308`` is a finite number but no date: it was counted, then failed as its ISO form."""
    from lineup_plugin import Hub, load_registry
    from tests.transports.test_direct import TOKEN as SERVER_TOKEN
    from tests.transports.test_direct import http_get, running

    bearer = {"Authorization": f"Bearer {SERVER_TOKEN}"}
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    async with running(tmp_path, hub=Hub(load_registry(load_entrypoints=False), store=store)) as server:
        for bad in ("1e308", "-1e308", "253402300800", "-62135596801"):
            status, _, body = await http_get(server.port, f"/api/stats?since={bad}", bearer)
            assert status == 400 and "since: expected seconds since the epoch" in json.loads(body)["error"]
        status, _, body = await http_get(server.port, "/api/stats?since=253402300799", bearer)  # 9999-12-31
        assert status == 200 and json.loads(body)["since"] == "9999-12-31T23:59:59+00:00"
    store.close()
    with pytest.raises(ConfigError, match="before the year 1"):
        parse_since("99999999999w", now=0)


async def test_the_server_counts_page_by_page_what_lineup_stats_counts_at_once(tmp_path: Path) -> None:
    from lineup_plugin.protocol.session import Audit
    from lineup_plugin.transports.direct.api import STATS_PAGE, store_stats

    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    records = []
    for i in range(STATS_PAGE):  # four records a call: two pages and more
        call_id = f"call_{i}"
        status = ("completed", "rejected", "failed", "expired")[i % 4]
        records += [
            Audit("call.created", call_id, None, ("choice", "confirm")[i % 2]),
            Audit("call.delivered", call_id, ("phone", "tablet")[i % 2], ""),
            Audit("tools.declared", None, "phone", "torch"),  # not about a call: left out
            Audit(f"call.{status}", call_id, "phone" if status != "expired" else None, ""),
        ]
    store.apply(records)
    paged = (await store_stats(store, None)).as_json()
    since = (await store_stats(store, 9e9)).as_json()
    store.close()
    assert paged == compute(read_call_audit(tmp_path / "lineup.sqlite3")).as_json()
    assert paged["calls"] == STATS_PAGE and paged["tools"]["confirm"]["calls"] == STATS_PAGE // 2
    assert since["calls"] == 0
