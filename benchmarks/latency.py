"""Round trip latency: one tool call from the agent to an App that answers at once, and back.

Every variant is set up first, then the variants take turns in rounds (the order rotating each
round), so that load from elsewhere on the machine hits them alike. A ratio is the median over
rounds of the two variants' p50 in that round.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path

from lineup_plugin.hub import Hub
from lineup_plugin.protocol import codec
from lineup_plugin.protocol.messages import ToolResult
from lineup_plugin.runtime.forward import Forwarder, ForwardServer
from lineup_plugin.runtime.loop import Runner
from lineup_plugin.transports.direct.server import DirectServer

from . import mcp_rig, rigs
from .report import Row, fmt_ratio, verdict
from .stats import percentile, round_ratios

FLOOR = "raw websockets echo"
BARE = "LineUp messages on a bare websocket, no hub (App answers, agent decodes)"
BARE_VERDICT = "the same, with the verdict on the call before in the call's write (three messages, as the hub)"
DIRECT = "direct, store off (MemoryStore)"
NORMAL = "direct, SQLite WAL synchronous=NORMAL (default)"
FULL = "direct, SQLite WAL synchronous=FULL"
_IDLE = f"after {rigs.MODEL_GAP * 1000:g} ms idle"
SPACED_FLOOR = f"raw websockets echo, each round trip {_IDLE}"
SPACED_DIRECT = f"direct, store off, each call {_IDLE} (a model's pace)"
SPACED_NORMAL = f"direct, SQLite NORMAL, each call {_IDLE}"
DEFLATE = "direct, store off, App negotiates permessage-deflate (as browsers do)"
RUNNER = "direct, store off, from a tool thread (Runner.call_blocking)"
FORWARDED = "direct, store off, forwarded from another process's tool thread (Unix socket)"
RELAY = "relay through the fake WuKongIM (separate process)"
RELAY_E2E = "relay, end-to-end encrypted (paired App: X25519 + HKDF + AES-256-GCM)"
#: the server's SENDACKs to the agent this late: a sender that waited for each would add it to every round trip
FAR_ACK = 0.02
RELAY_FAR = "relay, the server's SENDACKs to the agent 20 ms late (a server farther away)"
MEMORY = "LineUp over the memory transport (in process)"
MCP_MEMORY = "MCP ctx.elicit, in-memory transport (legacy session)"
MCP_HTTP = "MCP ctx.elicit, streamable HTTP on 127.0.0.1 (legacy session)"


@dataclass
class Plan:
    """How long to measure."""

    rounds: int
    budget: float  # seconds per variant per round
    limit: int  # samples per variant per round at most


def runner_sampler(runner: Runner) -> rigs.Sampler:
    """Round trips the way Hermes makes them: ``call_blocking`` on a worker thread."""
    return blocking_sampler(lambda: runner.call_blocking(rigs.TOOL, rigs.ARGUMENTS))


def forwarded_sampler(forwarder: Forwarder) -> rigs.Sampler:
    """Round trips of a process that does not serve the App: its calls forwarded to the one that does."""

    def forward() -> ToolResult:
        call_id = codec.new_id("call")
        return forwarder.call(
            rigs.TOOL, rigs.ARGUMENTS, call_id=call_id, deadline=60.0, origin=None, is_interrupted=lambda: False
        )

    return blocking_sampler(forward)


def blocking_sampler(call: Callable[[], ToolResult]) -> rigs.Sampler:
    """Round trips of ``call`` made on a worker thread, as a runtime's tool makes them."""

    def blocking(budget: float, limit: int) -> list[int]:
        samples: list[int] = []
        end = time.perf_counter() + budget
        while rigs.more(samples, limit, end):
            start = time.perf_counter_ns()
            result = call()
            samples.append(time.perf_counter_ns() - start)
            if result.status != "completed":
                raise RuntimeError(f"benchmark call ended {result.status}: {result.result}")
        return samples

    async def sample(budget: float, limit: int) -> list[int]:
        return await asyncio.to_thread(blocking, budget, limit)

    return sample


async def build(stack: AsyncExitStack, data_dir: Path) -> dict[str, rigs.Sampler]:
    """Start every variant; returns their samplers by name (in table order)."""
    echo = rigs.EchoServer()
    await echo.start(stack)
    bare = rigs.BareServer()
    await bare.start(stack)
    text = rigs.call_text()
    verdict_text = rigs.verdict_text(text)
    direct = await rigs.direct_server(stack, data_dir)
    normal = await rigs.direct_server(stack, data_dir, rigs.sqlite_store(data_dir, "normal"))
    full = await rigs.direct_server(stack, data_dir, rigs.sqlite_store(data_dir, "full"))
    deflate = await rigs.direct_server(stack, data_dir)
    runner_settings = rigs.settings(data_dir)
    runner = Runner(
        runner_settings,
        rigs.new_hub().registry,
        transport=lambda hub: DirectServer.from_settings(hub, runner_settings, limits=rigs.LIMITS),
        services=[lambda hub: ForwardServer(hub, runner_settings.data_dir)],
    )
    await asyncio.to_thread(runner.start)
    stack.push_async_callback(asyncio.to_thread, runner.stop)
    assert isinstance(runner.transport, DirectServer)
    servers = [direct, normal, full, runner.transport]
    targets = [echo.target(), bare.target(), rigs.ws_target(deflate, deflate=True), *map(rigs.ws_target, servers)]
    await rigs.start_child(stack, "ws", rigs.TOKEN, *targets)
    memory_hub = rigs.new_hub()
    await rigs.AnsweringApp(memory_hub, "memory-app").connect()
    relay_hub = await rigs.relay_hub(stack)
    pairing_dir = data_dir / "relay-pairing"
    relay_e2e_hub = await rigs.relay_hub(stack, pairing_dir)
    relay_far_hub = await rigs.relay_hub(stack, ack_delay=FAR_ACK)
    mcp_memory = await mcp_rig.in_memory(stack)
    mcp_http = await mcp_rig.streamable_http(stack)

    def hub_sampler(hub: Hub) -> rigs.Sampler:
        return lambda budget, limit: rigs.timed_calls(hub, budget, limit)

    async def floor(budget: float, limit: int) -> list[int]:
        return await echo.round_trips(text, budget, limit)

    async def bare_exchange(budget: float, limit: int) -> list[int]:
        return await bare.round_trips(text, budget, limit)

    async def bare_verdict(budget: float, limit: int) -> list[int]:
        return await bare.round_trips(text, budget, limit, before=verdict_text)

    return {
        FLOOR: floor,
        BARE: bare_exchange,
        BARE_VERDICT: bare_verdict,
        DIRECT: hub_sampler(direct.hub),
        NORMAL: hub_sampler(normal.hub),
        FULL: hub_sampler(full.hub),
        SPACED_FLOOR: rigs.spaced(floor),
        SPACED_DIRECT: rigs.spaced(hub_sampler(direct.hub)),
        SPACED_NORMAL: rigs.spaced(hub_sampler(normal.hub)),
        DEFLATE: hub_sampler(deflate.hub),
        RUNNER: runner_sampler(runner),
        FORWARDED: forwarded_sampler(Forwarder(runner_settings.data_dir)),
        RELAY: hub_sampler(relay_hub),
        RELAY_E2E: hub_sampler(relay_e2e_hub),
        RELAY_FAR: hub_sampler(relay_far_hub),
        MEMORY: hub_sampler(memory_hub),
        MCP_MEMORY: mcp_memory.sample,
        MCP_HTTP: mcp_http.sample,
    }


async def measure(samplers: dict[str, rigs.Sampler], plan: Plan) -> dict[str, list[list[int]]]:
    """Interleaved rounds (after one untimed warm-up round); samples in ns per variant per round."""
    names = list(samplers)
    for name in names:
        await samplers[name](min(plan.budget, 0.05), 20)
    rounds: dict[str, list[list[int]]] = {name: [] for name in names}
    for index in range(plan.rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            rounds[name].append(await samplers[name](plan.budget, plan.limit))
    return rounds


def rows(rounds: dict[str, list[list[int]]]) -> list[Row]:
    """The table rows of the latency section."""

    def p(name: str, q: float) -> float:
        return percentile([s for r in rounds[name] for s in r], q) / 1000

    def cell(name: str) -> str:
        count = sum(len(r) for r in rounds[name])
        return f"{p(name, 50):,.0f} / {p(name, 99):,.0f} µs (n={count})"

    def ratio(a: str, b: str) -> float:
        return round_ratios(rounds[a], rounds[b])

    direct_floor = ratio(DIRECT, FLOOR)
    normal_floor = ratio(NORMAL, FLOOR)
    vs_mcp_http = ratio(DIRECT, MCP_HTTP)
    vs_mcp_memory = ratio(MEMORY, MCP_MEMORY)
    section = "1-4 round trip p50 / p99"
    return [
        Row(section, FLOOR, cell(FLOOR), "the floor", "", ""),
        Row(section, BARE, cell(BARE), f"{fmt_ratio(ratio(BARE, FLOOR))} the echo", "", ""),
        Row(
            section,
            BARE_VERDICT,
            cell(BARE_VERDICT),
            f"{fmt_ratio(ratio(BARE_VERDICT, FLOOR))} the echo; {fmt_ratio(ratio(BARE_VERDICT, BARE))} with two",
            "",
            "",
        ),
        Row(
            section,
            DIRECT,
            cell(DIRECT),
            f"{fmt_ratio(direct_floor)} the echo; {fmt_ratio(ratio(DIRECT, BARE_VERDICT))} the three messages bare",
            "≤ 2.5×",
            verdict(direct_floor <= 2.5),
        ),
        Row(
            section,
            NORMAL,
            cell(NORMAL),
            f"{fmt_ratio(normal_floor)} the echo; {fmt_ratio(ratio(NORMAL, DIRECT))} store off",
            "≤ 4.2×",
            verdict(normal_floor <= 4.2),
        ),
        Row(
            section,
            FULL,
            cell(FULL),
            f"{fmt_ratio(ratio(FULL, FLOOR))} the echo; {fmt_ratio(ratio(FULL, DIRECT))} store off",
            "",
            "",
        ),
        Row(section, SPACED_FLOOR, cell(SPACED_FLOOR), f"{fmt_ratio(ratio(SPACED_FLOOR, FLOOR))} back to back", "", ""),
        Row(
            section,
            SPACED_DIRECT,
            cell(SPACED_DIRECT),
            f"{fmt_ratio(ratio(SPACED_DIRECT, SPACED_FLOOR))} the echo after the same idle",
            "",
            "",
        ),
        Row(
            section,
            SPACED_NORMAL,
            cell(SPACED_NORMAL),
            f"{fmt_ratio(ratio(SPACED_NORMAL, SPACED_FLOOR))} the echo after the same idle",
            "",
            "",
        ),
        Row(section, DEFLATE, cell(DEFLATE), f"{fmt_ratio(ratio(DEFLATE, DIRECT))} without deflate", "", ""),
        Row(section, RUNNER, cell(RUNNER), f"{fmt_ratio(ratio(RUNNER, DIRECT))} hub.call in the loop", "", ""),
        Row(section, FORWARDED, cell(FORWARDED), f"{fmt_ratio(ratio(FORWARDED, RUNNER))} the serving process", "", ""),
        Row(section, RELAY, cell(RELAY), f"{fmt_ratio(ratio(RELAY, DIRECT))} direct", "", ""),
        Row(section, RELAY_E2E, cell(RELAY_E2E), f"{fmt_ratio(ratio(RELAY_E2E, RELAY))} relay in clear", "", ""),
        Row(section, RELAY_FAR, cell(RELAY_FAR), f"{fmt_ratio(ratio(RELAY_FAR, RELAY))} relay", "", ""),
        Row(
            section,
            MEMORY,
            cell(MEMORY),
            f"{fmt_ratio(vs_mcp_memory)} MCP in-memory",
            "< 1×",
            verdict(vs_mcp_memory < 1),
        ),
        Row(section, MCP_MEMORY, cell(MCP_MEMORY), "", "", ""),
        Row(
            section,
            MCP_HTTP,
            cell(MCP_HTTP),
            f"direct is {fmt_ratio(vs_mcp_http)} this",
            "direct < 1×",
            verdict(vs_mcp_http < 1),
        ),
    ]
