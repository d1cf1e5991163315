"""Hardening of tools (issue 11, items 4, 5, 7, 10, 11b): what Apps declare, answer and call.

- 4: a schema's ``$ref`` is a local ``#/...`` pointer or the declaration is refused; nothing is fetched or read;
- 5: a high-risk in-process tool an App calls needs the user's approval, and every in-process run is audited;
- 7: a completed answer is checked against the action's outputSchema before it reaches the model;
- 10: a ``tool.list`` is applied all or nothing, and bounded in count and size;
- 11b: a call's ``risk`` is the confirm's own ``risk`` argument when given.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import Hub, hookimpl
from lineup_plugin.errors import ToolError
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.base import MAX_ERROR_CHARS
from lineup_plugin.protocol.messages import Actor, Envelope, Error, ToolCall, ToolList, ToolResult
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.tools.registry import MAX_SOURCE_BYTES, MAX_SOURCE_TOOLS, Register, Registry
from lineup_plugin.transports.memory import MemoryApp


def make_hub(*plugins: object) -> Hub:
    pm = get_plugin_manager(load_entrypoints=False)
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-plugin-{index}")
    return Hub(collect_tools(pm))


async def connected(hub: Hub, device_id: str = "phone") -> MemoryApp:
    app = MemoryApp(hub, device_id)
    await app.connect()
    await receive(app, "device.welcome")
    return app


def tool(name: str, schema: dict[str, Any], **extra: Any) -> ToolDefinition:
    return ToolDefinition.model_validate({"name": name, "type": "action", "inputSchema": schema, **extra})


async def declare(app: MemoryApp, *tools: ToolDefinition) -> None:
    await app.send_payload(ToolList(tools=list(tools)))


def app_tools(hub: Hub, device_id: str = "phone") -> list[str]:
    return [t.name for t in hub.registry if t.source == f"app:{device_id}"]


async def receive(app: MemoryApp, kind: str) -> Envelope:
    """The App's next message of ``kind``; a regression that never sends it fails here rather than hanging."""
    return await asyncio.wait_for(app.next(kind), 5)


async def next_error(app: MemoryApp) -> Error:
    payload = (await receive(app, "error")).payload
    assert isinstance(payload, Error)
    return payload


# ---------------------------------------------------------------------- 4: $ref stays local


@pytest.mark.parametrize(
    "ref",
    ["http://127.0.0.1:9/schema.json", "https://example.com/s.json", "FILE", "other.json#/x", "#/$defs/missing"],
    ids=["http", "https", "file", "relative", "unresolvable"],
)
async def test_a_ref_that_is_not_a_local_pointer_is_refused_at_declaration(ref: str, tmp_path: Path) -> None:
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"type": "string", "description": "TOP-SECRET-CONTENT"}))
    if ref == "FILE":
        ref = secret.as_uri()
    hub = make_hub()
    app = await connected(hub)
    await declare(app, tool("fetcher", {"type": "object", "properties": {"x": {"$ref": ref}}}))
    error = await next_error(app)
    assert error.code == "bad_tools" and repr(ref) in error.message
    assert "TOP-SECRET-CONTENT" not in error.message
    assert app_tools(hub) == []
    result = await hub.agent_call("fetcher", {"x": 1})  # never declared: a clear failure, no fetch, no raise
    assert result.status == "failed" and result.result["error"] == "invalid_arguments"


async def test_a_local_ref_is_accepted_and_checks_the_arguments() -> None:
    hub = make_hub()
    app = await connected(hub)
    schema = {
        "type": "object",
        "$defs": {"colour": {"type": "string", "enum": ["red", "blue"]}},
        "properties": {"c": {"$ref": "#/$defs/colour"}},
        "required": ["c"],
    }
    await declare(app, tool("paint", schema))
    assert app_tools(hub) == ["paint"]
    result = await hub.agent_call("paint", {"c": "green"})
    assert result.status == "failed" and result.result["field"] == "c"


def test_registry_refuses_remote_refs_and_nested_ids_from_plugins_too() -> None:
    registry = Registry()
    with pytest.raises(ToolError, match="only local refs"):
        registry.add(tool("a", {"type": "object", "properties": {"x": {"$ref": "file:///etc/passwd"}}}), source="p")
    with pytest.raises(ToolError, match="nested \\$id"):
        registry.add(tool("b", {"type": "object", "properties": {"x": {"$id": "http://e.com/x"}}}), source="p")
    with pytest.raises(ToolError, match="outputSchema"):
        registry.add(tool("c", {"type": "object"}, outputSchema={"$ref": "http://e.com/out"}), source="p")
    assert len(registry) == 0


# ------------------------------------------------------------- 5: App-called tools approved


class Wiper:
    def __init__(self) -> None:
        self.ran: list[str] = []

    @hookimpl
    def register_tools(self, register: Register) -> None:
        def wipe(path: str) -> str:
            """Delete a directory."""
            self.ran.append(path)
            return "wiped"

        def add(a: int, b: int) -> int:
            """Add."""
            return a + b

        register(wipe, risk="system_permission")
        register(add)


async def answer_confirm(app: MemoryApp, approved: bool) -> ToolCall:
    confirm = (await receive(app, "tool.call")).payload
    assert isinstance(confirm, ToolCall) and confirm.name == "confirm"
    status = "completed" if approved else "rejected"
    await app.send_payload(
        ToolResult.model_validate({"call_id": confirm.call_id, "status": status, "result": {"approved": approved}})
    )
    return confirm


async def test_a_high_risk_tool_an_app_calls_needs_the_users_approval_and_is_audited() -> None:
    plugin = Wiper()
    hub = make_hub(plugin)
    app = await connected(hub)
    await app.send_payload(ToolCall(call_id="w1", name="wipe", arguments={"path": "/tmp/x"}))
    confirm = await answer_confirm(app, approved=False)
    assert "/tmp/x" in confirm.arguments["details"] and confirm.risk == "system_permission"
    refused = (await receive(app, "tool.result")).payload
    assert isinstance(refused, ToolResult) and refused.call_id == "w1" and refused.status == "rejected"
    assert plugin.ran == []
    await app.send_payload(ToolCall(call_id="w2", name="wipe", arguments={"path": "/tmp/y"}))
    await answer_confirm(app, approved=True)
    done = (await receive(app, "tool.result")).payload
    assert isinstance(done, ToolResult) and done.call_id == "w2" and done.result == {"value": "wiped"}
    assert plugin.ran == ["/tmp/y"]
    audit = hub.store.audit_log
    assert ("tool.rejected", "w1", "phone", "wipe") in audit
    assert ("tool.completed", "w2", "phone", "wipe") in audit


async def test_every_in_process_run_is_audited_whoever_calls() -> None:
    hub = make_hub(Wiper())
    app = await connected(hub)
    await app.send_payload(ToolCall(call_id="a1", name="add", arguments={"a": 1, "b": 2}))
    assert (await receive(app, "tool.result")).payload.result == {"value": 3}  # type: ignore[union-attr]
    agent = await hub.agent_call("add", {"a": 2, "b": 2}, call_id="a2")
    assert agent.result == {"value": 4}
    audit = hub.store.audit_log
    assert ("tool.completed", "a1", "phone", "add") in audit
    assert ("tool.completed", "a2", None, "add") in audit


# ---------------------------------------------------------------- 7: answers are checked


async def test_an_answer_that_violates_the_output_schema_is_refused_and_the_call_stays_live() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a", "b"]}))
    call = (await receive(app, "tool.call")).payload
    assert isinstance(call, ToolCall)
    bad = {"call_id": call.call_id, "status": "completed", "result": {"selected": 42, "index": "zero"}}
    await app.send_payload(ToolResult.model_validate(bad))
    error = await next_error(app)
    assert error.code == "invalid_result" and error.call_id == call.call_id
    assert "field 'selected'" in error.message or "field 'index'" in error.message
    assert not task.done() and hub.session.calls.live(call.call_id) is not None
    good = {"call_id": call.call_id, "status": "completed", "result": {"selected": "b", "index": 1}}
    await app.send_payload(ToolResult.model_validate(good))
    result = await task
    assert result.status == "completed" and result.result == {"selected": "b", "index": 1}
    assert any(event == "result.invalid" and call_id == call.call_id for event, call_id, *_ in hub.store.audit_log)


async def test_the_invalid_result_error_is_bounded_whatever_the_app_sent() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a"]}))
    call = (await receive(app, "tool.call")).payload
    assert isinstance(call, ToolCall)
    huge = {"call_id": call.call_id, "status": "completed", "result": {"selected": "a", "index": "9" * 100_000}}
    await app.send_payload(ToolResult.model_validate(huge))
    error = await next_error(app)
    assert error.code == "invalid_result" and len(error.message) <= MAX_ERROR_CHARS
    await hub.cancel(call.call_id)
    assert (await task).status == "cancelled"


async def test_a_non_finite_number_in_an_answer_is_refused_and_the_call_stays_live() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("calculator", {"action": "multiply", "a": 1e308, "b": 10}))
    call = (await receive(app, "tool.call")).payload
    assert isinstance(call, ToolCall)
    answer = ToolResult.model_validate({"call_id": call.call_id, "status": "completed", "result": {"value": "INF"}})
    text = codec.encode(
        codec.envelope(answer, sender=Actor(kind="device", id="phone"), target=hub.agent, conversation_id="default")
    ).replace('"INF"', "1e999")
    await hub.receive(app, text)
    assert (await next_error(app)).code == "bad_message"
    assert hub.session.calls.live(call.call_id) is not None and not task.done()
    await app.send_payload(ToolResult.model_validate({"call_id": call.call_id, "status": "failed", "result": {}}))
    assert (await task).status == "failed"


@pytest.mark.parametrize(
    ("name", "action", "result", "field"),
    [
        ("choice", None, {"selected": "a"}, "index"),
        ("confirm", None, {"approved": "yes"}, "approved"),
        ("input", None, {"values": []}, "values"),
        ("calculator", "add", {"value": "3"}, "value"),
        ("canvas", "open", {}, "instance_id"),
    ],
)
def test_every_builtin_declares_an_output_schema_that_names_the_bad_field(
    name: str, action: str | None, result: dict[str, Any], field: str
) -> None:
    registry = collect_tools(get_plugin_manager(load_entrypoints=False))
    problem = registry.check_result(name, action, result)
    assert problem is not None and f"field {field!r}" in problem


def test_good_builtin_answers_pass_the_output_check() -> None:
    registry = collect_tools(get_plugin_manager(load_entrypoints=False))
    assert registry.check_result("choice", None, {"selected": "a", "index": 0}) is None
    assert registry.check_result("calculator", "divide", {"value": 0.25}) is None
    assert registry.check_result("canvas", "draw", {"instance_id": "i", "strokes": 2, "message": "drawn"}) is None
    assert registry.check_result("unknown", None, {"anything": 1}) is None


# ------------------------------------------------------------ 10: tool.list all or nothing


async def test_an_invalid_schema_in_tool_list_changes_nothing_and_says_bad_tools() -> None:
    hub = make_hub()
    app = await connected(hub)
    await declare(app, tool("camera", {"type": "object"}))
    assert app_tools(hub) == ["camera"]
    await declare(
        app,
        tool("torch", {"type": "object"}),
        tool("broken", {"type": "object", "properties": {"x": {"type": "nope"}}}),
    )
    error = await next_error(app)
    assert error.code == "bad_tools" and "'broken'" in error.message
    assert app_tools(hub) == ["camera"]


async def test_an_app_declares_at_most_the_bounded_number_of_tools() -> None:
    hub = make_hub()
    app = await connected(hub)
    tools = [tool(f"t{i}", {"type": "object"}) for i in range(MAX_SOURCE_TOOLS + 1)]
    await declare(app, *tools)
    error = await next_error(app)
    assert error.code == "bad_tools" and f"at most {MAX_SOURCE_TOOLS}" in error.message
    assert app_tools(hub) == []
    await declare(app, *tools[:MAX_SOURCE_TOOLS])
    assert len(app_tools(hub)) == MAX_SOURCE_TOOLS


async def test_an_app_declares_at_most_the_bounded_size_of_definitions() -> None:
    hub = make_hub()
    app = await connected(hub)
    await declare(app, tool("huge", {"type": "object"}, description="x" * MAX_SOURCE_BYTES))
    error = await next_error(app)
    assert error.code == "bad_tools" and f"at most {MAX_SOURCE_BYTES}" in error.message
    assert app_tools(hub) == []


def test_the_bounds_are_64_tools_and_64_kib() -> None:
    assert (MAX_SOURCE_TOOLS, MAX_SOURCE_BYTES) == (64, 64 * 1024)


# ------------------------------------------------------------------ 11b: one risk to show


async def test_a_confirm_call_carries_its_own_risk_argument() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("confirm", {"message": "rm -rf build", "risk": "restricted"}))
    call = (await receive(app, "tool.call")).payload
    assert isinstance(call, ToolCall) and call.risk == "restricted" == call.arguments["risk"]
    await app.send_payload(
        ToolResult.model_validate({"call_id": call.call_id, "status": "completed", "result": {"approved": True}})
    )
    await task
    task = asyncio.create_task(hub.agent_call("confirm", {"message": "go?"}))
    call = (await receive(app, "tool.call")).payload
    assert isinstance(call, ToolCall) and call.risk == "user_confirmation"  # none given: the tool's registered risk
    await hub.cancel(call.call_id)
    assert (await task).status == "cancelled"
