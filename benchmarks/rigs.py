"""The agent-side set-ups the benchmarks measure, and the child processes at their far ends."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sys
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from websockets.asyncio.server import ServerConnection, serve

from lineup_plugin.config.settings import Settings, WuKongIMSettings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.live import ANSWERED_ELSEWHERE
from lineup_plugin.protocol.messages import Actor, CallOutcome, DeviceWelcome, ToolCall, ToolCancel, ToolResult
from lineup_plugin.store import MemoryStore, SQLiteStore, Store
from lineup_plugin.transports.direct.server import DirectServer, Limits
from lineup_plugin.transports.memory import MemoryApp

from .peers import ANSWER

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "benchmark-token-0123456789"
#: the call every benchmark makes: a ``choice`` card
TOOL = "choice"
ARGUMENTS = {"question": "Deploy where?", "options": ["test", "staging"]}
#: the direct server's per-App message rate limit (20/s by default, a flood guard) would cap every
#: benchmark below; everything else is as shipped
LIMITS = Limits(message_rate=1e9, message_burst=1_000_000_000)

#: ``await sample(budget_seconds, max_samples)`` -> round trip times in ns, measured in the agent process
Sampler = Callable[[float, int], Awaitable[list[int]]]
#: the pace of a model's calls in the spaced rows: each round trip starts after this long idle
MODEL_GAP = 0.005


def more(samples: list[int], limit: int, end: float) -> bool:
    """Whether a sampler takes another sample: under ``limit``, and before ``end`` (perf_counter) or under five."""
    return len(samples) < limit and (len(samples) < 5 or time.perf_counter() < end)


def spaced(sampler: Sampler, gap: float = MODEL_GAP) -> Sampler:
    """``sampler``'s round trips one at a time, each after ``gap`` seconds idle, as a model makes calls
    (a back-to-back loop has the next round trip start while the other side still works on the last)."""

    async def sample(budget: float, limit: int) -> list[int]:
        samples: list[int] = []
        end = time.perf_counter() + budget
        while more(samples, limit, end):
            await asyncio.sleep(gap)
            samples += await sampler(0, 1)
        return samples

    return sample


def settings(data_dir: Path, **overrides: Any) -> Settings:
    """Direct-mode settings on 127.0.0.1, port 0, with the benchmark token."""
    values: dict[str, Any] = {
        "mode": "direct",
        "host": "127.0.0.1",
        "port": 0,
        "token": TOKEN,
        "store": "memory",
        "data_dir": data_dir,
        "max_connections": 256,
        "max_queue": 1024,
    }
    values.update(overrides)
    return Settings(**values)


def new_hub(store: Store | None = None) -> Hub:
    """A hub with the built-in tools (no third-party plugins)."""
    return Hub(load_registry(load_entrypoints=False), store=store or MemoryStore())


async def timed_calls(hub: Hub, budget: float, limit: int) -> list[int]:
    """Sequential ``hub.call`` round trips for ``budget`` seconds (at most ``limit``, at least 5)."""
    samples: list[int] = []
    end = time.perf_counter() + budget
    while more(samples, limit, end):
        start = time.perf_counter_ns()
        result = await hub.call(TOOL, ARGUMENTS)
        samples.append(time.perf_counter_ns() - start)
        if result.status != "completed":
            raise RuntimeError(f"benchmark call ended {result.status}: {result.result}")
    return samples


def call_text() -> str:
    """The wire text of a benchmark ``tool.call`` (what the raw echo sends)."""
    hub = new_hub()
    request = ToolCall(call_id=codec.new_id("call"), name=TOOL, arguments=ARGUMENTS, risk="display_only")
    request.expires_at = "2030-01-01T00:00:00.000+00:00"
    return hub.encode(request, "bench-0-0")


def verdict_text(call_text: str) -> str:
    """The wire text of the verdict on the benchmark call ``call_text`` (the ``tool.cancel`` every
    device gets when a call ends, the answering one too): its answer, applied, from its App."""
    call = codec.decode(call_text).payload
    assert isinstance(call, ToolCall)
    outcome = CallOutcome(status="completed", result=dict(ANSWER), device_id="bench-0-0")
    verdict = ToolCancel(call_id=call.call_id, reason=ANSWERED_ELSEWHERE, outcome=outcome)
    return new_hub().encode(verdict, "bench-0-0")


class Child:
    """A ``python -m benchmarks.peers`` child process; :meth:`start` returns its ready line."""

    def __init__(self, *args: str) -> None:
        self.args = args
        self.process: asyncio.subprocess.Process | None = None

    async def start(self, timeout: float = 60.0) -> dict[str, Any]:
        """Start it and wait for its ready line."""
        self.process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "benchmarks.peers",
            *self.args,
            cwd=ROOT,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert self.process.stdout is not None
        line = await asyncio.wait_for(self.process.stdout.readline(), timeout)
        if not line:
            raise RuntimeError(f"benchmark peer {self.args[0]} exited before it was ready")
        ready: dict[str, Any] = json.loads(line)
        return ready

    async def stop(self) -> None:
        """Close its stdin and wait for it to exit (killed after 10 s)."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.stdin is not None:
            process.stdin.close()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def exited(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the child to exit by itself."""
        if self.process is not None:
            await asyncio.wait_for(self.process.wait(), timeout)

    @property
    def pid(self) -> int:
        """The child's process id."""
        assert self.process is not None
        return self.process.pid


async def run_python(code: str, *args: str, env: dict[str, str] | None = None) -> dict[str, float]:
    """Run ``code`` (with ``args`` in sys.argv) in a fresh interpreter; returns the JSON it prints last."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        *args,
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await process.communicate()
    lines = out.decode().strip().splitlines()
    if process.returncode or not lines:
        raise RuntimeError(f"benchmark interpreter failed ({process.returncode})")
    result: dict[str, float] = json.loads(lines[-1])
    return result


async def start_child(stack: AsyncExitStack, *args: str) -> dict[str, Any]:
    """Start a child whose stop is pushed onto ``stack``; returns its ready line."""
    child = Child(*args)
    stack.push_async_callback(child.stop)
    return await child.start()


# ---------------------------------------------------------------------------------- direct


async def direct_server(stack: AsyncExitStack, data_dir: Path, store: Store | None = None) -> DirectServer:
    """A started DirectServer (benchmark limits) with its own hub; closed by ``stack``."""
    hub = new_hub(store)
    server = DirectServer.from_settings(hub, settings(data_dir), limits=LIMITS)
    await stack.enter_async_context(server)
    stack.callback(hub.store.close)
    return server


def ws_target(server: DirectServer, count: int = 1, *, deflate: bool = False) -> str:
    """The ``ws`` peer target of ``count`` LineUp Apps connected to ``server`` (offering deflate or not)."""
    return f"lineup{'+deflate' if deflate else ''}:ws://127.0.0.1:{server.port}/ws:{count}"


# -------------------------------------------------------------------------------- raw echo


class EchoServer:
    """The floor: a bare websockets server whose clients send every message straight back."""

    def __init__(self) -> None:
        self.connections: list[ServerConnection] = []
        self._arrived = asyncio.Event()
        self.port = 0

    async def start(self, stack: AsyncExitStack) -> None:
        """Listen on 127.0.0.1 (closed by ``stack``)."""

        async def handler(connection: ServerConnection) -> None:
            self.connections.append(connection)
            self._arrived.set()
            await connection.wait_closed()

        server = await stack.enter_async_context(serve(handler, "127.0.0.1", 0, max_size=2**20))
        self.port = next(iter(server.sockets)).getsockname()[1]

    def target(self, count: int = 1) -> str:
        """The ``ws`` peer target of ``count`` echo clients."""
        return f"echo:ws://127.0.0.1:{self.port}/:{count}"

    async def round_trips(self, text: str, budget: float, limit: int) -> list[int]:
        """Sequential send-and-receive-the-echo of ``text`` on the first connection."""
        connection = self.connections[0]
        samples: list[int] = []
        end = time.perf_counter() + budget
        while more(samples, limit, end):
            start = time.perf_counter_ns()
            await connection.send(text)
            await connection.recv()
            samples.append(time.perf_counter_ns() - start)
        return samples

    async def pipelined(self, text: str, window: int, seconds: float) -> float:
        """Echoes per second with ``window`` messages in flight on the first connection."""
        connection = self.connections[0]
        for _ in range(window):
            await connection.send(text)
        count = 0
        start = time.perf_counter()
        end = start + seconds
        outstanding = window
        while outstanding:
            await connection.recv()
            outstanding -= 1
            count += 1
            if time.perf_counter() < end:
                await connection.send(text)
                outstanding += 1
        return count / (time.perf_counter() - start)


class BareServer:
    """LineUp's messages with no hub: a bare websockets server says welcome to one App, then sends
    it the benchmark call and decodes its answer with the codec (what any LineUp peer must do)."""

    def __init__(self) -> None:
        self.connection: ServerConnection | None = None
        self._ready = asyncio.Event()
        self.port = 0

    async def start(self, stack: AsyncExitStack) -> None:
        """Listen on 127.0.0.1 (closed by ``stack``)."""
        welcome = new_hub().encode(DeviceWelcome(device_id="bench", agent=Actor(kind="agent", id="lineup-agent")))

        async def handler(connection: ServerConnection) -> None:
            await connection.recv()  # the hello
            await connection.send(welcome)
            self.connection = connection
            self._ready.set()
            await connection.wait_closed()

        server = await stack.enter_async_context(serve(handler, "127.0.0.1", 0, max_size=2**20))
        self.port = next(iter(server.sockets)).getsockname()[1]

    def target(self) -> str:
        """The ``ws`` peer target of one App."""
        return f"lineup:ws://127.0.0.1:{self.port}/:1"

    async def round_trips(self, text: str, budget: float, limit: int, *, before: str | None = None) -> list[int]:
        """Sequential send-the-call, receive-and-decode-the-answer; with ``before`` (the verdict on the
        call before), that message and the call leave in one write, as the hub sends them."""
        await self._ready.wait()
        connection = self.connection
        assert connection is not None
        frames = None if before is None else [before.encode(), text.encode()]
        samples: list[int] = []
        end = time.perf_counter() + budget
        while more(samples, limit, end):
            start = time.perf_counter_ns()
            if frames is None:
                await connection.send(text)
            else:  # each its own frame, the frames in one write (as the direct transport writes them)
                for frame in frames:
                    connection.protocol.send_text(frame)
                connection.transport.write(b"".join(connection.protocol.data_to_send()))
            codec.decode(await connection.recv())
            samples.append(time.perf_counter_ns() - start)
        return samples


# ------------------------------------------------------------------------------ in memory


class AnsweringApp(MemoryApp):
    """An in-process App that answers every call at once (the memory transport)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answering: set[asyncio.Task[str]] = set()

    def send(self, text: str) -> None:
        """Hub → App: answer a ``tool.call`` in a new task, as soon as the hub yields."""
        message = codec.decode(text)
        payload = message.payload
        if isinstance(payload, ToolCall):
            answer = ToolResult(call_id=payload.call_id, name=payload.name, status="completed", result=dict(ANSWER))
            task = asyncio.get_running_loop().create_task(self.send_payload(answer))
            self._answering.add(task)  # kept until done: asyncio holds tasks only weakly
            task.add_done_callback(self._answering.discard)


# ------------------------------------------------------------------------------ relay


async def relay_hub(stack: AsyncExitStack, pairing_dir: Path | None = None, *, ack_delay: float = 0.0) -> Hub:
    """A hub behind the WuKongIM relay, a fake WuKongIM server and the App on it (children).

    With ``pairing_dir`` the App is paired there and every envelope is sealed end to end; with
    ``ack_delay`` the server's SENDACKs to the agent come that many seconds late (an agent far
    from the server).
    """
    from lineup_plugin.transports.wukongim.pairing import Pairings
    from lineup_plugin.transports.wukongim.relay import Relay

    agent_uid = "bench-agent"
    fake = await start_child(stack, "wukongim", *([agent_uid, str(ack_delay)] if ack_delay else []))
    config = WuKongIMSettings(
        api_url=fake["api_url"], ws_url=fake["ws_url"], uid=agent_uid, app_uid="bench-app", text_cards="never"
    )
    pairings = None
    app_args = [fake["ws_url"], "bench-app", agent_uid]
    if pairing_dir is not None:
        pairings = Pairings(pairing_dir, config.uid, config.app_uid)
        state, device, secret = pairings.pair_link()
        offer = {**pairings.offer(state, device, fake["ws_url"], config.content_type), "secret": secret}
        app_args.append(json.dumps(offer))
    await start_child(stack, "relay-app", *app_args)
    hub = new_hub()
    relay = Relay(config, hub, pairings=pairings)
    task = asyncio.create_task(relay.run())

    async def close() -> None:
        await relay.close()
        await asyncio.wait([task])

    stack.push_async_callback(close)
    await asyncio.wait_for(relay.connected.wait(), 30)
    return hub


# ------------------------------------------------------------------------------ SQLite


def sqlite_store(data_dir: Path, synchronous: str) -> SQLiteStore:
    """A fresh durable store in ``data_dir`` with ``synchronous`` (WAL, as shipped)."""
    path = data_dir / f"bench-{synchronous}-{os.getpid()}-{time.monotonic_ns()}.sqlite3"
    return SQLiteStore(path, synchronous=synchronous, secrets=[TOKEN])  # type: ignore[arg-type]


def free_port() -> socket.socket:
    """A bound (not listening) socket on 127.0.0.1, port 0, for uvicorn."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock
