"""The Hermes runtime's own logic, without starting Hermes: settings section, cards, server ownership."""

from __future__ import annotations

import json
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import ConfigError
from lineup_plugin.hub import failure
from lineup_plugin.protocol.messages import ToolResult
from lineup_plugin.runtime.hermes.service import TOOLSET, HermesService, clarify_answer, clarify_card, plugin_section
from lineup_plugin.runtime.lock import ServerLock
from lineup_plugin.transports.direct.server import DirectServer


class FakeContext:
    """The part of Hermes' PluginContext LineUp uses, recording every registration."""

    def __init__(self) -> None:
        self.tools: dict[str, dict[str, Any]] = {}

    def register_tool(self, **entry: Any) -> None:
        self.tools[entry["name"]] = entry


@pytest.fixture
def service(tmp_path: Path) -> Iterator[HermesService]:
    settings = Settings(host="127.0.0.1", port=0, token="service-test-token-0123", data_dir=tmp_path, store="memory")
    svc = HermesService(FakeContext(), settings, load_registry(load_entrypoints=False), role="process")
    yield svc
    svc.stop()


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


def test_every_tool_is_registered_in_the_lineup_toolset_with_a_bare_schema(service: HermesService) -> None:
    service.bridge.sync()
    tools: dict[str, dict[str, Any]] = service.ctx.tools
    assert set(tools) == {"choice", "confirm", "input", "calculator", "canvas"}
    entry = tools["choice"]
    assert entry["toolset"] == TOOLSET
    assert set(entry["schema"]) == {"name", "description", "parameters"}


def test_the_hermes_handler_takes_hermes_context_arguments_and_returns_json(service: HermesService) -> None:
    service.bridge.sync()
    other = ServerLock(service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        text = service.ctx.tools["choice"]["handler"]({"question": "?", "options": ["a"]}, session_id="s", task_id="t")
    finally:
        other.release()
    body = json.loads(text)
    assert body["status"] == "failed" and body["result"]["error"] == "not_owner"


def test_a_call_in_a_process_that_does_not_own_the_server_fails_naming_the_owner(service: HermesService) -> None:
    other = ServerLock(service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        result = service.call_blocking("choice", {}, is_interrupted=lambda: False, heartbeat=lambda: None, deadline=1)
        assert not service.serving
    finally:
        other.release()
    assert result.status == "failed"
    assert (
        "served by another Hermes process (pid" in result.result["message"] and "(gateway)" in result.result["message"]
    )


def test_the_first_process_to_need_the_server_owns_it_until_it_stops(service: HermesService) -> None:
    assert service.ensure_started("test") and service.ensure_started("again")
    assert service.runner is not None and isinstance(service.runner.transport, DirectServer)
    port = service.runner.transport.port
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert not ServerLock(service.settings.data_dir).acquire("cli")
    service.stop()
    assert not service.serving
    later = ServerLock(service.settings.data_dir)
    assert later.acquire("cli")
    later.release()


def test_no_app_connected_is_a_clear_failure_not_a_hidden_tool(service: HermesService) -> None:
    result = service.call_blocking(
        "choice", {"question": "?", "options": ["a"]}, is_interrupted=lambda: False, heartbeat=lambda: None, deadline=5
    )
    assert result.status == "failed"
    assert result.result == failure("x", "choice", "failed", result.result["message"], error="no_app").result
    assert "no LineUp App is connected" in result.result["message"]


def test_lineup_command_serves_the_app_and_shows_the_link(service: HermesService) -> None:
    reply = service.lineup_command()
    assert service.serving and service.runner is not None and isinstance(service.runner.transport, DirectServer)
    assert f"direct mode: the App at {service.runner.transport.url} (0 devices connected)" in reply
    assert service.runner.transport.connect_link in reply


def test_lineup_command_names_the_process_that_serves_the_app(service: HermesService) -> None:
    other = ServerLock(service.settings.data_dir)
    assert other.acquire("gateway")
    try:
        reply = service.lineup_command()
    finally:
        other.release()
    assert "served by another Hermes process (pid" in reply and "(gateway)" in reply


def test_the_lineup_command_is_stored_as_hermes_would_store_it() -> None:
    from hermes_cli.commands import resolve_command
    from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest

    from lineup_plugin.runtime.hermes.service import register_command

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
