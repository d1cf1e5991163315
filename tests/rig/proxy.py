"""A fault-injecting TCP proxy on 127.0.0.1, between an App and the agent (or the agent and an IM server).

In ``frames`` mode it passes the HTTP upgrade through, then reads WebSocket frames and, per data
frame, may drop, delay, duplicate or reorder it, send only part of it and cut the connection
(truncated mid-frame), or cut the connection. Control frames (ping, pong, close) pass untouched.
In ``bytes`` mode (a binary protocol such as WuKongIM's) it forwards chunks and may delay them,
cut the connection, or forward half a chunk then cut. What it did is counted in
:attr:`FaultPlan.counts`. The Apps must connect without compression (a duplicated deflated frame
would break the deflate context, which is not the fault under test).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import Counter
from dataclasses import dataclass, field

FAULTS = ("drop", "delay", "duplicate", "reorder", "truncate", "cut")


@dataclass
class FaultPlan:
    """How often each fault happens, per data frame (or chunk) and direction; seeded."""

    seed: int = 1
    drop: float = 0.0
    delay: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    truncate: float = 0.0
    cut: float = 0.0
    max_delay: float = 0.05
    counts: Counter[str] = field(default_factory=Counter)
    rng: random.Random = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def pick(self, allowed: tuple[str, ...] = FAULTS) -> str | None:
        roll = self.rng.random()
        for name in allowed:
            roll -= getattr(self, name)
            if roll < 0:
                return name
        return None

    @classmethod
    def mixed(cls, seed: int, rate: float) -> FaultPlan:
        """Every fault, ``rate`` of frames faulted in all, cuts and truncations rarer than the rest."""
        return cls(
            seed=seed,
            drop=rate * 0.2,
            delay=rate * 0.3,
            duplicate=rate * 0.2,
            reorder=rate * 0.2,
            truncate=rate * 0.05,
            cut=rate * 0.05,
        )


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    """One WebSocket frame: its opcode and its bytes as they came."""
    head = await reader.readexactly(2)
    length = head[1] & 0x7F
    extra = b""
    if length == 126:
        extra = await reader.readexactly(2)
        length = int.from_bytes(extra, "big")
    elif length == 127:
        extra = await reader.readexactly(8)
        length = int.from_bytes(extra, "big")
    mask = await reader.readexactly(4) if head[1] & 0x80 else b""
    return head[0] & 0x0F, head + extra + mask + await reader.readexactly(length)


class FaultProxy:
    """Listens on 127.0.0.1 (``port`` once started) and forwards every connection to ``target``
    (0: nothing behind, connections are closed at once)."""

    def __init__(self, target: int, plan: FaultPlan, *, frames: bool = True) -> None:
        self.target = target
        self.plan = plan
        self.frames = frames
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _handle(self, app_reader: asyncio.StreamReader, app_writer: asyncio.StreamWriter) -> None:
        if not self.target:  # no agent behind (it is restarting): the connection is refused
            app_writer.close()
            return
        try:
            agent_reader, agent_writer = await asyncio.open_connection("127.0.0.1", self.target)
        except OSError:
            app_writer.close()
            return
        writers = (app_writer, agent_writer)
        self._writers.update(writers)

        def cut() -> None:
            for writer in writers:
                with contextlib.suppress(Exception):
                    writer.transport.abort()

        pumps = [
            asyncio.create_task(self._pump(app_reader, agent_writer, cut)),
            asyncio.create_task(self._pump(agent_reader, app_writer, cut)),
        ]
        self._tasks.update(pumps)
        try:
            await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
        finally:
            cut()
            for pump in pumps:
                pump.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
            self._tasks.difference_update(pumps)
            self._writers.difference_update(writers)

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: object) -> None:
        try:
            if self.frames:
                writer.write(await reader.readuntil(b"\r\n\r\n"))  # the upgrade request or response
                await self._frames(reader, writer, cut)
            else:
                await self._bytes(reader, writer, cut)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            return

    async def _frames(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: object) -> None:
        plan = self.plan
        held: list[bytes] = []
        loop = asyncio.get_running_loop()

        def release() -> None:
            while held:
                writer.write(held.pop(0))

        while True:
            opcode, frame = await read_frame(reader)
            if opcode not in (0x1, 0x2):  # control frames pass untouched
                writer.write(frame)
                await writer.drain()
                continue
            fault = plan.pick()
            if fault is not None:
                plan.counts[fault] += 1
            if fault == "drop":
                continue
            if fault == "cut":
                cut()  # type: ignore[operator]
                return
            if fault == "truncate":
                writer.write(frame[: plan.rng.randint(1, len(frame) - 1)])
                await writer.drain()
                cut()  # type: ignore[operator]
                return
            if fault == "delay":
                await asyncio.sleep(plan.rng.uniform(0, plan.max_delay))
            if fault == "reorder" and not held:
                held.append(frame)  # goes after the next frame, or on its own a moment later
                loop.call_later(plan.max_delay, release)
                continue
            writer.write(frame)
            if fault == "duplicate":
                writer.write(frame)
            release()
            await writer.drain()

    async def _bytes(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, cut: object) -> None:
        plan = self.plan
        while chunk := await reader.read(65536):
            fault = plan.pick(("delay", "truncate", "cut"))
            if fault is not None:
                plan.counts[fault] += 1
            if fault == "cut":
                cut()  # type: ignore[operator]
                return
            if fault == "truncate":
                writer.write(chunk[: max(1, len(chunk) // 2)])
                await writer.drain()
                cut()  # type: ignore[operator]
                return
            if fault == "delay":
                await asyncio.sleep(plan.rng.uniform(0, plan.max_delay))
            writer.write(chunk)
            await writer.drain()
