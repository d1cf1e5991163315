""":class:`NanobotRuntime`: the :class:`~lineup_plugin.runtime.AgentRuntime` of a nanobot process.

nanobot awaits a tool's ``execute`` with no time limit and cancels the turn's task on ``/stop``
or shutdown. So ``execute`` awaits the service's call (:meth:`LineUpService.call
<lineup_plugin.runtime.LineUpService.call>`: the card's deadline is its only limit); a
cancellation withdraws the card on every device, records the ``cancelled`` result as the call's
answer in nanobot's turn checkpoint (what the model reads next) and re-raises.
The App's stop button cancels the turns that wait on a card, as ``/stop`` would; when a turn
that asked ends, the App is told (``idle``, ``interrupted`` or ``failed``). nanobot gives a tool
no chat of its own, so App text reaches no turn (the App is told the agent takes no messages).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import threading
from typing import TYPE_CHECKING, Any, Literal

from .. import AgentRuntime, Conversation, LineUpService, ToolHandler
from . import compat

if TYPE_CHECKING:
    from .. import Origin


class NanobotRuntime(AgentRuntime):
    """:class:`AgentRuntime` of a nanobot process, with its :class:`LineUpService` (settings: ``LINEUP_*``)."""

    name = "nanobot"
    label = "nanobot"

    def __init__(self) -> None:
        from .. import load_registry, load_settings

        self.service = LineUpService(self, load_settings(), load_registry(), role="nanobot")
        self.service.bridge.sync(force=True)

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Nothing: nanobot's tool list is fixed at its start (the tools read ``service.bridge.schemas()``)."""

    def unregister_tool(self, name: str) -> None:
        """Nothing (see :meth:`register_tool`)."""

    def schemas(self) -> dict[str, dict[str, Any]]:
        """Every LineUp tool's function schema by name: built-in, plugin and (when serving) App-declared."""
        return self.service.bridge.schemas()

    async def call(self, name: str, arguments: dict[str, Any], sessions: Any = None) -> str:
        """Call LineUp tool ``name`` for the nanobot turn awaiting this; the result's JSON for the model.

        ``sessions`` is nanobot's session manager, where a cancelled call's result is recorded.
        """
        self.service.report_when_done(asyncio.current_task(), self.conversation())
        key = getattr(compat.current_request_context(), "session_key", None)
        record = functools.partial(compat.record_result, sessions, key, name, arguments)
        return await self.service.call(name, arguments, on_cancelled=record)

    def is_interrupted(self) -> bool:
        """False: a cancelled turn interrupts its own call (see :meth:`LineUpService.call`)."""
        return False

    def heartbeat(self, label: str, started: float) -> None:
        """Nothing: nanobot awaits a tool without a time limit."""

    def conversation(self) -> Conversation | None:
        """The nanobot session asking, as a conversation of its own (``nanobot-<session key>``)."""
        context = compat.current_request_context()
        if context is None:
            return None
        key = context.session_key or f"{context.channel}:{context.chat_id}"
        return Conversation(f"nanobot-{key}"[:200], f"nanobot {context.channel} · {context.chat_id}"[:200])

    def call_origin(self) -> Origin | None:
        """``cli`` for nanobot's CLI, ``cron`` (the job) for a cron job's turn, else ``gateway`` (the chat)."""
        from .. import Origin

        context = compat.current_request_context()
        if context is None:
            return None
        job = compat.cron_job(context)
        if job is not None:
            return Origin(kind="cron", label=job[:120])
        kind: Literal["cli", "gateway"] = "cli" if context.channel == "cli" else "gateway"
        return Origin(kind=kind, label=f"nanobot {context.channel} · {context.chat_id}"[:120])

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """False: nanobot's chats live in its own channels."""
        return False

    def interrupt(self, message: str | None = None) -> bool:
        """Stop every turn of this process that waits on a card: a bus turn is cancelled as by ``/stop``; a
        direct run's call ends ``cancelled`` (its caller owns the task)."""
        awaited = self.service.awaited_calls()
        for one in awaited:
            if one.task is not None and compat.dispatched_turn(one.task):
                one.cancel_task()
            else:
                one.withdraw()
        return bool(awaited)

    def steer(self, text: str) -> bool:
        """False: a tool cannot add to a nanobot turn."""
        return False


_runtime: NanobotRuntime | None = None
_runtime_lock = threading.Lock()


def installed() -> NanobotRuntime:
    """This process's runtime, made (settings read, tools loaded) on first use; its server stops at exit."""
    global _runtime
    with _runtime_lock:
        if _runtime is None:
            _runtime = NanobotRuntime()
            atexit.register(_runtime.service.stop)
        return _runtime


def uninstall() -> None:
    """Stop this process's server and forget the runtime (tests; nanobot has no plugin unload)."""
    global _runtime
    with _runtime_lock:
        runtime, _runtime = _runtime, None
    if runtime is not None:
        runtime.service.stop()
