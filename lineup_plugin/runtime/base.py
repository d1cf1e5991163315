"""The runtime-neutral adapter interface: what an agent runtime gives LineUp.

A *runtime* is the agent framework the plugin lives in (Hermes Agent first). LineUp needs four
things from it, which :class:`AgentRuntime` names:

- **register a tool**: every LineUp tool becomes a native tool of the runtime, described by a
  bare function schema ``{name, description, parameters}``;
- **wait for a call while honouring interrupts**: while a tool waits for the user, the runtime
  says whether the run was interrupted (:meth:`AgentRuntime.is_interrupted`) and is told that
  the wait is alive (:meth:`AgentRuntime.heartbeat`) so it does not think the tool hung;
- **deliver a user message**: text typed in the App goes to the agent under the runtime's own
  rules for a busy agent (interrupt, queue or steer);
- **interrupt or steer a run**: the App's stop button stops the run; steering adds text to it.

The runtime tells LineUp when a run starts and ends (in its own way: hooks, callbacks); LineUp
pushes the agent's status to the App itself (:meth:`LineUpService.report_status
<lineup_plugin.runtime.service.LineUpService.report_status>`).

:class:`ToolBridge` is the runtime-neutral half: it keeps the runtime's tools in step with the
LineUp registry (built-in, plugin and App-declared tools) and turns each call into a blocking
wait whose :class:`~lineup_plugin.protocol.ToolResult` reaches the model as JSON.
:class:`~lineup_plugin.runtime.service.LineUpService` is the rest of the runtime-neutral work:
settings, the server lock, the server and the hub's callbacks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    from ..media import StoredFile
    from ..protocol.messages import Origin, ToolResult

log = logging.getLogger(__name__)

#: a tool handler as a runtime calls it: the model's flat arguments in, JSON text out
ToolHandler = Callable[[dict[str, Any]], str]

#: what the model is told for each status that is not ``completed``
STATUS_HINTS: dict[str, str] = {
    "rejected": "The user declined. Do not do it; ask or choose another way.",
    "cancelled": "The request was withdrawn before the user answered; nothing was chosen.",
    "expired": "The user did not answer in time (this is not a refusal). Ask again later or go on without it.",
    "unsupported": "The user's App cannot run this tool.",
    "failed": "The tool could not run; see the message.",
}


def result_json(result: ToolResult) -> str:
    """The JSON text a model reads for ``result``: status first, the App's answer under ``result``.

    For every status other than ``completed`` a short ``hint`` says what the status means, so an
    ``expired`` wait is never read as a refusal.
    """
    body: dict[str, Any] = {"status": result.status, "tool": result.name, "call_id": result.call_id}
    if result.action:
        body["action"] = result.action
    body["result"] = result.result
    hint = STATUS_HINTS.get(result.status)
    if hint:
        body["hint"] = hint
    return json.dumps(body, ensure_ascii=False)


class Conversation(NamedTuple):
    """Which conversation (an agent session: a gateway chat, the CLI's session...) a call or message belongs to.

    ``id`` is the envelope's ``conversation_id`` (at most 200 characters); ``title`` what the App
    lists it as (None: the App names it).
    """

    id: str
    title: str | None = None


class BlockingCall(Protocol):
    """Calls a LineUp tool from a runtime's worker thread and blocks until its terminal result.

    ``is_interrupted`` is polled while waiting: once it is true the call is cancelled on every
    device and a ``cancelled`` result is returned. The devices are told "the agent was
    interrupted", or the check's own ``reason`` attribute when it has one (the question was
    settled elsewhere: "answered in the terminal: Deny"; the call then ends at once with it).
    ``heartbeat`` is called every poll slice. ``deadline`` is the wait in seconds; when it passes
    the result is ``expired``. ``conversation`` is the one the call belongs to (None: the hub's
    default).
    """

    def __call__(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None],
        deadline: float,
        conversation: Conversation | None = None,
    ) -> ToolResult: ...


class ToolSource(Protocol):
    """Where a :class:`ToolBridge` reads the tools: a :class:`~lineup_plugin.tools.registry.Registry`, or anything
    else that gives every tool's agent-facing function schema (see :mod:`lineup_plugin.tools.agent_schema`)."""

    def function_schemas(self) -> list[dict[str, Any]]:
        """Each tool as ``{name, description, parameters}``, in registration order."""
        ...


class AgentRuntime(ABC):
    """What a Hermes-style agent runtime provides to LineUp. Every method is thread-safe."""

    #: the runtime's name, e.g. ``"hermes"``
    name: str = "runtime"
    #: how messages for people name it, e.g. "another Hermes process"
    label: str = "agent"

    @abstractmethod
    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Make ``schema`` (``{name, description, parameters}``) a native tool that runs ``handler``.

        Registering a name again replaces the earlier tool of that name.
        """

    @abstractmethod
    def unregister_tool(self, name: str) -> None:
        """Remove a tool registered with :meth:`register_tool` (no error if it is not there)."""

    @abstractmethod
    def is_interrupted(self) -> bool:
        """Whether the run that called the tool on the current thread was interrupted."""

    @abstractmethod
    def heartbeat(self, label: str, started: float) -> None:
        """Tell the runtime a tool has been waiting since ``started`` (``time.monotonic()``).

        Called every poll slice while a tool waits; the runtime decides how often it acts on it.
        """

    @abstractmethod
    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """A user message from the App (``sender`` is the device id) in conversation ``conversation_id``.

        An idle agent starts a turn with it; a busy one follows the runtime's rules (interrupt,
        queue or steer). A runtime with one conversation may ignore ``conversation_id``. Returns
        False when there is no agent to take it.
        """

    def deliver_files(
        self, text: str, files: list[StoredFile], *, sender: str, conversation_id: str | None = None
    ) -> bool:
        """A user message from the App that came with ``files`` (kept on this machine; see :mod:`lineup_plugin.media`).

        By default the message is delivered with a line per file naming it and where it is, so
        an agent with file tools can open it, in conversation ``conversation_id`` as
        :meth:`deliver_message`; a runtime with its own media input (Hermes' gateway: images as
        image input) overrides this.
        """
        lines = [f"[the user sent {file.mime} file {file.name!r}, saved at {file.path}]" for file in files]
        return self.deliver_message("\n".join([*lines, text]), sender=sender, conversation_id=conversation_id)

    @abstractmethod
    def interrupt(self, message: str | None = None) -> bool:
        """Stop the current run, optionally because of the new ``message``; False if none runs."""

    @abstractmethod
    def steer(self, text: str) -> bool:
        """Add ``text`` to the current run without stopping it; False if none runs."""

    def may_print(self) -> bool:
        """Whether LineUp may print to this process's terminal (the App's link, its QR code); False when quiet."""
        return True

    def conversation(self) -> Conversation | None:
        """The conversation of the tool call running on the current thread (None: the hub's default)."""
        return None

    def call_origin(self) -> Origin | None:
        """Which session of the agent makes the tool call running on this thread (shown on the App's card).

        None: the process's kind decides (see :meth:`LineUpService.origin
        <lineup_plugin.runtime.service.LineUpService.origin>`).
        """
        return None

    def call_started(self, call_id: str) -> None:  # noqa: B027 - optional: most runtimes need not know
        """The tool call running on this thread is LineUp call ``call_id`` (said before any App is sent it)."""

    def tools_changed(self) -> None:  # noqa: B027 - optional: most runtimes read their tool list per run
        """The tools registered with :meth:`register_tool` changed: refresh what the runtime cached of them."""


class ToolBridge:
    """Keeps a runtime's native tools in step with the LineUp registry.

    Each registered tool's handler calls ``call`` (a :class:`BlockingCall`) with the runtime's
    interrupt check and heartbeat, and returns :func:`result_json` of the result.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        registry: ToolSource,
        call: BlockingCall,
        *,
        deadline_for: Callable[[str], float],
    ) -> None:
        self.runtime = runtime
        self.registry = registry
        self.call = call
        self.deadline_for = deadline_for
        self._schemas: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        """The tools currently registered with the runtime."""
        with self._lock:
            return list(self._schemas)

    def schemas(self) -> dict[str, dict[str, Any]]:
        """The function schema of each tool currently registered with the runtime, by name."""
        with self._lock:
            return dict(self._schemas)

    def sync(self, *, force: bool = False) -> tuple[list[str], list[str]]:
        """Register new or changed tools (all of them with ``force``), unregister gone ones.

        Returns the ``(added, removed)`` tool names.
        """
        wanted = {schema["name"]: schema for schema in self.registry.function_schemas()}
        with self._lock:
            added = [name for name, schema in wanted.items() if force or self._schemas.get(name) != schema]
            removed = [name for name in self._schemas if name not in wanted]
            for name in removed:
                self.runtime.unregister_tool(name)
                del self._schemas[name]
            for name in added:
                self.runtime.register_tool(wanted[name], self.handler(name))
                self._schemas[name] = wanted[name]
        return added, removed

    def call_tool(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        label: str | None = None,
        deadline: float | None = None,
        is_interrupted: Callable[[], bool] | None = None,
    ) -> ToolResult:
        """Call tool ``name`` and wait, with the runtime's interrupt check and heartbeat (on its worker thread).

        ``label`` is what the heartbeat says (default: waiting for the user to answer ``name``);
        ``deadline`` defaults to the tool's; ``is_interrupted`` defaults to the runtime's.
        """
        started = time.monotonic()
        said = label or f"waiting for the user to answer {name}"
        return self.call(
            name,
            dict(flat_args or {}),
            is_interrupted=is_interrupted or self.runtime.is_interrupted,
            heartbeat=lambda: self.runtime.heartbeat(said, started),
            deadline=self.deadline_for(name) if deadline is None else deadline,
            conversation=self.runtime.conversation(),
        )

    def handler(self, name: str) -> ToolHandler:
        """The handler the runtime runs for tool ``name``."""

        def handle(flat_args: dict[str, Any]) -> str:
            result = self.call_tool(name, flat_args)
            log.debug("tool %s ended %s", name, result.status)
            return result_json(result)

        handle.__name__ = f"lineup_{name}"
        return handle
