"""The Hermes Agent runtime: LineUp tools as native Hermes tools, the App as a Hermes platform.

:func:`install` is what the plugin's ``register(ctx)`` runs, in every Hermes process (CLI,
gateway, cron...). It reads LineUp's settings from ``plugins.entries.lineup`` of Hermes'
``config.yaml`` overlaid with ``LINEUP_*`` variables, registers every LineUp tool in the
``lineup`` toolset, the session hooks and the ``lineup`` messaging platform. It opens no port.

The server (hub + transport on their own event-loop thread) starts lazily, in one process only:

- in the gateway, when the ``lineup`` platform adapter connects;
- in the interactive CLI, when a session starts (or on ``/lineup``);
- anywhere else, on the first LineUp tool call (or ``/lineup``).

Whichever process comes first takes an OS file lock in the data directory and owns the server;
the others answer tool calls with a ``failed`` result naming the owner. The server stops when
the gateway disconnects the platform, when the CLI shuts its session down, or at exit.

With no App connected every tool stays visible to the model, and a call ends ``failed`` with
"no LineUp App is connected; ask the user to open the App" (hiding tools would change the tool
list, and the prompt cache with it, each time a phone locks its screen, and the model could
not tell the user why it cannot ask).
"""

from __future__ import annotations

import atexit
import functools
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Coroutine, Mapping
from typing import TYPE_CHECKING, Any

from ...config.check import given_settings, surely_valid
from ...errors import ConfigError
from ...plugins import builtin_function_schemas
from ..base import AgentRuntime, ToolBridge, ToolHandler
from ..lock import Owner, ServerLock

if TYPE_CHECKING:
    from ...config.settings import Settings
    from ...protocol.messages import AgentState, ToolResult
    from ...tools.registry import Registry
    from ..loop import Runner

log = logging.getLogger(__name__)

#: the plugin's name in Hermes (``plugins.enabled``, ``plugins.entries.<name>``, platform, toolset)
PLUGIN = "lineup"
TOOLSET = "lineup"
PLATFORM = "lineup"
EMOJI = "📱"
#: the App chat and user as the gateway sees them (LineUp has one human per agent)
APP_CHAT = "app"
APP_USER = "lineup-user"
#: how long the App's stop waits for the gateway to run ``/stop`` before closing the cards anyway
STOP_TIMEOUT = 15.0

#: the Hermes hooks LineUp registers (methods of :class:`HermesService` of the same names)
HOOKS = ("on_session_start", "pre_llm_call", "post_llm_call", "on_session_end", "on_session_finalize")

_service: HermesService | None = None
_service_lock = threading.Lock()


def service() -> HermesService | None:
    """The service :func:`install` created in this process, if the plugin is enabled."""
    return _service


# --------------------------------------------------------------------------- configuration


def plugin_section(config: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """LineUp's section of Hermes' config: ``plugins.entries.lineup`` (``{}`` when absent).

    This is the place Hermes gives every plugin for its own settings (Hermes itself reads
    ``allow_tool_override`` and ``llm`` from it). Raises ConfigError when it is not a mapping.
    """
    if config is None:
        from hermes_cli.config import load_config

        config = load_config()
    plugins = config.get("plugins") if isinstance(config, Mapping) else None
    entries = plugins.get("entries") if isinstance(plugins, Mapping) else None
    section = entries.get(PLUGIN) if isinstance(entries, Mapping) else None
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ConfigError(f"lineup setting 'plugins.entries.{PLUGIN}': expected a mapping of settings")
    # keys Hermes reads for every plugin are not LineUp settings
    return {key: value for key, value in section.items() if key not in {"allow_tool_override", "llm"}}


def process_role() -> str:
    """What kind of Hermes process this is: ``gateway``, ``cli`` (interactive) or ``process``."""
    if os.environ.get("_HERMES_GATEWAY") == "1":
        return "gateway"
    try:
        from hermes_cli.plugins import get_plugin_manager

        if getattr(get_plugin_manager(), "_cli_ref", None) is not None:
            return "cli"
    except Exception:  # pragma: no cover - Hermes internals moved
        pass
    return "process"


# ------------------------------------------------------------------------------- runtime


class HermesRuntime(AgentRuntime):
    """:class:`AgentRuntime` on Hermes' plugin API (``ctx``) and its agent objects."""

    name = "hermes"

    def __init__(self, ctx: Any, owner: HermesService) -> None:
        self.ctx = ctx
        self._service = weakref.proxy(owner)
        self._touch = threading.local()

    # tools -----------------------------------------------------------------------------

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Register ``schema`` in Hermes' tool registry (toolset ``lineup``) through ``ctx``."""

        def hermes_handler(args: dict[str, Any], **_context: Any) -> str:
            return handler(args if isinstance(args, dict) else {})

        hermes_handler.__name__ = f"lineup_{schema['name']}"
        self.ctx.register_tool(
            name=schema["name"],
            toolset=TOOLSET,
            schema=schema,
            handler=hermes_handler,
            description=schema.get("description", ""),
            emoji=EMOJI,
        )

    def unregister_tool(self, name: str) -> None:
        """Remove ``name`` from Hermes' tool registry."""
        from tools.registry import registry

        registry.deregister(name)
        manager = getattr(self.ctx, "_manager", None)
        names = getattr(manager, "_plugin_tool_names", None)
        if isinstance(names, set):
            names.discard(name)

    # waiting ---------------------------------------------------------------------------

    def is_interrupted(self) -> bool:
        """Hermes' per-thread interrupt flag (set by ``AIAgent.interrupt`` for its worker thread)."""
        from tools.interrupt import is_interrupted

        return bool(is_interrupted())

    def heartbeat(self, label: str, started: float) -> None:
        """Hermes' activity heartbeat (``touch_activity_if_due``), at most every 10 s per thread."""
        from tools.environments.base import touch_activity_if_due

        state = getattr(self._touch, "state", None)
        if state is None or state.get("start") != started:
            state = {"last_touch": started, "start": started}
            self._touch.state = state
        touch_activity_if_due(state, label)

    # messages and runs -----------------------------------------------------------------

    def _cli(self) -> Any:
        return getattr(getattr(self.ctx, "_manager", None), "_cli_ref", None)

    def deliver_message(self, text: str, *, sender: str) -> bool:
        """Gateway: a message in the App user's session. CLI: ``ctx.inject_message``. Else an attached agent."""
        adapter = self._service.adapter
        if adapter is not None:
            return bool(adapter.deliver_text(text, sender))
        if self._cli() is not None:
            return bool(self.ctx.inject_message(text))
        agent = self._service.running_agent()
        if agent is not None:
            agent.interrupt(text)
            return True
        return bool(self._service.idle_message(text))

    def interrupt(self, message: str | None = None) -> bool:
        """Gateway: ``/stop`` in the App user's session. CLI or attached agent: ``AIAgent.interrupt``."""
        adapter = self._service.adapter
        if adapter is not None:
            return bool(adapter.deliver_text("/stop", "lineup"))
        cli = self._cli()
        agent = getattr(cli, "agent", None) if cli is not None and getattr(cli, "_agent_running", False) else None
        agent = agent or self._service.running_agent()
        if agent is None:
            return False
        agent.interrupt(message)
        return True

    def steer(self, text: str) -> bool:
        """Gateway: ``/steer`` in the App user's session. CLI or attached agent: ``AIAgent.steer``."""
        adapter = self._service.adapter
        if adapter is not None:
            return bool(adapter.deliver_text(f"/steer {text}", "lineup"))
        cli = self._cli()
        agent = getattr(cli, "agent", None) if cli is not None and getattr(cli, "_agent_running", False) else None
        agent = agent or self._service.running_agent()
        return bool(agent.steer(text)) if agent is not None else False

    def report_status(self, state: AgentState, detail: str | None = None) -> None:
        """Push ``agent.status`` to the App (when this process owns the server)."""
        runner = self._service.runner
        if runner is not None:
            self._service.submit(runner.hub.set_status(state, detail))


# ------------------------------------------------------------------------------- service


class HermesService:
    """LineUp inside one Hermes process: settings, tools, hooks, and (maybe) the server.

    ``settings`` and ``registry`` may be given as functions that make them: they then run on first
    use (the server's start, or a tool call), not in Hermes' start. Until the registry is loaded the
    tools registered with Hermes are the function schemas ``tools``.
    """

    def __init__(
        self,
        ctx: Any,
        settings: Settings | Callable[[], Settings],
        registry: Registry | Callable[[], Registry],
        *,
        tools: list[dict[str, Any]] | None = None,
        role: str | None = None,
    ) -> None:
        self.ctx = ctx
        self._settings: Settings | None = None if callable(settings) else settings
        self._make_settings: Callable[[], Settings] | None = settings if callable(settings) else None
        self._registry: Registry | None = None if callable(registry) else registry
        self._make_registry: Callable[[], Registry] | None = registry if callable(registry) else None
        self._tools = tools
        self._fixed_role = self._role = role
        self._lock: ServerLock | None = None
        self.runner: Runner | None = None
        self.owner: Owner | None = None
        self.adapter: Any = None
        self.runtime = HermesRuntime(ctx, self)
        self.bridge = ToolBridge(self.runtime, self, self.call_blocking, deadline_for=self.deadline_for)
        self._start_lock = threading.RLock()
        self._agents: dict[str, weakref.ReferenceType[Any]] = {}
        self._idle_handlers: dict[str, Callable[[str], None]] = {}
        self._running: set[str] = set()
        self._state_lock = threading.Lock()
        self._refused_logged = False

    # settings and tools, made on first use ----------------------------------------------

    @property
    def settings(self) -> Settings:
        """LineUp's settings (validated by the model on first use)."""
        if self._settings is None:
            with self._start_lock:
                if self._settings is None:
                    assert self._make_settings is not None
                    self._settings = self._make_settings()
        return self._settings

    @property
    def registry(self) -> Registry:
        """The registry of every tool (loaded on first use)."""
        if self._registry is None:
            with self._start_lock:
                if self._registry is None:
                    assert self._make_registry is not None
                    self._registry = self._make_registry()
        return self._registry

    @property
    def lock(self) -> ServerLock:
        """The lock on the data directory that the process serving the App holds."""
        if self._lock is None:
            with self._start_lock:
                if self._lock is None:
                    self._lock = ServerLock(self.settings.data_dir)
        return self._lock

    def function_schemas(self) -> list[dict[str, Any]]:
        """The tools to register with Hermes: the registry's once loaded, else the schemas given."""
        if self._registry is None and self._tools is not None:
            return list(self._tools)
        return self.registry.function_schemas()

    # server lifecycle ------------------------------------------------------------------

    @property
    def role(self) -> str:
        """``gateway``, ``cli`` or ``process``: read when needed (the gateway marks itself after plugins load)."""
        return self._role or process_role()

    def deadline_for(self, name: str) -> float:
        """The wait deadline of tool ``name`` (``deadlines.<name>``, else ``deadline``)."""
        return self.settings.deadlines.get(name, self.settings.deadline)

    @property
    def serving(self) -> bool:
        """Whether this process owns the running server."""
        return self.runner is not None

    def ensure_started(self, reason: str, *, role: str | None = None) -> bool:
        """Start the server here unless another process owns it; True when this process serves.

        Idempotent and thread-safe. ``reason`` is logged (gateway connect, session start...);
        ``role`` overrides what :func:`process_role` says this process is.
        """
        with self._start_lock:
            if self.runner is not None:
                return True
            if role is not None:
                self._role = role
            if not self.lock.acquire(self.role):
                self.owner = self.lock.owner()
                if not self._refused_logged:
                    log.info("lineup: the server runs in another Hermes process (%s)", self.owner or "unknown")
                    self._refused_logged = True
                return False
            try:
                from ..loop import Runner  # the server's code is loaded by the process that serves

                runner = Runner(
                    self.settings,
                    self.registry,
                    on_text=self._on_text,
                    on_stop=self._on_stop,
                    on_tools_changed=self._on_tools_changed,
                )
                runner.start()
            except BaseException:
                self.lock.release()
                raise
            self.runner = runner
            self.owner = None
            log.info("lineup: serving the App for this %s process (%s)", self.role, reason)
            self._announce()
            return True

    def _announce(self) -> None:
        log.info("%s", self.settings.describe_mode())
        assert self.runner is not None
        transport = self.runner.transport
        link = transport.connect_link
        if link is None:  # relay mode: the App reaches the agent through WuKongIM
            if sys.stderr.isatty():
                print(f"{EMOJI} {self.settings.describe_mode()}", file=sys.stderr)
            return
        where = transport.describe()
        log.info("lineup: %s (token in %s or plugins.entries.lineup.token)", where, self.settings.data_dir)
        if sys.stderr.isatty():  # a person is watching this terminal; the link (with the token) never goes to logs
            from ...qr import terminal_qr

            print(f"{EMOJI} LineUp App: open {link} on your phone", file=sys.stderr)
            print(terminal_qr(link), file=sys.stderr)

    def stop(self) -> None:
        """Stop the server (if this process runs it) and release the lock."""
        with self._start_lock:
            runner, self.runner = self.runner, None
            self._role = self._fixed_role
            if runner is not None:
                try:
                    runner.stop()
                finally:
                    self.lock.release()
                log.info("lineup: server stopped")

    def submit(self, coro: Coroutine[Any, Any, Any]) -> bool:
        """Run ``coro`` on the server's loop without waiting; False (and nothing runs) if it stopped."""
        runner = self.runner
        if runner is None:
            coro.close()
            return False
        try:
            runner.submit(lambda: coro)
        except Exception:  # stopping: the loop is gone (submit closed the coroutine)
            return False
        return True

    def not_serving_result(self, name: str) -> ToolResult:
        """The ``failed`` result of a call made in a process that does not own the server."""
        from ...hub import failure
        from ...protocol import codec

        owner = self.owner or self.lock.owner()
        where = f"another Hermes process ({owner})" if owner else "another Hermes process"
        message = (
            f"the LineUp App is served by {where}; use LineUp tools from that process "
            "(usually the gateway), or stop it to serve the App from here"
        )
        return failure(codec.new_id("call"), name, "failed", message, error="not_owner")

    def call_blocking(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None],
        deadline: float,
    ) -> ToolResult:
        """Run one LineUp tool call for Hermes (on the agent's worker thread) and wait for its end."""
        runner = self.runner if self.ensure_started(f"first use of {name}") else None
        if runner is None:
            return self.not_serving_result(name)
        self.runtime.report_status("waiting_input", name)
        try:
            result: ToolResult = runner.call_blocking(
                name, flat_args, is_interrupted=is_interrupted, heartbeat=heartbeat, deadline=deadline
            )
        finally:
            self.runtime.report_status("running")
        return result

    # hub callbacks (run on the server's event loop) -------------------------------------

    async def _on_text(self, device_id: str, text: str) -> None:
        if not self.runtime.deliver_message(text, sender=device_id) and self.runner is not None:
            await self.runner.hub.send_text("The agent is not taking messages from the App right now.")

    async def _on_stop(self, device_id: str) -> None:
        """The App's stop button: stop the run first, then close whatever card is still open.

        In that order the agent is already flagged as interrupted when its tool returns, so it
        makes no further model call. In the gateway the stop is Hermes' ``/stop``, awaited.
        """
        import asyncio

        adapter = self.adapter
        stopped = adapter.submit_text("/stop", device_id) if adapter is not None else None
        if stopped is not None:
            try:
                await asyncio.wait_for(asyncio.wrap_future(stopped), STOP_TIMEOUT)
            except Exception:
                log.warning("lineup: the gateway did not confirm /stop", exc_info=True)
        else:
            self.runtime.interrupt(None)
        if self.runner is not None:
            await self.runner.hub.cancel_all("stopped by the user")

    async def _on_tools_changed(self) -> None:
        import asyncio

        await asyncio.to_thread(self.sync_tools)

    def sync_tools(self) -> None:
        """Register new App tools with Hermes, remove gone ones, and refresh live agents' tool lists."""
        added, removed = self.bridge.sync()
        if not (added or removed):
            return
        log.info("lineup: tools changed (+%s -%s)", added, removed)
        for agent in self._live_agents():
            try:
                from tools.mcp_tool import refresh_agent_mcp_tools

                refresh_agent_mcp_tools(agent, quiet_mode=True)
            except Exception:
                log.debug("could not refresh an agent's tools", exc_info=True)

    # agents ----------------------------------------------------------------------------

    def attach(self, agent: Any, on_idle_message: Callable[[str], None] | None = None) -> None:
        """Let App text reach ``agent`` (an ``AIAgent`` driven directly, not by the gateway or CLI).

        While the agent runs, App text interrupts it with the new message (``AIAgent.interrupt``;
        the host finds it in the result's ``interrupt_message``). While it is idle the text goes
        to ``on_idle_message``. Hermes' ``clarify`` becomes a choice card on the App, unless the
        host set its own ``clarify_callback``.
        """
        session_id = str(getattr(agent, "session_id", "") or id(agent))
        with self._state_lock:
            self._agents[session_id] = weakref.ref(agent)
            if on_idle_message is not None:
                self._idle_handlers[session_id] = on_idle_message
        if getattr(agent, "clarify_callback", None) is None:
            agent.clarify_callback = self.clarify_callback

    def detach(self, agent: Any) -> None:
        """Stop delivering App text to ``agent``."""
        session_id = str(getattr(agent, "session_id", "") or id(agent))
        with self._state_lock:
            self._agents.pop(session_id, None)
            self._idle_handlers.pop(session_id, None)

    def _live_agents(self) -> list[Any]:
        with self._state_lock:
            refs = list(self._agents.values())
        agents = [agent for agent in (ref() for ref in refs) if agent is not None]
        adapter = self.adapter
        if adapter is not None:
            agents.extend(adapter.cached_agents())
        return agents

    def running_agent(self) -> Any:
        """The attached agent that is in the middle of a run, if any."""
        with self._state_lock:
            for session_id, ref in self._agents.items():
                agent = ref()
                if agent is not None and session_id in self._running:
                    return agent
        return None

    def idle_message(self, text: str) -> bool:
        """Hand App text to an idle attached agent's host; False when no host takes it."""
        with self._state_lock:
            handlers = list(self._idle_handlers.values())
        for handler in handlers:
            handler(text)
        return bool(handlers)

    def clarify_callback(self, question: str, choices: list[str] | None) -> str:
        """Hermes' ``clarify`` as a LineUp card: ``choice`` with options, else ``input``; blocks."""
        started = time.monotonic()
        name, flat_args = clarify_card(question, choices)
        result = self.call_blocking(
            name,
            flat_args,
            is_interrupted=self.runtime.is_interrupted,
            heartbeat=lambda: self.runtime.heartbeat("waiting for the user to answer clarify", started),
            deadline=clarify_timeout(),
        )
        return clarify_answer(result) or f"[no answer from the LineUp App: {result.status}]"

    # hooks -----------------------------------------------------------------------------

    @property
    def in_gateway(self) -> bool:
        """Whether the App is a gateway platform here (replies then go through the platform)."""
        return self.adapter is not None or self.role == "gateway"

    def _relevant(self, platform: str | None) -> bool:
        """Whether a session's events concern the App (the gateway also serves other platforms)."""
        return not self.in_gateway or platform == PLATFORM

    def on_session_start(self, session_id: str = "", platform: str = "", **_: Any) -> None:
        """Interactive CLI: the session start is when this process takes the server."""
        if self.role == "cli":
            self.ensure_started("cli session start")

    def pre_llm_call(self, session_id: str = "", platform: str = "", **_: Any) -> None:
        """A turn starts: remember the session runs; the App shows ``thinking``."""
        with self._state_lock:
            self._running.add(str(session_id))
        if self._relevant(platform):
            self.runtime.report_status("thinking")

    def post_llm_call(self, assistant_response: str = "", platform: str = "", **_: Any) -> None:
        """Outside the gateway (which replies through the platform), mirror the reply to the App."""
        if not self.in_gateway and assistant_response and self.runner is not None:
            self.submit(self.runner.hub.send_text(assistant_response))

    def on_session_end(self, session_id: str = "", interrupted: bool = False, platform: str = "", **_: Any) -> None:
        """A turn ended: the App shows ``idle`` (or ``interrupted``)."""
        with self._state_lock:
            self._running.discard(str(session_id))
        if self._relevant(platform):
            self.runtime.report_status("interrupted" if interrupted else "idle")

    def on_session_finalize(self, reason: str = "", **_: Any) -> None:
        """The interactive CLI shuts down: stop the server."""
        if self.role == "cli" and reason == "shutdown":
            self.stop()

    def lineup_command(self, raw_args: str = "") -> str:
        """``/lineup``: serve the App from this process if nobody does yet, and say where it is.

        The link with the token is shown only outside the gateway (the CLI user is on this
        machine; a gateway command may come from any chat platform).
        """
        try:
            serving = self.ensure_started("/lineup command")
        except Exception as exc:
            return f"LineUp: cannot serve the App: {exc}"
        if not serving:
            owner = self.owner or self.lock.owner()
            return f"LineUp: the App is served by another Hermes process ({owner or 'unknown'})."
        assert self.runner is not None
        transport = self.runner.transport
        devices = len(self.runner.hub.peers)
        line = f"LineUp: {transport.describe()} ({devices} device{'s' if devices != 1 else ''} connected)."
        link = transport.connect_link
        if link is not None and not self.in_gateway:
            line += f"\nOpen {link} on your phone."
        return line


def clarify_card(question: str, choices: list[str] | None) -> tuple[str, dict[str, Any]]:
    """The LineUp tool and arguments that show Hermes' clarify: a choice card, or an input card."""
    options = [str(c) for c in choices or [] if str(c).strip()]
    if options:
        return "choice", {"question": question, "options": options}
    return "input", {"prompt": question}


def clarify_answer(result: ToolResult) -> str:
    """The text Hermes' clarify gets from a card's result ("" when the user gave no answer)."""
    if result.status != "completed":
        return ""
    value = result.result
    if isinstance(value.get("selected"), str):
        return str(value["selected"])
    values = value.get("values")
    if isinstance(values, dict):
        texts = [str(v) for v in values.values() if v not in (None, "")]
        return "\n".join(texts)
    text = value.get("text") or value.get("value")
    return str(text) if text is not None else ""


def clarify_timeout() -> float:
    """Hermes' ``agent.clarify_timeout`` (seconds), also the deadline of a clarify card."""
    try:
        from tools.clarify_gateway import get_clarify_timeout

        return float(get_clarify_timeout())
    except Exception:
        return 3600.0


def approval_timeout() -> float:
    """Hermes' ``approvals.timeout`` (seconds), also the deadline of an approval card."""
    try:
        from hermes_cli.config import load_config

        approvals = load_config().get("approvals") or {}
        return float(approvals.get("timeout", 60))
    except Exception:
        return 60.0


# ------------------------------------------------------------------------------- install


def install(ctx: Any, *, environ: Mapping[str, str] | None = None) -> HermesService:
    """Set LineUp up in this Hermes process (the body of the plugin's ``register(ctx)``).

    Raises ConfigError naming the setting when a setting is bad; Hermes then reports the plugin
    as failed to load (``hermes plugins list``) and registers nothing of it.
    """
    global _service
    with _service_lock:
        svc = _service
        if svc is None:
            settings, registry, tools = _settings_and_tools(environ)
            svc = HermesService(ctx, settings, registry, tools=tools)
            atexit.register(svc.stop)
        else:  # a forced re-discovery (Hermes cleared its hooks and tool list): keep the server
            svc.ctx = svc.runtime.ctx = ctx
        svc.bridge.sync(force=True)
        for hook in HOOKS:
            ctx.register_hook(hook, getattr(svc, hook))
        register_command(
            ctx, "lineup", svc.lineup_command, description="Show where the LineUp App is served and how to open it"
        )
        register_platform(ctx, svc)
        _service = svc
    return svc


def _settings_and_tools(
    environ: Mapping[str, str] | None,
) -> tuple[Settings | Callable[[], Settings], Registry | Callable[[], Registry], list[dict[str, Any]] | None]:
    """The settings and registry of :class:`HermesService`, as cheap as a Hermes start allows.

    Settings the fast check accepts are validated by the model when first used; any others right
    now, so that a bad one raises the ConfigError naming it. The registry is loaded now only if a
    third-party plugin is installed (its tools are known, and checked, only through it).
    """
    given = given_settings(plugin_section(), environ)
    settings = functools.partial(_validated, given) if surely_valid(given) else _validated(given)
    tools = builtin_function_schemas()
    from ...plugins import load_registry

    registry: Registry | Callable[[], Registry] = load_registry if tools is not None else load_registry()
    return settings, registry, tools


def _validated(given: dict[str, Any]) -> Settings:
    from ...config.settings import validated_settings

    return validated_settings(given)


def register_command(ctx: Any, name: str, handler: Callable[[str], str], *, description: str) -> None:
    """``ctx.register_command``, without importing Hermes' slash-command module when nothing has yet.

    Hermes' ``register_command`` imports ``hermes_cli.commands`` (and prompt_toolkit: 75-150 ms)
    only to refuse the names of its built-in commands, and skips that check when the module is
    not available. Every reader of plugin commands (the CLI, the gateway) loads that module first,
    and the interactive CLI has it loaded before plugins. Elsewhere the entry Hermes would store is
    stored directly (LineUp's command is no built-in one: a Hermes test checks it).
    """
    manager = getattr(ctx, "_manager", None)
    commands = getattr(manager, "_plugin_commands", None)
    manifest = getattr(ctx, "manifest", None)
    if "hermes_cli.commands" in sys.modules or not isinstance(commands, dict) or manifest is None:
        ctx.register_command(name, handler, description=description)
        return
    commands[name] = {"handler": handler, "description": description, "plugin": manifest.name, "args_hint": ""}


PLATFORM_HINT = (
    "You are talking with the user through the LineUp App on their phone or browser. Besides plain "
    "text you can ask them with the LineUp tools (choice, confirm, input, canvas, calculator and any "
    "tool their App declares): each shows as a card they answer with a tap, and you get a structured "
    "result with a status (completed, rejected, cancelled, expired, unsupported or failed)."
)


def register_platform(ctx: Any, svc: HermesService) -> None:
    """Register the ``lineup`` gateway platform; its adapter module is imported only by the gateway.

    With no ``is_connected`` check, the gateway enables the platform whenever the plugin is
    enabled (``platforms.lineup.enabled: false`` turns it off). The home channel is the App chat,
    so cron jobs can ``deliver: lineup``.
    """

    def make_adapter(config: Any) -> Any:
        from .platform import LineUpAdapter

        return LineUpAdapter(config, svc)

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
    """Stop this process's service and forget it (tests; Hermes has no plugin unload)."""
    global _service
    with _service_lock:
        svc, _service = _service, None
    if svc is not None:
        svc.stop()
        for name in svc.bridge.names:
            svc.runtime.unregister_tool(name)
