"""The hub and its transport on a background event loop, for runtimes whose tools are synchronous.

A Hermes-style runtime calls its tools on worker threads and expects them to block. The hub and
the transports are asyncio code. :class:`Runner` runs one asyncio loop on a daemon thread, builds
the hub (with the store ``settings`` ask for) and the transport there once, and offers blocking
entry points::

    runner = Runner(settings, registry, on_text=deliver)   # hub options: on_text, on_stop, ...
    runner.start()                                         # raises if the port cannot be bound
    print(runner.server.connect_link)                      # direct mode: the DirectServer
    result = runner.call_blocking("choice", {"question": "...", "options": [...]},
                                  is_interrupted=agent_was_interrupted, heartbeat=touch, deadline=600)
    runner.submit(runner.hub.send_text("done"))            # fire and forget; run() waits
    runner.stop()

The transport follows ``settings.effective_mode``: a :class:`~lineup_plugin.transports.direct.server.DirectServer`
in direct mode, the WuKongIM :class:`~lineup_plugin.transports.wukongim.relay.Relay` in relay mode; pass
``transport=`` to use another. The hub's callbacks (``on_text``...) run on the loop's thread:
hand work back to the runtime's own threads from there.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from importlib.resources.abc import Traversable
from typing import TYPE_CHECKING, Any, TypeVar

from ..config.settings import Settings
from ..errors import TransportError
from ..hub import Hub, failure
from ..protocol import codec
from ..protocol.messages import ToolResult
from ..tools.registry import Registry

if TYPE_CHECKING:
    from ..transports.direct.server import DirectServer

log = logging.getLogger(__name__)

T = TypeVar("T")

#: builds the transport for a hub; entered (``async with``) on the loop when the runner starts
TransportFactory = Callable[[Hub], AbstractAsyncContextManager[Any]]

INTERRUPTED = "the agent was interrupted"
NOT_RUNNING = "the LineUp service is not running"
#: seconds an interrupted call may take to be cancelled on the devices before call_blocking returns anyway
CANCEL_GRACE = 10.0


def default_transport(settings: Settings, *, app_dir: Traversable | None = None) -> TransportFactory:
    """The transport ``settings.effective_mode`` asks for."""
    if settings.effective_mode == "relay":
        assert settings.wukongim is not None
        wukongim = settings.wukongim

        @asynccontextmanager
        async def relay(hub: Hub) -> AsyncIterator[Any]:
            from ..transports.wukongim.relay import Relay

            client = Relay(wukongim, hub)
            task = asyncio.create_task(client.run(), name="lineup-relay")
            task.add_done_callback(_log_relay_end)
            try:
                yield client
            finally:
                await client.close()
                await asyncio.wait([task])

        return relay

    def direct(hub: Hub) -> DirectServer:
        from ..transports.direct.server import DirectServer

        return DirectServer.from_settings(hub, settings, app_dir=app_dir)

    return direct


def _log_relay_end(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("lineup: the WuKongIM relay stopped: %s", task.exception())


class Runner:
    """Runs a hub and its transport on an asyncio loop in a daemon thread.

    The hub is built on the loop's thread from ``settings`` (store, agent id, deadlines),
    ``registry`` (default: every installed plugin's tools) and ``hub_options`` (``on_text``,
    ``on_stop``, ``on_tools_changed``, ``conversation_id``...). Thread-safe: any thread may call
    :meth:`call_blocking`, :meth:`run` and :meth:`submit`.
    """

    def __init__(
        self,
        settings: Settings,
        registry: Registry | None = None,
        *,
        transport: TransportFactory | None = None,
        app_dir: Traversable | None = None,
        **hub_options: Any,
    ) -> None:
        self.settings = settings
        self._registry = registry
        self._transport_factory = transport or default_transport(settings, app_dir=app_dir)
        self._hub_options = hub_options
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._hub: Hub | None = None
        self._transport: Any = None
        self._stack: AsyncExitStack | None = None
        self._lock = threading.Lock()

    def _build_hub(self) -> Hub:
        from ..plugins import load_registry
        from ..store import open_store

        return Hub(
            self._registry if self._registry is not None else load_registry(),
            store=open_store(self.settings),
            agent_id=self.settings.agent_id,
            deadline=self.settings.deadline,
            deadlines=self.settings.deadlines,
            **self._hub_options,
        )

    # -------------------------------------------------------------------------- lifecycle

    @property
    def running(self) -> bool:
        """Whether the loop thread is up and the hub started."""
        return self._hub is not None and self._thread is not None and self._thread.is_alive()

    @property
    def hub(self) -> Hub:
        """The hub (use it only from the loop: through :meth:`run` or :meth:`submit`)."""
        if self._hub is None:
            raise TransportError(NOT_RUNNING)
        return self._hub

    @property
    def transport(self) -> Any:
        """The running transport (a DirectServer, a Relay...), or None before :meth:`start`."""
        return self._transport

    @property
    def server(self) -> DirectServer | None:
        """The DirectServer in direct mode (``.url``, ``.connect_link``, ``.port``), else None."""
        from ..transports.direct.server import DirectServer

        return self._transport if isinstance(self._transport, DirectServer) else None

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        """The background event loop."""
        if self._loop is None:
            raise TransportError(NOT_RUNNING)
        return self._loop

    def start(self, timeout: float = 30.0) -> None:
        """Start the thread, build the hub and enter the transport; once only (later calls do nothing).

        Errors while starting (e.g. TransportError: the port is in use) are raised here, and the
        thread is stopped again.
        """
        with self._lock:
            if self._thread is not None:
                return
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=self._main, args=(loop,), name="lineup-hub", daemon=True)
            self._loop, self._thread = loop, thread
            thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._startup(), loop).result(timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel live calls (devices are told), close the transport and the store, end the thread."""
        with self._lock:
            loop, thread = self._loop, self._thread
            if loop is None or thread is None:
                return
            self._loop = self._thread = None
        if thread.is_alive():
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(timeout)
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
        self._hub = None
        self._transport = None

    def __enter__(self) -> Runner:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _main(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
            pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()

    async def _startup(self) -> None:
        hub = self._build_hub()
        stack = AsyncExitStack()
        try:
            self._transport = await stack.enter_async_context(self._transport_factory(hub))
        except BaseException:
            await stack.aclose()
            hub.store.close()
            raise
        self._stack = stack
        self._hub = hub

    async def _shutdown(self) -> None:
        hub, stack = self._hub, self._stack
        self._stack = None
        if hub is not None:
            await hub.cancel_all("the agent is shutting down")
        if stack is not None:
            await stack.aclose()
        if hub is not None:
            hub.store.close()

    # ------------------------------------------------------------------------------ calls

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a concurrent future of its result."""
        try:
            return asyncio.run_coroutine_threadsafe(coro, self.loop)
        except BaseException:
            coro.close()
            raise

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and block until it returns (e.g. ``run(hub.send_text("hi"))``)."""
        return self.submit(coro).result(timeout)

    def call_blocking(
        self,
        name: str,
        flat_args: dict[str, Any],
        *,
        is_interrupted: Callable[[], bool] = lambda: False,
        heartbeat: Callable[[], None] | None = None,
        deadline: float | None = None,
        poll: float = 0.25,
    ) -> ToolResult:
        """Call tool ``name`` with the model's flat arguments and block until its terminal result.

        Every ``poll`` seconds ``is_interrupted`` is checked and ``heartbeat`` called. Once
        interrupted, the call is cancelled on every device (they are told "the agent was
        interrupted") and a ``cancelled`` result is returned; an answer that won the race is
        returned instead. ``deadline`` is the wait in seconds (default: the hub's per-tool
        deadline); it ends ``expired``. Never raises for a failed call: a stopped runner gives a
        ``failed`` result.
        """
        call_id = codec.new_id("call")
        if is_interrupted():
            return failure(call_id, name, "cancelled", INTERRUPTED)
        pending = _Pending()
        try:
            future = self.submit(self._interruptible(name, flat_args, call_id, deadline, pending))
        except (TransportError, RuntimeError):
            return failure(call_id, name, "failed", NOT_RUNNING, error="not_running")
        interrupted_at: float | None = None
        while True:
            try:
                return future.result(timeout=poll)
            except concurrent.futures.TimeoutError:
                pass
            except concurrent.futures.CancelledError:
                return failure(call_id, name, "failed", NOT_RUNNING, error="not_running")
            if heartbeat is not None:
                heartbeat()
            if interrupted_at is None and is_interrupted():
                interrupted_at = time.monotonic()
                try:
                    self.loop.call_soon_threadsafe(pending.interrupt)
                except (TransportError, RuntimeError):
                    return failure(call_id, name, "cancelled", INTERRUPTED)
            elif interrupted_at is not None and time.monotonic() - interrupted_at > CANCEL_GRACE:
                future.cancel()
                return failure(call_id, name, "cancelled", INTERRUPTED)

    async def _interruptible(
        self, name: str, flat_args: dict[str, Any], call_id: str, deadline: float | None, pending: _Pending
    ) -> ToolResult:
        """The call, in the one task that :meth:`call_blocking` submitted; an interrupt cancels that task."""
        if not pending.interrupted:
            pending.task = asyncio.current_task()
            options: dict[str, Any] = {"call_id": call_id}
            if deadline is not None:
                options["deadline"] = deadline
            try:
                return await self.hub.agent_call(name, flat_args, **options)
            except asyncio.CancelledError:  # the hub cancelled the call on every device
                if not pending.interrupted:  # the runner is stopping
                    raise
            # The hub may have accepted an answer just before the interrupt: its record wins.
            ended = self.hub.store.get_call(call_id)
            if ended is not None and ended.result is not None:
                return ended.result
        return failure(call_id, name, "cancelled", INTERRUPTED)


class _Pending:
    """One :meth:`Runner.call_blocking` call's task on the loop, and whether it was interrupted."""

    __slots__ = ("interrupted", "task")

    def __init__(self) -> None:
        self.task: asyncio.Task[Any] | None = None
        self.interrupted = False

    def interrupt(self) -> None:
        """On the loop: cancel the call (a task not started yet returns ``cancelled`` at once)."""
        self.interrupted = True
        if self.task is not None:
            self.task.cancel()
