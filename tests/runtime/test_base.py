"""The runtime-neutral half: result JSON for the model, and the bridge that keeps a runtime's tools in step."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lineup_plugin import Hub, load_registry
from lineup_plugin.hub import failure
from lineup_plugin.protocol.messages import ToolList, ToolResult
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.runtime.base import AgentRuntime, ToolBridge, ToolHandler, result_json
from lineup_plugin.tools.registry import function_schema
from lineup_plugin.transports.memory import MemoryApp

FLASHLIGHT = {
    "name": "flashlight",
    "type": "action",
    "description": "Turn the flashlight on or off.",
    "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
}


class FakeRuntime(AgentRuntime):
    """Records what LineUp asks of it."""

    name = "fake"

    def __init__(self) -> None:
        self.tools: dict[str, tuple[dict[str, Any], ToolHandler]] = {}
        self.interrupted = False
        self.beats: list[tuple[str, float]] = []

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        self.tools[schema["name"]] = (schema, handler)

    def unregister_tool(self, name: str) -> None:
        self.tools.pop(name, None)

    def is_interrupted(self) -> bool:
        return self.interrupted

    def heartbeat(self, label: str, started: float) -> None:
        self.beats.append((label, started))

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        return False

    def interrupt(self, message: str | None = None) -> bool:
        return False

    def steer(self, text: str) -> bool:
        return False


class RecordingCall:
    """A BlockingCall that answers at once and records how it was called."""

    def __init__(self, result: ToolResult) -> None:
        self.result = result
        self.calls: list[dict[str, Any]] = []

    def __call__(self, name: str, flat_args: dict[str, Any], **options: Any) -> ToolResult:
        self.calls.append({"name": name, "args": flat_args, **options})
        options["heartbeat"]()
        return self.result


def test_completed_result_is_status_then_the_apps_answer() -> None:
    result = ToolResult(call_id="c1", name="choice", status="completed", result={"selected": "b", "index": 1})
    body = json.loads(result_json(result))
    assert body == {"status": "completed", "tool": "choice", "call_id": "c1", "result": {"selected": "b", "index": 1}}


@pytest.mark.parametrize(
    ("status", "says"),
    [
        ("expired", "not a refusal"),
        ("rejected", "declined"),
        ("cancelled", "withdrawn"),
        ("unsupported", "cannot run"),
        ("failed", "could not run"),
    ],
)
def test_every_other_status_carries_a_hint_saying_what_it_means(status: str, says: str) -> None:
    body = json.loads(result_json(failure("c1", "confirm", status, "why")))
    assert (body["status"], body["result"]["message"]) == (status, "why")
    assert says in body["hint"]


def test_sync_registers_every_tool_as_its_function_schema() -> None:
    registry = load_registry(load_entrypoints=False)
    runtime = FakeRuntime()
    added, removed = ToolBridge(
        runtime, registry, RecordingCall(failure("x", "x", "failed", "x")), deadline_for=float
    ).sync()
    assert (sorted(added), removed) == (sorted(t.name for t in registry), [])
    schema, _ = runtime.tools["calculator"]
    assert schema == function_schema(registry.get("calculator").definition)  # type: ignore[union-attr]
    assert set(schema) == {"name", "description", "parameters"}


def test_sync_again_changes_nothing_unless_forced() -> None:
    runtime = FakeRuntime()
    bridge = ToolBridge(
        runtime,
        load_registry(load_entrypoints=False),
        RecordingCall(failure("x", "x", "failed", "x")),
        deadline_for=float,
    )
    bridge.sync()
    assert bridge.sync() == ([], [])
    assert sorted(bridge.sync(force=True)[0]) == sorted(bridge.names)


async def test_app_declared_tools_come_and_go_with_the_app() -> None:
    runtime = FakeRuntime()
    registry = load_registry(load_entrypoints=False)
    bridge = ToolBridge(runtime, registry, RecordingCall(failure("x", "x", "failed", "x")), deadline_for=float)

    def tools_changed() -> None:
        bridge.sync()

    hub = Hub(registry, on_tools_changed=tools_changed)
    bridge.sync()
    app = MemoryApp(hub, "phone")
    await app.connect()
    await app.send_payload(ToolList(tools=[ToolDefinition.model_validate(FLASHLIGHT)]))
    assert runtime.tools["flashlight"][0]["parameters"] == FLASHLIGHT["inputSchema"]
    await app.disconnect()
    assert "flashlight" not in runtime.tools and "choice" in runtime.tools


def test_handler_waits_with_the_runtimes_interrupt_check_heartbeat_and_the_tools_deadline() -> None:
    runtime = FakeRuntime()
    answered = ToolResult(call_id="c9", name="choice", status="completed", result={"selected": "a", "index": 0})
    call = RecordingCall(answered)
    bridge = ToolBridge(runtime, load_registry(load_entrypoints=False), call, deadline_for=lambda name: 42.0)
    bridge.sync()
    _, handler = runtime.tools["choice"]
    text = handler({"question": "?", "options": ["a"]})
    assert json.loads(text)["result"] == {"selected": "a", "index": 0}
    (made,) = call.calls
    assert (made["name"], made["args"], made["deadline"]) == ("choice", {"question": "?", "options": ["a"]}, 42.0)
    assert made["is_interrupted"] == runtime.is_interrupted
    assert runtime.beats and runtime.beats[0][0] == "waiting for the user to answer choice"
