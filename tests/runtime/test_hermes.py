"""The Hermes adapter's own logic, without starting Hermes: config section, cards, tools, hosts, hooks, command."""

from __future__ import annotations

import asyncio
import concurrent.futures
import importlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import ConfigError
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import (
    SCHEMA_CACHE,
    cached_function_schemas,
    remember_function_schemas,
    third_party_plugins,
)
from lineup_plugin.protocol.live import interrupt_reason
from lineup_plugin.protocol.messages import Origin, ToolCancel, ToolResult
from lineup_plugin.runtime.base import Conversation, result_json
from lineup_plugin.runtime.hermes import common, compat
from lineup_plugin.runtime.hermes.common import TOOLSET, Answer, ask, clarify_answer, clarify_card, plugin_section
from lineup_plugin.runtime.hermes.hooks import HOOKS, HermesHooks
from lineup_plugin.runtime.hermes.install import register_command
from lineup_plugin.runtime.hermes.runtime import STOP_TIMEOUT, HermesRuntime, hermes_result
from lineup_plugin.runtime.lock import ServerLock
from lineup_plugin.transports.direct.server import DirectServer
from lineup_plugin.transports.memory import MemoryApp


class FakeManager:
    """Hermes' plugin manager, as far as LineUp reads it: the interactive CLI, if any."""

    def __init__(self, cli: Any = None) -> None:
        self._cli_ref = cli


class FakeContext:
    """The part of Hermes' PluginContext LineUp uses, recording every registration."""

    def __init__(self, cli: Any = None) -> None:
        self.tools: dict[str, dict[str, Any]] = {}
        self.injected: list[str] = []
        self._manager = FakeManager(cli)

    def register_tool(self, **entry: Any) -> None:
        self.tools[entry["name"]] = entry

    def inject_message(self, content: str, role: str = "user") -> bool:
        self.injected.append(content)
        return True


class FakeAgent:
    """An AIAgent as LineUp drives it: interrupt, steer, clarify_callback, session_id."""

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.clarify_callback: Any = None
        self.interrupts: list[str | None] = []
        self.steered: list[str] = []

    def interrupt(self, message: str | None = None) -> None:
        self.interrupts.append(message)

    def steer(self, text: str) -> bool:
        self.steered.append(text)
        return True


class FakeCli:
    """Hermes' interactive CLI: its agent, its session, and whether a turn runs."""

    def __init__(self, running: bool) -> None:
        self.agent = FakeAgent("cli")
        self.session_id = "cli"
        self._agent_running = running


class FakeAdapter:
    """The gateway platform adapter as the runtime uses it."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str]] = []
        self.conversations: list[str | None] = []

    def deliver_text(self, text: str, sender: str, conversation_id: str | None = None) -> bool:
        self.texts.append((text, sender))
        self.conversations.append(conversation_id)
        return True

    def submit_text(self, text: str, sender: str) -> concurrent.futures.Future[None]:
        self.texts.append((text, sender))
        done: concurrent.futures.Future[None] = concurrent.futures.Future()
        done.set_result(None)
        return done


def make_runtime(tmp_path: Path, ctx: Any = None) -> HermesRuntime:
    settings = Settings(host="127.0.0.1", port=0, token="hermes-test-token-0123", data_dir=tmp_path, store="memory")
    return HermesRuntime(ctx or FakeContext(), settings, load_registry(load_entrypoints=False), role="process")


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[HermesRuntime]:
    made = make_runtime(tmp_path)
    yield made
    made.service.stop()


# ----------------------------------------------------------------------------- config and cards


def test_settings_come_from_plugins_entries_lineup() -> None:
    config = {"plugins": {"enabled": ["lineup"], "entries": {"lineup": {"port": 9600, "allow_tool_override": False}}}}
    assert plugin_section(config) == {"port": 9600}  # keys Hermes reads for every plugin are left to Hermes


@pytest.mark.parametrize(
    "config",
    [{}, {"plugins": None}, {"plugins": {"entries": {"other": {}}}}, {"plugins": {"entries": {"lineup": None}}}],
)
def test_a_missing_section_means_defaults(config: dict[str, Any]) -> None:
    assert plugin_section(config) == {}


def test_a_section_that_is_not_a_mapping_is_an_error_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"lineup setting 'plugins\.entries\.lineup': expected a mapping"):
        plugin_section({"plugins": {"entries": {"lineup": "port=9600"}}})


def test_clarify_with_choices_is_a_choice_card_and_without_an_input_card() -> None:
    assert clarify_card("Which?", ["a", " ", "b"]) == ("choice", {"question": "Which?", "options": ["a", "b"]})
    assert clarify_card("Name?", None) == ("input", {"prompt": "Name?"})


@pytest.mark.parametrize(
    ("status", "result", "answer"),
    [
        ("completed", {"selected": "b", "index": 1}, "b"),
        ("completed", {"values": {"text": "Ada"}}, "Ada"),
        ("expired", {"message": "no answer before the deadline"}, ""),
        ("cancelled", {"message": "cancelled by the user"}, ""),
    ],
)
def test_a_cards_result_becomes_the_clarify_answer(status: str, result: dict[str, Any], answer: str) -> None:
    card = ToolResult.model_validate({"call_id": "c", "status": status, "result": result})
    assert clarify_answer(card) == answer


class RecordingAnswer(Answer):
    """A Hermes wait that records the card's result; ``settled`` says it ended another way."""

    def __init__(self, settled: bool) -> None:
        self.resolved: list[ToolResult] = []
        self.ended_elsewhere = settled

    def resolve(self, result: ToolResult) -> None:
        self.resolved.append(result)

    def settled(self) -> bool:
        return self.ended_elsewhere


CHOICE = {"question": "Which database?", "options": ["sqlite", "postgres"]}


async def test_a_card_for_a_hermes_wait_applies_the_apps_answer() -> None:
    hub = Hub(load_registry(load_entrypoints=False))
    app = MemoryApp(hub, "phone")
    await app.connect()
    answer = RecordingAnswer(settled=False)
    asking = asyncio.create_task(ask(hub, "choice", CHOICE, 60, "card-1", answer))
    await app.next("tool.call")
    await app.send_payload(ToolResult(call_id="card-1", result={"selected": "sqlite", "index": 0}))
    await asking
    assert [(r.call_id, r.result) for r in answer.resolved] == [("card-1", {"selected": "sqlite", "index": 0})]


async def test_a_card_whose_hermes_wait_ended_another_way_is_closed_and_answers_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(common, "SETTLE_POLL", 0.01)
    hub = Hub(load_registry(load_entrypoints=False))
    app = MemoryApp(hub, "phone")
    await app.connect()
    answer = RecordingAnswer(settled=True)  # e.g. the user typed the answer in the chat
    asking = asyncio.create_task(ask(hub, "choice", CHOICE, 60, "card-2", answer))
    await app.next("tool.call")
    closed = (await app.next("tool.cancel")).payload
    await asking
    assert isinstance(closed, ToolCancel) and (closed.call_id, closed.reason) == ("card-2", "answered in the chat")
    assert closed.outcome is not None and closed.outcome.status == "cancelled"
    assert answer.resolved == []


# ----------------------------------------------------------------------------- tools


def test_every_tool_is_registered_in_the_lineup_toolset_with_a_bare_schema(runtime: HermesRuntime) -> None:
    runtime.service.bridge.sync()
    tools: dict[str, dict[str, Any]] = runtime.ctx.tools
    assert set(tools) == {"choice", "confirm", "input", "calculator", "canvas"}
    entry = tools["choice"]
    assert entry["toolset"] == TOOLSET
    assert set(entry["schema"]) == {"name", "description", "parameters"}


@pytest.mark.usefixtures("impatient")
def test_the_hermes_handler_takes_hermes_context_arguments_and_returns_json(runtime: HermesRuntime) -> None:
    runtime.service.bridge.sync()
    other = ServerLock(runtime.service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        text = runtime.ctx.tools["choice"]["handler"]({"question": "?", "options": ["a"]}, session_id="s", task_id="t")
    finally:
        other.release()
    body = json.loads(text)
    assert body["status"] == "failed" and body["result"]["error"] == "not_owner"
    assert "served by another Hermes process (pid" in body["result"]["message"]


@pytest.mark.parametrize(
    ("status", "result", "error"),
    [
        ("rejected", {}, "rejected"),
        ("cancelled", {"message": "the agent was interrupted"}, "cancelled: the agent was interrupted"),
        ("expired", {"message": "no answer within 600 s"}, "expired: no answer within 600 s"),
        ("failed", {"message": "no LineUp App is connected", "error": "no_app"}, "failed: no LineUp App is connected"),
    ],
)
def test_a_call_that_did_not_complete_carries_the_error_key_hermes_marks_failures_by(
    status: str, result: dict[str, Any], error: str
) -> None:
    text = result_json(ToolResult(call_id="c1", name="choice", status=status, result=result))  # type: ignore[arg-type]
    body = json.loads(hermes_result(text))
    assert body["error"] == error
    assert {key: value for key, value in body.items() if key != "error"} == json.loads(text)


def test_a_completed_call_has_no_error_key() -> None:
    text = result_json(ToolResult(call_id="c1", name="choice", status="completed", result={"selected": "a"}))
    assert hermes_result(text) == text


@pytest.mark.parametrize(
    ("argv", "quiet"),
    [
        (["hermes", "chat", "-Q", "-q", "hi"], True),
        (["hermes", "chat", "--quiet", "-q", "hi"], True),
        (["hermes", "chat", "-vQ"], True),
        (["hermes", "chat", "-q", "hi"], False),
        (["hermes", "chat", "--", "-Q"], False),
    ],
)
def test_hermes_chat_quiet_is_seen_and_nothing_is_printed_then(
    runtime: HermesRuntime, monkeypatch: pytest.MonkeyPatch, argv: list[str], quiet: bool
) -> None:
    monkeypatch.setattr(sys, "argv", argv)
    assert compat.quiet_cli() is quiet
    assert runtime.may_print() is not quiet


# ----------------------------------------------------------------------------- hosts


def test_an_attached_agent_is_interrupted_by_app_text_while_it_runs_and_its_host_gets_it_when_idle(
    runtime: HermesRuntime,
) -> None:
    agent, idle = FakeAgent("s1"), []
    runtime.attach(agent, on_idle_message=idle.append)
    hooks = HermesHooks(runtime)
    hooks.pre_llm_call(session_id="s1")
    assert runtime.deliver_message("never mind", sender="phone")
    assert runtime.steer("faster") and runtime.interrupt(None)
    hooks.on_session_end(session_id="s1")
    assert runtime.deliver_message("hello", sender="phone")
    assert (agent.interrupts, agent.steered, idle) == (["never mind", None], ["faster"], ["hello"])
    assert agent.clarify_callback == runtime.clarify_callback
    runtime.detach(agent)
    assert not runtime.deliver_message("anyone?", sender="phone")


def test_in_the_cli_app_text_is_injected_and_stop_reaches_the_cli_agent_or_else_an_attached_one(tmp_path: Path) -> None:
    cli = FakeCli(running=True)
    ctx = FakeContext(cli)
    runtime = make_runtime(tmp_path, ctx)
    attached = FakeAgent("s1")
    runtime.attach(attached)
    HermesHooks(runtime).pre_llm_call(session_id="s1")
    assert runtime.deliver_message("hi", sender="phone") and ctx.injected == ["hi"]
    assert runtime.interrupt("stop") and cli.agent.interrupts == ["stop"] and attached.interrupts == []
    cli._agent_running = False
    assert runtime.interrupt(None) and attached.interrupts == [None]


def test_in_the_gateway_app_text_is_a_session_message_and_stop_is_the_stop_command(runtime: HermesRuntime) -> None:
    adapter = FakeAdapter()
    runtime.gateway.adapter = adapter
    attached = FakeAgent("s1")
    runtime.attach(attached)
    HermesHooks(runtime).pre_llm_call(session_id="s1", platform="lineup")
    assert runtime.deliver_message("hi", sender="phone")
    assert runtime.interrupt(None) and runtime.steer("left")
    assert adapter.texts == [("hi", "phone"), ("/stop", "lineup"), ("/steer left", "lineup")]
    assert attached.interrupts == [] and runtime.in_gateway
    assert STOP_TIMEOUT > 0


# ----------------------------------------------------------------------------- hooks and command


class AppFeed:
    """What the hooks push to the App, recorded at the service: mirrored replies and statuses."""

    def __init__(self, runtime: HermesRuntime) -> None:
        self.texts: list[str] = []
        self.statuses: list[str] = []
        self.conversations: set[Conversation | None] = set()
        runtime.service.send_text = self.text  # type: ignore[method-assign]
        runtime.service.report_status = self.status  # type: ignore[method-assign]

    def text(self, text: str, *, conversation: Conversation | None = None) -> None:
        self.texts.append(text)
        self.conversations.add(conversation)

    def status(self, state: str, detail: str | None = None, *, conversation: Conversation | None = None) -> None:
        self.statuses.append(state)
        self.conversations.add(conversation)


def a_turn(hooks: HermesHooks, session_id: str, reply: str, platform: str) -> None:
    """One turn's hooks, with the arguments Hermes passes (``agent/turn_context.py``, ``turn_finalizer.py``)."""
    hooks.pre_llm_call(session_id=session_id, task_id="t", turn_id="1", user_message="hi", platform=platform)
    hooks.post_llm_call(session_id=session_id, task_id="t", assistant_response=reply, platform=platform)
    hooks.on_session_end(session_id=session_id, completed=True, interrupted=False, platform=platform)


def test_a_session_the_app_takes_no_part_in_is_never_mirrored_nor_shown(runtime: HermesRuntime) -> None:
    feed = AppFeed(runtime)
    a_turn(HermesHooks(runtime), "telegram-1", "a private reply", platform="telegram")
    assert (feed.texts, feed.statuses) == ([], [])


@pytest.mark.usefixtures("impatient")
def test_a_session_that_called_a_lineup_tool_is_mirrored_and_shown(runtime: HermesRuntime) -> None:
    runtime.service.bridge.sync()
    feed = AppFeed(runtime)
    other = ServerLock(runtime.service.settings.data_dir)
    assert other.acquire("gateway")  # the call ends at once (not_owner): only its session id matters here
    try:
        runtime.ctx.tools["choice"]["handler"]({"question": "?", "options": ["a"]}, session_id="tg-2", task_id="t")
    finally:
        other.release()
    a_turn(HermesHooks(runtime), "tg-2", "deployed", platform="telegram")
    assert (feed.texts, feed.statuses) == (["deployed"], ["thinking", "idle"])
    # shown in a conversation of its own, named after the session
    assert feed.conversations == {Conversation("hermes-tg-2", "Hermes telegram · tg-2")}


def test_an_attached_agent_is_mirrored_even_after_its_session_id_changed(runtime: HermesRuntime) -> None:
    agent = FakeAgent("s1")
    runtime.attach(agent)
    feed = AppFeed(runtime)
    hooks = HermesHooks(runtime)
    a_turn(hooks, "s1", "first", platform="")
    agent.session_id = "s1-compressed"  # Hermes starts a new session when it compresses the context
    a_turn(hooks, "s1-compressed", "second", platform="")
    runtime.detach(agent)
    a_turn(hooks, "s1-compressed", "after detach", platform="")
    assert feed.texts == ["first", "second"]


def test_the_cli_is_mirrored_only_once_the_app_took_part_in_its_session(tmp_path: Path) -> None:
    cli = FakeCli(running=False)
    runtime = make_runtime(tmp_path, FakeContext(cli))
    feed = AppFeed(runtime)
    hooks = HermesHooks(runtime)
    a_turn(hooks, "cli", "before the App", platform="cli")
    assert runtime.deliver_message("hello from the phone", sender="phone")
    a_turn(hooks, "cli", "after the App", platform="cli")
    cli.session_id = "cli-2"  # /new: a session the App has not joined
    a_turn(hooks, "cli-2", "new session", platform="cli")
    try:
        assert hooks.lineup_command().startswith("LineUp: direct mode")
    finally:
        runtime.service.stop()
    a_turn(hooks, "cli-2", "after /lineup", platform="cli")
    assert feed.texts == ["after the App", "after /lineup"]


def test_in_the_gateway_only_the_app_session_is_shown_and_replies_go_through_the_platform(
    runtime: HermesRuntime,
) -> None:
    runtime.gateway.adapter = FakeAdapter()
    feed = AppFeed(runtime)
    hooks = HermesHooks(runtime)
    a_turn(hooks, "tg", "telegram reply", platform="telegram")
    a_turn(hooks, "app", "app reply", platform="lineup")
    assert (feed.texts, feed.statuses) == ([], ["thinking", "idle"])


def test_lineup_command_serves_the_app_and_shows_the_link(runtime: HermesRuntime) -> None:
    reply = HermesHooks(runtime).lineup_command()
    runner = runtime.service.runner
    assert runtime.service.serving and runner is not None and isinstance(runner.transport, DirectServer)
    assert reply.startswith(f"LineUp: direct mode: the App at {runner.transport.url} (0 devices connected).")
    assert runner.transport.connect_link in reply


def test_lineup_command_names_the_process_that_serves_the_app(runtime: HermesRuntime) -> None:
    other = ServerLock(runtime.service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        reply = HermesHooks(runtime).lineup_command()
    finally:
        other.release()
    assert reply.startswith("LineUp: the App is served by another Hermes process (pid") and "(gateway)" in reply


def test_the_lineup_command_is_stored_as_hermes_would_store_it() -> None:
    from hermes_cli.commands import resolve_command
    from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest

    def handler(raw_args: str) -> str:
        return raw_args

    entries = []
    for shortcut in (False, True):
        manager = PluginManager()
        ctx = PluginContext(PluginManifest(name="lineup"), manager)
        if shortcut:  # as in a process that has not loaded Hermes' slash-command module
            with pytest.MonkeyPatch.context() as patch:
                patch.delitem(sys.modules, "hermes_cli.commands")
                register_command(ctx, "lineup", handler, description="where the App is")
        else:
            ctx.register_command("lineup", handler, description="where the App is")
        entries.append(manager._plugin_commands)
    assert (
        entries[0]
        == entries[1]
        == {"lineup": {"handler": handler, "description": "where the App is", "plugin": "lineup", "args_hint": ""}}
    )
    assert resolve_command("lineup") is None  # not a built-in command, which Hermes would refuse


# ----------------------------------------------------------------------------- register(ctx)

REGISTER = """
import json, sys
import hermes_cli.config  # Hermes has it loaded before it loads plugins
class Ctx:
    def __init__(self):
        self.tools, self.hooks, self.commands, self.platforms = [], [], [], []
    def register_tool(self, name, toolset, schema, handler, **options): self.tools.append(name)
    def register_hook(self, name, callback): self.hooks.append(name)
    def register_command(self, name, handler, **options): self.commands.append(name)
    def register_platform(self, **options): self.platforms.append(options["name"])
ctx = Ctx()
import lineup_plugin.hermes
lineup_plugin.hermes.register(ctx)
heavy = ["pydantic", "websockets", "anyio", "lineup_plugin.hub", "lineup_plugin.runtime.loop", "gateway.run"]
print(json.dumps({"tools": ctx.tools, "hooks": ctx.hooks, "commands": ctx.commands, "platforms": ctx.platforms,
                  "loaded": [m for m in heavy if m in sys.modules]}))
"""


def test_register_is_cheap_it_loads_neither_pydantic_nor_the_server(tmp_path: Path) -> None:
    pytest.importorskip("hermes_cli", reason="needs hermes-agent installed")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    # only the built-in tools, whose plain schemas need no registry (a third-party plugin needs it)
    environ.update(HERMES_HOME=str(tmp_path), LINEUP_BLOCK_PLUGINS=",".join(third_party_plugins()))
    done = subprocess.run(
        [sys.executable, "-c", REGISTER], env=environ, capture_output=True, text=True, timeout=120, check=True
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["loaded"] == []
    assert set(report["tools"]) == {"choice", "confirm", "input", "calculator", "canvas"}
    assert (report["commands"], report["platforms"]) == (["lineup"], ["lineup"])
    assert report["hooks"] == list(HOOKS)


def test_a_third_party_plugin_loads_pydantic_at_the_first_start_only_then_its_schemas_are_kept(
    tmp_path: Path,
) -> None:
    pytest.importorskip("hermes_cli", reason="needs hermes-agent installed")
    plugins = third_party_plugins()
    if not plugins:
        pytest.skip("no third-party lineup plugin installed (scripts/test installs examples/lineup-weather)")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    environ.update(HERMES_HOME=str(tmp_path))

    def start() -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", REGISTER], env=environ, capture_output=True, text=True, timeout=120, check=True
        )
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))

    first, second = start(), start()
    assert "pydantic" in first["loaded"]  # the plugin's typed tools are known only through the registry
    assert second["loaded"] == []  # the next start registers them from the kept schemas
    assert second["tools"] == first["tools"] and "weather" in second["tools"]
    assert (tmp_path / "lineup" / SCHEMA_CACHE).is_file()
    environ["LINEUP_BLOCK_PLUGINS"] = ",".join(plugins)  # the plugins changed: the kept schemas are not used
    assert "weather" not in start()["tools"]


def test_kept_schemas_are_used_only_for_the_same_plugins(tmp_path: Path) -> None:
    schemas = [{"name": "weather", "description": "today", "parameters": {"type": "object", "properties": {}}}]
    assert cached_function_schemas(tmp_path) is None
    remember_function_schemas(tmp_path, schemas)
    assert cached_function_schemas(tmp_path) == schemas
    assert cached_function_schemas(tmp_path, {"LINEUP_BLOCK_PLUGINS": "weather"}) is None
    (tmp_path / SCHEMA_CACHE).write_text("{not json")
    assert cached_function_schemas(tmp_path) is None


def test_kept_schemas_are_not_used_after_a_plugins_submodule_changes_without_a_version_bump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An editable install: the plugin's tools live in a submodule that changes, its version stays."""
    site = tmp_path / "site"
    package = site / "lineup_fake_editable"
    (package / "tools").mkdir(parents=True)
    (package / "__init__.py").write_text("from .tools.weather import register_tools\n")
    (package / "tools" / "__init__.py").write_text("")
    weather = package / "tools" / "weather.py"
    weather.write_text("def register_tools(register): ...  # takes city\n")
    info = site / "lineup_fake_editable-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lineup-fake-editable\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[lineup]\nfake_editable = lineup_fake_editable\n")
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    assert "fake_editable" in third_party_plugins()
    data_dir = tmp_path / "data"
    schemas = [{"name": "weather", "description": "today", "parameters": {"type": "object", "properties": {}}}]
    remember_function_schemas(data_dir, schemas)
    assert cached_function_schemas(data_dir) == schemas
    weather.write_text("def register_tools(register): ...  # takes city and day\n")  # a new size
    os.utime(weather, ns=(weather.stat().st_atime_ns, weather.stat().st_mtime_ns + 1_000_000_000))
    assert cached_function_schemas(data_dir) is None  # stale: the registry is loaded again
    remember_function_schemas(data_dir, schemas)
    assert cached_function_schemas(data_dir) == schemas


def test_a_cron_jobs_or_subagents_call_names_its_session_kind() -> None:
    from lineup_plugin.runtime.hermes.common import hermes_origin

    assert hermes_origin("cron_nightly_20261130_230000", "") == Origin(kind="cron", label="nightly")
    # Hermes 0.19 names a delegate_task child's task sa-<index>-<hex8>; subagent-... before
    assert hermes_origin("20261130_x", "sa-0-5f3e9a1c") == Origin(kind="subagent", label="0-5f3e9a1c")
    assert hermes_origin("20261130_x", "subagent-2-ab12cd34") == Origin(kind="subagent", label="2-ab12cd34")
    assert hermes_origin("20261130_x", "task-1") is None  # the process's own kind then
    assert hermes_origin("20261130_x", "sa-x") is None


@pytest.mark.hermes
def test_a_cron_jobs_card_is_labelled_with_the_jobs_name_from_hermes_job_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("cron.jobs", reason="needs hermes-agent installed")
    from cron.jobs import create_job

    from lineup_plugin.runtime.hermes.common import hermes_origin

    monkeypatch.setenv("HERMES_HOME", str(tmp_path))
    job = create_job("Summarise the day's deploys", "every 1d", name="Nightly deploy report")
    assert job["id"] != "Nightly deploy report"
    session_id = f"cron_{job['id']}_20261130_230000"  # as Hermes' scheduler names the job's session
    assert hermes_origin(session_id, "") == Origin(kind="cron", label="Nightly deploy report")
    assert hermes_origin("cron_gone0000_20261130_230000", "") == Origin(kind="cron", label="gone0000")


# ------------------------------------------------------------------ approval choices (no Hermes needed)


def test_the_approval_card_offers_hermes_choices_and_fewer_when_hermes_does() -> None:
    def offered(**flags: bool) -> list[str]:
        return [c["value"] for c in common.approval_card("rm -rf /x", "recursive delete", **flags)["choices"]]

    assert offered() == ["once", "session", "always", "deny"]
    assert offered(allow_permanent=False) == ["once", "session", "deny"]
    assert offered(smart_denied=True) == ["once", "deny"]
    card = common.approval_card("rm -rf /x", "recursive delete")
    assert card["details"] == "rm -rf /x" and "recursive delete" in card["message"]


@pytest.mark.parametrize(
    ("status", "result", "choice"),
    [
        ("completed", {"approved": True, "choice": "session"}, "session"),
        ("completed", {"approved": True, "choice": "always"}, "once"),  # not offered: the narrowest
        ("completed", {"approved": True}, "once"),  # an App with Approve and Reject only
        ("completed", {"approved": True, "choice": "deny"}, "once"),  # says approved: never more than once
        ("rejected", {"approved": False, "choice": "session"}, "deny"),  # a rejection is a deny
        ("rejected", {"approved": False}, "deny"),
        ("cancelled", {"message": "stopped"}, None),
        ("expired", {}, None),
    ],
)
def test_an_approval_answer_is_read_as_the_narrowest_hermes_choice_it_can_mean(
    status: str, result: dict[str, object], choice: str | None
) -> None:
    answer = ToolResult.model_validate({"call_id": "c1", "status": status, "result": result})
    assert common.approval_choice(answer, ["once", "session", "deny"]) == choice


def test_each_interactive_cli_session_is_a_conversation_of_its_own_not_the_apps_default(tmp_path: Path) -> None:
    # two CLIs on one App: neither lands in (nor retitles) the phone's own chat, nor each other's
    seen = []
    for session in ("cli-a", "cli-b"):
        cli = FakeCli(running=False)
        cli.session_id = session
        runtime = make_runtime(tmp_path / session, FakeContext(cli))
        feed = AppFeed(runtime)
        assert runtime.deliver_message("hello from the phone", sender="phone")  # the App takes part
        a_turn(HermesHooks(runtime), session, "a reply", platform="cli")
        seen.append(feed.conversations)
    assert seen == [
        {Conversation("hermes-cli-a", "Hermes CLI · cli-a")},
        {Conversation("hermes-cli-b", "Hermes CLI · cli-b")},
    ]


# ------------------------------------------------------------------ the interactive CLI's approval, raced by a card


class PromptingCli:
    """The interactive CLI's approval prompt as Hermes' has it: a panel state with a response queue,
    answered by the keys (:meth:`press`) or by anyone putting into that queue."""

    def __init__(self) -> None:
        import queue

        self._approval_state: dict[str, Any] | None = None
        self.opened = threading.Event()
        self.flags: dict[str, bool] = {}
        self._queue: queue.Queue[str] = queue.Queue()

    def prompt(self, command: str, description: str, **flags: bool) -> str:
        self.flags = flags
        self._approval_state = {"command": command, "description": description, "response_queue": self._queue}
        self.opened.set()
        choice = self._queue.get(timeout=30)
        self._approval_state = None
        return choice

    def press(self, choice: str) -> None:
        self.opened.wait(30)
        self._queue.put(choice)


class CardOnApp:
    """An :class:`~lineup_plugin.runtime.hermes.approval.Asker` whose card the test answers (or sees withdrawn)."""

    def __init__(self) -> None:
        self.arguments: dict[str, Any] = {}
        self.shown = threading.Event()
        self.answer: concurrent.futures.Future[ToolResult] = concurrent.futures.Future()
        self.withdrawn = threading.Event()
        #: what the card's devices were told when it was withdrawn
        self.reason = ""
        self.done = threading.Event()

    def __call__(self, arguments: dict[str, Any], *, deadline: float, is_interrupted: Any) -> ToolResult:
        self.arguments = arguments
        self.shown.set()
        try:
            while True:
                if is_interrupted():
                    self.reason = interrupt_reason(is_interrupted)
                    self.withdrawn.set()
                    return ToolResult(call_id="c1", status="cancelled", result={"message": "withdrawn"})
                try:
                    return self.answer.result(timeout=0.01)
                except concurrent.futures.TimeoutError:
                    continue
        finally:
            self.done.set()

    def reply(self, status: str, **result: Any) -> None:
        self.shown.wait(30)
        self.answer.set_result(ToolResult.model_validate({"call_id": "c1", "status": status, "result": result}))


def raced(
    cli: PromptingCli, card: CardOnApp, *, only_way: bool = False, told: list[str] | None = None, **flags: bool
) -> concurrent.futures.Future[str]:
    from lineup_plugin.runtime.hermes.approval import racing

    approve = racing(card, cli, cli.prompt, only_way=only_way, tell=None if told is None else told.append)
    pool = concurrent.futures.ThreadPoolExecutor(1)
    asked = pool.submit(approve, "rm -rf /srv/old", "recursive delete", **flags)
    pool.shutdown(wait=False)
    return asked


@pytest.mark.parametrize(
    ("status", "answer", "choice"),
    [
        ("completed", {"approved": True, "choice": "once"}, "once"),
        ("completed", {"approved": True, "choice": "session"}, "session"),
        ("completed", {"approved": True, "choice": "always"}, "always"),
        ("rejected", {"approved": False, "choice": "deny"}, "deny"),
        ("completed", {"approved": True}, "once"),  # an App with Approve and Reject only
        ("rejected", {"approved": False}, "deny"),
    ],
)
def test_a_cli_approval_answered_on_the_app_is_that_choice_for_hermes_and_closes_the_terminal_prompt(
    status: str, answer: dict[str, Any], choice: str
) -> None:
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card)
    card.reply(status, **answer)
    assert asked.result(30) == choice  # what the CLI's prompt hands to Hermes' approval gate
    assert cli._approval_state is None  # the terminal panel closed as after a key press
    assert card.arguments["details"] == "rm -rf /srv/old"
    assert [c["value"] for c in card.arguments["choices"]] == ["once", "session", "always", "deny"]


def test_a_cli_approval_answered_in_the_terminal_withdraws_the_card_saying_so() -> None:
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card)
    card.shown.wait(30)
    cli.press("session")
    assert asked.result(30) == "session"
    assert card.withdrawn.wait(30)
    assert card.reason == "answered in the terminal: Allow for this session"  # not "the agent was interrupted"


def test_a_cli_approval_the_prompts_timeout_denied_withdraws_the_card_as_expired(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lineup_plugin.runtime.hermes import approval

    monkeypatch.setattr(approval, "approval_timeout", lambda: 0.0)  # the prompt's wait is already over
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card)
    cli.press("deny")  # what Hermes' prompt answers at its timeout
    assert asked.result(30) == "deny"
    assert card.withdrawn.wait(30)
    assert card.reason == "no answer before the deadline"


def test_a_one_shot_chats_approval_that_gets_no_answer_on_the_app_is_denied_at_once() -> None:
    # hermes chat -q: nobody can answer its prompt but the App (no App connected, the card expired)
    cli, card, told = PromptingCli(), CardOnApp(), []
    asked = raced(cli, card, only_way=True, told=told)
    card.reply("failed", message="no LineUp App is connected", error="no_app")
    assert asked.result(30) == "deny"
    assert cli._approval_state is None
    # the person at the terminal was told where to answer, once: its prompt shows nothing there
    assert told == ["📱 LineUp: approve or deny on the App: rm -rf /srv/old (no answer: denied)"]


def test_an_interactive_cli_approval_says_nothing_more_on_the_terminal_its_panel_asks() -> None:
    cli, card, told = PromptingCli(), CardOnApp(), []
    asked = raced(cli, card, told=told)
    card.reply("completed", approved=True, choice="once")
    assert asked.result(30) == "once" and told == []


def test_an_interactive_cli_approval_that_gets_no_answer_on_the_app_still_waits_for_the_terminal() -> None:
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card)
    card.reply("expired", message="no answer before the deadline")
    card.done.wait(30)
    assert not asked.done()  # the terminal's prompt is still open
    cli.press("once")
    assert asked.result(30) == "once"


def test_an_app_answer_after_the_terminal_answered_is_not_taken_by_the_next_prompt() -> None:
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card)
    card.shown.wait(30)
    cli.press("deny")
    assert asked.result(30) == "deny"
    card.done.wait(30)
    # a later prompt for the same command gets only its own answer
    later = raced(cli, CardOnApp())
    cli.press("once")
    assert later.result(30) == "once"


@pytest.mark.parametrize(
    ("flags", "offered"),
    [
        ({}, ["once", "session", "always", "deny"]),
        ({"allow_permanent": False}, ["once", "session", "deny"]),
        ({"smart_denied": True}, ["once", "deny"]),
    ],
)
def test_the_cli_approval_card_offers_what_the_terminal_offers(flags: dict[str, bool], offered: list[str]) -> None:
    cli, card = PromptingCli(), CardOnApp()
    asked = raced(cli, card, **flags)
    card.shown.wait(30)
    cli.opened.wait(30)
    assert [c["value"] for c in card.arguments["choices"]] == offered
    assert cli.flags == {"allow_permanent": True, **flags}  # the terminal prompt is asked as Hermes asked
    card.reply("completed", approved=True, choice="always")
    assert asked.result(30) == ("always" if not flags else "once")  # never more than was offered


def test_the_app_answers_only_the_prompt_of_its_own_command() -> None:
    cli = PromptingCli()
    cli._approval_state = {"command": "chmod 777 x", "response_queue": cli._queue}
    assert not compat.answer_cli_approval(cli, "rm -rf /srv/old", "always")
    assert compat.answer_cli_approval(cli, "chmod 777 x", "once")
    assert cli._queue.get_nowait() == "once"
    cli._approval_state = None
    assert not compat.answer_cli_approval(cli, "chmod 777 x", "once")
