"""LineUp inside the real nanobot agent: only the LLM is scripted, the App is a real WebSocket client.

These tests need ``nanobot-ai``, whose dependencies conflict with the dev environment (it pins
``mcp<2``): ``scripts/test`` runs them in a virtualenv of their own (``.venv-nanobot``), and the
main suite does not collect them (``tests/conftest.py``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from lineup_plugin.protocol.messages import AgentStop, ToolCall, ToolCancel, ToolList
from lineup_plugin.protocol.tools import ToolDefinition
from lineup_plugin.runtime.nanobot.runtime import installed, uninstall
from tests.e2e.hermes_harness import within
from tests.fakes.llm import call, say, tool_messages, tool_names
from tests.wsapp import WsApp

from .harness import WAIT, Nanobot, nanobot_session

bounded = within(WAIT)
DEPLOY = {"question": "Deploy to which environment?", "options": ["test", "staging", "production"]}
CARDS = {"choice", "confirm", "input", "canvas", "calculator"}
_chats = itertools.count(1)


@pytest.fixture(scope="module")
def nanobot(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Nanobot]:
    with nanobot_session(tmp_path_factory.mktemp("nanobot-home")) as env:
        yield env


@pytest.fixture
async def app(nanobot: Nanobot) -> Any:
    service = installed().service
    assert service.ensure_started("test")
    connected = await WsApp.connect(service.runner.transport)
    yield connected
    await connected.close()


async def next_status(app: WsApp, state: str) -> Any:
    """The next ``agent.status`` in ``state`` (with the envelope's conversation id)."""
    while True:
        envelope = await app.next("agent.status")
        if envelope.payload.state == state:  # type: ignore[union-attr]
            return envelope


def chat() -> str:
    """A chat of its own for each test (nanobot keeps a session per chat)."""
    return f"chat-{next(_chats)}"


def answers(nanobot: Nanobot, request: int = -1) -> list[dict[str, Any]]:
    """The tool results the model read in its ``request``-th request."""
    return tool_messages(nanobot.llm.requests[request])


async def asked(nanobot: Nanobot, app: WsApp, chat_id: str, *script: Any) -> ToolCall:
    """Script the model, send a message from ``chat_id``; the card it shows on the App."""
    nanobot.llm.reset(*script)
    await nanobot.agent.send(chat_id, "please ask me")
    return await app.next_call()


def test_nanobot_loads_the_cards_and_the_dispatcher_from_the_entry_points(nanobot: Nanobot) -> None:
    tools = {name: nanobot.agent.agent_loop.tools.get(name) for name in [*CARDS, "lineup"]}
    assert all(tools.values()), tools
    assert tools["choice"].parameters["required"] == ["question", "options"]
    assert "Ask the user to pick one" in tools["choice"].description


@bounded
async def test_a_choice_answered_on_the_app_reaches_the_model_and_the_card_names_the_chat(
    nanobot: Nanobot, app: WsApp
) -> None:
    chat_id = chat()
    card = await asked(nanobot, app, chat_id, call("choice", **DEPLOY), say("Deploying to staging."))
    assert (card.name, card.arguments) == ("choice", DEPLOY)
    assert card.origin is not None and (card.origin.kind, card.origin.label) == (
        "gateway",
        f"nanobot telegram · {chat_id}",
    )
    await app.answer(card, selected="staging", index=1)
    assert await nanobot.agent.reply(chat_id) == "Deploying to staging."
    (answer,) = answers(nanobot)
    assert answer["json"] == {
        "status": "completed",
        "tool": "choice",
        "call_id": card.call_id,
        "result": {"selected": "staging", "index": 1},
    }
    assert CARDS | {"lineup"} <= tool_names(nanobot.llm.requests[0])
    status = await next_status(app, "idle")  # the App learns when the turn that asked has ended
    assert status.conversation_id == f"nanobot-telegram:{chat_id}"


@bounded
@pytest.mark.parametrize("status", ["rejected", "unsupported", "failed"])
async def test_each_status_the_app_answers_reaches_the_model_with_its_hint(
    nanobot: Nanobot, app: WsApp, status: str
) -> None:
    chat_id = chat()
    card = await asked(nanobot, app, chat_id, call("confirm", message="Delete the branch?"), say(f"It was {status}."))
    await app.answer(card, status=status, message=f"{status} on the phone")
    assert await nanobot.agent.reply(chat_id) == f"It was {status}."
    (answer,) = answers(nanobot)
    assert answer["json"]["status"] == status and answer["json"]["hint"]


@bounded
async def test_a_card_nobody_answers_expires_at_its_deadline_and_the_model_reads_expired(
    nanobot: Nanobot, app: WsApp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(installed().service.settings.deadlines, "input", 0.5)
    chat_id = chat()
    card = await asked(nanobot, app, chat_id, call("input", prompt="Your name?"), say("I will ask later."))
    closed = (await app.next("tool.cancel")).payload
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert await nanobot.agent.reply(chat_id) == "I will ask later."
    (answer,) = answers(nanobot)
    assert answer["json"]["status"] == "expired" and "not a refusal" in answer["json"]["hint"]


@bounded
async def test_with_no_app_connected_the_model_reads_a_clear_failure(nanobot: Nanobot) -> None:
    installed().service.stop()  # a fresh server: no device of an earlier test is still attached
    chat_id = chat()
    nanobot.llm.reset(call("choice", **DEPLOY), say("Please open the LineUp App."))
    await nanobot.agent.send(chat_id, "deploy")
    assert await nanobot.agent.reply(chat_id) == "Please open the LineUp App."
    (answer,) = answers(nanobot)
    assert answer["json"]["status"] == "failed"
    assert "no LineUp App is connected" in answer["json"]["result"]["message"]


async def next_turn_sees_cancelled(nanobot: Nanobot, chat_id: str) -> dict[str, Any]:
    """The chat's next message: the model's request shows what the stopped card answered."""
    nanobot.llm.reset(say("Stopped, as you asked."))
    await nanobot.agent.send(chat_id, "what happened?")
    assert await nanobot.agent.reply(chat_id) == "Stopped, as you asked."
    (answer,) = [m for m in answers(nanobot) if m["name"] == "choice"]
    return dict(answer["json"])


@bounded
async def test_stop_in_the_chat_withdraws_the_card_and_the_model_sees_cancelled(nanobot: Nanobot, app: WsApp) -> None:
    chat_id = chat()
    card = await asked(nanobot, app, chat_id, call("choice", **DEPLOY))
    await nanobot.agent.send(chat_id, "/stop")
    closed = (await app.next("tool.cancel")).payload
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert closed.reason == "the agent was interrupted"
    assert await nanobot.agent.reply(chat_id) == "Stopped 1 task(s)."  # nanobot's own answer to /stop
    answer = await next_turn_sees_cancelled(nanobot, chat_id)
    assert (answer["status"], answer["call_id"]) == ("cancelled", card.call_id)
    assert len(nanobot.llm.requests) == 1  # the stopped turn made no further model call


@bounded
async def test_the_apps_stop_button_stops_the_turn_and_the_model_sees_cancelled(nanobot: Nanobot, app: WsApp) -> None:
    chat_id = chat()
    card = await asked(nanobot, app, chat_id, call("choice", **DEPLOY))
    await app.send(AgentStop())
    closed = (await app.next("tool.cancel")).payload
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    await next_status(app, "interrupted")
    answer = await next_turn_sees_cancelled(nanobot, chat_id)
    assert (answer["status"], answer["call_id"]) == ("cancelled", card.call_id)


@bounded
async def test_shutdown_with_a_card_open_withdraws_it_on_the_app(nanobot: Nanobot, app: WsApp) -> None:
    other = await anyio.to_thread.run_sync(nanobot.start_agent)
    chat_id = chat()
    nanobot.llm.reset(call("choice", **DEPLOY))
    await other.send(chat_id, "deploy")
    card = await app.next_call()
    await anyio.to_thread.run_sync(other.close)  # what nanobot's gateway runs on shutdown
    closed = (await app.next("tool.cancel")).payload
    assert isinstance(closed, ToolCancel) and closed.call_id == card.call_id
    assert closed.reason == "the agent was interrupted"


@bounded
async def test_a_tool_the_app_declares_later_is_called_through_the_dispatcher(nanobot: Nanobot, app: WsApp) -> None:
    flashlight = {
        "name": "flashlight",
        "type": "action",
        "description": "Turn the phone's flashlight on or off.",
        "inputSchema": {"type": "object", "properties": {"on": {"type": "boolean"}}, "required": ["on"]},
    }
    await app.next("tool.list")
    await app.send(ToolList(tools=[ToolDefinition.model_validate(flashlight)], request=True))
    await app.next("tool.list")  # the answer comes once the declared tools are known
    chat_id = chat()
    card = await asked(
        nanobot,
        app,
        chat_id,
        call("lineup", tool=""),
        call("lineup", tool="flashlight", arguments={"on": True}),
        say("On."),
    )
    assert (card.name, card.arguments) == ("flashlight", {"on": True})
    await app.answer(card, on=True)
    assert await nanobot.agent.reply(chat_id) == "On."
    listed = json.loads(answers(nanobot, 1)[0]["content"])
    assert "flashlight" in {tool["name"] for tool in listed["tools"]}
    assert answers(nanobot)[-1]["json"]["result"] == {"on": True}


def test_the_adapter_stays_small() -> None:
    """The adapter's size measures the runtime seam (goal: at most 300 lines)."""
    package = Path(installed.__code__.co_filename).parent
    lines = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in package.glob("*.py"))
    assert lines <= 400, lines


def test_a_bad_setting_keeps_lineups_tools_out_and_nanobots_log_says_why(
    nanobot: Nanobot, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loguru import logger

    uninstall()  # the next start reads the settings again
    monkeypatch.setenv("LINEUP_PORT", "not-a-port")
    logged: list[str] = []
    sink = logger.add(logged.append, level="ERROR")
    try:
        other = nanobot.start_agent()
    finally:
        logger.remove(sink)
        uninstall()
    try:
        assert not {"lineup", *CARDS} & set(other.agent_loop.tools.tool_names)
        assert "read_file" in other.agent_loop.tools.tool_names  # nanobot itself started
        assert "Failed to register tool" in "".join(logged) and "lineup setting 'port'" in "".join(logged)
    finally:
        other.close()


@bounded
async def test_bad_calls_through_the_dispatcher_reach_the_model_as_clear_failures(nanobot: Nanobot, app: WsApp) -> None:
    chat_id = chat()
    nanobot.llm.reset(
        call("lineup", tool="no_such_tool", arguments={}),
        call("lineup", tool="choice", arguments={"question": 5, "options": []}),
        say("Sorry."),
    )
    await nanobot.agent.send(chat_id, "do odd things")
    assert await nanobot.agent.reply(chat_id) == "Sorry."
    unknown, invalid = (m["json"] for m in answers(nanobot))
    assert unknown["status"] == "failed" and "unknown tool 'no_such_tool'" in unknown["result"]["message"]
    assert invalid["status"] == "failed" and invalid["result"]["error"] == "invalid_arguments"
