"""LineUp inside the real Hermes Agent: only the LLM is scripted, the App is a real WebSocket client.

The plugin is found through its entry point and enabled by ``plugins.enabled: [lineup]`` in a
temporary ``HERMES_HOME`` (see :mod:`tests.e2e.hermes_harness`).
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import json
import os
import re
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from playwright.async_api import Browser, Locator, Page, expect

from lineup_plugin.protocol.messages import AgentStatus, AgentStop, MessageDelta, Text, ToolCall, ToolCancel, ToolList
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.runtime.base import Conversation
from tests.fakes.llm import Gate, Turn, call, last_user_text, say, stream, tool_messages, tool_names
from tests.wsapp import WsApp

from .browser import PHONE
from .hermes_harness import (
    TOKEN,
    Gateway,
    Hermes,
    cli_home,
    hermes_chat,
    hermes_session,
    result_of,
    run_in_thread,
    running_gateway,
    within,
)

# Hermes must not be imported before the ``hermes`` fixture sets HERMES_HOME: only look it up.
pytestmark = [
    pytest.mark.hermes,
    pytest.mark.skipif(importlib.util.find_spec("run_agent") is None, reason="needs hermes-agent installed"),
]


@pytest.fixture(scope="session")
def hermes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Hermes]:
    """Hermes with LineUp enabled, imported once for the session."""
    with hermes_session(tmp_path_factory.mktemp("hermes-home")) as env:
        yield env


@pytest.fixture(scope="class")
def gateway_process(hermes: Hermes) -> Iterator[Gateway]:
    """A real Hermes gateway serving the App, shared by one test class."""
    with running_gateway(hermes) as running:
        yield running


@pytest.fixture
async def gateway(gateway_process: Gateway) -> Gateway:
    """The shared gateway, once it has finished the previous test's messages."""
    await anyio.to_thread.run_sync(gateway_process.settle)
    return gateway_process


DEPLOY = {"question": "Deploy to which environment?", "options": ["test", "staging", "production"]}
FLASHLIGHT = {
    "name": "flashlight",
    "type": "action",
    "description": "Turn the phone's flashlight on or off.",
    "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
}


#: the longest any one test may wait for Hermes or the App before it fails (instead of hanging)
WAIT = 60.0


bounded = within(WAIT)


async def next_status(app: WsApp, state: str) -> AgentStatus:
    """Read ``agent.status`` messages until one is in ``state``."""
    while True:
        status = (await app.next("agent.status")).payload
        assert isinstance(status, AgentStatus)
        if status.state == state:
            return status


async def streamed_reply(app: WsApp, first: MessageDelta) -> tuple[list[MessageDelta], Text]:
    """The ``message.delta`` pieces of the streamed reply that ``first`` began, and the ``text`` that settles it."""
    pieces = [first]
    while True:
        message = (await app.recv()).payload
        if isinstance(message, MessageDelta):
            pieces.append(message)
        elif isinstance(message, Text) and pieces and message.message_id == pieces[0].message_id:
            return pieces, message


async def start_streaming(
    hermes: Hermes, gateway: Gateway, ask: str, *pieces: str | Gate
) -> tuple[WsApp, MessageDelta]:
    """Script a streamed reply of ``pieces``, ask ``ask`` from a new App; the App and the reply's first piece."""
    hermes.llm.reset(stream(*pieces))
    app = await WsApp.connect(gateway.server)
    await app.send(Text(text=ask))
    first = (await app.next("message.delta")).payload
    assert isinstance(first, MessageDelta)
    return app, first


def two_deletions(hermes: Hermes, tmp_path: Path, reply: str) -> tuple[Path, Path]:
    """Two new folders; the model deletes one, then the other (each asks approval), then says ``reply``."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    hermes.llm.reset(
        call("terminal", command=f"rm -rf {first}"), call("terminal", command=f"rm -rf {second}"), say(reply)
    )
    return first, second


async def next_text(app: WsApp, text: str) -> None:
    """Read ``text`` messages until one says ``text``."""
    while True:
        message = (await app.next("text")).payload
        assert isinstance(message, Text)
        if message.text == text:
            return


@bounded
async def test_choice_answered_on_the_app_reaches_the_model_as_a_structured_result(hermes: Hermes) -> None:
    hermes.llm.reset(call("choice", **DEPLOY), say("Deploying to staging."))
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent(), "deploy the app")
        card = await app.next_call()
        assert (card.name, card.arguments) == ("choice", DEPLOY)
        await app.answer(card, selected="staging", index=1)
        result = await result_of(run)
        await next_text(app, "Deploying to staging.")
    finally:
        await app.close()
    assert result["final_response"] == "Deploying to staging."
    first, second = hermes.llm.requests
    assert {"choice", "confirm", "input", "calculator", "canvas"} <= tool_names(first)
    (answer,) = tool_messages(second)
    assert answer["json"]["status"] == "completed"
    assert answer["json"]["result"] == {"selected": "staging", "index": 1}
    assert not hermes.llm.errors


@bounded
async def test_a_delegate_task_subagents_card_says_subagent(hermes: Hermes) -> None:
    goal = "Ask the user where to deploy"
    child_done = threading.Event()

    def turn(body: dict[str, Any]) -> Turn:
        """The parent and its subagent run at once (a top-level delegation runs in the background):
        each request is answered by whose it is."""
        if goal not in last_user_text(body):
            return say("I asked a subagent.")  # the parent
        if not tool_messages(body):
            return call("choice", **DEPLOY)
        child_done.set()
        return say("The user chose staging.")

    hermes.llm.reset(call("delegate_task", goal=goal), *[turn] * 6)
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent("lineup", "delegation"), "deploy the app")
        card = await app.next_call()
        await app.answer(card, selected="staging", index=1)
        await result_of(run)
        assert await anyio.to_thread.run_sync(child_done.wait, 60)  # the subagent ended too
    finally:
        await app.close()
    assert card.origin is not None and card.origin.kind == "subagent", card.origin
    assert re.fullmatch(r"\d+-[0-9a-f]{8}", card.origin.label or ""), card.origin


@bounded
async def test_a_card_nobody_answers_expires_and_the_model_reads_expired(
    hermes: Hermes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(hermes.service.settings.deadlines, "input", 0.5)
    hermes.llm.reset(call("input", prompt="What is your name?"), say("No answer yet; I will ask later."))
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent(), "ask for my name")
        card = await app.next_call()
        closed = (await app.next("tool.cancel")).payload
        result = await result_of(run)
    finally:
        await app.close()
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id and "expired" in (closed.reason or "")
    assert result["final_response"] == "No answer yet; I will ask later."
    (answer,) = tool_messages(hermes.llm.requests[1])
    assert answer["json"]["status"] == "expired"
    assert "not a refusal" in answer["json"]["hint"]


@bounded
async def test_with_no_app_connected_the_model_reads_a_clear_failure(hermes: Hermes) -> None:
    hermes.service.stop()  # a fresh server: no device of an earlier test is still attached
    hermes.llm.reset(call("choice", **DEPLOY), say("Please open the LineUp App."))
    result = await result_of(run_in_thread(hermes.agent(), "deploy the app"))
    assert result["final_response"] == "Please open the LineUp App."
    (answer,) = tool_messages(hermes.llm.requests[1])
    assert answer["json"]["status"] == "failed"
    assert "no LineUp App is connected" in answer["json"]["result"]["message"]


class AppFeed:
    """What the plugin pushes to the App, recorded where it is decided: mirrored replies and statuses."""

    def __init__(self, hermes: Hermes, monkeypatch: pytest.MonkeyPatch) -> None:
        self.texts: list[str] = []
        self.statuses: list[str] = []
        self.conversations: set[Conversation | None] = set()
        service = hermes.service
        send_text, report_status = service.send_text, service.report_status

        def record_text(text: str, *, conversation: Conversation | None = None) -> None:
            self.texts.append(text)
            self.conversations.add(conversation)
            send_text(text, conversation=conversation)

        def record_status(state: str, detail: str | None = None, *, conversation: Conversation | None = None) -> None:
            self.statuses.append(state)
            self.conversations.add(conversation)
            report_status(state, detail, conversation=conversation)

        monkeypatch.setattr(service, "send_text", record_text)
        monkeypatch.setattr(service, "report_status", record_status)


@bounded
async def test_an_agent_of_another_platform_that_never_used_lineup_stays_private(
    hermes: Hermes, monkeypatch: pytest.MonkeyPatch
) -> None:
    hermes.llm.reset(say("Your bank PIN is in the drawer."))
    feed = AppFeed(hermes, monkeypatch)
    app = await WsApp.connect(hermes.server)
    try:
        agent = hermes.agent(attach=False, platform="telegram")
        result = await result_of(run_in_thread(agent, "where is my PIN?"))
    finally:
        await app.close()
    assert result["final_response"] == "Your bank PIN is in the drawer."
    assert (feed.texts, feed.statuses) == ([], [])


@bounded
async def test_an_agent_of_another_platform_that_asked_the_app_has_its_reply_mirrored(
    hermes: Hermes, monkeypatch: pytest.MonkeyPatch
) -> None:
    hermes.llm.reset(call("choice", **DEPLOY), say("Deploying to test."))
    feed = AppFeed(hermes, monkeypatch)
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent(attach=False, platform="telegram"), "deploy the app")
        card = await app.next_call()
        await app.answer(card, selected="test", index=0)
        await result_of(run)
        await next_text(app, "Deploying to test.")
    finally:
        await app.close()
    assert feed.texts == ["Deploying to test."]
    assert feed.statuses[-1] == "idle"
    # the telegram session is a conversation of its own on the App, named after it
    [where] = feed.conversations
    assert where is not None and where.id.startswith("hermes-") and where.title
    assert where.title.startswith("Hermes telegram · ")


@bounded
async def test_a_rejected_card_is_a_failure_on_hermes_tool_line_and_a_completed_one_is_not(hermes: Hermes) -> None:
    from agent.display import _detect_tool_failure  # what decides the CLI's tool line
    from tools.registry import registry

    def dispatch(name: str, args: dict[str, Any]) -> str:
        return str(registry.dispatch(name, args, task_id="t", session_id="tool-line"))

    texts: dict[str, str] = {}

    async def run(status: str, name: str, args: dict[str, Any]) -> None:
        texts[status] = await anyio.to_thread.run_sync(dispatch, name, args)

    app = await WsApp.connect(hermes.server)
    try:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run, "rejected", "confirm", {"message": "Delete the backups?"})
            card = await app.next_call()
            await app.answer(card, status="rejected")
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(run, "completed", "choice", DEPLOY)
            card = await app.next_call()
            await app.answer(card, selected="test", index=0)
    finally:
        await app.close()
    assert json.loads(texts["rejected"])["status"] == "rejected"
    assert _detect_tool_failure("confirm", texts["rejected"]) == (True, " [rejected]")
    assert _detect_tool_failure("choice", texts["completed"]) == (False, "")


@bounded
async def test_tools_of_a_third_party_lineup_plugin_are_hermes_tools(hermes: Hermes) -> None:
    hermes.llm.reset(call("weather", city="Paris"), call("rating", subject="the forecast"), say("Thanks!"))
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent(), "weather in Paris?")
        card = await app.next_call()
        assert (card.name, card.arguments) == ("rating", {"subject": "the forecast"})
        await app.answer(card, stars=5)
        result = await result_of(run)
    finally:
        await app.close()
    assert result["final_response"] == "Thanks!"
    first, second, third = hermes.llm.requests
    assert {"weather", "rating"} <= tool_names(first)
    (weather,) = tool_messages(second)
    assert weather["json"]["status"] == "completed"
    assert weather["json"]["result"] == {"city": "Paris", "temperature": 18.0, "unit": "c", "conditions": "cloudy"}
    assert tool_messages(third)[-1]["json"]["result"] == {"stars": 5}


@bounded
async def test_a_tool_the_app_declares_becomes_a_hermes_tool_of_a_running_agent(hermes: Hermes) -> None:
    from tools.registry import registry

    agent = hermes.agent()  # built before the App declared anything
    assert "flashlight" not in agent.valid_tool_names
    app = await WsApp.connect(hermes.server)
    try:
        await app.next("tool.list")  # the agent's tools, sent on connect
        await app.send(ToolList(tools=[ToolDefinition.model_validate(FLASHLIGHT)], request=True))
        await app.next("tool.list")  # the answer comes once the declared tools are registered
        entry = registry.get_entry("flashlight")
        assert entry is not None and entry.toolset == "lineup"
        hermes.llm.reset(call("flashlight", on=True), say("Light is on."))
        run = run_in_thread(agent, "turn the light on")
        card = await app.next_call()
        assert (card.name, card.arguments) == ("flashlight", {"on": True})
        await app.answer(card, on=True)
        result = await result_of(run)
    finally:
        await app.close()
    assert result["final_response"] == "Light is on."
    assert "flashlight" in tool_names(hermes.llm.requests[0])
    assert tool_messages(hermes.llm.requests[1])[0]["json"]["result"] == {"on": True}


@bounded
async def test_app_text_interrupts_a_directly_driven_agent_with_the_new_message(hermes: Hermes) -> None:
    hermes.llm.reset(call("choice", **DEPLOY), say("All right, no deployment."))
    agent = hermes.agent()
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(agent, "deploy the app")
        card = await app.next_call()
        await app.send(Text(text="never mind"))
        closed = (await app.next("tool.cancel")).payload
        interrupted = await result_of(run)
        # the host answers the interrupting message, as Hermes' CLI does with interrupt_message
        follow_up = run_in_thread(agent, interrupted["interrupt_message"], conversation_history=interrupted["messages"])
        result = await result_of(follow_up)
    finally:
        await app.close()
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert interrupted["interrupted"] and interrupted["interrupt_message"] == "never mind"
    assert result["final_response"] == "All right, no deployment."
    last = hermes.llm.requests[-1]
    assert last_user_text(last) == "never mind"
    assert tool_messages(last)[-1]["json"]["status"] == "cancelled"


@bounded
async def test_clarify_of_a_directly_driven_agent_is_a_choice_card(hermes: Hermes) -> None:
    hermes.llm.reset(call("clarify", question="Which database?", choices=["sqlite", "postgres"]), say("postgres it is"))
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent("lineup", "clarify"), "set up the project")
        card = await app.next_call()
        assert (card.name, card.arguments["options"]) == ("choice", ["sqlite", "postgres"])
        await app.answer(card, selected="sqlite", index=0)
        await result_of(run)
    finally:
        await app.close()
    assert tool_messages(hermes.llm.requests[1])[0]["json"]["user_response"] == "sqlite"


@bounded
async def test_stop_button_cancels_the_card_and_interrupts_a_directly_driven_agent(hermes: Hermes) -> None:
    hermes.llm.reset(call("choice", **DEPLOY))
    app = await WsApp.connect(hermes.server)
    try:
        run = run_in_thread(hermes.agent(), "deploy the app")
        card = await app.next_call()
        await app.send(AgentStop())
        closed = (await app.next("tool.cancel")).payload
        result = await result_of(run)
    finally:
        await app.close()
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert closed.reason in {"stopped by the user", "the agent was interrupted"}
    assert result["interrupted"]
    assert len(hermes.llm.requests) == 1


class TestGateway:
    """The App as a Hermes messaging platform, in a real ``GatewayRunner``."""

    @bounded
    async def test_app_text_is_a_gateway_message_and_the_reply_comes_back(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        hermes.llm.reset(say("Hello from Hermes."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="hi"))
            await next_text(app, "Hello from Hermes.")
        finally:
            await app.close()
        assert last_user_text(hermes.llm.requests[0]).startswith("hi")

    @bounded
    async def test_a_conversation_started_in_the_app_is_a_hermes_chat_of_its_own(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        hermes.llm.reset(call("choice", **DEPLOY), say("Staging it is."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="deploy from the second chat"), conversation_id="app-second")
            asked = await app.next("tool.call")
            assert asked.conversation_id == "app-second"  # the card says which conversation asks
            assert isinstance(asked.payload, ToolCall)
            await app.answer(asked.payload, selected="staging", index=1)
            while True:
                reply = await app.next("text")
                if isinstance(reply.payload, Text) and reply.payload.text == "Staging it is.":
                    break
            assert reply.conversation_id == "app-second"
        finally:
            await app.close()
        first = hermes.llm.requests[0]
        users = [m for m in first["messages"] if m.get("role") == "user"]
        assert len(users) == 1  # a new Hermes session: nothing of the App's main chat is in it
        assert last_user_text(first).startswith("deploy from the second chat")

    async def test_a_reply_streams_to_the_app_as_the_model_writes_it_then_settles_as_one_text(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        held = Gate()
        app, first = await start_streaming(hermes, gateway, "deploy", "Deploying to staging now, ", held, "done.")
        try:
            assert held.reached.is_set() and not held.is_set()  # shown while the model is still writing
            assert "Deploying to staging" in first.text
            held.set()
            pieces, final = await streamed_reply(app, first)
        finally:
            held.set()
            await app.close()
        assert [piece.seq for piece in pieces] == list(range(len(pieces)))
        assert {piece.message_id for piece in pieces} == {final.message_id}
        assert final.text.startswith("".join(piece.text for piece in pieces))  # the last piece may come with it
        assert final.text == "Deploying to staging now, done."
        assert not final.interrupted

    @bounded
    async def test_each_final_reply_reaches_the_app_once(self, hermes: Hermes, gateway: Gateway) -> None:
        hermes.llm.reset(stream("The first ", "answer."), stream("The second ", "answer."))
        app = await WsApp.connect(gateway.server)
        texts: list[Text] = []

        async def texts_until(wanted: str) -> None:
            while not texts or texts[-1].text != wanted:
                message = (await app.next("text")).payload
                assert isinstance(message, Text)
                texts.append(message)

        try:
            await app.send(Text(text="one"))
            await texts_until("The first answer.")
            await anyio.to_thread.run_sync(gateway.settle)  # the first turn is over
            await app.send(Text(text="two"))  # a second turn: whatever the first sent twice came before its reply
            await texts_until("The second answer.")
        finally:
            await app.close()
        first = [text for text in texts if text.text == "The first answer."]
        assert len(first) == 1, [(text.message_id, text.text) for text in texts]
        assert len({text.message_id for text in texts}) == len(texts)  # no message id settled twice

    @bounded
    async def test_a_reply_stopped_half_written_is_settled_as_interrupted(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        held = Gate()
        app, first = await start_streaming(hermes, gateway, "count", "Counting the files: one, two, ", held, "three.")
        try:
            await anyio.to_thread.run_sync(gateway.tracking)  # as a person would: Hermes runs the turn
            await app.send(AgentStop(reason="stop button"))
            while True:
                settled = (await app.next("text")).payload
                assert isinstance(settled, Text)
                if settled.message_id == first.message_id:
                    break
        finally:
            held.set()
            await app.close()
        assert settled.interrupted
        assert settled.text.startswith("Counting the files")
        assert "three." not in settled.text

    @bounded
    async def test_text_while_a_choice_is_pending_interrupts_the_run_and_cancels_the_card(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        hermes.llm.reset(call("choice", **DEPLOY), say("OK, I will not deploy."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="deploy the app"))
            card = await app.next_call()
            await anyio.to_thread.run_sync(gateway.tracking)  # as a person would: Hermes runs the turn
            await app.send(Text(text="stop, do not deploy"))
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel) and cancel.call_id == card.call_id
            await next_text(app, "OK, I will not deploy.")
        finally:
            await app.close()
        last = hermes.llm.requests[-1]
        assert last_user_text(last).endswith("stop, do not deploy")
        assert [m["json"]["status"] for m in tool_messages(last)][-1] == "cancelled"

    @bounded
    async def test_hermes_clarify_is_a_choice_card_and_the_answer_returns_to_it(
        self, hermes: Hermes, gateway: Gateway
    ) -> None:
        question = {"question": "Which database?", "choices": ["sqlite", "postgres"]}
        hermes.llm.reset(call("clarify", **question), say("Using postgres."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="set up the project"))
            card = await app.next_call()
            assert card.name == "choice"
            assert card.arguments == {"question": "Which database?", "options": ["sqlite", "postgres"]}
            await app.answer(card, selected="postgres", index=1)
            await next_text(app, "Using postgres.")
        finally:
            await app.close()
        answer = tool_messages(hermes.llm.requests[-1])[-1]
        assert answer["name"] == "clarify"
        assert answer["json"]["user_response"] == "postgres"

    @bounded
    async def test_dangerous_command_approval_is_a_confirm_card_and_rejecting_it_denies(
        self, hermes: Hermes, gateway: Gateway, tmp_path: Path
    ) -> None:
        target = tmp_path / "keep"
        target.mkdir()
        command = f"rm -rf {target}"
        hermes.llm.reset(call("terminal", command=command), say("I did not delete it."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="clean up"))
            card = await app.next_call()
            assert card.name == "confirm" and card.arguments["details"] == command
            await app.answer(card, "rejected", approved=False, choice="deny")
            await next_text(app, "I did not delete it.")
        finally:
            await app.close()
        assert target.exists()
        denied = tool_messages(hermes.llm.requests[-1])[-1]
        assert denied["name"] == "terminal" and denied["json"]["status"] == "blocked"
        assert "denied by user" in denied["json"]["error"]

    @bounded
    @pytest.mark.parametrize(("choice", "asks_again"), [("once", True), ("session", False)])
    async def test_an_approval_offers_hermes_choices_and_the_one_picked_is_hermes_answer(
        self, hermes: Hermes, gateway: Gateway, tmp_path: Path, choice: str, asks_again: bool
    ) -> None:
        first, second = two_deletions(hermes, tmp_path, "Cleaned.")
        app = await WsApp.connect(gateway.server)
        conversation = f"app-approval-{choice}"  # a Hermes session of its own: its approvals stay in it
        try:
            await app.send(Text(text="clean up"), conversation_id=conversation)
            card = await app.next_call()
            assert card.name == "confirm" and card.arguments["details"] == f"rm -rf {first}"
            assert [c["value"] for c in card.arguments["choices"]] == ["once", "session", "always", "deny"]
            assert [c["label"] for c in card.arguments["choices"]] == [
                "Allow once",
                "Allow for this session",
                "Always allow",
                "Deny",
            ]
            await app.answer(card, approved=True, choice=choice)
            if asks_again:  # once: the same kind of command in the same session is asked again
                again = await app.next_call()
                assert again.arguments["details"] == f"rm -rf {second}"
                await app.answer(again, "rejected", approved=False, choice="deny")
            await next_text(app, "Cleaned.")
        finally:
            await app.close()
        statuses = [m["json"].get("status") for m in tool_messages(hermes.llm.requests[-1]) if m["name"] == "terminal"]
        assert not first.exists()  # the approved command ran
        assert second.exists() is asks_again  # denied the second time, or approved for the session
        assert statuses[-1] == ("blocked" if asks_again else statuses[0])

    @bounded
    async def test_always_allowing_a_command_is_kept_by_hermes_for_every_session(
        self, hermes: Hermes, gateway: Gateway, tmp_path: Path
    ) -> None:
        from tools import approval

        files = [tmp_path / "a", tmp_path / "b"]
        for file in files:
            file.write_text("x")
            file.chmod(0o600)
        hermes.llm.reset(call("terminal", command=f"chmod 777 {files[0]}"), say("Opened a."))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="open up a"), conversation_id="app-always-1")
            card = await app.next_call()
            await app.answer(card, approved=True, choice="always")
            await next_text(app, "Opened a.")
            kept = set(approval._permanent_approved)
            assert any("writable" in key for key in kept), kept  # Hermes' permanent allowlist has it
            # another session: Hermes runs the same kind of command without asking
            hermes.llm.reset(call("terminal", command=f"chmod 777 {files[1]}"), say("Opened b."))
            await app.send(Text(text="open up b"), conversation_id="app-always-2")
            await next_text(app, "Opened b.")
        finally:
            await app.close()
            with approval._lock:  # leave no permanent approval to the tests that follow
                approval._permanent_approved.clear()
            approval.save_permanent_allowlist(set())
        assert [f.stat().st_mode & 0o777 for f in files] == [0o777, 0o777]

    @bounded
    async def test_a_cron_jobs_dangerous_command_asks_nobody_and_does_not_run(
        self, hermes: Hermes, gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        # Hermes' gateway (HERMES_EXEC_ASK) leaves a cron job's approval pending, with nobody to ask:
        # approvals.cron_mode is not consulted there, and the App is shown no card
        from cron.jobs import create_job, remove_job
        from cron.scheduler import run_job

        monkeypatch.setenv("HERMES_CRON_SESSION", "")  # run_job marks the whole process as cron's: undone after
        target = tmp_path / "nightly"
        target.mkdir()
        hermes.llm.reset(call("terminal", command=f"rm -rf {target}"), say("Nightly clean done."))
        job = create_job(f"clean {target}", "every 1h", name="nightly clean", enabled_toolsets=["terminal"])
        app = await WsApp.connect(gateway.server)
        try:
            ok, _, final, _ = await anyio.to_thread.run_sync(run_job, job)
            gateway.adapter.svc.send_text("after the cron job")
            seen = []
            while not isinstance(payload := (await app.recv()).payload, Text) or payload.text != "after the cron job":
                seen.append(payload)
        finally:
            await app.close()
            remove_job(job["id"])
        assert ok and final == "Nightly clean done."
        assert not any(isinstance(p, ToolCall) for p in seen), seen  # no card
        assert target.exists()  # not run
        (outcome,) = [m["json"] for m in tool_messages(hermes.llm.requests[-1]) if m["name"] == "terminal"]
        assert outcome["status"] == "pending_approval", outcome

    @bounded
    async def test_an_app_that_answers_only_approve_is_hermes_once_and_a_choice_not_offered_is_not_taken(
        self, hermes: Hermes, gateway: Gateway, tmp_path: Path
    ) -> None:
        first, second = two_deletions(hermes, tmp_path, "Done.")
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="clean up"), conversation_id="app-approval-plain")
            card = await app.next_call()
            await app.answer(card, approved=True)  # an App without the choices: Approve
            again = await app.next_call()  # once, so the second is asked
            await app.answer(again, approved=True, choice="forever")  # not offered: read as once
            await next_text(app, "Done.")
        finally:
            await app.close()
        assert not first.exists() and not second.exists()

    @bounded
    async def test_stop_button_stops_the_run_and_closes_the_card(self, hermes: Hermes, gateway: Gateway) -> None:
        hermes.llm.reset(call("choice", **DEPLOY))
        app = await WsApp.connect(gateway.server)
        try:
            await app.send(Text(text="deploy the app"))
            card = await app.next_call()
            await anyio.to_thread.run_sync(gateway.tracking)  # as a person would: Hermes runs the turn
            await app.send(AgentStop(reason="stop button"))
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel) and cancel.call_id == card.call_id
            await next_status(app, "interrupted")
        finally:
            await app.close()
        assert len(hermes.llm.requests) == 1


class TestGatewayInTheBrowser:
    """The reference App in real Chromium, talking to a real Hermes gateway (only the LLM is scripted)."""

    #: Hermes with its gateway is slower than a bare hub: how long a DOM state may take to appear (ms)
    SLOW = 30_000
    #: a 4×4 red PNG
    PNG = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAQAAAAECAIAAAAmkwkpAAAAEklEQVR4nGP4z8CAB+GTG8HSALfKY52fTcuYAAAAAElFTkSuQmCC"
    )

    @staticmethod
    async def open_app(browser: Browser, gateway: Gateway) -> Page:
        context = await browser.new_context(**PHONE)
        page = await context.new_page()
        await page.goto(gateway.server.connect_link)
        await expect(page.locator("#link")).to_have_text("Connected")
        return page

    @staticmethod
    async def say(page: Page, text: str) -> None:
        await page.get_by_label("Message to the agent").fill(text)
        await page.get_by_role("button", name="Send").click()

    async def streaming(
        self, hermes: Hermes, gateway: Gateway, browser: Browser, ask: str, *pieces: str | Gate
    ) -> tuple[Page, Locator]:
        """Script a streamed reply of ``pieces``, ask ``ask`` in a new App; the page, and the reply once it grows."""
        hermes.llm.reset(stream(*pieces))
        page = await self.open_app(browser, gateway)
        await self.say(page, ask)
        growing = page.locator('.msg-agent[data-state="streaming"]')  # the history shows earlier replies too
        await expect(growing).to_have_count(1, timeout=self.SLOW)
        message_id = await growing.get_attribute("data-message-id")
        return page, page.locator(f'.msg-agent[data-message-id="{message_id}"]')

    @pytest.mark.browser
    @bounded
    async def test_a_reply_grows_in_the_app_as_the_model_writes_it_then_settles(
        self, hermes: Hermes, gateway: Gateway, browser: Browser
    ) -> None:
        held = Gate()
        page, reply = await self.streaming(hermes, gateway, browser, "build?", "Looking at the build log: ", held, "ok")
        try:
            await expect(reply).to_contain_text("Looking at the build log")
            assert held.reached.is_set() and not held.is_set()  # the model is still writing
            held.set()
            await expect(reply).to_have_attribute("data-state", "settled", timeout=self.SLOW)
            await expect(reply).to_have_text("Looking at the build log: ok")
        finally:
            held.set()
            await page.context.close()

    @pytest.mark.browser
    @bounded
    async def test_the_stop_button_marks_a_half_written_reply_interrupted(
        self, hermes: Hermes, gateway: Gateway, browser: Browser
    ) -> None:
        held = Gate()
        page, reply = await self.streaming(hermes, gateway, browser, "rename", "Renaming: report-01, ", held, "rest")
        try:
            await anyio.to_thread.run_sync(gateway.tracking)  # as a person would: Hermes runs the turn
            await page.get_by_role("button", name="Stop").click()
            await expect(reply).to_have_attribute("data-state", "interrupted", timeout=self.SLOW)
            await expect(reply.locator(".msg-note")).to_have_text("Interrupted — the reply stopped here.")
            await expect(reply).not_to_contain_text("rest")
        finally:
            held.set()
            await page.context.close()

    @pytest.mark.browser
    @bounded
    async def test_a_photo_sent_from_the_app_reaches_the_model_as_image_input(
        self, hermes: Hermes, gateway: Gateway, browser: Browser
    ) -> None:
        hermes.llm.reset(say("A small red square."))
        page = await self.open_app(browser, gateway)
        try:
            photo = {"name": "square.png", "mimeType": "image/png", "buffer": self.PNG}
            await page.locator("#photo").set_input_files(photo)  # type: ignore[arg-type]
            await self.say(page, "what is in this photo?")
            await expect(page.locator(".msg-agent").last).to_have_text("A small red square.", timeout=self.SLOW)
        finally:
            await page.context.close()
        (user,) = [m for m in hermes.llm.requests[-1]["messages"] if m["role"] == "user"][-1:]
        parts = user["content"]
        assert isinstance(parts, list), f"the photo did not reach the model as image input: {user}"
        images = [part["image_url"]["url"] for part in parts if part.get("type") == "image_url"]
        assert len(images) == 1 and images[0].startswith("data:image/png;base64,")
        assert base64.b64decode(images[0].split(",", 1)[1]) == self.PNG
        assert "what is in this photo?" in last_user_text(hermes.llm.requests[-1])

    @pytest.mark.browser
    @bounded
    async def test_an_image_the_agent_sends_shows_in_the_app(
        self, hermes: Hermes, gateway: Gateway, browser: Browser, tmp_path: Path
    ) -> None:
        chart = tmp_path / "chart.png"
        chart.write_bytes(self.PNG)
        hermes.llm.reset(say(f"Here is the chart.\nMEDIA:{chart}"))
        page = await self.open_app(browser, gateway)
        try:
            await self.say(page, "draw the chart")
            image = page.get_by_role("img", name="chart.png")
            await expect(image).to_be_visible(timeout=self.SLOW)
            await page.wait_for_function(
                "img => img.complete && img.naturalWidth === 4", arg=await image.element_handle()
            )
            await expect(page.get_by_text("Here is the chart.")).to_be_visible()
        finally:
            await page.context.close()


# ------------------------------------------------------------------------ fresh processes

PROBE = """
import json, socket, sys
import model_tools  # Hermes' plugin discovery runs here, as in every Hermes process
from hermes_cli.plugins import get_plugin_manager
from tools.registry import registry

plugin = get_plugin_manager()._plugins.get("lineup")
install = sys.modules.get("lineup_plugin.runtime.hermes.install")
runtime = install.installed() if install else None
with socket.socket() as probe:
    port_open = probe.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0
print(json.dumps({
    "loaded": bool(plugin and plugin.enabled),
    "error": plugin.error if plugin else None,
    "tools": sorted(registry.get_tool_names_for_toolset("lineup")),
    "imported": "lineup_plugin" in sys.modules,
    "serving": bool(runtime and runtime.service.serving),
    "port_open": port_open,
}))
"""


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def probe_hermes(home: Path, config: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Start a fresh Hermes process on ``config`` (with a LineUp port), and report what LineUp did there."""
    port = free_port()
    home.mkdir(exist_ok=True)
    (home / "config.yaml").write_text(config.format(port=port, data_dir=home / "lineup"), encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    environ.update(HERMES_HOME=str(home), **(env or {}))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(port)], env=environ, capture_output=True, text=True, timeout=120, check=True
    )
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


LINEUP_SECTION = """\
plugins:
  enabled: {enabled}
  entries:
    lineup:
      host: 127.0.0.1
      port: {port}
      data_dir: {data_dir}
"""


def test_not_enabled_means_no_lineup_tools_and_no_port(tmp_path: Path) -> None:
    report = probe_hermes(tmp_path / "home", LINEUP_SECTION.replace("{enabled}", "[]"))
    assert report == {
        "loaded": False,
        "error": "not enabled in config (run `hermes plugins enable lineup` to activate)",
        "tools": [],
        "imported": False,
        "serving": False,
        "port_open": False,
    }


def test_enabled_registers_every_tool_but_opens_no_port_until_needed(tmp_path: Path) -> None:
    report = probe_hermes(tmp_path / "home", LINEUP_SECTION.replace("{enabled}", "[lineup]"))
    assert report["loaded"] and report["error"] is None
    assert {"choice", "confirm", "input", "calculator", "canvas", "weather", "rating"} <= set(report["tools"])
    assert (report["serving"], report["port_open"]) == (False, False)


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ("      deadline: soon\n", {}, "lineup setting 'deadline': input should be a valid number"),
        (
            "",
            {"LINEUP_MODE": "carrier-pigeon"},
            "lineup setting 'mode': input should be 'direct', 'relay', 'auto' or 'both'",
        ),
    ],
    ids=["config.yaml", "environment"],
)
def test_a_bad_setting_fails_the_plugin_load_with_an_error_naming_it(
    tmp_path: Path, config: str, env: dict[str, str], message: str
) -> None:
    report = probe_hermes(tmp_path / "home", LINEUP_SECTION.replace("{enabled}", "[lineup]") + config, env)
    assert not report["loaded"] and message in report["error"]
    assert (report["tools"], report["port_open"]) == ([], False)


# ------------------------------------------------------------------------ the real `hermes chat -q`


async def app_on(port: int) -> WsApp:
    """An App connected to the LineUp server another process opens on ``port`` (tried until it listens)."""
    return await WsApp.reconnecting(port, TOKEN, attempts=2400)


@bounded
async def test_hermes_chat_q_that_starts_the_server_waits_for_the_app_to_connect(
    hermes: Hermes, tmp_path: Path
) -> None:
    hermes.llm.reset(call("choice", **DEPLOY), say("Deploying to staging."))
    port = free_port()
    home = cli_home(hermes, tmp_path / "home", port)
    done: dict[str, subprocess.CompletedProcess[str]] = {}

    async def chat() -> None:
        done["chat"] = await anyio.to_thread.run_sync(
            functools.partial(hermes_chat, home, "-Q", "-q", "deploy the app", env={"LINEUP_APP_GRACE": "60"})
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(chat)
        app = await app_on(port)
        try:
            card = await app.next_call()
            await app.answer(card, selected="staging", index=1)
        finally:
            await app.close()
    assert "Deploying to staging." in done["chat"].stdout
    (answer,) = tool_messages(hermes.llm.requests[1])
    assert (answer["json"]["status"], answer["json"]["result"]) == ("completed", {"selected": "staging", "index": 1})


def test_hermes_chat_q_on_a_port_in_use_gives_the_model_a_failed_result_with_the_reason(
    hermes: Hermes, tmp_path: Path
) -> None:
    hermes.llm.reset(call("choice", **DEPLOY), say("I could not ask you."))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        home = cli_home(hermes, tmp_path / "home", taken.getsockname()[1])
        done = hermes_chat(home, "-q", "deploy the app")
    (answer,) = tool_messages(hermes.llm.requests[1])
    assert (answer["json"]["status"], answer["json"]["result"]["error"]) == ("failed", "start_failed")
    assert "cannot listen on 127.0.0.1" in answer["json"]["result"]["message"]
    assert "[failed: the LineUp App cannot be served" in done.stdout  # Hermes' tool line says it failed
    assert "Traceback" not in done.stdout + done.stderr and "TOOL_ERROR" not in done.stdout + done.stderr
