"""The MCP peer: an official-SDK server whose tool elicits on demand, timed in the agent process.

The ``serve`` tool runs for the whole benchmark: each command asks it for a batch of sequential
``ctx.elicit(...)`` round trips (a form with the same two fields as the LineUp ``choice`` answer)
and it returns their times. Two transports: in memory (client and server in this process) and
streamable HTTP on 127.0.0.1 (server here under uvicorn, client in a child process). Both use the
handshake-era protocol (``mode="legacy"``): the 2026 stateless protocol has no server-to-client
requests, so ``ctx.elicit`` needs a session.
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import AsyncExitStack
from typing import Any

import uvicorn
from mcp import Client, types
from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel

from .peers import ANSWER
from .rigs import Child, free_port, more

#: (budget seconds, max samples, where to put the times), or None to end the tool
Command = tuple[float, int, "asyncio.Future[list[int]]"] | None


class Pick(BaseModel):
    """What the user picked (the same fields as a LineUp ``choice`` result)."""

    selected: str
    index: int


class ElicitingServer:
    """An MCPServer with one long-running tool that elicits when told to."""

    def __init__(self) -> None:
        self.commands: asyncio.Queue[Command] = asyncio.Queue()
        self.server = MCPServer("lineup-bench")
        commands = self.commands

        @self.server.tool()
        async def serve(ctx: Context) -> str:
            """Elicit in batches until told to stop."""
            while (command := await commands.get()) is not None:
                budget, limit, done = command
                samples: list[int] = []
                end = time.perf_counter() + budget
                while more(samples, limit, end):
                    start = time.perf_counter_ns()
                    result = await ctx.elicit("Deploy where?", Pick)
                    samples.append(time.perf_counter_ns() - start)
                    if result.action != "accept":
                        raise RuntimeError(f"elicitation ended {result.action}")
                done.set_result(samples)
            return "done"

    async def sample(self, budget: float, limit: int) -> list[int]:
        """Sequential elicitation round trips for ``budget`` seconds (at most ``limit``)."""
        done: asyncio.Future[list[int]] = asyncio.get_running_loop().create_future()
        self.commands.put_nowait((budget, limit, done))
        return await asyncio.wait_for(done, 600)


async def on_elicit(context: Any, params: Any) -> Any:
    """The client's elicitation callback: accept at once."""
    return types.ElicitResult(action="accept", content=dict(ANSWER))


async def in_memory(stack: AsyncExitStack) -> ElicitingServer:
    """MCP client and server in this process, connected in memory."""
    peer = ElicitingServer()
    ready = asyncio.Event()

    async def client() -> None:
        async with Client(peer.server, elicitation_callback=on_elicit, mode="legacy") as session:
            ready.set()
            await session.call_tool("serve", {})

    task = asyncio.create_task(client())

    async def close() -> None:
        peer.commands.put_nowait(None)
        await asyncio.wait_for(task, 30)

    stack.push_async_callback(close)
    await asyncio.wait_for(ready.wait(), 30)
    return peer


async def streamable_http(stack: AsyncExitStack) -> ElicitingServer:
    """MCP server here over streamable HTTP (uvicorn, 127.0.0.1), its client in a child process."""
    logging.getLogger("mcp").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    peer = ElicitingServer()
    sock = free_port()
    server = uvicorn.Server(uvicorn.Config(peer.server.streamable_http_app(), log_level="warning", lifespan="on"))
    task = asyncio.create_task(server.serve(sockets=[sock]))

    async def close() -> None:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        sock.close()

    stack.push_async_callback(close)
    while not server.started:
        await asyncio.sleep(0.01)

    client = Child("mcp", f"http://127.0.0.1:{sock.getsockname()[1]}/mcp")
    stack.push_async_callback(client.stop)

    async def stop_tool() -> None:  # end the tool and let its client leave by itself (else the SDK logs errors)
        peer.commands.put_nowait(None)
        await client.exited(30)

    await client.start()
    stack.push_async_callback(stop_tool)
    return peer
