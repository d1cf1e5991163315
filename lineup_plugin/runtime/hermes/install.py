"""Setting LineUp up in a Hermes process: what the plugin's ``register(ctx)`` runs.

:func:`install` runs in every Hermes process (CLI, gateway, cron...). It reads LineUp's settings
from ``plugins.entries.lineup`` of Hermes' ``config.yaml`` overlaid with ``LINEUP_*`` variables,
registers every LineUp tool in the ``lineup`` toolset, the session hooks, the ``/lineup``
command and the ``lineup`` messaging platform. It opens no port, and stays cheap: settings the
fast check accepts are validated (with pydantic) on first use, and the built-in tools are
registered from their plain schemas unless a third-party LineUp plugin is installed.

The server (hub + transport on their own event-loop thread) starts lazily, in one process only
(:class:`~lineup_plugin.runtime.service.LineUpService`):

- in the gateway, when the ``lineup`` platform adapter connects;
- in the interactive CLI, when a session starts (or on ``/lineup``);
- anywhere else, on the first LineUp tool call (or ``/lineup``).

Whichever process comes first takes an OS file lock in the data directory and owns the server;
the others answer tool calls with a ``failed`` result naming the owner. The server stops when
the gateway disconnects the platform, when the CLI shuts its session down, or at exit.

A program that drives an ``AIAgent`` itself lets App text reach it with
``installed().attach(agent)`` (see :meth:`HermesRuntime.attach
<lineup_plugin.runtime.hermes.runtime.HermesRuntime.attach>`).
"""

from __future__ import annotations

import atexit
import functools
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...config.check import default_data_dir, given_settings, surely_valid
from ...plugins import builtin_function_schemas, cached_function_schemas
from . import compat
from .common import APP_CHAT, EMOJI, PLATFORM, plugin_section
from .hooks import COMMAND, COMMAND_HELP, HOOKS, HermesHooks
from .runtime import HermesRuntime

if TYPE_CHECKING:
    from ...config.settings import Settings
    from ...tools.registry import Registry

PLATFORM_HINT = (
    "You are talking with the user through the LineUp App on their phone or browser. Besides plain "
    "text you can ask them with the LineUp tools (choice, confirm, input, canvas, calculator and any "
    "tool their App declares): each shows as a card they answer with a tap, and you get a structured "
    "result with a status (completed, rejected, cancelled, expired, unsupported or failed)."
)

_installed: HermesRuntime | None = None
_installed_lock = threading.Lock()


def installed() -> HermesRuntime | None:
    """The runtime :func:`install` set up in this process, if Hermes enabled the plugin."""
    return _installed


def install(ctx: Any, *, environ: Mapping[str, str] | None = None) -> HermesRuntime:
    """Set LineUp up in this Hermes process (the body of the plugin's ``register(ctx)``).

    Raises ConfigError naming the setting when a setting is bad; Hermes then reports the plugin
    as failed to load (``hermes plugins list``) and registers nothing of it.
    """
    global _installed
    with _installed_lock:
        runtime = _installed
        if runtime is None:
            settings, registry, tools = _settings_and_tools(environ)
            runtime = HermesRuntime(ctx, settings, registry, tools=tools)
            atexit.register(runtime.service.stop)
        else:  # a forced re-discovery (Hermes cleared its hooks and tool list): keep the server
            runtime.ctx = ctx
        runtime.service.bridge.sync(force=True)
        hooks = HermesHooks(runtime)
        for hook in HOOKS:
            ctx.register_hook(hook, getattr(hooks, hook))
        register_command(ctx, COMMAND, hooks.lineup_command, description=COMMAND_HELP)
        register_platform(ctx, runtime)
        _installed = runtime
    return runtime


def _settings_and_tools(
    environ: Mapping[str, str] | None,
) -> tuple[Settings | Callable[[], Settings], Registry | Callable[[], Registry], list[dict[str, Any]] | None]:
    """The settings and registry of the service, as cheap as a Hermes start allows.

    Settings the fast check accepts are validated by the model when first used; any others right
    now, so that a bad one raises the ConfigError naming it. The registry is loaded now only if a
    third-party plugin is installed (its tools are known, and checked, only through it).
    """
    given = given_settings(plugin_section(), environ)
    settings = functools.partial(_validated, given) if surely_valid(given) else _validated(given)
    data_dir = Path(given["data_dir"]) if isinstance(given.get("data_dir"), str) else default_data_dir()
    tools = builtin_function_schemas() or cached_function_schemas(data_dir)
    from ...plugins import load_registry, remember_function_schemas

    if tools is not None:
        return settings, load_registry, tools
    registry = load_registry()  # a third-party plugin whose tools this data dir has not seen yet
    remember_function_schemas(data_dir, registry.function_schemas())
    return settings, registry, None


def _validated(given: dict[str, Any]) -> Settings:
    from ...config.settings import validated_settings

    return validated_settings(given)


def register_command(ctx: Any, name: str, handler: Callable[[str], str], *, description: str) -> None:
    """``ctx.register_command``, without importing Hermes' slash-command module when nothing has yet.

    Hermes' ``register_command`` imports ``hermes_cli.commands`` (and prompt_toolkit: 75-150 ms)
    only to refuse the names of its built-in commands, and skips that check when the module is
    not available. Every reader of plugin commands (the CLI, the gateway) loads that module first,
    and the interactive CLI has it loaded before plugins. Elsewhere the entry Hermes would store is
    stored directly (LineUp's command is no built-in one: a test checks it).
    """
    if compat.slash_commands_loaded() or not compat.store_plugin_command(ctx, name, handler, description):
        ctx.register_command(name, handler, description=description)


def register_platform(ctx: Any, runtime: HermesRuntime) -> None:
    """Register the ``lineup`` gateway platform; its adapter module is imported only by the gateway.

    With no ``is_connected`` check, the gateway enables the platform whenever the plugin is
    enabled (``platforms.lineup.enabled: false`` turns it off). The home channel is the App chat,
    so cron jobs can ``deliver: lineup``.
    """

    def make_adapter(config: Any) -> Any:
        from .platform import LineUpAdapter

        return LineUpAdapter(config, runtime)

    ctx.register_platform(
        name=PLATFORM,
        label="LineUp App",
        adapter_factory=make_adapter,
        check_fn=lambda: True,
        env_enablement_fn=lambda: {"home_channel": {"chat_id": APP_CHAT, "name": "LineUp App"}},
        emoji=EMOJI,
        platform_hint=PLATFORM_HINT,
        allow_update_command=False,
    )


def uninstall() -> None:
    """Stop this process's server and forget the runtime (tests; Hermes has no plugin unload)."""
    global _installed
    with _installed_lock:
        runtime, _installed = _installed, None
    if runtime is not None:
        runtime.service.stop()
        for name in runtime.service.bridge.names:
            runtime.unregister_tool(name)
