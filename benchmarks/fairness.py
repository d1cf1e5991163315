"""Fairness: how long a new App waits for its welcome while other Apps keep the agent busy.

    python -m benchmarks.fairness [--apps 30] [--rate 19] [--connects 5] [--store sqlite|memory]

A direct server (real WebSockets on 127.0.0.1, the default limits, a SQLite store) serves
``--apps`` Apps run by a child process, each sending a text ``--rate`` times a second and reading
everything the agent sends (every text reaches every other App). Meanwhile a new App connects ``--connects`` times;
each time the seconds from opening its socket to reading its ``device.welcome`` are taken. Then
the backlog case: every App's 100 texts already wait at the server when the new App connects,
and the number of them handled before its welcome is counted.

Before the fix (one App's messages that were read already were handled one after the other
without a turn for any other connection) the welcome waited 5-12 s behind 30 Apps at 19/s, and
all the waiting texts went first; now each connection gets a turn after each message.
The new Apps run in the server's process, so the numbers are for comparison on one machine,
not absolute.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

from websockets.exceptions import ConnectionClosed

from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import load_registry
from lineup_plugin.protocol.messages import Text
from lineup_plugin.transports.direct.server import DirectServer
from tests.wsapp import WsApp, _Address, encode_from

from .rigs import TOKEN

#: texts each App has waiting at the server in the backlog case
BACKLOG = 100
#: seconds the load runs before the first new App, and between two new Apps
SETTLE = 4.0
PAUSE = 0.5


async def _drain(app: WsApp) -> None:
    with contextlib.suppress(ConnectionClosed):
        while True:
            await app.ws.recv()


async def busy_apps(port: int, apps: int, rate: float, seconds: float) -> None:
    """The busy Apps (run in a child process): each sends ``rate`` texts a second for ``seconds`` and reads all."""
    server = _Address(port, TOKEN)
    busy = [await WsApp.connect(server, f"busy-{i}", open_timeout=120) for i in range(apps)]  # type: ignore[arg-type]

    async def talk(app: WsApp) -> None:
        n, end = 0, time.monotonic() + seconds
        with contextlib.suppress(ConnectionClosed):
            while time.monotonic() < end:
                await app.ws.send(encode_from(app.device_id, Text(text=f"{app.device_id} says {n}")))
                n += 1
                await asyncio.sleep(1 / rate)

    readers = [asyncio.create_task(_drain(app)) for app in busy]
    await asyncio.gather(*(talk(app) for app in busy))
    for app in busy:
        await app.close()
    await asyncio.gather(*readers)


async def welcome_times(server: DirectServer, apps: int, rate: float, connects: int) -> list[float]:
    """Seconds to each of ``connects`` welcomes while ``apps`` Apps (in a child process) send ``rate`` texts a
    second each."""
    seconds = SETTLE + connects * (PAUSE + 1.0)
    command = [sys.executable, "-m", "benchmarks.fairness", "--role", "apps", "--port", str(server.port)]
    command += ["--apps", str(apps), "--rate", str(rate), "--seconds", str(seconds)]
    child = await asyncio.create_subprocess_exec(*command)
    await asyncio.sleep(SETTLE)  # the Apps connect and the load settles before the first measurement
    times = []
    for k in range(connects):
        start = time.perf_counter()
        newcomer = await WsApp.connect(server, f"newcomer-{k}", open_timeout=120)
        times.append(time.perf_counter() - start)
        reader = asyncio.create_task(_drain(newcomer))
        await newcomer.close()
        await reader
        await asyncio.sleep(PAUSE)
    await child.wait()
    return times


async def backlog_before_welcome(server: DirectServer, handled: list[str], apps: int) -> tuple[int, int]:
    """How many of the texts waiting at the server went before a new App's welcome, of how many."""
    busy = [await WsApp.connect(server, f"backlog-{i}") for i in range(apps)]
    readers = [asyncio.create_task(_drain(app)) for app in busy]
    start = len(handled)
    for app in busy:
        for n in range(BACKLOG):
            await app.ws.send(encode_from(app.device_id, Text(text=f"{app.device_id} {n}")))
    waiting = start + apps * BACKLOG - len(handled)
    first = len(handled)
    newcomer = await WsApp.connect(server, "newcomer-backlog", open_timeout=120)
    went_before = len(handled) - first
    readers.append(asyncio.create_task(_drain(newcomer)))
    for app in [*busy, newcomer]:
        await app.close()
    await asyncio.gather(*readers)
    return went_before, waiting


async def run(apps: int, rate: float, connects: int, store: str) -> None:
    """Measure and print both cases."""
    handled: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lineup-fairness-") as tmp:
        settings = Settings(
            mode="direct", host="127.0.0.1", port=0, token=TOKEN, store=store, data_dir=Path(tmp),
            max_connections=256, max_queue=100_000,
        )  # fmt: skip
        hub = Hub.from_settings(settings, load_registry(load_entrypoints=False), on_text=lambda d, t: handled.append(t))
        async with DirectServer.from_settings(hub, settings) as server:
            times = await welcome_times(server, apps, rate, connects)
            went_before, waiting = await backlog_before_welcome(server, handled, apps)
        hub.store.close()
    print(f"{apps} Apps sending {rate:g} texts/s each ({store} store), {connects} new Apps:")
    print(f"  welcome after: median {statistics.median(times):.3f} s, worst {max(times):.3f} s")
    print(f"  {apps} Apps with {BACKLOG} texts each waiting: {went_before} of {waiting} handled before the welcome")


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fairness", description=__doc__)
    parser.add_argument("--apps", type=int, default=30)
    parser.add_argument("--rate", type=float, default=19.0)
    parser.add_argument("--connects", type=int, default=5)
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--role", choices=["agent", "apps"], default="agent", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, default=10.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    if args.role == "apps":
        asyncio.run(busy_apps(args.port, args.apps, args.rate, min(args.seconds, 600.0)))
        return
    asyncio.run(run(min(args.apps, 200), max(0.1, min(args.rate, 100.0)), max(1, min(args.connects, 50)), args.store))


if __name__ == "__main__":
    main()
