"""The hub and its transport on a background event loop, for runtimes whose tools are synchronous.

A Hermes-style runtime calls its tools on worker threads and expects them to block. The hub and
the transports are asyncio code. :class:`Runner` runs them in an anyio blocking portal
(:func:`anyio.from_thread.start_blocking_portal`: an asyncio loop on a daemon thread named
``lineup-hub``) and offers blocking entry points::

    runner = Runner(settings, registry, on_text=deliver)   # hub options: on_text, on_stop, ...
    runner.start()                                         # raises if the transport cannot start
    print(runner.transport.describe(), runner.transport.connect_link)
    result = runner.call_blocking("choice", {"question": "...", "options": [...]},
                                  is_interrupted=agent_was_interrupted, heartbeat=touch, deadline=600)
    runner.submit(runner.hub.send_text, "done")            # a task of the portal; run() waits for it
    runner.stop()

The hub is :meth:`Hub.from_settings <lineup_plugin.hub.Hub.from_settings>`; the transport is
:func:`~lineup_plugin.transports.transport_for` (``settings.effective_mode``) unless
``transport=`` builds another. The hub's callbacks (``on_text``...) run on the loop's thread:
hand work back to the runtime's own threads from there.

Structured concurrency: the serving task (the hub and the transport, entered as an async
context) is a task of the portal's task group; one task per blocking call and each submitted
function are started on the portal's loop with ``asyncio.run_coroutine_threadsafe`` (a third of
the cost of the portal's ``start_task_soon``, paid on every tool call) and kept by the runner.
:meth:`Runner.stop` ends the serving task (live calls are cancelled and the devices told), then
cancels every task still kept, then the portal's. Nothing is left running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager, AbstractContextManager, AsyncExitStack
from importlib.resources.abc import Traversable
from typing import Any, TypeVar, TypeVarTuple

import anyio
from anyio.abc import TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

from ..config.settings import Settings
from ..errors import TransportError
from ..hub import Hub, failure
from ..ports import Transport
from ..protocol import codec
from ..protocol.live import INTERRUPTED, interrupt_reason
from ..protocol.messages import Origin, ToolResult
from ..tools.registry import Registry
from ..transports import transport_for

log = logging.getLogger(__name__)

T = TypeVar("T")
Args = TypeVarTuple("Args")

#: builds the transport of a hub; entered (``async with``) on the loop when the runner starts
TransportFactory = Callable[[Hub], Transport]
#: builds a service that runs beside the transport (e.g. the forwarding socket); entered after the
#: transport, left before the live calls are cancelled at the stop
ServiceFactory = Callable[[Hub], AbstractAsyncContextManager[Any]]

#: the name of the portal's thread
THREAD_NAME = "lineup-hub"
NOT_RUNNING = "the LineUp service is not running"
SHUTTING_DOWN = "the agent is shutting down"
#: seconds an interrupted call may take to be cancelled on the devices before call_blocking returns anyway
CANCEL_GRACE = 10.0


class Runner:
    """Runs a hub and its transport in an anyio blocking portal (an asyncio loop on a daemon thread).

    The hub is built on the loop's thread from ``settings`` (store, agent id, deadlines),
    ``registry`` (default: every installed plugin's tools) and ``hub_options`` (``on_text``,
    ``on_stop``, ``on_tools_changed``, ``conversation_id``...). Thread-safe: any thread but the
    loop's may call :meth:`call_blocking`, :meth:`run` and :meth:`submit`.
    """

    def __init__(
        self,
        settings: Settings,
        registry: Registry | None = None,
        *,
        transport: TransportFactory | None = None,
        services: list[ServiceFactory] | None = None,
        app_dir: Traversable | None = None,
        **hub_options: Any,
    ) -> None:
        self.settings = settings
        self._make_services = list(services or [])
        #: the services ``services`` built, once the runner serves (in their order)
        self.services: list[Any] = []
        self._registry = registry
        self._make_transport = transport or (lambda hub: _transport_for(settings, hub, app_dir))
        self._hub_options = hub_options
        self._portal_context: AbstractContextManager[BlockingPortal] | None = None
        self._portal: BlockingPortal | None = None
        self._serving: concurrent.futures.Future[None] | None = None
        self._stopping: anyio.Event | None = None
        self._hub: Hub | None = None
        self._transport: Transport | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        #: the tasks :meth:`submit` started that have not ended (cancelled by :meth:`stop`)
        self._submitted: set[concurrent.futures.Future[Any]] = set()
        self._lock = threading.Lock()

    # -------------------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        """Whether the portal is up and the hub serves."""
        return self._portal is not None and self._hub is not None

    @property
    def hub(self) -> Hub:
        """The hub (use it only from the loop: through :meth:`run` or :meth:`submit`)."""
        if self._hub is None:
            raise TransportError(NOT_RUNNING)
        return self._hub

    @property
    def transport(self) -> Transport:
        """The running transport: ``describe()`` and ``connect_link`` are for people."""
        if self._transport is None:
            raise TransportError(NOT_RUNNING)
        return self._transport

    def start(self, timeout: float = 30.0) -> None:
        """Start the portal, build the hub and enter the transport; once only (later calls do nothing).

        Errors while starting (e.g. TransportError: the port is in use; TimeoutError after
        ``timeout`` seconds) are raised here, and the portal's thread is stopped again.
        """
        with self._lock:
            if self._portal_context is not None:
                return
            context = start_blocking_portal("asyncio", name=THREAD_NAME)
            self._portal = context.__enter__()
            self._portal_context = context
            portal = self._portal
        try:
            self._serving, _ = portal.start_task(self._serve, timeout, name="lineup-serve")
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel live calls (devices are told), close the transport and the store, end the thread.

        Waits ``timeout`` seconds for that; then every task still running is cancelled.
        """
        with self._lock:
            context, portal, serving, stopping = self._portal_context, self._portal, self._serving, self._stopping
            self._portal_context = self._portal = self._serving = self._stopping = None
        if context is None or portal is None:
            return
        try:
            if serving is not None and stopping is not None:
                with contextlib.suppress(Exception):
                    portal.start_task_soon(stopping.set)
                    serving.result(timeout)
            with self._lock:
                self._loop, submitted = None, list(self._submitted)  # submit() refuses from now on
            for future in submitted:  # cancels its task on the loop, which still runs
                future.cancel()
            with contextlib.suppress(RuntimeError):  # the portal stopped already
                portal.call(portal.stop, True)
        finally:
            context.__exit__(None, None, None)  # joins the thread
            self._hub = None
            self._transport = None

    def __enter__(self) -> Runner:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    async def _serve(self, timeout: float, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """The serving task: the hub and its transport, from start until :meth:`stop` sets ``stopping``."""
        stopping = anyio.Event()
        hub = Hub.from_settings(self.settings, self._registry, **self._hub_options)
        async with AsyncExitStack() as stack:
            stack.callback(hub.store.close)
            if hub.push is not None:  # the last closing pushes go out (briefly) before the store closes
                stack.push_async_callback(hub.push.aclose)
            with anyio.fail_after(timeout):
                transport = await stack.enter_async_context(self._make_transport(hub))
            try:
                async with AsyncExitStack() as beside:
                    with anyio.fail_after(timeout):
                        for make in self._make_services:
                            self.services.append(await beside.enter_async_context(make(hub)))
                    self._hub, self._transport, self._stopping = hub, transport, stopping
                    self._loop = asyncio.get_running_loop()
                    task_status.started()
                    await stopping.wait()
            finally:
                self.services = []
                # before the transport closes, so that every device is told why its cards close
                with anyio.move_on_after(CANCEL_GRACE, shield=True):
                    await hub.cancel_all(SHUTTING_DOWN)

    # ------------------------------------------------------------------------------ calls

    def submit(self, func: Callable[[*Args], Awaitable[T]], *args: *Args) -> concurrent.futures.Future[T]:
        """Start ``func(*args)`` as a task on the loop; a concurrent future of its result (cancelling
        it cancels the task). Raises TransportError when the runner is not running."""
        with self._lock:
            loop = self._loop
            if loop is None:
                raise TransportError(NOT_RUNNING)
            work = _awaited(func, *args)  # func(*args) is called on the loop, as a task's first step
            try:
                future = asyncio.run_coroutine_threadsafe(work, loop)
            except RuntimeError as exc:  # the loop is closed
                work.close()
                raise TransportError(NOT_RUNNING) from exc
            self._submitted.add(future)
        future.add_done_callback(self._submitted.discard)
        return future

    def run(self, func: Callable[[*Args], Awaitable[T]], *args: *Args) -> T:
        """Run ``func(*args)`` on the loop and block until it returns (e.g. ``run(hub.send_text, "hi")``)."""
        return self.submit(func, *args).result()

    def call_blocking(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        is_interrupted: Callable[[], bool] = lambda: False,
        heartbeat: Callable[[], None] | None = None,
        deadline: float | None = None,
        call_id: str | None = None,
        origin: Origin | None = None,
        poll: float = 0.25,
        conversation_id: str | None = None,
    ) -> ToolResult:
        """Call tool ``name`` with the model's flat arguments and block until its terminal result.

        Every ``poll`` seconds ``is_interrupted`` is checked and ``heartbeat`` called. Once
        interrupted, the call is cancelled on every device (they are told why: the check's
        ``reason``, by default "the agent was interrupted") and a ``cancelled`` result is
        returned; an answer that won the race is returned instead. ``deadline`` is the wait in
        seconds (default: the hub's per-tool deadline); it ends ``expired``. ``call_id`` continues
        a call known by that id (e.g. one this process forwarded before it took over serving);
        ``origin`` says who asks; the call belongs to ``conversation_id`` (None: the hub's). Never
        raises for a failed call: a stopped runner gives a ``failed`` result.
        """
        call_id = call_id or codec.new_id("call")
        if is_interrupted():
            return failure(call_id, name, "cancelled", INTERRUPTED)
        pending = _Pending()
        try:
            future = self.submit(
                self._interruptible, name, flat_args, call_id, deadline, origin, pending, conversation_id
            )
        except TransportError:
            return _not_running(call_id, name)
        interrupted_at: float | None = None
        while True:
            try:
                return future.result(timeout=poll)
            except concurrent.futures.TimeoutError:
                pass
            except (concurrent.futures.CancelledError, TransportError):  # the runner stopped
                return _not_running(call_id, name)
            except Exception as exc:
                log.warning("lineup: call %s (%s) failed", call_id, name, exc_info=True)
                return failure(call_id, name, "failed", f"{type(exc).__name__}: {exc}", error="internal")
            if heartbeat is not None:
                heartbeat()
            if interrupted_at is None and is_interrupted():
                interrupted_at = time.monotonic()
                try:
                    self.submit(pending.interrupt, interrupt_reason(is_interrupted))
                except TransportError:
                    return failure(call_id, name, "cancelled", interrupt_reason(is_interrupted))
            elif interrupted_at is not None and time.monotonic() - interrupted_at > CANCEL_GRACE:
                future.cancel()
                return failure(call_id, name, "cancelled", pending.reason)

    def wait_for_app(
        self,
        timeout: float,
        *,
        is_interrupted: Callable[[], bool] = lambda: False,
        heartbeat: Callable[[], None] | None = None,
        poll: float = 0.25,
    ) -> bool:
        """Block until an App device is connected, ``timeout`` seconds at most; whether one is.

        Every ``poll`` seconds ``heartbeat`` is called and ``is_interrupted`` checked: an interrupt
        ends the wait at once (False). A stopped runner gives False.
        """
        try:
            future = self.submit(self._device_within, timeout)
        except TransportError:
            return False
        while True:
            try:
                return future.result(timeout=poll)
            except concurrent.futures.TimeoutError:
                pass
            except (concurrent.futures.CancelledError, TransportError):  # the runner stopped
                return False
            if heartbeat is not None:
                heartbeat()
            if is_interrupted():
                future.cancel()
                return False

    async def _device_within(self, timeout: float) -> bool:
        with anyio.move_on_after(timeout):
            await self.hub.wait_for_device()
            return True
        return False

    async def _interruptible(
        self,
        name: str,
        flat_args: dict[str, Any],
        call_id: str,
        deadline: float | None,
        origin: Origin | None,
        pending: _Pending,
        conversation_id: str | None = None,
    ) -> ToolResult:
        """The call, in the one task that :meth:`call_blocking` started; an interrupt cancels that task."""
        if pending.interrupted:
            return failure(call_id, name, "cancelled", INTERRUPTED)
        hub = self.hub
        task = asyncio.current_task()
        pending.task = task
        pending.end = functools.partial(hub.cancel, call_id)
        options: dict[str, Any] = {"call_id": call_id, "origin": origin}
        if deadline is not None:
            options["deadline"] = deadline
        if conversation_id is not None:
            options["conversation_id"] = conversation_id
        try:
            return await hub.agent_call(name, flat_args, **options)
        except asyncio.CancelledError:  # the hub cancelled the call on every device, then re-raised
            if not pending.interrupted:  # the runner is stopping
                raise
            if task is not None:
                task.uncancel()  # this cancellation was ours, and ends here
            await hub.cancel(call_id, pending.reason)  # a call taken over by id is not cancelled by the hub itself
        finally:
            pending.task = None
            pending.end = None
        # The hub may have accepted an answer just before the interrupt: its record wins.
        ended = hub.store.get_call(call_id)
        if ended is not None and ended.result is not None:
            return ended.result
        return failure(call_id, name, "cancelled", pending.reason)


class _Pending:
    """One :meth:`Runner.call_blocking` call's task on the loop, and whether it was interrupted.

    The interrupt cancels the task itself (one ``CancelledError``, as the hub's contract has it:
    the hub then awaits telling every device, which an anyio cancel scope, cancelling each
    later await too, would cut short). An interrupt that says why (a ``reason`` other than
    "the agent was interrupted": the question was settled elsewhere, say in the agent's terminal)
    first ends the call with it on every device, so that no answer arriving after it is taken.
    """

    __slots__ = ("end", "interrupted", "reason", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        #: the hub's ``cancel`` of the call, while its task runs
        self.end: Callable[[str], Awaitable[bool]] | None = None
        self.interrupted = False
        self.reason = INTERRUPTED

    async def interrupt(self, reason: str = INTERRUPTED) -> None:
        """On the loop: cancel the call (a task not started yet returns ``cancelled`` at once); never suspends."""
        self.interrupted = True
        self.reason = reason
        if self.task is not None:
            if reason != INTERRUPTED and self.end is not None:
                await self.end(reason)  # the hub's cancel does not suspend
            self.task.cancel()


async def _awaited(func: Callable[[*Args], Awaitable[T]], *args: *Args) -> T:
    return await func(*args)


def _not_running(call_id: str, name: str) -> ToolResult:
    return failure(call_id, name, "failed", NOT_RUNNING, error="not_running")


def _transport_for(settings: Settings, hub: Hub, app_dir: Traversable | None) -> Transport:
    return transport_for(settings, hub, app_dir=app_dir)
