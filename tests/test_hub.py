"""The hub over the in-memory transport: a full call for every built-in tool, and call semantics."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lineup_plugin import Hub, hookimpl
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol.messages import AgentStop, Text, ToolAck, ToolCall, ToolCancel, ToolList, ToolResult
from lineup_plugin.tools.registry import Register
from lineup_plugin.transports.memory import MemoryApp


def make_hub(*plugins: object, **options: Any) -> Hub:
    pm = get_plugin_manager(load_entrypoints=False)
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-plugin-{index}")
    return Hub(collect_tools(pm), **options)


async def connected(hub: Hub, device_id: str = "phone") -> MemoryApp:
    app = MemoryApp(hub, device_id)
    await app.connect()
    assert (await app.next("device.welcome")).payload.device_id == device_id  # type: ignore[union-attr]
    return app


async def answer_next_call(app: MemoryApp, status: str = "completed", **result: Any) -> ToolCall:
    call = (await app.next("tool.call")).payload
    assert isinstance(call, ToolCall)
    await app.send_payload(ToolAck(call_id=call.call_id, stage="waiting_user"))
    await app.send_payload(ToolResult.model_validate({"call_id": call.call_id, "status": status, "result": result}))
    return call


BUILTIN_CALLS = [
    ("choice", {"question": "Deploy where?", "options": ["test", "staging"]}, {"selected": "staging", "index": 1}),
    ("confirm", {"message": "Delete the branch?", "risk": "user_confirmation"}, {"approved": True}),
    ("input", {"prompt": "Your name", "fields": {"type": "object"}}, {"values": {"name": "Ada"}}),
    ("calculator", {"action": "divide", "a": 1, "b": 4}, {"value": 0.25}),
    ("canvas", {"action": "open", "width": 800, "height": 600}, {"instance_id": "inst_001"}),
    ("canvas", {"action": "draw", "instance_id": "inst_001", "path": "M10 10 L50 50", "color": "red"}, {"ok": True}),
]


@pytest.mark.parametrize(
    ("name", "flat", "answer"), BUILTIN_CALLS, ids=[f"{c[0]}-{i}" for i, c in enumerate(BUILTIN_CALLS)]
)
async def test_full_call_of_each_builtin_tool(name: str, flat: dict[str, Any], answer: dict[str, Any]) -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call(name, flat))
    call = await answer_next_call(app, **answer)
    result = await task
    assert call.name == name and call.action == flat.get("action")
    assert "action" not in call.arguments
    assert result.status == "completed" and result.result == answer
    assert (result.name, result.action) == (name, flat.get("action"))
    assert hub.store.get_call(call.call_id).state == "completed"  # type: ignore[union-attr]


async def test_bad_arguments_are_never_sent() -> None:
    hub = make_hub()
    app = await connected(hub)
    result = await hub.agent_call("choice", {"question": "q", "options": "a"})
    assert result.status == "failed"
    assert result.result["field"] == "options" and result.result["error"] == "invalid_arguments"
    await app.send_payload(Text(text="ping"))  # the App saw no call: the next thing it gets is not a call
    assert all(m.kind != "tool.call" for m in list(app.inbox._queue))  # type: ignore[attr-defined]


async def test_no_app_connected_is_a_clear_failure() -> None:
    result = await make_hub().agent_call("choice", {"question": "q", "options": ["a"]})
    assert result.status == "failed" and "no LineUp App is connected" in result.result["message"]


async def test_first_answer_wins_and_other_devices_are_told() -> None:
    hub = make_hub()
    phone, laptop = await connected(hub, "phone"), await connected(hub, "laptop")
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a", "b"]}))
    call = await answer_next_call(phone, selected="b", index=1)
    assert (await task).result == {"selected": "b", "index": 1}
    cancel = (await laptop.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.call_id == call.call_id
    assert cancel.reason == "answered on another device"
    await laptop.send_payload(ToolResult(call_id=call.call_id, result={"selected": "a", "index": 0}))
    refusal = (await laptop.next("error")).payload
    assert refusal.code == "call_closed" and "already ended as completed" in refusal.message  # type: ignore[union-attr]
    assert hub.store.get_call(call.call_id).result.result == {"selected": "b", "index": 1}  # type: ignore[union-attr]


async def test_duplicate_result_envelope_is_applied_once() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("confirm", {"message": "ok?"}))
    call = (await app.next("tool.call")).payload
    assert isinstance(call, ToolCall)
    answer = ToolResult(call_id=call.call_id, result={"approved": True})
    envelope_id = await app.send_payload(answer)
    await app.send_payload(answer, id=envelope_id)
    await app.send_payload(answer)  # same answer, new envelope: harmless
    assert (await task).result == {"approved": True}
    verdict = (await app.next("tool.cancel")).payload
    assert isinstance(verdict, ToolCancel) and verdict.outcome is not None
    assert verdict.outcome.result == {"approved": True}
    assert app.inbox.empty()
    assert [e[0] for e in hub.store.audit_log].count("call.completed") == 1  # type: ignore[attr-defined]


async def test_reconnecting_device_gets_the_live_call_again() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a"]}))
    first = (await app.next("tool.call")).payload
    await app.disconnect()
    app = await connected(hub)
    again = await answer_next_call(app, selected="a", index=0)
    assert again.call_id == first.call_id  # type: ignore[union-attr]
    assert (await task).status == "completed"


async def test_deadline_gives_expired_not_rejected() -> None:
    hub = make_hub()
    app = await connected(hub)
    result = await hub.agent_call("choice", {"question": "q", "options": ["a"]}, deadline=0.01)
    assert result.status == "expired"
    cancel = (await app.next("tool.cancel")).payload
    assert cancel.reason.startswith("expired")  # type: ignore[union-attr]


async def test_per_tool_deadline_setting_is_used() -> None:
    hub = make_hub(deadlines={"confirm": 0.01})
    await connected(hub)
    assert hub.deadline_for("confirm") == 0.01 and hub.deadline_for("choice") == hub.deadline
    assert (await hub.agent_call("confirm", {"message": "ok?"})).status == "expired"


async def test_interrupting_the_waiter_cancels_on_every_device() -> None:
    hub = make_hub()
    phone, laptop = await connected(hub, "phone"), await connected(hub, "laptop")
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a"]}))
    call = (await phone.next("tool.call")).payload
    await laptop.next("tool.call")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for app in (phone, laptop):
        cancel = (await app.next("tool.cancel")).payload
        assert cancel.call_id == call.call_id and cancel.reason == "the agent was interrupted"  # type: ignore[union-attr]
    assert hub.store.get_call(call.call_id).state == "cancelled"  # type: ignore[union-attr]


async def test_app_can_cancel_a_call() -> None:
    hub = make_hub()
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("input", {"prompt": "name?"}))
    call = (await app.next("tool.call")).payload
    await app.send_payload(ToolCancel(call_id=call.call_id, reason="not now"))  # type: ignore[union-attr]
    result = await task
    assert result.status == "cancelled" and result.result["message"] == "not now"


async def test_repeated_call_id_is_not_run_twice() -> None:
    hub = make_hub()
    app = await connected(hub)
    first = asyncio.create_task(hub.call("choice", {"question": "q", "options": ["a"]}, call_id="c1"))
    second = asyncio.create_task(hub.call("choice", {"question": "q", "options": ["a"]}, call_id="c1"))
    await answer_next_call(app, selected="a", index=0)
    assert (await first).result == (await second).result == {"selected": "a", "index": 0}
    third = await hub.call("choice", {"question": "q", "options": ["a"]}, call_id="c1")
    assert third.status == "completed"
    await app.send_payload(Text(text="done"))
    assert all(m.kind != "tool.call" for m in list(app.inbox._queue))  # type: ignore[attr-defined]


async def test_unknown_call_result_is_refused() -> None:
    hub = make_hub()
    app = await connected(hub)
    await app.send_payload(ToolResult(call_id="ghost"))
    assert (await app.next("error")).payload.code == "unknown_call"  # type: ignore[union-attr]


async def test_bad_message_gets_an_error_and_the_session_goes_on() -> None:
    hub = make_hub()
    app = await connected(hub)
    await hub.receive(app, "{not json")
    assert (await app.next("error")).payload.code == "bad_message"  # type: ignore[union-attr]
    await hub.receive(app, '{"v": 9}')
    assert (await app.next("error")).payload.code == "unsupported_version"  # type: ignore[union-attr]
    task = asyncio.create_task(hub.agent_call("choice", {"question": "q", "options": ["a"]}))
    await answer_next_call(app, selected="a", index=0)
    assert (await task).status == "completed"


async def test_app_declared_tool_becomes_callable_until_it_leaves() -> None:
    changes: list[int] = []
    hub = make_hub(on_tools_changed=lambda: changes.append(1))
    app = await connected(hub)
    torch = {
        "name": "torch",
        "type": "action",
        "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}},
    }
    await app.send_payload(ToolList.model_validate({"tools": [torch]}))
    assert "torch" in hub.registry and changes == [1]
    task = asyncio.create_task(hub.agent_call("torch", {"on": True}))
    call = await answer_next_call(app, lit=True)
    assert call.arguments == {"on": True} and (await task).result == {"lit": True}
    await app.disconnect()
    assert "torch" not in hub.registry and changes == [1, 1]


async def test_tool_list_request_is_answered_with_agent_tools() -> None:
    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            def now() -> str:
                """The time."""
                return "noon"

            register(now)

    hub = make_hub(Plugin())
    app = await connected(hub)
    await app.next("tool.list")
    await app.send_payload(ToolList(request=True))
    listing = (await app.next("tool.list")).payload
    assert [t.name for t in listing.tools] == ["now"]  # type: ignore[union-attr]


async def test_in_process_tool_runs_in_the_agent() -> None:
    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            async def add(a: int, b: int) -> int:
                """Add."""
                return a + b

            def boom() -> None:
                """Fails."""
                raise RuntimeError("disk on fire")

            register(add)
            register(boom)

    hub = make_hub(Plugin())
    assert (await hub.agent_call("add", {"a": 2, "b": 3})).result == {"value": 5}
    failed = await hub.agent_call("boom", {})
    assert failed.status == "failed" and failed.result["message"] == "RuntimeError: disk on fire"
    assert (await hub.agent_call("add", {"a": "x", "b": 3})).result["field"] == "a"


async def test_high_risk_in_process_tool_needs_approval_on_the_app() -> None:
    ran: list[str] = []

    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            def wipe(path: str) -> str:
                """Delete a directory."""
                ran.append(path)
                return "wiped"

            register(wipe, risk="system_permission")

    hub = make_hub(Plugin())
    app = await connected(hub)
    task = asyncio.create_task(hub.agent_call("wipe", {"path": "/tmp/x"}))
    confirm = await answer_next_call(app, "rejected", approved=False)
    assert confirm.name == "confirm" and "/tmp/x" in confirm.arguments["details"]
    assert (await task).status == "rejected" and ran == []
    task = asyncio.create_task(hub.agent_call("wipe", {"path": "/tmp/y"}))
    await answer_next_call(app, approved=True)
    assert (await task).result == {"value": "wiped"} and ran == ["/tmp/y"]


async def test_app_calls_an_agent_tool_and_unknown_is_unsupported() -> None:
    class Plugin:
        @hookimpl
        def register_tools(self, register: Register) -> None:
            def echo(text: str) -> str:
                """Echo."""
                return text

            register(echo)

    hub = make_hub(Plugin())
    app = await connected(hub)
    await app.send_payload(ToolCall(call_id="a1", name="echo", arguments={"text": "hi"}))
    assert (await app.next("tool.result")).payload.result == {"value": "hi"}  # type: ignore[union-attr]
    await app.send_payload(ToolCall(call_id="a2", name="choice", arguments={}))
    assert (await app.next("tool.result")).payload.status == "unsupported"  # type: ignore[union-attr]


async def test_text_stop_and_status_reach_the_right_side() -> None:
    texts: list[tuple[str, str]] = []
    stops: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append((device, text)), on_stop=stops.append)
    app = await connected(hub)
    await app.send_payload(Text(text="hello agent"))
    await app.send_payload(AgentStop())
    assert texts == [("phone", "hello agent")] and stops == ["phone"]
    await hub.send_text("hello human")
    assert (await app.next("text")).payload.text == "hello human"  # type: ignore[union-attr]
    await hub.set_status("thinking", "reading mail")
    status = (await app.next("agent.status")).payload
    assert (status.state, status.detail) == ("thinking", "reading mail")  # type: ignore[union-attr]


async def test_open_card_of_an_ended_call_is_closed_on_reconnect() -> None:
    hub = make_hub()
    app = await connected(hub)
    result = await asyncio.gather(hub.agent_call("choice", {"question": "q", "options": ["a"]}, deadline=0.01))
    call_id = result[0].call_id
    await app.disconnect()
    again = MemoryApp(hub, "phone")
    await again.connect(open_calls=[call_id, "never-heard-of"])
    first, second = (await again.next("tool.cancel")).payload, (await again.next("tool.cancel")).payload
    assert first.call_id == call_id
    assert first.reason.startswith("this call already ended (expired)")  # type: ignore[union-attr]
    assert second.reason == "the agent no longer knows this call"  # type: ignore[union-attr]
