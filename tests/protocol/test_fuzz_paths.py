"""Fuzzing every inbound path through the hub: hello, result, ack, cancel, tool.list, tool.call, text, stop.

Whatever an App sends, :meth:`Hub.receive` returns (no exception leaves the hub); input the decoder
refuses is answered with exactly one ``error`` message to that App (and, before the handshake, the
link is closed); and the store still commits: the live call the fuzzed input may have touched ends
exactly once, with the same status for the caller and a fresh read of the SQLite file, and a normal
call made afterwards completes and is committed. Driven over the memory transport with a real
:class:`SQLiteStore` on disk.
"""

from __future__ import annotations

import asyncio
import copy
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lineup_plugin.errors import ProtocolError
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import TERMINAL, CallState
from lineup_plugin.protocol.messages import (
    Actor,
    AgentStop,
    DeviceHello,
    Envelope,
    Text,
    ToolAck,
    ToolCall,
    ToolCancel,
    ToolList,
    ToolResult,
)
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.memory import MemoryApp

from .test_fuzz import json_values, parent_of, paths

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
QUESTION = {"question": "Deploy where?", "options": ["staging", "production"]}
LIVE = "call_live_0001"

#: one valid App → agent message per inbound path; ``LIVE`` is the id of a call live when it arrives
INBOUND: dict[str, Any] = {
    "device.hello": DeviceHello(device_id="phone", app_version="1.0", open_calls=[LIVE]),
    "tool.result": ToolResult(call_id=LIVE, status="completed", result={"selected": "staging", "index": 0}),
    "tool.ack": ToolAck(call_id=LIVE, stage="waiting_user"),
    "tool.cancel": ToolCancel(call_id=LIVE, reason="not now"),
    "tool.list": ToolList(tools=[{"name": "app_x", "type": "action", "inputSchema": {"type": "object"}}]),  # type: ignore[list-item]
    "tool.call": ToolCall(call_id="call_app_1", name="calculator", action="add", arguments={"a": 1, "b": 2}),
    "text": Text(text="hello agent"),
    "agent.stop": AgentStop(reason="user"),
}


def wire(payload: Any) -> dict[str, Any]:
    message = codec.envelope(
        payload,
        sender=Actor(kind="device", id="phone"),
        target=Actor(kind="agent", id="lineup-agent"),
        conversation_id="default",
    )
    return json.loads(codec.encode(message))


@st.composite
def bent(draw: st.DrawFn, kind: str) -> str:
    """A valid message of ``kind`` with fields dropped, replaced or added, or cut short, as wire text."""
    message = copy.deepcopy(wire(INBOUND[kind]))
    message["id"] = f"m_{draw(st.integers(min_value=0, max_value=10**9))}"
    how = draw(st.sampled_from(["mutate", "payload", "truncate", "valid"]))
    if how == "payload":
        message["payload"] = draw(st.dictionaries(st.text(max_size=10), json_values, max_size=4) | json_values)
    elif how == "mutate":
        for _ in range(draw(st.integers(min_value=1, max_value=3))):
            where = [p for p in paths(message) if p[:1] != ("type",)] or paths(message)
            path = draw(st.sampled_from(where))
            parent = parent_of(message, path)
            action = draw(st.sampled_from(["drop", "replace", "add"]))
            if action == "drop" and isinstance(parent, dict):
                del parent[path[-1]]
            elif action == "add" and isinstance(parent, dict):
                parent[draw(st.text(max_size=10))] = draw(json_values)
            else:
                parent[path[-1]] = draw(json_values)
    text = json.dumps(message, ensure_ascii=False)
    if how == "truncate":
        text = text[: draw(st.integers(min_value=0, max_value=len(text) - 1))]
    return text


def drain(app: MemoryApp) -> list[Envelope]:
    out = []
    while not app.inbox.empty():
        out.append(app.inbox.get_nowait())
    return out


def registry() -> Any:
    return collect_tools(get_plugin_manager(load_entrypoints=False))


async def answer(app: MemoryApp, call_id: str, selected: str) -> None:
    await app.send_payload(ToolResult(call_id=call_id, result={"selected": selected, "index": 0}))


async def scenario(kind: str, text: str, directory: Path) -> None:
    path = directory / "lineup.sqlite3"
    events: list[str] = []
    store = SQLiteStore(path)
    hub = Hub(
        registry(), store=store, on_text=lambda d, t: events.append("text"), on_stop=lambda d: events.append("stop")
    )
    tablet = MemoryApp(hub, "tablet")
    await tablet.connect()
    await tablet.next("device.welcome")
    live = asyncio.create_task(hub.call("choice", QUESTION, call_id=LIVE))
    assert (await tablet.next("tool.call")).payload.call_id == LIVE  # type: ignore[union-attr]

    phone = MemoryApp(hub, "phone")
    if kind == "device.hello":
        hub.connect(phone, verify=phone.verify)
    else:
        await phone.connect()
        await phone.next("device.welcome")
        drain(phone)
    try:
        codec.decode(text)
        refused = False
    except ProtocolError:
        refused = True

    await hub.receive(phone, text)  # the property: nothing is raised out of the hub

    got = drain(phone)
    if refused:
        assert [m.kind for m in got] == ["error"], f"one error for refused input, got {[m.kind for m in got]}"
        if kind == "device.hello":
            assert phone.closed is not None, "a refused hello closes the link"

    # the live call ends exactly once, the same for the caller and the file
    await answer(tablet, LIVE, "production")
    result = await live
    assert result.status in {str(s) for s in TERMINAL}
    # a normal call afterwards completes and is committed
    fresh = asyncio.create_task(hub.call("choice", QUESTION))
    call = (await tablet.next("tool.call")).payload
    assert isinstance(call, ToolCall)
    await answer(tablet, call.call_id, "staging")
    done = await fresh
    assert done.status == "completed" and done.result == {"selected": "staging", "index": 0}
    store.close()
    with SQLiteStore(path) as reread:
        saved_live = reread.get_call(LIVE)
        assert saved_live is not None and str(saved_live.state) == result.status
        assert saved_live.result is not None and saved_live.result.result == result.result
        saved = reread.get_call(call.call_id)
        assert saved is not None and saved.state is CallState.COMPLETED
        assert reread.pending_calls() == []
        ends = [e for e, c, _, _ in reread.audit_log if c == LIVE and e.removeprefix("call.") in TERMINAL]
        assert len(ends) == 1, f"the live call ended {ends}"


def run(kind: str, text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        asyncio.run(scenario(kind, text, Path(directory)))


@pytest.mark.parametrize("kind", list(INBOUND))
def test_every_inbound_path_gives_only_protocol_errors_and_the_store_still_commits(kind: str) -> None:
    @FUZZ
    @given(bent(kind))
    def check(text: str) -> None:
        run(kind, text)

    check()


@pytest.mark.parametrize("kind", list(INBOUND))
def test_the_unbent_message_of_each_path_is_accepted(kind: str) -> None:
    run(kind, json.dumps(wire(INBOUND[kind])))


def test_every_inbound_kind_is_covered() -> None:
    from_app = {
        "device.hello",
        "tool.result",
        "tool.ack",
        "tool.cancel",
        "tool.list",
        "tool.call",
        "text",
        "agent.stop",
    }
    assert set(INBOUND) == from_app
