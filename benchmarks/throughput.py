"""Throughput (calls per second with many calls in flight, and with many Apps) and memory per App.

A LineUp call is one message each way, like one echo, so calls/s compares directly with a raw
pipelined echo's messages/s. With several Apps connected every call goes to each of them (the
hub's semantics: the first answer wins, the others get ``tool.cancel``), and every App answers.
"""

from __future__ import annotations

import asyncio
import gc
import os
import time
import tracemalloc
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path

from lineup_plugin.hub import Hub

from . import rigs
from .report import Row, fmt_ratio, verdict
from .stats import median

INFLIGHT = (1, 16, 256)
APPS = (1, 10, 100)
#: calls in flight while measuring with several Apps
APPS_INFLIGHT = 16


@dataclass
class Plan:
    """How long to measure."""

    rounds: int
    window: float  # seconds per measurement
    memory_apps: int = 100


@dataclass
class Results:
    """Rates per round, by variant."""

    lineup: dict[int, list[float]] = field(default_factory=dict)
    echo: dict[int, list[float]] = field(default_factory=dict)
    apps: dict[int, list[float]] = field(default_factory=dict)
    #: (RSS, traced) bytes per App, without and with permessage-deflate
    memory: dict[bool, tuple[float, float]] = field(default_factory=dict)
    memory_apps: int = 0


async def call_rate(hub: Hub, inflight: int, seconds: float) -> float:
    """Completed ``hub.call``s per second with ``inflight`` calls kept in flight."""
    end = time.perf_counter() + seconds
    done = 0

    async def worker() -> None:
        nonlocal done
        while time.perf_counter() < end:
            result = await hub.call(rigs.TOOL, rigs.ARGUMENTS)
            if result.status != "completed":
                raise RuntimeError(f"benchmark call ended {result.status}: {result.result}")
            done += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(inflight)))
    return done / (time.perf_counter() - start)


async def measure(data_dir: Path, plan: Plan) -> Results:
    """Every rate, interleaved in rounds; then memory per App."""
    results = Results()
    async with AsyncExitStack() as stack:
        echo = rigs.EchoServer()
        await echo.start(stack)
        servers = {count: await rigs.direct_server(stack, data_dir) for count in APPS}
        targets = [rigs.ws_target(server, count) for count, server in servers.items()]
        await rigs.start_child(stack, "ws", rigs.TOKEN, echo.target(), *targets)
        text = rigs.call_text()
        one = servers[1].hub
        await call_rate(one, 16, min(plan.window, 0.1))  # warm up
        await echo.pipelined(text, 16, min(plan.window, 0.1))
        for _ in range(plan.rounds):
            for inflight in INFLIGHT:
                results.lineup.setdefault(inflight, []).append(await call_rate(one, inflight, plan.window))
                results.echo.setdefault(inflight, []).append(await echo.pipelined(text, inflight, plan.window))
            for count, server in servers.items():
                rate = await call_rate(server.hub, APPS_INFLIGHT, plan.window)
                results.apps.setdefault(count, []).append(rate)
    for deflate in (False, True):  # each in a fresh process, so that RSS means something
        memory = await rigs.run_python(MEMORY, str(data_dir), str(plan.memory_apps), str(int(deflate)))
        results.memory[deflate] = (memory["rss"], memory["traced"])
    results.memory_apps = plan.memory_apps
    return results


MEMORY = """
import asyncio, json, sys
from pathlib import Path
from benchmarks.throughput import memory_per_app
rss, traced = asyncio.run(memory_per_app(Path(sys.argv[1]), int(sys.argv[2]), deflate=sys.argv[3] == "1"))
print(json.dumps({"rss": rss, "traced": traced}))
"""


def rss_bytes() -> int:
    """This process's resident set size (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


async def memory_per_app(data_dir: Path, count: int, *, deflate: bool = False) -> tuple[float, float]:
    """Bytes per connected App: RSS delta of this process, then traced Python allocations."""
    async with AsyncExitStack() as stack:
        server = await rigs.direct_server(stack, data_dir)
        gc.collect()
        before = rss_bytes()
        async with AsyncExitStack() as apps:
            await rigs.start_child(apps, "ws", rigs.TOKEN, rigs.ws_target(server, count, deflate=deflate))
            gc.collect()
            rss = (rss_bytes() - before) / count
        while server.hub.connected:
            await asyncio.sleep(0.01)
        gc.collect()
        tracemalloc.start()
        try:
            snapshot = tracemalloc.take_snapshot()
            async with AsyncExitStack() as apps:
                await rigs.start_child(apps, "ws", rigs.TOKEN, rigs.ws_target(server, count, deflate=deflate))
                gc.collect()
                after = tracemalloc.take_snapshot()
                traced = sum(stat.size_diff for stat in after.compare_to(snapshot, "filename")) / count
        finally:
            tracemalloc.stop()
    return rss, traced


def rows(results: Results) -> list[Row]:
    """The table rows of the throughput section."""
    section = "5 throughput"
    out: list[Row] = []
    for inflight in INFLIGHT:
        lineup, echo = results.lineup[inflight], results.echo[inflight]
        ratio = median([a / b for a, b in zip(lineup, echo, strict=True)])
        target, met = ("≥ 50% of the echo", verdict(ratio >= 0.5)) if inflight == 256 else ("", "")
        out.append(
            Row(
                section,
                f"direct, 1 App, {inflight} calls in flight",
                f"{median(lineup):,.0f} calls/s",
                f"{ratio:.0%} of a raw pipelined echo ({median(echo):,.0f} msg/s)",
                target,
                met,
            )
        )
    base = median(results.apps[1])
    for count in APPS:
        rate = median(results.apps[count])
        out.append(
            Row(
                section,
                f"direct, {count} App{'s' if count > 1 else ''}, {APPS_INFLIGHT} in flight (each call to every App)",
                f"{rate:,.0f} calls/s",
                f"{fmt_ratio(rate / base)} 1 App; {rate * count:,.0f} deliveries/s",
                "",
                "",
            )
        )
    for deflate, (rss, traced) in sorted(results.memory.items()):
        out.append(
            Row(
                section,
                f"memory per connected App{', permessage-deflate' if deflate else ''} (agent process)",
                f"{rss / 1024:,.1f} KiB RSS; {traced / 1024:,.1f} KiB traced",
                f"fresh agent process, {results.memory_apps} Apps: RSS delta; tracemalloc delta (Python heap)",
                "",
                "",
            )
        )
    return out
