""":class:`NanobotRuntime`: the :class:`~lineup_plugin.runtime.AgentRuntime` of a nanobot process.

nanobot awaits a tool's ``execute`` with no time limit and cancels the turn's task on ``/stop``
or shutdown. So a LineUp call runs the service's blocking call on a thread of its own (the
card's deadline is its only limit) while ``execute`` awaits it. A cancellation marks the call
interrupted, waits until the card is withdrawn on every device, records the ``cancelled`` result
as the call's answer in nanobot's turn checkpoint (what the model reads next) and re-raises.
The App's stop button cancels the turns that wait on a card, as ``/stop`` would; when a turn
that asked ends, the App is told (``idle``, ``interrupted`` or ``failed``). nanobot gives a tool
no chat of its own, so App text reaches no turn (the App is told the agent takes no messages).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import contextvars
import threading
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import AgentRuntime, Conversation, LineUpService, ToolHandler
from . import compat

if TYPE_CHECKING:
    from .. import Origin


@dataclass(eq=False)
class AwaitedCall:
    """One LineUp call awaited by a nanobot turn (its task, on ``loop``), and whether it was cancelled."""

    task: asyncio.Task[Any] | None
    loop: asyncio.AbstractEventLoop
    cancelled: threading.Event = field(default_factory=threading.Event)


#: the call running on this thread (its context is the awaiting turn's, copied)
_AWAITED: contextvars.ContextVar[AwaitedCall | None] = contextvars.ContextVar("lineup_awaited", default=None)


class NanobotRuntime(AgentRuntime):
    """:class:`AgentRuntime` of a nanobot process, with its :class:`LineUpService` (settings: ``LINEUP_*``)."""

    name = "nanobot"
    label = "nanobot"

    def __init__(self) -> None:
        from ...config.settings import load_settings
        from .. import load_registry

        self._awaited: set[AwaitedCall] = set()
        self._turns: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self._lock = threading.Lock()
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
        awaited = AwaitedCall(asyncio.current_task(), asyncio.get_running_loop())
        token = _AWAITED.set(awaited)
        context = contextvars.copy_context()
        _AWAITED.reset(token)
        self._follow(awaited.task)
        outcome: concurrent.futures.Future[str] = concurrent.futures.Future()

        def work() -> None:
            try:
                outcome.set_result(context.run(self.service.bridge.handler(name), arguments))
            except BaseException as exc:  # the bridge gives every failure as a result: a bug
                outcome.set_exception(exc)

        done = asyncio.wrap_future(outcome)
        with self._lock:
            self._awaited.add(awaited)
        threading.Thread(target=work, name=f"lineup-{name}", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            awaited.cancelled.set()
            while not done.done():  # the card is withdrawn within the runner's cancel grace
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(done)
            session_key = getattr(compat.request_context(), "session_key", None)
            compat.record_result(sessions, session_key, name, arguments, done.result())
            raise
        finally:
            with self._lock:
                self._awaited.discard(awaited)

    def _follow(self, task: asyncio.Task[Any] | None) -> None:
        """Tell the App when the turn ``task`` ends (once per turn)."""
        if task is None or task in self._turns:
            return
        self._turns.add(task)
        conversation = self.conversation()

        def ended(task: asyncio.Task[Any]) -> None:
            state = "interrupted" if task.cancelled() else "failed" if task.exception() else "idle"
            report = self.service.report_status  # it may reach the serving process: off nanobot's loop
            threading.Thread(target=report, args=(state,), kwargs={"conversation": conversation}, daemon=True).start()

        task.add_done_callback(ended)

    def is_interrupted(self) -> bool:
        """Whether the nanobot turn awaiting the call on this thread was cancelled."""
        awaited = _AWAITED.get()
        return awaited is not None and awaited.cancelled.is_set()

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
        """``cli`` for nanobot's CLI, ``cron`` (the job) for a cron job's turn, else ``gateway`` (the chat)."""
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

    def deliver_message(self, text: str, *, sender: str, conversation_id: str | None = None) -> bool:
        """False: nanobot's chats live in its own channels."""
        return False

    def interrupt(self, message: str | None = None) -> bool:
        """Stop every turn of this process that waits on a card: a bus turn is cancelled as by ``/stop``; a
        direct run's call ends ``cancelled`` (its caller owns the task)."""
        with self._lock:
            awaited = list(self._awaited)
        for one in awaited:
            if one.task is not None and compat.dispatched_turn(one.task):
                with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits any more
                    one.loop.call_soon_threadsafe(one.task.cancel)
            else:
                one.cancelled.set()
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
