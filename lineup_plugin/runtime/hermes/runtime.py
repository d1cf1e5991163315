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
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..base import AgentRuntime, ToolHandler
from ..service import LineUpService
from . import compat
from .common import EMOJI, PLATFORM, TOOLSET, clarify_answer, clarify_card, clarify_timeout, process_role

if TYPE_CHECKING:
    from ...config.settings import Settings
    from ...tools.registry import Registry

log = logging.getLogger(__name__)

#: how long the App's stop waits for the gateway to run ``/stop`` before closing the cards anyway
STOP_TIMEOUT = 15.0
#: who the gateway is told sent the commands LineUp issues itself
COMMAND_SENDER = "lineup"


class Host(Protocol):
    """Where App text, the stop button and steering go for one kind of Hermes host."""

    def deliver(self, text: str, sender: str) -> bool:
        """Hand App text to the agent; False when nobody takes it."""
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

    def deliver(self, text: str, sender: str) -> bool:
        """A message of the App user's session."""
        adapter = self.adapter
        return adapter is not None and bool(adapter.deliver_text(text, sender))

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

    def deliver(self, text: str, sender: str) -> bool:
        """``ctx.inject_message``: the next input when idle, an interrupt with it when busy."""
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
        """Stop delivering App text to ``agent``."""
        key = self._key(agent)
        with self._lock:
            self._agents.pop(key, None)
            self._idle_handlers.pop(key, None)

    def turn(self, session_id: str, *, running: bool) -> None:
        """A turn of session ``session_id`` started (``running``) or ended (Hermes' LLM-call hooks)."""
        with self._lock:
            if running:
                self._running.add(session_id)
            else:
                self._running.discard(session_id)

    def running(self) -> Any:
        """The attached agent that is in the middle of a run, if any."""
        with self._lock:
            for key, ref in self._agents.items():
                agent = ref()
                if agent is not None and key in self._running:
                    return agent
        return None

    def deliver(self, text: str, sender: str) -> bool:
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
        self._touch = threading.local()
        self.service = LineUpService(self, settings, registry, tools=tools, role=role or process_role)

    # tools -----------------------------------------------------------------------------

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Register ``schema`` in Hermes' tool registry (toolset ``lineup``) through ``ctx``."""

        def hermes_handler(args: Mapping[str, Any], **_context: Any) -> str:
            return handler(dict(args) if isinstance(args, Mapping) else {})

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

    def deliver_message(self, text: str, *, sender: str) -> bool:
        """Gateway: a message of the App user's session. CLI: ``ctx.inject_message``. Else an attached agent."""
        return self._hosts()[0].deliver(text, sender)

    def interrupt(self, message: str | None = None) -> bool:
        """Gateway: ``/stop`` (waited for). CLI or attached agent: ``AIAgent.interrupt``."""
        return any(host.interrupt(message) for host in self._hosts())

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

    def clarify_callback(self, question: str, choices: list[str] | None) -> str:
        """Hermes' ``clarify`` as a LineUp card: ``choice`` with options, else ``input``; blocks."""
        name, flat_args = clarify_card(question, choices)
        result = self.service.bridge.call_tool(
            name, flat_args, label="waiting for the user to answer clarify", deadline=clarify_timeout()
        )
        return clarify_answer(result) or f"[no answer from the LineUp App: {result.status}]"

