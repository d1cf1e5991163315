"""Every Hermes internal LineUp uses is still in the installed Hermes; none is used outside compat.py.

Each function of :mod:`lineup_plugin.runtime.hermes.compat` names what of Hermes it relies on
(:data:`RELIES_ON`); one test per function checks those in a fresh interpreter (importing Hermes
here would fix its home directory before the end-to-end tests set theirs), so a Hermes upgrade
that drops one fails a test named after the compat function, naming what is gone.
"""

from __future__ import annotations

import ast
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin.runtime.hermes import compat

PACKAGE = Path(compat.__file__).resolve().parents[2]

#: what each compat function relies on. ``module:name.attr`` is an attribute of a module;
#: ``module:Class().attr`` an attribute of an instance made without arguments;
#: ``module:Class.self.attr`` an attribute the class (or a base) assigns to ``self``;
#: ``module:Class.method(param)`` a method taking ``param``; ``module::text`` text in the module's source.
RELIES_ON: dict[str, list[str]] = {
    "answer_cli_approval": [
        "cli:HermesCLI.self._approval_state",
        'cli::"response_queue": response_queue,',
        "cli::result = response_queue.get(timeout=1)",
    ],
    "approval_pending": ["tools.approval:has_blocking_approval"],
    "approving_cli": [
        "tools.terminal_tool:_get_approval_callback",
        "cli:HermesCLI._approval_callback",
        # hermes chat -q: _init_agent registers the CLI's prompt for the thread that runs -Q's agent;
        # cli.chat() registers it again for the worker thread of its turn
        "hermes_cli.cli_agent_setup_mixin::self._install_tool_callbacks()",
        "cli::set_approval_callback(self._approval_callback)",
    ],
    "cache_media": [
        "gateway.platforms.base:cache_media_bytes(filename)",
        "gateway.platforms.base:cache_media_bytes(mime_type)",
        "gateway.platforms.base::class CachedMedia",
    ],
    "clarify_pending": ["tools.clarify_gateway:_entries", "tools.clarify_gateway:has_pending"],
    "clarify_timeout": ["tools.clarify_gateway:get_clarify_timeout"],
    "calling_agent": [
        "run_agent:AIAgent.interrupt(message)",
        "agent.tool_executor::def execute_tool_calls_sequential(agent,",
        "agent.tool_executor::def execute_tool_calls_concurrent(agent,",
        "agent.tool_executor::function_result = _ra().handle_function_call(",
    ],
    "cli_agent_running": ["cli:HermesCLI.self._agent_running", "cli:HermesCLI.self.agent"],
    "cli_session_id": ["cli:HermesCLI.self.session_id"],
    "config_path": ["hermes_cli.config:get_config_path"],
    "config_problem": ["hermes_cli.config:get_config_path", "hermes_cli.config:fast_safe_load"],
    "cron_job_name": [
        "cron.jobs:get_job",
        "cron.scheduler::_cron_session_id = f\"cron_{job_id}_{_hermes_now().strftime('%Y%m%d_%H%M%S')}\"",
    ],
    "cli_of": ["hermes_cli.plugins:PluginContext.self._manager", "hermes_cli.plugins:PluginManager()._cli_ref"],
    "forget_plugin_tool": [
        "tools.registry:registry.deregister",
        "hermes_cli.plugins:PluginManager()._plugin_tool_names",
    ],
    "gateway_agents": [
        "gateway.platforms.base:BasePlatformAdapter.gateway_runner",
        "gateway.run:GatewayRunner.self._agent_cache",
        "gateway.run:GatewayRunner.self._agent_cache_lock",
    ],
    "hook_cli_approval": [
        "tools.terminal_tool:set_approval_callback",
        "tools.terminal_tool:_get_approval_callback",
        "cli:HermesCLI._approval_callback(allow_permanent)",
        "cli:HermesCLI._approval_callback(smart_denied)",
        "cli::set_approval_callback(self._approval_callback)",
    ],
    "in_gateway_process": [f'gateway.run::os.environ["{compat.GATEWAY_ENV}"] = "1"'],
    "interactive_cli": ["hermes_cli.plugins:get_plugin_manager", "hermes_cli.plugins:PluginManager()._cli_ref"],
    "is_interrupted": ["tools.interrupt:is_interrupted"],
    "load_config": ["hermes_cli.config:load_config"],
    "mark_connected": ["gateway.platforms.base:BasePlatformAdapter._mark_connected"],
    "mark_disconnected": ["gateway.platforms.base:BasePlatformAdapter._mark_disconnected"],
    "platform_api": [
        "gateway.platforms.base:BasePlatformAdapter.build_source",
        "gateway.platforms.base:BasePlatformAdapter.handle_message",
        "gateway.platforms.base:MessageEvent",
        "gateway.platforms.base:MessageType.TEXT",
        "gateway.platforms.base:MessageType.PHOTO",
        "gateway.platforms.base:MessageType.DOCUMENT",
        "gateway.platforms.base::media_urls: List[str]",
        "gateway.platforms.base::media_types: List[str]",
        "gateway.platforms.base:BasePlatformAdapter.edit_message(finalize)",
        "gateway.platforms.base:BasePlatformAdapter.REQUIRES_EDIT_FINALIZE",
        "gateway.platforms.base:BasePlatformAdapter.send_image_file(image_path)",
        "gateway.platforms.base:BasePlatformAdapter.send_document(file_name)",
        "gateway.platforms.base:BasePlatformAdapter.send_video(video_path)",
        'gateway.run::getattr(_adapter, "SUPPORTS_MESSAGE_EDITING", True)',
        "gateway.platforms.base:SendResult",
        "gateway.config:Platform",
    ],
    "plugin_status": [
        "hermes_cli.plugins_cmd:_discover_all_plugins",
        "hermes_cli.plugins_cmd:_get_enabled_set",
        "hermes_cli.plugins_cmd:_get_disabled_set",
        "hermes_cli.plugins_cmd:_plugin_status(key)",
        "hermes_cli.plugins_cmd::return list(seen.values())",
        "hermes_cli.plugins_cmd::(name, version, description, source, dir_path, key)",
    ],
    "session_chat": ["gateway.session_context:get_session_env", 'gateway.session_context::"HERMES_SESSION_CHAT_ID"'],
    "quiet_cli": ['hermes_cli._parser::"-Q"', 'hermes_cli._parser::"--quiet"'],
    "refresh_agent_tools": ["tools.mcp_tool:refresh_agent_mcp_tools(quiet_mode)"],
    "resolve_approval": ["tools.approval:resolve_gateway_approval"],
    "resolve_clarify": ["tools.clarify_gateway:resolve_gateway_clarify"],
    "set_fatal_error": ["gateway.platforms.base:BasePlatformAdapter._set_fatal_error(retryable)"],
    "slash_commands_loaded": ["hermes_cli.commands:resolve_command"],
    "stream_by_default": [
        "gateway.display_config:_PLATFORM_DEFAULTS",
        "gateway.display_config::plat_defaults.get(setting)",
        "gateway.run::_plat_streaming is None",
    ],
    "stream_cursor": [
        "gateway.config:DEFAULT_STREAMING_CURSOR",
        "gateway.config:StreamingConfig().cursor",
        "gateway.run:GatewayRunner.self.config",
        "gateway.platforms.base:BasePlatformAdapter.gateway_runner",
    ],
    "store_plugin_command": [
        "hermes_cli.plugins:PluginManager()._plugin_commands",
        "hermes_cli.plugins:PluginContext.self.manifest",
    ],
    "subagent_of": ['tools.delegate_tool::subagent_id = f"sa-{task_index}-{_uuid.uuid4().hex[:8]}"'],
    "takes_messages": ["gateway.platforms.base:BasePlatformAdapter.self._message_handler"],
    "touch_activity": ["tools.environments.base:touch_activity_if_due"],
}

CHECK = r"""
import importlib, importlib.util, inspect, json, re, sys

def source_of(cls):
    return "\n".join(inspect.getsource(base) for base in cls.__mro__ if base.__module__.split(".")[0] != "builtins")

def holds(requirement):
    module_name, _, path = requirement.partition(":")
    if path.startswith(":"):
        spec = importlib.util.find_spec(module_name)
        return spec is not None and path[1:] in open(spec.origin, encoding="utf-8").read()
    value = importlib.import_module(module_name)
    match = re.fullmatch(r"(\w+)\.self\.(\w+)", path)
    if match:
        return re.search(rf"self\.{match[2]}\b\s*(:[^=]+)?=", source_of(getattr(value, match[1]))) is not None
    param = re.fullmatch(r"(.+)\((\w+)\)", path)
    if param:
        path = param[1]
    for part in path.split("."):
        if part.endswith("()"):
            value = getattr(value, part[:-2])()
        else:
            value = getattr(value, part)
    return param is None or param[2] in inspect.signature(value).parameters

missing = {}
for function, requirements in json.loads(sys.argv[1]).items():
    gone = []
    for requirement in requirements:
        try:
            ok = holds(requirement)
        except Exception:
            ok = False
        if not ok:
            gone.append(requirement)
    missing[function] = gone
print(json.dumps(missing))
"""


@pytest.fixture(scope="module")
def missing(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    """What of :data:`RELIES_ON` the installed Hermes lacks, by compat function (checked in a fresh interpreter)."""
    pytest.importorskip("hermes_cli", reason="needs hermes-agent installed")
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "_HERMES"))}
    environ["HERMES_HOME"] = str(tmp_path_factory.mktemp("hermes-home"))
    done = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(RELIES_ON)],
        env=environ,
        capture_output=True,
        text=True,
        timeout=180,
        check=True,
    )
    report: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


@pytest.mark.parametrize("function", sorted(RELIES_ON))
def test_hermes_still_has_what_compat_uses(function: str, missing: dict[str, list[str]]) -> None:
    gone = missing[function]
    if gone:
        pytest.fail(f"compat.{function} relies on {', '.join(gone)}, which the installed Hermes no longer has")


def test_every_compat_function_says_what_it_relies_on() -> None:
    functions = {
        name
        for name, value in vars(compat).items()
        if inspect.isfunction(value) and value.__module__ == compat.__name__ and not name.startswith("_")
    }
    assert functions == set(compat.__all__) == set(RELIES_ON)


def test_a_missing_internal_fails_naming_it(tmp_path: Path) -> None:
    environ = {**os.environ, "HERMES_HOME": str(tmp_path)}
    checks = {"is_interrupted": ["tools.interrupt:is_interrupted_gone"], "load_config": ["hermes_cli.config:nope()"]}
    done = subprocess.run(
        [sys.executable, "-c", CHECK, json.dumps(checks)], env=environ, capture_output=True, text=True, check=True
    )
    assert json.loads(done.stdout) == checks


# ------------------------------------------------------------------------------ outside compat.py

#: the top-level modules of the hermes-agent distribution
HERMES_MODULES = {"hermes_cli", "gateway", "tools", "run_agent", "model_tools", "agent", "cli", "toolsets", "cron"}
#: the LineUp modules that work with Hermes objects
ADAPTER_FILES = sorted({*(PACKAGE / "runtime").rglob("*.py"), PACKAGE / "hermes.py"} - {Path(compat.__file__)})


def internals_used(tree: ast.AST) -> list[str]:
    """Where a module imports Hermes, or touches a private attribute of anything but ``self``/``cls``."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            if not getattr(node, "level", 0):
                found += [f"line {node.lineno}: import {n}" for n in names if n.split(".")[0] in HERMES_MODULES]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            owner = node.value
            if not (isinstance(owner, ast.Name) and owner.id in {"self", "cls"}):
                found.append(f"line {node.lineno}: .{node.attr}")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in {"getattr", "setattr", "hasattr", "delattr"}
            and len(node.args) > 1
        ):
            name = node.args[1]
            if isinstance(name, ast.Constant) and isinstance(name.value, str) and _private(name.value):
                found.append(f"line {node.lineno}: {node.func.id}(..., {name.value!r})")
    return found


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


@pytest.mark.parametrize("path", ADAPTER_FILES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_hermes_internal_is_used_outside_compat(path: Path) -> None:
    assert internals_used(ast.parse(path.read_text(encoding="utf-8"))) == []


def test_the_rule_sees_imports_private_attributes_and_getattr() -> None:
    source = "import tools.x\nfrom gateway import y\nctx._manager\ngetattr(ctx, '_cli_ref')\nself._own\nx.__dict__\n"
    found: list[Any] = internals_used(ast.parse(source))
    assert found == [
        "line 1: import tools.x",
        "line 2: import gateway",
        "line 3: ._manager",
        "line 4: getattr(..., '_cli_ref')",
    ]
