"""The protocol core does no I/O: it imports no I/O library, reads no clock and queries no store.

Driven here with a fake clock at 1000.0 (1970, 16 minutes 40 seconds after the epoch) and fake
records, every time the core puts on the wire or in the store must be that clock's: a wall-clock
read anywhere would show up as a 2026 timestamp. What the core needs from the store is handed to
it (``wants`` → ``Known``), and the registry changes an App asks for come out of it as output.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from lineup_plugin.protocol import calls as calls_module
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.calls import Call, CallState, format_timestamp, parse_timestamp
from lineup_plugin.protocol.history import Record, SaveConversation
from lineup_plugin.protocol.messages import (
    Actor,
    DeviceHello,
    Envelope,
    Text,
    ToolCall,
    ToolList,
    ToolResult,
)
from lineup_plugin.protocol.outputs import Applied, Audit, DeclareTools, SaveCall, SeenEnvelope, Send, WithdrawTools
from lineup_plugin.protocol.reads import Kept, Known, Wants
from lineup_plugin.protocol.session import Session
from lineup_plugin.protocol.tools import ToolDefinition

NOW = 1000.0
STAMP = format_timestamp(NOW)  # 1970-01-01T00:16:40.000+00:00

FORBIDDEN = [
    "asyncio",
    "websockets",
    "anyio",
    "httpx",
    "sqlite3",
    "hermes_cli",
    "run_agent",
    "model_tools",
]


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class Catalog:
    """Reads only: a session has no way to change it (registry changes are its output)."""

    def agent_tools(self) -> list[ToolDefinition]:
        return []

    def runs_in_process(self, name: str) -> bool:
        return False

    def check_result(self, name: str, action: str | None, result: dict[str, Any]) -> str | None:
        return None


def session(clock: Clock) -> Session[str]:
    return Session(catalog=Catalog(), clock=clock, kept=Kept(history_id="h1", head=0))


def from_app(device_id: str, payload: Any, envelope_id: str) -> Envelope:
    return codec.envelope(
        payload,
        sender=Actor(kind="device", id=device_id),
        target=Actor(kind="agent", id="lineup-agent"),
        conversation_id="default",
        id=envelope_id,
        timestamp=STAMP,
    )


def wire(batch_messages: list[Any]) -> list[dict[str, Any]]:
    return [json.loads(m.text) for m in batch_messages if isinstance(m, Send)]


def times_in(changes: list[Any]) -> list[float]:
    """Every time a batch's store changes carry."""
    found: list[float] = []
    for change in changes:
        if isinstance(change, SaveCall):
            found += [change.call.created_at] + [at for _, at in change.call.history]
            found += [change.call.expires_at] if change.call.expires_at is not None else []
        elif isinstance(change, Audit | SeenEnvelope):
            assert change.at is not None
            found.append(change.at)
        elif isinstance(change, Record):
            found.append(change.at)
        elif isinstance(change, SaveConversation):
            assert change.updated_at is not None
            found.append(change.updated_at)
    return found


def no_wall_clock() -> float:
    raise AssertionError("the session core read the wall clock")


def test_every_timestamp_on_the_wire_and_in_the_store_comes_from_the_injected_clock(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(codec, "now_iso", no_wall_clock)
    monkeypatch.setattr(calls_module.time, "time", no_wall_clock)
    clock = Clock()
    core = session(clock)
    core.open("phone", name="phone", device_id="phone")
    core.start_call(ToolCall(call_id="c1", name="choice", arguments={"options": ["a", "b"]}), wait=60)
    first = core.take()

    sent = wire(first.messages)
    assert {m["timestamp"] for m in sent} == {STAMP}
    [call] = [m for m in sent if m["type"] == "lineup.v1.tool.call"]
    assert parse_timestamp(call["payload"]["expires_at"]) == NOW + 60
    assert set(times_in(first.changes)) == {NOW, NOW + 60}

    clock.now = NOW + 5
    answer = from_app("phone", ToolResult(call_id="c1", status="completed", result={"selected": "a"}), "r1")
    wants = core.wants("phone", answer)
    assert wants == Wants("r1", ())  # the call is live: only whether the envelope was seen
    core.receive("phone", answer, Known(seen=False))
    second = core.take()
    assert [c.call_id for c in second.ended] == ["c1"]
    assert set(times_in(second.changes)) == {NOW, NOW + 5, NOW + 60}  # the call row keeps its start
    assert {a.at for a in second.changes if isinstance(a, Audit)} == {NOW + 5}
    assert {m["timestamp"] for m in wire(second.messages)} <= {format_timestamp(NOW + 5)}

    clock.now = NOW + 100
    core.start_call(ToolCall(call_id="c2", name="choice"), wait=10)
    core.take()
    clock.now = NOW + 111
    assert core.calls.next_deadline() == NOW + 110
    assert core.calls.tick() == 1
    expired = core.take()
    [ended] = expired.ended
    assert ended.state == CallState.EXPIRED and ended.history[-1][1] == NOW + 111
    assert {m["timestamp"] for m in wire(expired.messages)} == {format_timestamp(NOW + 111)}


def test_what_the_store_knows_is_handed_in_with_the_envelope() -> None:
    clock = Clock()
    core = session(clock)
    core.open("phone", name="phone", device_id="phone")
    core.take()
    ended = Call(request=ToolCall(call_id="old", name="choice"), conversation_id="default", created_at=NOW - 50)
    ended.end("completed", "done", now=NOW - 40)

    late = from_app("phone", ToolResult(call_id="old", status="completed", result={"selected": "b"}), "r2")
    assert core.wants("phone", late) == Wants("r2", ("old",))
    core.receive("phone", late, Known(seen=False, calls={"old": ended}))
    [error] = wire(core.take().messages)
    assert error["payload"]["code"] == "call_closed"  # known only through what was handed in

    again = from_app("phone", Text(text="hi"), "seen-before")
    core.receive("phone", again, Known(seen=True))
    batch = core.take()
    assert batch.messages == [] and batch.events == []
    assert [(a.event, a.at) for a in batch.changes if isinstance(a, Audit)] == [("duplicate.envelope", NOW)]


def test_registry_changes_are_output_and_their_outcome_is_handed_back() -> None:
    core = session(Clock())
    core.open("phone", name="phone", device_id="phone")
    core.take()
    tools = [ToolDefinition(name="camera", type="action", description="take a photo")]
    listing = from_app("phone", ToolList(tools=tools), "t1")
    core.receive("phone", listing, Known())
    batch = core.take()
    [change] = batch.registry
    assert isinstance(change, DeclareTools) and change.source == "app:phone" and change.tools == tuple(tools)
    core.registry_applied(change, Applied(changed=True))
    assert [type(e).__name__ for e in core.take().events] == ["ToolsChanged"]

    core.close("phone")
    assert core.take().registry == [WithdrawTools("app:phone")]


def test_a_hello_that_names_its_last_seq_wants_the_history_it_missed() -> None:
    core = Session(catalog=Catalog(), clock=Clock(), kept=Kept(history_id="h1", head=7))
    core.open("phone", name="phone", verify=lambda hello: None)
    hello = from_app("phone", DeviceHello(device_id="phone", last_seq=3, history_id="h1"), "hello")
    wants = core.wants("phone", hello)
    assert wants.history is not None and wants.history.after == 3 and wants.envelope_id is None


def test_protocol_core_and_session_import_no_io_library_in_a_fresh_interpreter() -> None:
    code = (
        "import sys\n"
        "import lineup_plugin.protocol as p\n"
        "from lineup_plugin.protocol import session\n"
        "from lineup_plugin.protocol.reads import Kept\n"
        "p.decode(p.encode(p.envelope(p.Text(text='hi'), sender=p.Actor(kind='agent', id='a'),"
        " target=p.Actor(kind='device', id='d'), conversation_id='c')))\n"
        "class Catalog:\n"
        "    def agent_tools(self): return []\n"
        "    def runs_in_process(self, name): return False\n"
        "    def check_result(self, name, action, result): return None\n"
        "core = session.Session(catalog=Catalog(), clock=lambda: 1000.0, kept=Kept('h'))\n"
        "core.open('phone', name='phone', device_id='phone')\n"
        "core.start_call(p.ToolCall(call_id='c1', name='choice'), wait=60)\n"
        "assert core.take().messages\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
