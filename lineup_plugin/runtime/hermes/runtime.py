""":class:`HermesRuntime`: the :class:`~lineup_plugin.runtime.base.AgentRuntime` of Hermes Agent.

Tools are registered through the plugin context (toolset ``lineup``); a waiting tool polls
Hermes' per-thread interrupt flag and touches its activity heartbeat. Where App text and the
stop button go depends on which Hermes *host* drives the agent in this process — one small
strategy each:

- :class:`GatewayHost` — the gateway, once the ``lineup`` platform connected: text is a message
  of the App user's session (Hermes' busy-input rules apply), stop is ``/stop``, steer ``/steer``;
- :class:`CliHost` — the interactive CLI: text is ``ctx.inject_message``; stop and steer go to
  the CLI's agent while it is in a turn (else to an attached agent);
- :class:`AttachedAgents` — an ``AIAgent`` a host program drives itself and attached with
  :meth:`HermesRuntime.attach`: text interrupts its run with the new message, or goes to the
  host's ``on_idle_message`` while it is idle; Hermes' ``clarify`` becomes a card.

The first host that is active handles text; stop and steer fall back from the CLI to attached
agents. Every reach into Hermes is in :mod:`.compat`.

**Which sessions the App follows** (:meth:`HermesRuntime.follows`): Hermes runs the session hooks
for every agent of the process, whatever platform it talks to. The App is shown a session's
status and, outside the gateway, its replies only when the App takes part in it: in the gateway
the App's own (``lineup``) session; elsewhere a session that called a LineUp tool, an attached
agent's session, or the interactive CLI's session once App text was typed into it or ``/lineup``
was run there. Any other agent's turns (a Telegram bot built on ``AIAgent``, a cron job, the CLI
before it used LineUp) never reach the App.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

from ..base import AgentRuntime, Conversation, ToolHandler
from ..service import LineUpService
from . import compat
from .approval import racing
from .common import (
    EMOJI,
    PLATFORM,
    TOOLSET,
    app_conversation,
    clarify_answer,
    clarify_card,
    clarify_timeout,
    hermes_origin,
    process_role,
)

if TYPE_CHECKING:
    from ...config.settings import Settings
    from ...media import StoredFile
    from ...protocol.messages import Origin, ToolResult
    from ...tools.registry import Registry

log = logging.getLogger(__name__)

#: the Hermes session and task ids of the tool call running in this context (thread)
_ASKING: contextvars.ContextVar[tuple[str, str]] = contextvars.ContextVar("lineup_asking", default=("", ""))

#: how long the App's stop waits for the gateway to run ``/stop`` before closing the cards anyway
STOP_TIMEOUT = 15.0
#: who the gateway is told sent the commands LineUp issues itself
COMMAND_SENDER = "lineup"
#: how many sessions the App takes part in are remembered (the oldest are forgotten first)
APP_SESSIONS_KEPT = 1000


def hermes_result(text: str) -> str:
    """The result JSON (:func:`~lineup_plugin.runtime.base.result_json`) as Hermes should show it.

    Hermes marks a tool line as failed when the result has a top-level ``error`` (``agent/display.py``,
    ``_detect_tool_failure``; its ``post_tool_call`` observers read the same key). A call that did
    not complete — rejected, cancelled, expired, unsupported, failed — gets ``error``:
    ``"<status>: <message>"``, so a withdrawn card never looks like a success on the CLI.
    """
    try:
        body = json.loads(text)
    except ValueError:
        return text
    if not isinstance(body, dict) or body.get("status") in (None, "completed") or "error" in body:
        return text
    result = body.get("result")
    detail = result.get("message") or result.get("reason") if isinstance(result, dict) else None
    body["error"] = f"{body['status']}: {detail}" if isinstance(detail, str) and detail else str(body["status"])
    return json.dumps(body, ensure_ascii=False)


class Host(Protocol):
    """Where App text, the stop button and steering go for one kind of Hermes host."""

    def deliver(self, text: str, sender: str, conversation_id: str | None = None) -> bool:
        """Hand App text (of ``conversation_id``) to the agent; False when nobody takes it."""
        ...

    def interrupt(self, message: str | None) -> bool:
        """Stop the run (and return once it has taken the stop in); False when none runs."""
        ...

    def steer(self, text: str) -> bool:
        """Add ``text`` to the run; False when none runs."""
        ...

    def agents(self) -> list[Any]:
        """The live agents whose tool lists follow LineUp's."""
        ...


class GatewayHost:
    """The gateway: the App is the ``lineup`` platform, whose adapter connects and sets :attr:`adapter`."""

    def __init__(self) -> None:
        #: the platform adapter (:class:`~.platform.LineUpAdapter`) while it is connected
        self.adapter: Any = None

    @property
    def active(self) -> bool:
        """Whether the platform is connected in this process."""
        return self.adapter is not None

    def deliver(self, text: str, sender: str, conversation_id: str | None = None) -> bool:
        """A message of the App user's session: the chat of its conversation."""
        adapter = self.adapter
        return adapter is not None and bool(adapter.deliver_text(text, sender, conversation_id=conversation_id))

    def interrupt(self, message: str | None) -> bool:
        """``/stop`` in the App user's session, waited for (:data:`STOP_TIMEOUT` at most)."""
        adapter = self.adapter
        stopped = adapter.submit_text("/stop", COMMAND_SENDER) if adapter is not None else None
        if stopped is None:
            return False
        try:
            stopped.result(STOP_TIMEOUT)
        except Exception:
            log.warning("lineup: the gateway did not confirm /stop", exc_info=True)
        return True

    def steer(self, text: str) -> bool:
        """``/steer`` in the App user's session."""
        adapter = self.adapter
        return adapter is not None and bool(adapter.deliver_text(f"/steer {text}", COMMAND_SENDER))

    def agents(self) -> list[Any]:
        """The gateway's cached agents of App sessions."""
        adapter = self.adapter
        return compat.gateway_agents(adapter, PLATFORM) if adapter is not None else []


class CliHost:
    """The interactive CLI (``hermes``), which Hermes hands its plugins through the context."""

    def __init__(self, context: Callable[[], Any]) -> None:
        self._context = context

    @property
    def active(self) -> bool:
        """Whether this process runs the interactive CLI."""
        return compat.cli_of(self._context()) is not None

    def _agent(self) -> Any:
        return compat.cli_agent_running(compat.cli_of(self._context()))

    def deliver(self, text: str, sender: str, conversation_id: str | None = None) -> bool:
        """``ctx.inject_message``: the next input when idle, an interrupt with it when busy (one session)."""
        return bool(self._context().inject_message(text))

    def interrupt(self, message: str | None) -> bool:
        """``AIAgent.interrupt`` of the CLI's agent, if it is in a turn."""
        agent = self._agent()
        if agent is None:
            return False
        agent.interrupt(message)
        return True

    def steer(self, text: str) -> bool:
        """``AIAgent.steer`` of the CLI's agent, if it is in a turn."""
        agent = self._agent()
        return agent is not None and bool(agent.steer(text))

    def agents(self) -> list[Any]:
        """None: the CLI rebuilds its agent's tool list itself."""
        return []

    def session_id(self) -> str:
        """The session the CLI is in ("" when there is no CLI or it has no session yet)."""
        return compat.cli_session_id(compat.cli_of(self._context()))


class AttachedAgents:
    """Agents a host program drives itself (``AIAgent.run_conversation``), attached to LineUp."""

    def __init__(self) -> None:
        self._agents: dict[str, weakref.ReferenceType[Any]] = {}
        self._idle_handlers: dict[str, Callable[[str], None]] = {}
        self._running: set[str] = set()
        self._lock = threading.Lock()

    @staticmethod
    def _key(agent: Any) -> str:
        return str(getattr(agent, "session_id", "") or id(agent))

    def attach(self, agent: Any, on_idle_message: Callable[[str], None] | None) -> None:
        """Start delivering App text to ``agent`` (``on_idle_message`` gets it while the agent is idle)."""
        key = self._key(agent)
        with self._lock:
            self._agents[key] = weakref.ref(agent)
            if on_idle_message is not None:
                self._idle_handlers[key] = on_idle_message

    def detach(self, agent: Any) -> None:
        """Stop delivering App text to ``agent`` (found by identity: its session id may have changed)."""
        with self._lock:
            keys = [key for key, ref in self._agents.items() if ref() is agent or ref() is None]
            for key in keys:
                self._agents.pop(key, None)
                self._idle_handlers.pop(key, None)

    def turn(self, session_id: str, *, running: bool) -> None:
        """A turn of session ``session_id`` started (``running``) or ended (Hermes' LLM-call hooks)."""
        with self._lock:
            if running:
                self._running.add(session_id)
            else:
                self._running.discard(session_id)

    def running_sessions(self) -> set[str]:
        """The sessions whose turn runs now (any agent of the process)."""
        with self._lock:
            return set(self._running)

    def running(self) -> Any:
        """The attached agent that is in the middle of a run, if any."""
        with self._lock:
            for key, ref in self._agents.items():
                agent = ref()
                if agent is not None and key in self._running:
                    return agent
        return None

    def deliver(self, text: str, sender: str, conversation_id: str | None = None) -> bool:
        """Interrupt the running agent with ``text``, else hand it to the idle agents' hosts."""
        agent = self.running()
        if agent is not None:
            agent.interrupt(text)
            return True
        with self._lock:
            handlers = list(self._idle_handlers.values())
        for handler in handlers:
            handler(text)
        return bool(handlers)

    def interrupt(self, message: str | None) -> bool:
        """``AIAgent.interrupt`` of the running agent."""
        agent = self.running()
        if agent is None:
            return False
        agent.interrupt(message)
        return True

    def steer(self, text: str) -> bool:
        """``AIAgent.steer`` of the running agent."""
        agent = self.running()
        return agent is not None and bool(agent.steer(text))

    def agents(self) -> list[Any]:
        """Every attached agent still alive."""
        with self._lock:
            refs = list(self._agents.values())
        return [agent for agent in (ref() for ref in refs) if agent is not None]

    def has_session(self, session_id: str) -> bool:
        """Whether an attached agent is in session ``session_id`` now (its id may change, e.g. on compression)."""
        return any(str(getattr(agent, "session_id", "") or "") == session_id for agent in self.agents())


class AskingAgents:
    """The agents of this process that wait on a LineUp tool call now, found by their tool call.

    A one-shot ``hermes chat -q`` (or any agent neither the gateway, the CLI nor a host program
    attached) is known to LineUp only through its tool calls: while one waits on the App, the
    App's stop (passed on by the serving process) interrupts its agent, so the model is not asked
    again with the withdrawn card's ``cancelled``.
    """

    def __init__(self) -> None:
        self._waiting: dict[int, Any] = {}  # id of the call's marker -> its agent
        self._lock = threading.Lock()

    def enter(self) -> object | None:
        """A tool call starts on this thread: remember its agent; pass the result to :meth:`leave`."""
        agent = compat.calling_agent()
        if agent is None:
            return None
        marker = object()
        with self._lock:
            self._waiting[id(marker)] = agent
        return marker

    def leave(self, marker: object | None) -> None:
        """The tool call that :meth:`enter` returned ``marker`` for ended."""
        if marker is not None:
            with self._lock:
                self._waiting.pop(id(marker), None)

    def interrupt(self, message: str | None) -> bool:
        """``AIAgent.interrupt`` of every agent waiting on a LineUp call; False when there is none."""
        with self._lock:
            agents = {id(agent): agent for agent in self._waiting.values()}
        for agent in agents.values():
            agent.interrupt(message)
        return bool(agents)


class AppSessions:
    """The ids of the sessions the App took part in (a LineUp tool call, App text, ``/lineup``).

    Thread-safe; the :data:`APP_SESSIONS_KEPT` most recently joined are kept.
    """

    def __init__(self, kept: int = APP_SESSIONS_KEPT) -> None:
        self._ids: OrderedDict[str, None] = OrderedDict()
        self._kept = kept
        self._lock = threading.Lock()

    def join(self, session_id: str) -> None:
        """The App takes part in session ``session_id`` from now on ("" is ignored)."""
        if not session_id:
            return
        with self._lock:
            self._ids[session_id] = None
            self._ids.move_to_end(session_id)
            while len(self._ids) > self._kept:
                self._ids.popitem(last=False)

    def __contains__(self, session_id: object) -> bool:
        with self._lock:
            return session_id in self._ids


class HermesRuntime(AgentRuntime):
    """:class:`AgentRuntime` on Hermes' plugin context (``ctx``), with its :class:`LineUpService`.

    ``settings``, ``registry``, ``tools`` and ``role`` are the service's (``role`` defaults to
    what this Hermes process is: ``gateway``, ``cli`` or ``process``).
    """

    name = "hermes"
    label = "Hermes"

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
        self.gateway = GatewayHost()
        self.cli = CliHost(lambda: self.ctx)
        self.attached = AttachedAgents()
        self.asking = AskingAgents()
        self.app_sessions = AppSessions()
        self._touch = threading.local()
        self._platforms_lock = threading.Lock()
        #: the platform of each session the hooks saw (a tool handler is not told it), newest last
        self._platforms: OrderedDict[str, str] = OrderedDict()
        self.service = LineUpService(self, settings, registry, tools=tools, role=role or process_role)

    # tools -----------------------------------------------------------------------------

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Register ``schema`` in Hermes' tool registry (toolset ``lineup``) through ``ctx``."""

        def hermes_handler(args: Mapping[str, Any], **context: Any) -> str:
            session_id, task_id = str(context.get("session_id") or ""), str(context.get("task_id") or "")
            self.app_sessions.join(session_id)
            asking = _ASKING.set((session_id, task_id))
            waiting = self.asking.enter()
            try:
                return hermes_result(handler(dict(args) if isinstance(args, Mapping) else {}))
            finally:
                self.asking.leave(waiting)
                _ASKING.reset(asking)

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
        """Remove ``name`` from Hermes' tool registry (and from the plugin's tool names)."""
        compat.forget_plugin_tool(self.ctx, name)

    def tools_changed(self) -> None:
        """Refresh the tool lists of live agents (attached ones, the gateway's cached ones)."""
        for agent in self.attached.agents() + self.gateway.agents():
            try:
                compat.refresh_agent_tools(agent)
            except Exception:
                log.debug("could not refresh an agent's tools", exc_info=True)

    def call_origin(self) -> Origin | None:
        """A cron job's or subagent's call says so (by Hermes' session and task ids); else None (the process's kind)."""
        session_id, task_id = _ASKING.get()
        return hermes_origin(session_id, task_id)

    def may_print(self) -> bool:
        """No link or QR code on the terminal of ``hermes chat -Q`` (quiet: only the reply is printed)."""
        return not compat.quiet_cli()

    # waiting ---------------------------------------------------------------------------

    def is_interrupted(self) -> bool:
        """Hermes' per-thread interrupt flag (set by ``AIAgent.interrupt`` for its worker thread)."""
        return compat.is_interrupted()

    def heartbeat(self, label: str, started: float) -> None:
        """Hermes' activity heartbeat, which acts at most every 10 s per thread."""
        state = getattr(self._touch, "state", None)
        if state is None or state.get("start") != started:
            state = {"last_touch": started, "start": started}
            self._touch.state = state
        compat.touch_activity(state, label)

    # messages and runs -----------------------------------------------------------------

    def _hosts(self) -> list[Host]:
        if self.gateway.active:
            return [self.gateway]
        if self.cli.active:
            return [self.cli, self.attached]
        return [self.attached]

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """Gateway: a message of the App user's session, in the chat of ``conversation_id``.
        CLI: ``ctx.inject_message``. Else an attached agent.

        Text typed into the CLI makes the App take part in the CLI's session (its replies are mirrored).
        """
        host = self._hosts()[0]
        if host is self.cli:
            self.join_cli_session()
        return host.deliver(text, sender, conversation_id)

    def conversation(self) -> Conversation | None:
        """The conversation of the LineUp tool call running on this thread (its Hermes session's)."""
        session_id, _ = _ASKING.get()
        return self.conversation_of(session_id, None)

    def conversation_of(self, session_id: str | None, platform: str | None) -> Conversation | None:
        """The LineUp conversation of a Hermes session's events (None: the default one).

        In the gateway each chat of the App (``lineup`` platform) is a conversation of its own,
        the App chat being the default one. Every other session — the interactive CLI's (each
        process's, each ``/new``), an attached agent's, a session of another platform that calls
        a LineUp tool — is ``hermes-<session id>``, titled after it: the phone's own chat stays
        its own, and two CLIs never retitle each other's conversation.
        """
        chat_platform, chat_id = compat.session_chat()
        if (platform or chat_platform) == PLATFORM:
            return Conversation(app_conversation(chat_id))
        sid = str(session_id or "")
        if not sid:
            return None
        if self.cli.active and sid == self.cli.session_id():
            return Conversation(f"hermes-{sid}", f"Hermes CLI · {sid}")
        self.note_platform(sid, platform)
        with self._platforms_lock:  # the same title whoever asks (a tool handler is not told the platform)
            where = self._platforms.get(sid) or chat_platform or self.service.role
        return Conversation(f"hermes-{sid}", f"Hermes {where} · {sid}")

    def note_platform(self, session_id: str | None, platform: str | None) -> None:
        """Remember the platform of a session (the hooks are told it; the tool handlers are not)."""
        if not session_id or not platform:
            return
        with self._platforms_lock:
            self._platforms[session_id] = platform
            self._platforms.move_to_end(session_id)
            while len(self._platforms) > APP_SESSIONS_KEPT:
                self._platforms.popitem(last=False)

    def deliver_files(
        self, text: str, files: list[StoredFile], *, sender: str, conversation_id: str | None = None
    ) -> bool:
        """Gateway: one message of the App user's session with the files as its media (images are
        image input). Elsewhere as the base class does: a line per file, naming where it is kept."""
        adapter = self.gateway.adapter
        if adapter is not None:
            return bool(adapter.deliver_text(text, sender, files, conversation_id))
        return super().deliver_files(text, files, sender=sender, conversation_id=conversation_id)

    def join_cli_session(self) -> None:
        """The App takes part in the interactive CLI's current session (App text, ``/lineup``)."""
        if self.cli.active:
            self.app_sessions.join(self.cli.session_id())

    def follows(self, session_id: str | None, platform: str | None) -> bool:
        """Whether the App is shown this session's turns: its status and (outside the gateway) its replies.

        In the gateway, only the App's own session (platform ``lineup``). Elsewhere a session the App
        takes part in: one that called a LineUp tool, an attached agent's, or the CLI's once App
        text reached it or ``/lineup`` ran there. Never any other agent's.
        """
        if self.in_gateway:
            return platform == PLATFORM
        sid = str(session_id or "")
        return bool(sid) and (sid in self.app_sessions or self.attached.has_session(sid))

    def interrupt(self, message: str | None = None) -> bool:
        """Gateway: ``/stop`` (waited for) when a turn of the App's own session runs. CLI or attached
        agent: ``AIAgent.interrupt``. Else (``hermes chat -q``...): the agents waiting on a LineUp call."""
        hosts: list[Host | AskingAgents] = [*self._hosts(), self.asking]
        if self.gateway.active and not self.app_turn_running():
            hosts.remove(self.gateway)  # a /stop with nothing to stop only answers "No active task to stop"
        return any(host.interrupt(message) for host in hosts)

    def app_turn_running(self) -> bool:
        """Whether a turn of a session of the App's platform runs now (Hermes' turn hooks say so)."""
        with self._platforms_lock:
            platforms = dict(self._platforms)
        return any(platforms.get(session_id) == PLATFORM for session_id in self.attached.running_sessions())

    def steer(self, text: str) -> bool:
        """Gateway: ``/steer``. CLI or attached agent: ``AIAgent.steer``."""
        return any(host.steer(text) for host in self._hosts())

    @property
    def in_gateway(self) -> bool:
        """Whether the App is a gateway platform here (replies then go through the platform)."""
        return self.gateway.active or self.service.role == "gateway"

    # agents driven by a host program -----------------------------------------------------

    def attach(self, agent: Any, on_idle_message: Callable[[str], None] | None = None) -> None:
        """Let App text reach ``agent`` (an ``AIAgent`` driven directly, not by the gateway or CLI).

        While the agent runs, App text interrupts it with the new message (``AIAgent.interrupt``;
        the host finds it in the result's ``interrupt_message``). While it is idle the text goes
        to ``on_idle_message``. Hermes' ``clarify`` becomes a choice card on the App, unless the
        host set its own ``clarify_callback``.
        """
        self.attached.attach(agent, on_idle_message)
        if getattr(agent, "clarify_callback", None) is None:
            agent.clarify_callback = self.clarify_callback

    def detach(self, agent: Any) -> None:
        """Stop delivering App text to ``agent``."""
        self.attached.detach(agent)

    def hook_cli_approval(self) -> None:
        """The CLI's dangerous-command approvals are also App cards, racing its prompt (see
        :mod:`.approval`): the interactive CLI's, and a one-shot ``hermes chat -q``'s (where the
        card is the only way to answer). Does nothing in any other process; cheap to call again."""
        try:
            cli, only_way = compat.cli_of(self.ctx), False
            if cli is None:
                cli, only_way = compat.approving_cli(), True
            if cli is None:
                return
            tell = partial(print, file=sys.stderr) if sys.stderr.isatty() and self.may_print() else None
            compat.hook_cli_approval(
                cli, lambda prompt: racing(partial(self.ask_cli, cli=cli), cli, prompt, only_way=only_way, tell=tell)
            )
        except Exception:  # Hermes moved its prompt: the terminal still asks, as before
            log.warning("lineup: cannot show the CLI's approvals on the App", exc_info=True)

    def ask_cli(
        self, arguments: dict[str, Any], *, deadline: float, is_interrupted: Callable[[], bool], cli: Any
    ) -> ToolResult:
        """A ``confirm`` card in the conversation of ``cli``'s session (from any thread); its terminal result."""
        asking = _ASKING.set((compat.cli_session_id(cli), ""))
        try:
            return self.service.bridge.call_tool(
                "confirm", arguments, label="waiting for the user to approve a command", deadline=deadline,
                is_interrupted=is_interrupted,
            )  # fmt: skip
        finally:
            _ASKING.reset(asking)

    def clarify_callback(self, question: str, choices: list[str] | None) -> str:
        """Hermes' ``clarify`` as a LineUp card: ``choice`` with options, else ``input``; blocks."""
        name, flat_args = clarify_card(question, choices)
        result = self.service.bridge.call_tool(
            name, flat_args, label="waiting for the user to answer clarify", deadline=clarify_timeout()
        )
        return clarify_answer(result) or f"[no answer from the LineUp App: {result.status}]"
