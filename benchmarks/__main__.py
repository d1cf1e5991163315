"""``python -m benchmarks [--quick] [--only SECTION] [--one-core] [--against REV [--runs N]]``: run
every benchmark (or the sections named) and print the table; with ``--against``, the table of this
tree side by side with commit REV's (:mod:`benchmarks.against`)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path

from . import against, latency, machine, phone, startup, throughput
from .report import Row, render

FULL = {
    "latency": latency.Plan(rounds=31, budget=0.1, limit=2000),
    "throughput": throughput.Plan(rounds=7, window=0.3, memory_apps=100),
    "startup": 5,
}
QUICK = {
    "latency": latency.Plan(rounds=2, budget=0.01, limit=10),
    "throughput": throughput.Plan(rounds=1, window=0.05, memory_apps=5),
    "startup": 1,
}


async def run(plans: dict[str, object], sections: set[str]) -> list[Row]:
    """Run the chosen sections; each gets a fresh data directory."""
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="lineup-bench-") as tmp:
        data_dir = Path(tmp)
        if "latency" in sections:
            async with AsyncExitStack() as stack:
                samplers = await latency.build(stack, data_dir)
                rounds = await latency.measure(samplers, plans["latency"])  # type: ignore[arg-type]
            rows += latency.rows(rounds)
        if "throughput" in sections:
            rows += throughput.rows(await throughput.measure(data_dir, plans["throughput"]))  # type: ignore[arg-type]
        if "startup" in sections:
            rows += startup.rows(await startup.measure(data_dir, plans["startup"]))  # type: ignore[arg-type]
        if "phone" in sections:
            rows += phone.rows(await phone.measure())
    return rows


def main() -> None:
    """Parse the command line, run, print the table."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (its numbers mean nothing)")
    parser.add_argument(
        "--only",
        action="append",
        choices=["latency", "throughput", "startup", "phone"],
        help="run only this section (repeatable)",
    )
    parser.add_argument(
        "--one-core",
        action="store_true",
        help="run the agent and every child process on one CPU core: ratios then measure work, steady from run "
        "to run (on a shared 2-core VM the echo alone moves 110-350 µs between runs with where the kernel puts them)",
    )
    parser.add_argument(
        "--against",
        metavar="REV",
        help="run this tree and commit REV (unpacked with git archive) alternately, with the same options, "
        "and print both side by side: round trips as multiples of each run's own echo",
    )
    parser.add_argument(
        "--runs", type=int, default=3, metavar="N", help="with --against: runs of each tree (default 3)"
    )
    args = parser.parse_args()
    if args.against is not None:
        passed = ["--quick"] if args.quick else []
        passed += [f"--only={section}" for section in args.only or []]
        passed += ["--one-core"] if args.one_core else []
        try:
            table = against.side_by_side(args.against, args.runs, passed)
        except against.AgainstError as exc:
            sys.exit(f"python -m benchmarks: {exc}")
        print("\n".join([*machine.describe(), table]))
        return
    if args.one_core:
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # the children inherit it
    logging.disable(logging.WARNING)  # the MCP SDK and uvicorn log every request at INFO
    header = machine.describe()
    if args.one_core:
        header.append(f"pinned to CPU {min(os.sched_getaffinity(0))} with every child process (--one-core)")
    started = time.perf_counter()
    sections = set(args.only or ["latency", "throughput", "startup", "phone"])
    rows = asyncio.run(run(QUICK if args.quick else FULL, sections))
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    header.append(
        f"{'quick smoke run (numbers not meaningful)' if args.quick else 'full run'}: "
        f"{time.perf_counter() - started:.0f} s; load average at the end: {load}"
    )
    print(render(header, rows))


if __name__ == "__main__":
    main()
