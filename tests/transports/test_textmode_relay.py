"""Text cards over the relay: a WuKongIM user whose client sends and shows only plain text.

The user is a plain Python WuKongIM client on the fake server (and, last, the official JS SDK);
the agent side is the real relay and hub. The user never sees a LineUp envelope.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from lineup_plugin.protocol.calls import Call, CallState
from lineup_plugin.protocol.messages import ToolCall, ToolResult
from lineup_plugin.protocol.session import SaveCall
from lineup_plugin.store import MemoryStore
from lineup_plugin.transports.memory import MemoryApp
from lineup_plugin.transports.wukongim.relay import Relay, wrap_envelope
from lineup_plugin.transports.wukongim.textclient import CUT_NOTE, fitted, text_payload
from tests.fakes.textuser import TextUser
from tests.fakes.textuser import text_user as fake_text_user
from tests.fakes.wukongim import FakeWuKongIM, JsSdkApp, js_sdk_missing
from tests.transports.test_relay import AGENT, APP, GUARD, make_hub, py_app, running_relay

DEPLOY = {"question": "Deploy build 1.4.2 where?", "options": ["test", "staging", "production"]}


@asynccontextmanager
async def text_user(server: FakeWuKongIM) -> AsyncIterator[TextUser]:
    async with fake_text_user(server, APP, AGENT) as user:
        yield user


@pytest.fixture
async def server() -> AsyncIterator[FakeWuKongIM]:
    async with FakeWuKongIM() as fake:
        yield fake


async def finished(call: asyncio.Task[ToolResult]) -> ToolResult:
    with anyio.fail_after(GUARD):
        return await call


def hello(envelope_id: str) -> bytes:
    """A LineUp App's device.hello as a WuKongIM message payload."""
    envelope = {
        "v": 1,
        "id": envelope_id,
        "type": "lineup.v1.device.hello",
        "conversation_id": "default",
        "sender": {"kind": "device", "id": "py-app"},
        "target": {"kind": "agent", "id": AGENT},
        "payload": {"device_id": "py-app"},
    }
    return wrap_envelope(json.dumps(envelope), 9527)


def only_text_sent_to(server: FakeWuKongIM, uid: str) -> bool:
    return all(json.loads(m.payload)["type"] == 1 for m in server.messages_from(AGENT) if m.channel_id == uid)


async def test_a_choice_is_asked_in_text_and_a_text_reply_completes_the_call(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        prompt = await user.read()
        assert prompt == (
            "Deploy build 1.4.2 where?\n1. test\n2. staging\n3. production\n"
            'Reply with a number from 1 to 3, or "cancel".'
        )
        await user.say("4")
        assert await user.read() == 'There is no option 4. Reply with a number from 1 to 3, or "cancel".'
        await user.say("２")
        assert await user.read() == "✓ You chose: staging"
        result = await finished(call)
    assert (result.status, result.result) == ("completed", {"selected": "staging", "index": 1})
    assert only_text_sent_to(server, APP)


async def test_confirm_and_a_form_field_by_field(server: FakeWuKongIM) -> None:
    hub = make_hub()
    fields = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "port": {"type": "integer", "minimum": 1024}},
        "required": ["name", "port"],
    }
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        confirm = asyncio.create_task(hub.agent_call("confirm", {"message": "Restart the web server?"}))
        assert (await user.read()).startswith("Restart the web server?\nNeeds your approval")
        await user.say("yes")
        assert await user.read() == "✓ You approved this."
        assert (await finished(confirm)).result == {"approved": True}

        form = asyncio.create_task(hub.agent_call("input", {"prompt": "New service", "fields": fields}))
        assert "Question 1 of 2: name" in await user.read()
        await user.say("api")
        assert "Question 2 of 2: port" in await user.read()
        await user.say("80")
        assert (await user.read()).startswith("80 is less than the minimum of 1024.")
        await user.say("8080")
        assert await user.read() == "✓ Sent name: api, port: 8080"
        result = await finished(form)
    assert (result.status, result.result) == ("completed", {"values": {"name": "api", "port": 8080}})


async def test_cards_wait_their_turn_and_each_call_gets_its_own_answer(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        first = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        assert (await user.read()).startswith("Deploy build 1.4.2 where?\n")
        second = asyncio.create_task(hub.agent_call("confirm", {"message": "Tag the release?"}, call_id="tag"))
        third = asyncio.create_task(hub.agent_call("input", {"prompt": "Release name?"}, call_id="name"))
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: hub.session.calls.live("tag") and hub.session.calls.live("name"))
        await user.say("3")
        assert (await user.read()).startswith("✓ You chose: production\n\nTag the release? (1 more waiting)")
        await user.say("no")
        assert await user.read() == '✖ You rejected this.\n\nRelease name?\nReply with your answer, or "cancel".'
        await user.say("Aurora")
        assert await user.read() == "✓ Sent answer: Aurora"
        results = [await finished(task) for task in (first, second, third)]
    assert [(r.status, r.result) for r in results] == [
        ("completed", {"selected": "production", "index": 2}),
        ("rejected", {"approved": False}),
        ("completed", {"values": {"answer": "Aurora"}}),
    ]


async def test_cancel_by_text_expiry_and_the_agents_cancel_are_posted(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        cancelled = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        await user.read()
        await user.say("cancel")
        assert await user.read() == "✖ Cancelled."
        result = await finished(cancelled)
        assert (result.status, result.result) == ("cancelled", {"message": "the user cancelled this in the chat"})

        expiring = asyncio.create_task(hub.agent_call("choice", DEPLOY, deadline=0.2))
        await user.read()
        assert await user.read() == "✖ Expired: Deploy build 1.4.2 where? (no answer in time)"  # the clock ran out
        assert (await finished(expiring)).status == "expired"

        withdrawn = asyncio.create_task(hub.agent_call("confirm", {"message": "Drop the table?"}, call_id="drop"))
        await user.read()
        await hub.cancel("drop", "the agent changed its plan")
        assert await user.read() == "✖ Cancelled: Drop the table? (the agent changed its plan)"
        assert (await finished(withdrawn)).status == "cancelled"


async def test_an_answer_on_another_device_is_posted(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        phone = MemoryApp(hub, "phone")
        await phone.connect()
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        request = await phone.next("tool.call")
        await user.read()
        answer = {"selected": "test", "index": 0}
        await phone.send_payload(ToolResult(call_id=request.payload.call_id, result=answer))  # type: ignore[union-attr]
        assert await user.read() == "✓ Answered on another device: Deploy build 1.4.2 where?"
        assert (await finished(call)).result == answer
        await user.say("1")  # no card open any more: a user message for the agent, not an answer


async def test_tools_without_a_text_form_are_unsupported_and_the_calculator_is_shown(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        canvas = await hub.agent_call("canvas", {"action": "open", "width": 100, "height": 80})
        assert canvas.status == "unsupported"
        assert await user.read() == 'The agent asked for "canvas", which cannot be shown in this chat; it was told.'
        total = await hub.agent_call("calculator", {"action": "multiply", "a": 6, "b": 7})
        assert (total.status, total.result) == ("completed", {"value": 42})
        assert await user.read() == "6 × 7 = 42"


async def test_text_that_answers_no_card_and_agent_replies_stay_chat(server: FakeWuKongIM) -> None:
    texts: list[str] = []
    hub = make_hub(on_text=lambda device, text: texts.append(text))
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        await user.say("please deploy")
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: texts == ["please deploy"])
        await hub.send_text("Where to?")
        assert await user.read() == "Where to?"
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        await user.read()
        await user.say("/stop")  # a command still goes to the agent while a card waits
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: texts == ["please deploy", "/stop"])
        await user.say("1")
        assert (await finished(call)).result == {"selected": "test", "index": 0}


async def test_a_redelivered_reply_answers_once(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        first = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        await user.read()
        region = {"question": "And the region?", "options": ["eu", "us"]}
        second = asyncio.create_task(hub.agent_call("choice", region, call_id="region"))
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: hub.session.calls.live("region"))
        await user.say("1")
        assert (await user.read()).startswith("✓ You chose: test\n\nAnd the region?")
        await server.resend(server.messages_from(APP)[-1], AGENT)  # the server's retry: same message id
        await user.say("2")
        assert await user.read() == "✓ You chose: us"
        assert (await finished(first)).result["index"] == 0
        assert (await finished(second)).result == {"selected": "us", "index": 1}


async def test_a_prompt_lost_with_the_connection_is_asked_again(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        server.answer_sends = False
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        with anyio.fail_after(GUARD):
            await server.wait_until(lambda: server.unanswered)  # the prompt is stuck without SENDACK
            server.answer_sends = True
            await server.drop(AGENT)  # ...and fails with the connection
        prompt = await user.read()  # the send that never got its SENDACK was lost: asked again after the re-sync
        assert prompt.startswith("Deploy build 1.4.2 where?")
        await user.say("2")
        assert (await finished(call)).result == {"selected": "staging", "index": 1}


async def test_cards_left_open_by_a_previous_run_are_said_closed_when_the_agent_starts(server: FakeWuKongIM) -> None:
    store = MemoryStore()
    left = Call(request=ToolCall(call_id="old", name="choice", arguments=DEPLOY), conversation_id="default")
    left.advance(CallState.DELIVERED)
    store.apply([SaveCall(left)])
    hub = make_hub(store=store)  # recovers: the old call ends cancelled
    async with text_user(server) as user, running_relay(server, hub, text_cards="auto"):
        notice = await user.read()
        assert notice == (
            "✖ Closed: Deploy build 1.4.2 where? (the agent restarted before an answer arrived; ask again)"
        )
        call = asyncio.create_task(hub.agent_call("confirm", {"message": "Try again?"}))
        assert (await user.read()).startswith("Try again?")
        await user.say("yes")
        assert (await finished(call)).result == {"approved": True}


async def test_a_client_that_speaks_lineup_gets_its_open_card_as_an_envelope(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub, text_cards="auto") as relay:
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        _, content = await TextUser(app.session, AGENT).message()  # PyApp reads the same stream; not yet declared
        assert content["type"] == 1
        await app.send("device.hello", {"device_id": "py-app"})
        request = await app.next("tool.call")
        assert not relay.texts.active
        answer = {"call_id": request["payload"]["call_id"], "result": {"selected": "x", "index": 0}}
        await app.send("tool.result", answer)
        assert (await finished(call)).status == "completed"


async def test_a_lineup_app_that_spoke_before_the_agent_started_gets_envelopes(server: FakeWuKongIM) -> None:
    await server.push(APP, AGENT, hello("old-hello"))
    hub = make_hub()
    async with py_app(server) as app, running_relay(server, hub, text_cards="auto") as relay:
        with anyio.fail_after(GUARD):
            await hub.wait_for_device()
        call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
        request = await app.next("tool.call")
        answer = {"call_id": request["payload"]["call_id"], "result": {"selected": "x", "index": 0}}
        await app.send("tool.result", answer)
        assert (await finished(call)).status == "completed"
        assert not relay.texts.active


async def test_always_gives_text_even_to_a_client_that_speaks_lineup(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with text_user(server) as user, running_relay(server, hub, text_cards="always") as relay:
        await user.session.send(AGENT, 1, hello("hello-1"))
        call = asyncio.create_task(hub.agent_call("confirm", {"message": "Go?"}))
        assert (await user.read()).startswith("Go?")
        assert relay.texts.active
        await user.say("y")
        assert (await finished(call)).result == {"approved": True}


def test_a_text_too_long_for_one_wukongim_frame_is_cut_saying_so() -> None:
    text = "选项 " * 100_000
    cut = fitted(text, 10_000)
    assert cut.endswith(CUT_NOTE) and len(text_payload(cut)) <= 10_000
    one_more = cut[: -len(CUT_NOTE)] + "选" + CUT_NOTE
    assert len(text_payload(one_more)) > 10_000  # the longest text that fits
    assert fitted("short", 10_000) == "short"
    assert json.loads(text_payload("bad \ud800"))["content"] == "bad ?"


def test_the_relay_reads_text_cards_from_its_settings() -> None:
    from lineup_plugin.config.settings import load_settings

    settings = load_settings({"wukongim": {"api_url": "http://127.0.0.1:1", "uid": "a", "app_uid": "b"}})
    assert settings.wukongim is not None and settings.wukongim.text_cards == "auto"
    environ = {"LINEUP_WUKONGIM_TEXT_CARDS": "never"}
    forced = load_settings({"wukongim": {"api_url": "http://127.0.0.1:1", "uid": "a", "app_uid": "b"}}, environ)
    assert forced.wukongim is not None
    relay = Relay(forced.wukongim, make_hub())
    assert not relay.texts.active


@pytest.mark.node
@pytest.mark.skipif(js_sdk_missing() is not None, reason=str(js_sdk_missing()))
async def test_the_official_js_sdk_gets_a_card_as_text_and_answers_in_text(server: FakeWuKongIM) -> None:
    hub = make_hub()
    async with running_relay(server, hub, text_cards="auto"), JsSdkApp(server.ws_url, APP, "") as app:
        with anyio.fail_after(GUARD):
            await app.wait_for("status", status=1)
            call = asyncio.create_task(hub.agent_call("choice", DEPLOY))
            prompt = await app.wait_for("message", contentType=1)
            await app.command(cmd="text", channel=AGENT, channelType=1, text="production")
            result = await call
            done = await app.wait_for("message", where=lambda e: e.get("text") == "✓ You chose: production")
    assert prompt["fromUID"] == AGENT and prompt["text"].startswith("Deploy build 1.4.2 where?\n1. test\n")
    assert (result.status, result.result) == ("completed", {"selected": "production", "index": 2})
    assert done["contentType"] == 1
    assert only_text_sent_to(server, APP)
