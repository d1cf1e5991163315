""":class:`NanobotRuntime`: the :class:`~lineup_plugin.runtime.base.AgentRuntime` of a nanobot process.

nanobot awaits a tool's ``execute`` with no time limit and cancels the turn's task on ``/stop``
or shutdown. So a LineUp call runs the service's blocking call on a thread of its own (the
card's deadline is the only limit) while ``execute`` awaits it; a cancellation marks the call
interrupted, waits until the card is withdrawn on every device, records the ``cancelled``
result as the call's answer in nanobot's turn checkpoint (what the model reads next) and
re-raises. The App's stop button cancels the turns that wait on a card, as ``/stop`` would.

nanobot gives a plugin tool no way to reach a chat of its own, so App text reaches no turn here
(the App is told the agent takes no messages).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import AgentRuntime, Conversation, LineUpService, ToolHandler
from . import compat

if TYPE_CHECKING:
    from .. import Origin


@dataclass(eq=False)
class AwaitedCall:
    """One LineUp call awaited by a nanobot turn: the turn's task and loop, and whether it was cancelled."""

    task: asyncio.Task[Any] | None
    loop: asyncio.AbstractEventLoop
    cancelled: threading.Event = field(default_factory=threading.Event)

    def stop(self) -> None:
        """Cancel the turn that waits (as ``/stop`` does), from any thread."""
        if self.task is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits any more
                self.loop.call_soon_threadsafe(self.task.cancel)


#: the call running on this thread (its context is the awaiting turn's, copied)
_WAITING: contextvars.ContextVar[AwaitedCall | None] = contextvars.ContextVar("lineup_nanobot_waiting", default=None)


class NanobotRuntime(AgentRuntime):
    """:class:`AgentRuntime` of a nanobot process, with its :class:`LineUpService` (settings from ``LINEUP_*``)."""

    name = "nanobot"
    label = "nanobot"

    def __init__(self) -> None:
        from ...config.settings import load_settings
        from .. import load_registry

        self._schemas: dict[str, dict[str, Any]] = {}
        self._waiting: set[AwaitedCall] = set()
        self._lock = threading.Lock()
        self.service = LineUpService(self, load_settings(), load_registry(), role="nanobot")
        self.service.bridge.sync(force=True)

    # tools: nanobot's list is fixed at its start, so the schemas are kept for the dispatcher ---------

    def register_tool(self, schema: dict[str, Any], handler: ToolHandler) -> None:
        """Keep ``schema`` (calls go through :meth:`call`)."""
        with self._lock:
            self._schemas[schema["name"]] = schema

    def unregister_tool(self, name: str) -> None:
        """Forget ``name``."""
        with self._lock:
            self._schemas.pop(name, None)

    def schemas(self) -> list[dict[str, Any]]:
        """Every LineUp tool's function schema: built-in, plugin and (in the serving process) App-declared."""
        with self._lock:
            return list(self._schemas.values())

    def schema(self, name: str) -> dict[str, Any] | None:
        """The function schema of tool ``name``, if known here."""
        with self._lock:
            return self._schemas.get(name)

    # one call --------------------------------------------------------------------------------

    async def call(self, name: str, arguments: dict[str, Any], sessions: Any = None) -> str:
        """Call LineUp tool ``name`` for the nanobot turn awaiting this; the result's JSON for the model.

        ``sessions`` is nanobot's session manager, where a cancelled call's result is recorded.
        """
        loop = asyncio.get_running_loop()
        waiting = AwaitedCall(asyncio.current_task(), loop)
        token = _WAITING.set(waiting)
        context = contextvars.copy_context()
        _WAITING.reset(token)
        outcome: concurrent.futures.Future[str] = concurrent.futures.Future()

        def work() -> None:
            try:
                outcome.set_result(context.run(self.service.bridge.handler(name), arguments))
            except BaseException as exc:  # the bridge gives every failure as a result; this is a bug
                outcome.set_exception(exc)

        done = asyncio.wrap_future(outcome)
        with self._lock:
            self._waiting.add(waiting)
        threading.Thread(target=work, name=f"lineup-{name}", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            waiting.cancelled.set()
            while not done.done():  # the card is withdrawn within the runner's cancel grace
                try:
                    await asyncio.shield(done)
                except asyncio.CancelledError:
                    continue
            session_key = getattr(compat.request_context(), "session_key", None)
            compat.record_result(sessions, session_key, name, arguments, done.result())
            raise
        finally:
            with self._lock:
                self._waiting.discard(waiting)

    def is_interrupted(self) -> bool:
        """Whether the nanobot turn awaiting the call on this thread was cancelled."""
        waiting = _WAITING.get()
        return waiting is not None and waiting.cancelled.is_set()

    def heartbeat(self, label: str, started: float) -> None:
        """Nothing: nanobot awaits a tool without a time limit."""

    def conversation(self) -> Conversation | None:
        """The nanobot session asking, as a conversation of its own (``nanobot-<session key>``)."""
        context = compat.request_context()
        if context is None:
            return None
        key = context.session_key or f"{context.channel}:{context.chat_id}"
        return Conversation(f"nanobot-{key}"[:200], f"nanobot {context.channel} · {context.chat_id}"[:200])

    def call_origin(self) -> Origin | None:
        """``cli`` for nanobot's CLI, ``cron`` for a cron job's turn, else ``gateway``; labelled with the chat."""
        from .. import Origin

        context = compat.request_context()
        if context is None:
            return None
        job = compat.cron_job(context)
        if job is not None:
            return Origin(kind="cron", label=job[:120])
        return Origin(
            kind="cli" if context.channel == "cli" else "gateway",
            label=f"nanobot {context.channel} · {context.chat_id}"[:120],
        )

    # messages and runs ------------------------------------------------------------------------

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """False: nanobot's chats live in its own channels."""
        return False

    def interrupt(self, message: str | None = None) -> bool:
        """Cancel every turn of this process that waits on a LineUp card, as ``/stop`` does."""
        with self._lock:
            waiting = list(self._waiting)
        for one in waiting:
            one.stop()
        return bool(waiting)

    def steer(self, text: str) -> bool:
        """False: a plugin cannot add to a nanobot turn."""
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
