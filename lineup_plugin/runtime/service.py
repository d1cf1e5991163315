"""LineUp inside one agent process, whatever the runtime: settings, tools, the server and its lock.

:class:`LineUpService` is the runtime-neutral orchestration an adapter (Hermes today; an MCP
server, say, tomorrow) builds on:

- **settings and registry, made on first use**: either may be given as a function that makes it,
  so an agent's start pays for neither (the tools it registers meanwhile are plain function
  schemas);
- **one server per data directory**: :meth:`LineUpService.ensure_started` takes the OS file lock
  (:mod:`.lock`) and runs the hub and its transport in a :class:`~.loop.Runner`; another process
  that needs the server is told which process owns it;
- **the blocking call**: :meth:`LineUpService.call_blocking` (what the runtime's tools run, through
  :class:`~.base.ToolBridge`) starts the server if nobody serves yet, pushes ``waiting_input``
  to the App while the user answers, then ``running``; :meth:`LineUpService.call` is the same call
  awaited by an asyncio task (on a thread of its own; cancelling the task withdraws the card);
- **the hub's callbacks**: App text goes to :meth:`AgentRuntime.deliver_message
  <lineup_plugin.runtime.base.AgentRuntime.deliver_message>`; the App's stop button to
  :meth:`~lineup_plugin.runtime.base.AgentRuntime.interrupt` (on a worker thread, so a runtime may
  wait for its run to stop), then every open card is closed; App-declared tools become runtime
  tools (:meth:`LineUpService.sync_tools`).

**Every process can ask.** Only one process serves the App; a call made in any other process of
the same data directory is forwarded to it (:mod:`.forward`: a Unix socket only this user can
open, plus a token), with its interrupts, and gets the same statuses as a call made there. The
call keeps its id: when the serving process exits or is killed, a process still waiting takes
over serving (or forwards to the one that did) and the card stays answerable. Each call says
which session asks (:meth:`LineUpService.origin`), and the App shows it on the card.

With no App connected every tool stays visible to the model, and a call ends ``failed`` with
"no LineUp App is connected; ask the user to open the App" (hiding tools would change the tool
list, and the prompt cache with it, each time a phone locks its screen, and the model could not
tell the user why it cannot ask) — except just after this process started serving: then the
link is on screen and the App may be on its way, so a call first waits for an App to connect
until ``app_grace`` seconds after the start (:func:`app_grace`; honouring interrupts).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import logging
import sys
import threading
import time
import weakref
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import LineUpError, OwnerUnreachable, TransportError
from .base import AgentRuntime, Conversation, ToolBridge, result_json
from .lock import Owner, ServerLock, program

if TYPE_CHECKING:
    import asyncio

    from ..config.settings import Settings
    from ..hub import Hub
    from ..media import StoredFile
    from ..protocol.messages import AgentState, Origin, ToolResult
    from ..tools.registry import Registry
    from .forward import Forwarder
    from .loop import Runner

log = logging.getLogger(__name__)

T = TypeVar("T")

#: what the App is told when its text reaches no agent
NOT_TAKING_MESSAGES = "The agent is not taking messages from the App right now."
#: why the App's stop button closes the cards still open
STOPPED_BY_USER = "stopped by the user"
#: ``app_grace`` when not set, in a process on an interactive terminal (seconds)
INTERACTIVE_APP_GRACE = 120.0
#: seconds a process keeps trying to reach the serving process (it may be starting, or handing over)
FORWARD_PATIENCE = 10.0
#: what kind of session a process's calls come from, by the process's role
ORIGIN_KINDS = {"gateway": "gateway", "cli": "cli", "mcp": "mcp"}


def app_grace(setting: float | None, *, interactive: bool | None = None) -> float:
    """Seconds after the server's start during which a call waits for an App to connect.

    ``setting`` is ``app_grace``; unset, it is :data:`INTERACTIVE_APP_GRACE` when a person is at
    this process's terminal (``interactive``; default: stdin and stderr are terminals), else 0.
    """
    if setting is not None:
        return setting
    if interactive is None:
        interactive = sys.stdin.isatty() and sys.stderr.isatty()
    return INTERACTIVE_APP_GRACE if interactive else 0.0


@dataclass(eq=False)
class AwaitedCall:
    """A LineUp call an asyncio task awaits (:meth:`LineUpService.call`): the task, its loop, and whether the call
    was withdrawn (:meth:`withdraw`)."""

    task: asyncio.Task[Any] | None
    loop: asyncio.AbstractEventLoop
    withdrawn: threading.Event = field(default_factory=threading.Event)

    def withdraw(self) -> None:
        """End the call ``cancelled`` (its card withdrawn on every device) without cancelling the task; any thread."""
        self.withdrawn.set()

    def cancel_task(self) -> None:
        """Cancel the awaiting task, as the runtime's own stop would (any thread; nothing once its loop closed)."""
        if self.task is not None:
            with contextlib.suppress(RuntimeError):  # a closed loop: nothing awaits any more
                self.loop.call_soon_threadsafe(self.task.cancel)


class LineUpService:
    """LineUp in one agent process: settings, tools, the server lock, and (maybe) the server.

    ``settings`` and ``registry`` may be given as functions that make them: they then run on first
    use (the server's start, or a tool call). Until the registry is loaded the tools registered
    with the runtime are the function schemas ``tools``. ``role`` says what kind of process this
    is (written in the lock file for the other processes' messages); a function is asked each
    time it is needed.
    """

    def __init__(
        self,
        runtime: AgentRuntime,
        settings: Settings | Callable[[], Settings],
        registry: Registry | Callable[[], Registry],
        *,
        tools: list[dict[str, Any]] | None = None,
        role: str | Callable[[], str] = "process",
    ) -> None:
        self.runtime = runtime
        self._settings: Settings | None = None if callable(settings) else settings
        self._make_settings: Callable[[], Settings] | None = settings if callable(settings) else None
        self._registry: Registry | None = None if callable(registry) else registry
        self._make_registry: Callable[[], Registry] | None = registry if callable(registry) else None
        self._tools = tools
        self._role = role
        self._started_as: str | None = None
        self._lock: ServerLock | None = None
        self._start_lock = threading.RLock()
        self._refused_logged = False
        self._started_at = 0.0
        self.runner: Runner | None = None
        self.owner: Owner | None = None
        self._forwarder: Forwarder | None = None
        self._awaited: set[AwaitedCall] = set()
        self._awaited_lock = threading.Lock()
        self._followed: weakref.WeakSet[asyncio.Task[Any]] = weakref.WeakSet()
        self.bridge = ToolBridge(runtime, self, self.call_blocking, deadline_for=self.deadline_for)

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
                    self._refresh_schema_cache(self._registry)
        return self._registry

    def _refresh_schema_cache(self, registry: Registry) -> None:
        """The tools were registered from kept schemas that differ from the plugins' now: keep the new ones."""
        from ..plugins import remember_function_schemas, third_party_plugins

        if self._tools is not None and third_party_plugins():
            schemas = registry.function_schemas()
            if schemas != self._tools:
                remember_function_schemas(self.settings.data_dir, schemas)

    @property
    def lock(self) -> ServerLock:
        """The lock on the data directory that the process serving the App holds."""
        if self._lock is None:
            with self._start_lock:
                if self._lock is None:
                    self._lock = ServerLock(self.settings.data_dir)
        return self._lock

    def function_schemas(self) -> list[dict[str, Any]]:
        """The tools to register with the runtime: the registry's once loaded, else the schemas given."""
        if self._registry is None and self._tools is not None:
            return list(self._tools)
        return self.registry.function_schemas()

    def deadline_for(self, name: str) -> float:
        """The wait deadline of tool ``name`` (``deadlines.<name>``, else ``deadline``)."""
        return self.settings.deadlines.get(name, self.settings.deadline)

    def sync_tools(self) -> None:
        """Register new tools with the runtime, remove gone ones, and have it refresh what it cached."""
        added, removed = self.bridge.sync()
        if added or removed:
            log.info("lineup: tools changed (+%s -%s)", added, removed)
            self.runtime.tools_changed()

    # server lifecycle ------------------------------------------------------------------

    @property
    def role(self) -> str:
        """What kind of process this is (``gateway``, ``cli``, ``process``...): as started, else as ``role`` says."""
        if self._started_as is not None:
            return self._started_as
        return self._role() if callable(self._role) else self._role

    @property
    def serving(self) -> bool:
        """Whether this process owns the running server."""
        return self.runner is not None

    @property
    def app_connected(self) -> bool:
        """Whether this process serves and at least one App device is connected."""
        runner = self.runner
        try:
            return runner is not None and runner.hub.connected
        except TransportError:  # stopping
            return False

    def ensure_started(self, reason: str, *, role: str | None = None) -> bool:
        """Start the server here unless another process owns it; True when this process serves.

        Idempotent and thread-safe. ``reason`` is logged (gateway connect, session start...);
        ``role`` overrides what this process is taken for until :meth:`stop`.
        """
        with self._start_lock:
            if self.runner is not None:
                return True
            if role is not None:
                self._started_as = role
            if not self.lock.acquire(self.role):
                self.owner = self.lock.owner()
                if not self._refused_logged:
                    log.info("lineup: the server runs in another process (%s)", self.owner or "unknown")
                    self._refused_logged = True
                return False
            try:
                from .forward import ForwardServer, platform_supported
                from .loop import Runner  # the server's code is loaded by the process that serves

                data_dir = self.settings.data_dir
                runner = Runner(
                    self.settings,
                    self.registry,
                    services=[lambda hub: ForwardServer(hub, data_dir)] if platform_supported() else [],
                    on_text=self._on_text,
                    on_stop=self._on_stop,
                    on_tools_changed=self._on_tools_changed,
                    on_files=self._on_files,
                )
                runner.start()
            except BaseException:
                self.lock.release()
                raise
            self.runner = runner
            self.owner = None
            self._started_at = time.monotonic()
            log.info("lineup: serving the App for this %s process (%s)", self.role, reason)
            self._announce(runner)
            return True

    def _announce(self, runner: Runner) -> None:
        transport = runner.transport
        log.info("%s", self.settings.describe_mode())
        log.info("lineup: %s", transport.describe())
        if not self._on_terminal():
            return
        # a person is watching this terminal; the link (with the token) never goes to logs
        link = transport.connect_link
        if link is None:
            print(f"📱 LineUp {transport.describe()}", file=sys.stderr)
            return
        from ..qr import terminal_qr

        print(f"📱 LineUp App: open {link} on your phone", file=sys.stderr)
        print(terminal_qr(link), file=sys.stderr)

    def _on_terminal(self) -> bool:
        """Whether a person watches this terminal and the runtime lets LineUp print there (not quiet)."""
        return sys.stderr.isatty() and self.runtime.may_print()

    def stop(self) -> None:
        """Stop the server (if this process runs it) and release the lock."""
        with self._start_lock:
            runner, self.runner = self.runner, None
            self._started_as = None
            if runner is not None:
                try:
                    runner.stop()
                finally:
                    self.lock.release()
                log.info("lineup: server stopped")

    def status_line(self, *, show_link: bool) -> str:
        """One line for a person: where the App is served and how many devices are on, or who serves it.

        ``show_link`` adds the link that opens the App paired (it holds the token: only for a person
        at this machine).
        """
        runner = self.runner
        if runner is None:
            owner = self.owner or self.lock.owner()
            return f"the App is served by another {self.runtime.label} process ({owner or 'unknown'})."
        transport = runner.transport
        devices = len(runner.hub.peers)
        line = f"{transport.describe()} ({devices} device{'s' if devices != 1 else ''} connected)."
        link = transport.connect_link
        if show_link and link is not None:
            line += f"\nOpen {link} on your phone."
        return line

    # the hub, from the runtime's threads ---------------------------------------------------

    def on_hub(self, func: Callable[[Hub], Awaitable[T]]) -> concurrent.futures.Future[T] | None:
        """Run ``func(hub)`` as a task of the server's loop, without waiting; None if this process does not serve."""
        runner = self.runner
        if runner is None:
            return None
        try:
            return runner.submit(func, runner.hub)
        except TransportError:  # stopping
            return None

    def report_status(
        self, state: AgentState, detail: str | None = None, *, conversation: Conversation | None = None
    ) -> None:
        """Push ``agent.status`` (of ``conversation``) to the App (through the serving process when another one
        serves it)."""
        conversation_id = self.conversation_id(conversation)
        if self.on_hub(lambda hub: hub.set_status(state, detail, conversation_id=conversation_id)) is None:
            self._tell_server({"op": "status", "state": state, "detail": detail}, conversation)

    def send_text(self, text: str, *, conversation: Conversation | None = None) -> None:
        """Send an agent message (in ``conversation``) to the App (through the serving process when another one
        serves it)."""
        conversation_id = self.conversation_id(conversation)
        if self.on_hub(lambda hub: hub.send_text(text, conversation_id=conversation_id)) is None:
            self._tell_server({"op": "text", "text": text}, conversation)

    def conversation_id(self, conversation: Conversation | None) -> str | None:
        """The id of ``conversation`` for the hub, once its title is told to the App (None: the default)."""
        if conversation is None:
            return None
        if conversation.title:
            self.on_hub(lambda hub: hub.name_conversation(conversation.id, conversation.title or ""))
        return conversation.id

    def _tell_server(self, message: dict[str, Any], conversation: Conversation | None = None) -> None:
        """Pass a status or reply of this process's session (``conversation``) on to the serving process, if one
        serves."""
        from ..protocol.forward import StatusLine, TextLine
        from .forward import conversation_ref, platform_supported

        if self.runner is not None or not platform_supported() or self.lock.owner() is None:
            return
        kind = StatusLine if message["op"] == "status" else TextLine
        line = kind.model_construct(**message, conversation=conversation_ref(conversation))
        try:
            self.forwarder.notify(line)
        except Exception as exc:  # the App misses one status line or reply; the calls are unaffected
            log.debug("lineup: could not pass %s on to the serving process: %s", message["op"], exc)

    def not_serving_result(self, name: str, call_id: str | None = None, why: str = "") -> ToolResult:
        """The ``failed`` result of a call made in a process that does not own the server and cannot reach it."""
        from ..hub import failure
        from ..protocol import codec

        owner = self.lock.owner() or self.owner  # the file first: the owner may have changed since
        where = f"another {self.runtime.label} process" + (f" ({owner})" if owner else "")
        message = (
            f"the LineUp App is served by {where}, which this process cannot reach"
            + (f" ({why})" if why else "")
            + "; use LineUp tools from that process, or stop it to serve the App from here"
        )
        return failure(call_id or codec.new_id("call"), name, "failed", message, error="not_owner")

    def start_failed_result(self, name: str, error: BaseException) -> ToolResult:
        """The ``failed`` result of a call whose process could not start the server (e.g. the port is in use)."""
        from ..hub import failure
        from ..protocol import codec

        message = f"the LineUp App cannot be served from this process: {error}"
        return failure(codec.new_id("call"), name, "failed", message, error="start_failed")

    def origin(self) -> Origin:
        """Which session asks, for the card: the runtime's answer for this thread, else the process's kind."""
        from ..protocol.messages import Origin

        given = self.runtime.call_origin()
        if given is not None:
            return given
        name = program()
        kind = ORIGIN_KINDS.get(self.role) or ("chat" if " chat" in f" {name}" else "process")
        return Origin(kind=kind, label=name[:120] or None)  # type: ignore[arg-type]

    @property
    def forwarder(self) -> Forwarder:
        """This process's way to the serving process's forwarding socket."""
        if self._forwarder is None:
            from .forward import Forwarder

            self._forwarder = Forwarder(self.settings.data_dir)
        return self._forwarder

    def call_blocking(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None],
        deadline: float,
        conversation: Conversation | None = None,
    ) -> ToolResult:
        """Run one LineUp tool call (on the runtime's worker thread) and wait for its end.

        The call belongs to ``conversation`` (the card says which; None: the default one).

        Starts the server if no process serves yet (a server that cannot start, e.g. on a port in
        use, ends the call ``failed`` with the reason, error ``start_failed``); else forwards the
        call to the process that serves. If that process goes away before the call ends, this one
        takes over serving (or forwards to the one that did) with the same call id. While the
        user answers the App shows ``waiting_input``; then ``running``. Never raises for a
        failed call.
        """
        from ..hub import failure
        from ..protocol import codec
        from ..protocol.forward import HandOver
        from .forward import platform_supported

        call_id = codec.new_id("call")
        self.runtime.call_started(call_id)
        origin = self.origin()
        policy = HandOver(time.monotonic, ends=time.monotonic() + deadline, patience=FORWARD_PATIENCE)
        while True:
            try:
                runner = self.runner if self.ensure_started(f"first use of {name}") else None
            except Exception as exc:  # the port is in use, the relay cannot be reached...
                log.warning("lineup: cannot serve the App for %s: %s", name, exc)
                return self.start_failed_result(name, exc)
            if runner is not None:
                # a process that took over from one that went away: its App is on its way back
                took_over = self.settings.handover_grace if policy.took_over else 0.0
                return self._call_here(
                    runner, name, flat_args, call_id, origin, is_interrupted, heartbeat, policy.ends, took_over,
                    conversation,
                )  # fmt: skip
            if not platform_supported():
                return self.not_serving_result(name, call_id, "no Unix sockets on this system")
            try:
                return self.forwarder.call(
                    name,
                    flat_args,
                    call_id=call_id,
                    deadline=policy.left(),
                    origin=origin,
                    is_interrupted=is_interrupted,
                    heartbeat=heartbeat,
                    on_interrupt=self._interrupted_by_server,
                    conversation=conversation,
                )
            except OwnerUnreachable as exc:
                why = str(exc)
            except LineUpError as exc:
                log.warning("lineup: forwarding %s failed: %s", name, exc)
                return failure(call_id, name, "failed", str(exc), error="forward_failed")
            log.info("lineup: %s: %s; trying again", name, why)
            if is_interrupted():
                from ..protocol.live import interrupt_reason

                return failure(call_id, name, "cancelled", interrupt_reason(is_interrupted))
            retry_at = policy.failed()
            if retry_at is None:
                return self.not_serving_result(name, call_id, why)
            while time.monotonic() < retry_at and not is_interrupted():
                heartbeat()
                time.sleep(0.05)

    async def call(
        self, name: str, flat_args: dict[str, Any], *, on_cancelled: Callable[[str], object] | None = None
    ) -> str:
        """Run one LineUp tool call for the awaiting asyncio task (an asyncio runtime's tool): the result's JSON.

        The asyncio twin of a tool's handler (:data:`~.base.ToolHandler`): it returns
        :func:`~.base.result_json` of the call's result.

        The blocking call (through :attr:`bridge`, so with the tool's deadline and the runtime's
        heartbeat) runs on a thread of its own, in a copy of the task's context: the runtime's
        :meth:`~AgentRuntime.conversation` and :meth:`~AgentRuntime.call_origin` see the task's
        context variables. Until it ends the call is one of :meth:`awaited_calls`. It is
        interrupted when the runtime says so, when it is withdrawn (:meth:`AwaitedCall.withdraw`:
        it then returns ``cancelled``), or when the awaiting task is cancelled: then the card is
        withdrawn on every device (this waits for that, through further cancellations),
        ``on_cancelled`` gets the ``cancelled`` result's JSON, and the :class:`asyncio.CancelledError` is
        raised again. Never raises for a failed call.
        """
        import asyncio

        awaited = AwaitedCall(asyncio.current_task(), asyncio.get_running_loop())
        outcome: concurrent.futures.Future[str] = concurrent.futures.Future()
        context = contextvars.copy_context()

        def interrupted() -> bool:
            return awaited.withdrawn.is_set() or self.runtime.is_interrupted()

        def work() -> None:
            try:
                result = context.run(self.bridge.call_tool, name, flat_args, is_interrupted=interrupted)
                outcome.set_result(result_json(result))
            except BaseException as exc:  # the bridge gives every failure as a result: a bug
                outcome.set_exception(exc)

        done = asyncio.wrap_future(outcome)
        with self._awaited_lock:
            self._awaited.add(awaited)
        threading.Thread(target=work, name=f"lineup-{name}", daemon=True).start()
        try:
            return await asyncio.shield(done)
        except asyncio.CancelledError:
            awaited.withdraw()
            while not done.done():  # the card is withdrawn within the runner's cancel grace
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(done)
            if on_cancelled is not None:
                on_cancelled(done.result())
            raise
        finally:
            with self._awaited_lock:
                self._awaited.discard(awaited)

    def report_when_done(self, task: asyncio.Task[Any] | None, conversation: Conversation | None = None) -> None:
        """Tell the App when ``task`` (an asyncio runtime's turn that called a tool) ends: ``interrupted`` when it
        was cancelled, ``failed`` when it raised, else ``idle`` (once per task; None: nothing)."""
        if task is None or task in self._followed:
            return
        self._followed.add(task)

        def ended(task: asyncio.Task[Any]) -> None:
            state = "interrupted" if task.cancelled() else "failed" if task.exception() else "idle"
            report = self.report_status  # it may reach the serving process: off the task's loop
            threading.Thread(target=report, args=(state,), kwargs={"conversation": conversation}, daemon=True).start()

        task.add_done_callback(ended)

    def awaited_calls(self) -> list[AwaitedCall]:
        """The calls asyncio tasks await now (:meth:`call`), for a runtime's :meth:`~AgentRuntime.interrupt`."""
        with self._awaited_lock:
            return list(self._awaited)

    def _call_here(
        self,
        runner: Runner,
        name: str,
        flat_args: dict[str, Any],
        call_id: str,
        origin: Origin,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None],
        ends: float,
        took_over: float = 0.0,
        conversation: Conversation | None = None,
    ) -> ToolResult:
        """The call, in the process that serves the App (``took_over``: wait that long for the App to come back)."""
        self._await_app(runner, name, is_interrupted, heartbeat, at_least=took_over)
        self.report_status("waiting_input", name, conversation=conversation)
        try:
            return runner.call_blocking(
                name,
                flat_args,
                is_interrupted=is_interrupted,
                heartbeat=heartbeat,
                deadline=max(0.0, ends - time.monotonic()),
                call_id=call_id,
                origin=origin,
                conversation_id=self.conversation_id(conversation),
            )
        finally:
            self.report_status("running", conversation=conversation)

    def _interrupted_by_server(self, reason: str) -> None:
        """The serving process passed on the App's stop button: stop this process's run too (not on this thread)."""
        threading.Thread(target=self.runtime.interrupt, args=(None,), name="lineup-interrupt", daemon=True).start()

    def _await_app(
        self,
        runner: Runner,
        name: str,
        is_interrupted: Callable[[], bool],
        heartbeat: Callable[[], None],
        *,
        at_least: float = 0.0,
    ) -> None:
        """Just after the server started, with no App yet: wait for one until the grace ends (``at_least`` seconds)."""
        left = max(self._started_at + app_grace(self.settings.app_grace) - time.monotonic(), at_least)
        if left <= 0 or self.app_connected:
            return
        log.info("lineup: %s waits up to %.0f s for the App to connect", name, left)
        if self._on_terminal():
            print(f"📱 LineUp: waiting for the App to connect ({name}; up to {left:.0f} s)…", file=sys.stderr)
        runner.wait_for_app(left, is_interrupted=is_interrupted, heartbeat=heartbeat)

    # hub callbacks (run on the server's event loop) -------------------------------------

    async def _on_text(self, device_id: str, text: str) -> None:
        await self._deliver(lambda where: self.runtime.deliver_message(text, sender=device_id, conversation_id=where))

    async def _on_files(self, device_id: str, text: str, files: list[StoredFile]) -> None:
        await self._deliver(
            lambda where: self.runtime.deliver_files(text, files, sender=device_id, conversation_id=where)
        )

    async def _deliver(self, deliver: Callable[[str | None], bool]) -> None:
        """App text to the runtime, in the conversation it was typed in; the App hears when nobody takes it."""
        runner = self.runner
        conversation_id = runner.hub.text_conversation if runner is not None else None
        if not deliver(conversation_id) and runner is not None:
            await runner.hub.send_text(NOT_TAKING_MESSAGES, conversation_id=conversation_id)

    async def _on_stop(self, device_id: str) -> None:
        """The App's stop button: stop the run first, then close whatever card is still open.

        In that order the agent is already flagged as interrupted when its tool returns, so it
        makes no further model call. The runtime's interrupt runs on a worker thread: it may wait
        until the run has taken the stop in.
        """
        import anyio

        from .forward import ForwardServer

        await anyio.to_thread.run_sync(self.runtime.interrupt, None)
        runner = self.runner
        if runner is not None and runner.running:
            for service in runner.services:  # the other processes' runs stop too
                if isinstance(service, ForwardServer):
                    service.interrupt_all(STOPPED_BY_USER)
            await runner.hub.cancel_all(STOPPED_BY_USER)

    async def _on_tools_changed(self) -> None:
        import anyio

        await anyio.to_thread.run_sync(self.sync_tools)
