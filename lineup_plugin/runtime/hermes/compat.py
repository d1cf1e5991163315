"""Every use of Hermes beyond the plugin context's ``register_*`` methods, one named function each.

Hermes Agent has no stable API for most of what LineUp needs: its per-thread interrupt flag,
the activity heartbeat, the gateway's clarify and approval waits, the plugin manager's tables,
the interactive CLI object, the gateway's agent cache. Each reach into Hermes is here, behind a
function named for what it does, so that a Hermes upgrade that moves one breaks one function —
and ``tests/runtime/test_hermes_compat.py`` fails naming it. Nothing else in LineUp imports a
Hermes module or touches a Hermes attribute whose name starts with ``_``.

Hermes modules are imported inside the functions: the plugin's ``register(ctx)`` runs in every
Hermes process and must stay cheap.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

__all__ = [
    "answer_cli_approval",
    "approval_pending",
    "approving_cli",
    "cache_media",
    "calling_agent",
    "clarify_pending",
    "clarify_timeout",
    "cli_agent_running",
    "cli_of",
    "cli_session_id",
    "config_path",
    "config_problem",
    "cron_job_name",
    "forget_plugin_tool",
    "gateway_agents",
    "hook_cli_approval",
    "in_gateway_process",
    "interactive_cli",
    "is_interrupted",
    "load_config",
    "mark_connected",
    "mark_disconnected",
    "platform_api",
    "plugin_status",
    "quiet_cli",
    "refresh_agent_tools",
    "resolve_approval",
    "resolve_clarify",
    "session_chat",
    "set_fatal_error",
    "slash_commands_loaded",
    "store_plugin_command",
    "stream_by_default",
    "stream_cursor",
    "subagent_of",
    "takes_messages",
    "touch_activity",
]

#: what Hermes' gateway sets in its own environment (``gateway/run.py``)
GATEWAY_ENV = "_HERMES_GATEWAY"


# ------------------------------------------------------------------------- process and config


def in_gateway_process() -> bool:
    """Whether this process is Hermes' gateway (it sets ``_HERMES_GATEWAY=1`` once it starts)."""
    return os.environ.get(GATEWAY_ENV) == "1"


def interactive_cli() -> Any:
    """The interactive CLI of this process (the plugin manager's ``_cli_ref``), or None."""
    from hermes_cli.plugins import get_plugin_manager

    return getattr(get_plugin_manager(), "_cli_ref", None)


def quiet_cli() -> bool:
    """Whether this process is ``hermes chat -Q``/``--quiet`` (Hermes prints only the reply), read from ``sys.argv``.

    Hermes keeps its parsed arguments to itself; the flag is the one ``hermes_cli._parser`` defines.
    """
    for arg in sys.argv[1:]:
        if arg == "--":
            break
        short_flags = arg.startswith("-") and not arg.startswith("--") and arg[1:].isalpha()
        if arg == "--quiet" or (short_flags and "Q" in arg[1:]):
            return True
    return False


def load_config() -> Mapping[str, Any]:
    """Hermes' ``config.yaml`` as Hermes reads it (``hermes_cli.config.load_config``)."""
    from hermes_cli.config import load_config as hermes_load_config

    config = hermes_load_config()
    return config if isinstance(config, Mapping) else {}


def config_path() -> str:
    """Where Hermes reads its ``config.yaml`` (``hermes_cli.config.get_config_path``: under ``HERMES_HOME``)."""
    from hermes_cli.config import get_config_path

    return str(get_config_path())


def config_problem() -> str:
    """Why Hermes cannot parse its ``config.yaml`` ("" when it can, or there is none).

    Hermes' own reader then warns and runs on its defaults, ignoring the whole file; this parses
    it as Hermes does (``fast_safe_load``, which ``hermes_cli.config`` reads with) without that
    fallback (or the copy of the file it saves).
    """
    from hermes_cli.config import fast_safe_load, get_config_path

    try:
        with open(get_config_path(), encoding="utf-8") as file:
            fast_safe_load(file)
    except FileNotFoundError:
        return ""
    except Exception as exc:  # PyYAML's errors, a file that is not UTF-8, one that cannot be read
        return " ".join(str(exc).split())
    return ""


def plugin_status(name: str) -> tuple[str, str] | None:
    """Plugin ``name`` as ``hermes plugins list`` shows it: ``(status, source)``, or None if Hermes does not find it.

    ``status`` is ``enabled``, ``not enabled`` or ``disabled`` (``plugins.enabled`` and
    ``plugins.disabled`` of config.yaml); ``source`` is where Hermes found it (``entrypoint``
    for an installed package, ``user`` for a directory in ``$HERMES_HOME/plugins``...). The
    functions of ``hermes_cli.plugins_cmd`` behind the list command do the finding and reading.
    """
    from hermes_cli import plugins_cmd

    enabled, disabled = plugins_cmd._get_enabled_set(), plugins_cmd._get_disabled_set()
    for entry in plugins_cmd._discover_all_plugins():  # (name, version, description, source, path, key)
        found, source, key = str(entry[0]), str(entry[3]), str(entry[5])
        if name in (found, key):
            return str(plugins_cmd._plugin_status(found, enabled, disabled, key=key)), source
    return None


def clarify_timeout() -> float:
    """Hermes' ``agent.clarify_timeout`` in seconds (``tools.clarify_gateway.get_clarify_timeout``)."""
    from tools.clarify_gateway import get_clarify_timeout

    return float(get_clarify_timeout())


def session_chat() -> tuple[str, str]:
    """The gateway platform and chat of the session running on this thread (``("", "")`` outside one).

    Hermes' gateway binds them as context variables for each message it handles; its agent's
    threads (tools, hooks) inherit them.
    """
    if not in_gateway_process():
        return "", ""
    from gateway.session_context import get_session_env

    return get_session_env("HERMES_SESSION_PLATFORM", ""), get_session_env("HERMES_SESSION_CHAT_ID", "")


#: a ``delegate_task`` subagent's task id (``tools.delegate_tool``): ``sa-<index>-<hex8>`` since
#: Hermes 0.19, ``subagent-<index>-<hex8>`` before (and still its fallback)
_SUBAGENT_TASK = re.compile(r"(?:sa|subagent)-(\d+-[0-9a-f]{8})")


def subagent_of(task_id: str) -> str | None:
    """The subagent (``<index>-<hex8>``) whose tool call has Hermes task id ``task_id``, or None."""
    match = _SUBAGENT_TASK.fullmatch(task_id)
    return match[1] if match else None


def cron_job_name(job_id: str) -> str | None:
    """The name of Hermes' cron job ``job_id`` (``cron.jobs.get_job``, which reads the profile's
    ``cron/jobs.json``), or None when it has none or cannot be read."""
    try:
        from cron.jobs import get_job

        job = get_job(job_id)
    except Exception:  # a damaged jobs file, Hermes internals moved: the id will do
        return None
    name = job.get("name") if isinstance(job, Mapping) else None
    return (str(name).strip() or None) if name else None


# ------------------------------------------------------------------------- plugin context


def cli_of(ctx: Any) -> Any:
    """The interactive CLI the plugin context's manager knows (``ctx._manager._cli_ref``), or None."""
    return getattr(getattr(ctx, "_manager", None), "_cli_ref", None)


def cli_agent_running(cli: Any) -> Any:
    """The CLI's agent while it is in a turn (``cli._agent_running``), else None."""
    return getattr(cli, "agent", None) if getattr(cli, "_agent_running", False) else None


def calling_agent() -> Any:
    """The ``AIAgent`` whose tool call runs on this thread, or None (call it from the tool's handler).

    Hermes does not tell a plugin's tool handler which agent called it, and a one-shot ``hermes
    chat -q`` registers its agent nowhere a plugin can reach. Its tool executors
    (``agent/tool_executor.py``) run each call with the agent as their ``agent`` argument, on
    this thread's stack (sequential calls) or in the closure of the worker that runs it
    (concurrent ones): the nearest frame that holds an ``AIAgent`` as ``agent`` or ``self``.
    """
    frame = sys._getframe(1)
    while frame is not None:
        names = frame.f_locals
        for name in ("agent", "self"):
            value = names.get(name)
            if type(value).__name__ == "AIAgent" and callable(getattr(value, "interrupt", None)):
                return value
        frame = frame.f_back  # type: ignore[assignment]
    return None


def cli_session_id(cli: Any) -> str:
    """The session id of the interactive CLI (``cli.session_id``, which follows its agent's), or ""."""
    return str(getattr(cli, "session_id", "") or "")


def forget_plugin_tool(ctx: Any, name: str) -> None:
    """Remove tool ``name`` from Hermes' registry and from the plugin manager's tool names.

    Hermes has no ``unregister_tool``: ``tools.registry.registry.deregister`` and the manager's
    ``_plugin_tool_names`` set (which ``ctx.register_tool`` adds to) are what it would undo.
    """
    from tools.registry import registry

    registry.deregister(name)
    names = getattr(getattr(ctx, "_manager", None), "_plugin_tool_names", None)
    if isinstance(names, set):
        names.discard(name)


def slash_commands_loaded() -> bool:
    """Whether Hermes' slash-command module (``hermes_cli.commands``, with prompt_toolkit) is loaded."""
    return "hermes_cli.commands" in sys.modules


def store_plugin_command(ctx: Any, name: str, handler: Callable[[str], Any], description: str) -> bool:
    """Store a slash command as ``ctx.register_command`` would, without its built-in name check.

    Writes the entry ``register_command`` writes into the manager's ``_plugin_commands``. False
    (and nothing stored) when the context has no such table or no manifest.
    """
    commands = getattr(getattr(ctx, "_manager", None), "_plugin_commands", None)
    manifest = getattr(ctx, "manifest", None)
    if not isinstance(commands, dict) or manifest is None:
        return False
    commands[name] = {"handler": handler, "description": description, "plugin": manifest.name, "args_hint": ""}
    return True


# ------------------------------------------------------------------------- agent runs


def is_interrupted() -> bool:
    """Hermes' per-thread interrupt flag (``tools.interrupt.is_interrupted``)."""
    from tools.interrupt import is_interrupted as hermes_is_interrupted

    return bool(hermes_is_interrupted())


def touch_activity(state: dict[str, float], label: str) -> None:
    """Hermes' activity heartbeat (``tools.environments.base.touch_activity_if_due``; it rate-limits)."""
    from tools.environments.base import touch_activity_if_due

    touch_activity_if_due(state, label)


def refresh_agent_tools(agent: Any) -> None:
    """Rebuild a live agent's tool list from Hermes' registry (``tools.mcp_tool.refresh_agent_mcp_tools``)."""
    from tools.mcp_tool import refresh_agent_mcp_tools

    refresh_agent_mcp_tools(agent, quiet_mode=True)


# ------------------------------------------------------------------------- gateway


class PlatformAPI(NamedTuple):
    """The gateway classes a platform plugin builds on."""

    BasePlatformAdapter: type[Any]
    MessageEvent: type[Any]
    MessageType: Any
    SendResult: type[Any]
    Platform: type[Any]


def platform_api() -> PlatformAPI:
    """``gateway.platforms.base`` and ``gateway.config.Platform`` (imported by the gateway only)."""
    from gateway.config import Platform
    from gateway.platforms.base import BasePlatformAdapter, MessageEvent, MessageType, SendResult

    return PlatformAPI(BasePlatformAdapter, MessageEvent, MessageType, SendResult, Platform)


def mark_connected(adapter: Any) -> None:
    """Tell the gateway the platform is up (``BasePlatformAdapter._mark_connected``)."""
    adapter._mark_connected()


def mark_disconnected(adapter: Any) -> None:
    """Tell the gateway the platform is down (``BasePlatformAdapter._mark_disconnected``)."""
    adapter._mark_disconnected()


def set_fatal_error(adapter: Any, code: str, message: str, *, retryable: bool) -> None:
    """Report why the platform cannot connect (``BasePlatformAdapter._set_fatal_error``)."""
    adapter._set_fatal_error(code, message, retryable=retryable)


def stream_cursor(adapter: Any) -> str:
    """The cursor the gateway's stream consumer puts after a reply still being written.

    ``gateway_runner.config.streaming.cursor`` (default ``gateway.config.DEFAULT_STREAMING_CURSOR``).
    """
    streaming = getattr(getattr(getattr(adapter, "gateway_runner", None), "config", None), "streaming", None)
    cursor = getattr(streaming, "cursor", None)
    if isinstance(cursor, str):
        return cursor
    from gateway.config import DEFAULT_STREAMING_CURSOR

    return str(DEFAULT_STREAMING_CURSOR)


def stream_by_default(platform: str) -> None:
    """Stream replies on ``platform`` unless the user's config says otherwise.

    Adds ``streaming: True`` to the platform's built-in display defaults
    (``gateway.display_config._PLATFORM_DEFAULTS``). The gateway reads a per-platform value in
    place of the top-level ``streaming.enabled``; ``display.platforms.<platform>.streaming: false``
    in the user's config still turns it off.
    """
    from gateway.display_config import _PLATFORM_DEFAULTS

    _PLATFORM_DEFAULTS.setdefault(platform, {}).setdefault("streaming", True)


def cache_media(data: bytes, name: str, mime: str) -> tuple[str, str, str]:
    """Keep an App file where Hermes keeps platform media (``gateway.platforms.base.cache_media_bytes``).

    Returns ``(path, media type, kind)``, kind being ``image``, ``video``, ``audio`` or
    ``document``. Raises ValueError when Hermes refuses the bytes (an "image" that is not one).
    """
    from gateway.platforms.base import cache_media_bytes

    cached = cache_media_bytes(data, filename=name, mime_type=mime)
    if cached is None:
        raise ValueError(f"{name!r} is not a valid {mime} file")
    return str(cached.path), str(cached.media_type), str(cached.kind)


def takes_messages(adapter: Any) -> bool:
    """Whether the gateway has given the adapter its message handler (``_message_handler``)."""
    return bool(getattr(adapter, "_message_handler", None))


def gateway_agents(adapter: Any, platform: str) -> list[Any]:
    """The gateway's cached agents of ``platform`` sessions (``gateway_runner._agent_cache``)."""
    runner = getattr(adapter, "gateway_runner", None)
    cache = getattr(runner, "_agent_cache", None)
    lock = getattr(runner, "_agent_cache_lock", None)
    if not cache or lock is None:
        return []
    with lock:
        entries = [entry for key, entry in cache.items() if f":{platform}:" in str(key)]
    agents = [entry[0] if isinstance(entry, tuple) else entry for entry in entries]
    return [agent for agent in agents if agent is not None]


def resolve_clarify(clarify_id: str, answer: str) -> None:
    """Answer a gateway clarify (``tools.clarify_gateway.resolve_gateway_clarify``)."""
    from tools.clarify_gateway import resolve_gateway_clarify

    resolve_gateway_clarify(clarify_id, answer)


def clarify_pending(clarify_id: str, session_key: str) -> bool:
    """Whether gateway clarify ``clarify_id`` still waits (exactly, through the module's ``_entries``)."""
    from tools import clarify_gateway

    entries = getattr(clarify_gateway, "_entries", None)
    if isinstance(entries, dict):
        return clarify_id in entries
    return bool(clarify_gateway.has_pending(session_key))


def resolve_approval(session_key: str, choice: str) -> None:
    """Answer a dangerous-command approval: ``once``, ``session``, ``always`` or ``deny``
    (``tools.approval.resolve_gateway_approval``; Hermes records a session or permanent approval itself)."""
    from tools.approval import resolve_gateway_approval

    resolve_gateway_approval(session_key, choice)


def approval_pending(session_key: str) -> bool:
    """Whether an approval of the session still blocks (``tools.approval.has_blocking_approval``)."""
    from tools.approval import has_blocking_approval

    return bool(has_blocking_approval(session_key))


# ------------------------------------------------------------------------- interactive CLI approval


def hook_cli_approval(cli: Any, wrap: Callable[[Callable[..., str]], Callable[..., str]]) -> None:
    """Send the interactive CLI's dangerous-command approvals through ``wrap(cli's prompt)``.

    Hermes asks the CLI user through the approval callback the CLI registers for its agent's
    thread at each turn (``tools.terminal_tool.set_approval_callback(cli._approval_callback)``);
    its answer (``once``, ``session``, ``always``, ``deny``) is what Hermes' own approval gate then
    records. The CLI's ``_approval_callback`` is replaced on the instance (so every later turn,
    and the computer-use prompt, registers the wrapper), and the current thread's callback too
    when it is the CLI's own (a turn already running; a subagent's thread keeps its policy).
    Done once per CLI; calling it again only updates the thread's callback.
    """
    current = getattr(cli, "_approval_callback", None)
    if not callable(current):
        return
    from tools.terminal_tool import _get_approval_callback, set_approval_callback

    original = getattr(current, "lineup_wraps", None)
    if original is None:
        original = current
        wrapped = wrap(original)
        wrapped.lineup_wraps = original  # type: ignore[attr-defined]
        cli._approval_callback = wrapped
    else:
        wrapped = current
    if _get_approval_callback() == original:
        set_approval_callback(wrapped)


def approving_cli() -> Any:
    """The CLI whose approval prompt is registered on this thread, or None: how a one-shot
    ``hermes chat -q`` (which gives its plugins no CLI, ``_cli_ref`` staying None) is found.

    Hermes' single-query path registers the CLI's own ``_approval_callback`` for its agent's
    thread (``tools.terminal_tool.set_approval_callback``), as the interactive CLI does: this is
    that bound method's ``HermesCLI`` (seen through LineUp's wrapper once it is hooked).
    """
    from tools.terminal_tool import _get_approval_callback

    callback = _get_approval_callback()
    callback = getattr(callback, "lineup_wraps", callback)
    cli = getattr(callback, "__self__", None)
    if getattr(callback, "__name__", "") != "_approval_callback" or type(cli).__name__ != "HermesCLI":
        return None
    return cli


def answer_cli_approval(cli: Any, command: str, choice: str) -> bool:
    """Answer the CLI's open approval prompt for ``command`` with ``choice`` as its keys would.

    The prompt waits on ``cli._approval_state["response_queue"]`` (the queue its key bindings
    put the picked choice into) and then returns that choice, closing its panel. False (nothing
    answered) when no prompt for ``command`` is open.
    """
    state = getattr(cli, "_approval_state", None)
    if not isinstance(state, dict) or state.get("command") != command:
        return False
    waiting = state.get("response_queue")
    if waiting is None:
        return False
    waiting.put(choice)
    return True
