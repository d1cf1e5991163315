"""The fault rig, large form (a soak): many Apps, many calls, every fault, and nothing lost or run twice.

    python -m benchmarks.faults [--apps 100] [--calls 100] [--rate 0.05] [--seed 1] [--deadline 2]

The rig of ``tests/rig/`` (the small form is ``tests/test_faults.py``): one agent process with a
hub, a SQLite store and a direct server per App; each App over a real WebSocket through a fault
proxy that drops, delays, duplicates, reorders and truncates frames and cuts connections (``--rate``
of frames faulted); the agent is SIGKILLed once at every named point of the call lifecycle
(``tests.rig.agent.POINTS``, in a seeded order, each at a random occurrence) and started again on
the same directory; every fourth life also has its store fail (disk full for three writes, or an
I/O error). At the end the invariants are checked (``tests/rig/driver.py``) and a table printed:
faults injected, calls, lost, duplicated. Exit status 1 if any invariant broke, the agent's peak
RSS passed ``--rss-limit`` MiB, or a kill point was never reached.

``--unserializable`` adds a store write that raises ``TypeError`` (a value the store cannot
serialise): a known bug (``tests/test_faults.py``, xfail) makes the agent stall on it today.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path

from tests.rig.agent import POINTS
from tests.rig.driver import Generation, run_rig
from tests.rig.proxy import FaultPlan

ONCE_PER_CONNECTION = ("device.hello", "device.welcome")


def generations(args: argparse.Namespace) -> list[Generation]:
    """One life per kill point; every fourth with a store fault too."""
    rng = random.Random(args.seed)
    points = list(POINTS)
    rng.shuffle(points)
    spread = max(1, args.apps * args.calls // (4 * len(points)))
    kinds = ["disk_full", "io_error"] + (["unserializable"] if args.unserializable else [])
    lives = []
    for number, point in enumerate(points):
        nth = rng.randint(1, args.apps if point.endswith(ONCE_PER_CONNECTION) else spread)
        fault = None
        if number % 4 == 3:
            kind = kinds[(number // 4) % len(kinds)]
            fault = f"{kind}@{rng.randint(1, spread)}" + ("+3" if kind == "disk_full" else "")
        lives.append(Generation(kill=f"{point}@{nth}", store_fault=fault))
    return lives


async def main(args: argparse.Namespace) -> int:
    plan = FaultPlan.mixed(seed=args.seed, rate=args.rate)
    lives = generations(args)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lineup-faults-") as tmp:
        report = await run_rig(
            Path(args.data_dir or tmp),
            apps=args.apps,
            calls=args.calls,
            generations=lives,
            plan=plan,
            concurrency=args.concurrency,
            deadline=args.deadline,
            seed=args.seed,
            stall=args.stall,
        )
    wall = time.perf_counter() - started
    print(report.table())
    print(f"\n{args.apps} Apps x {args.calls} calls, seed {args.seed}, {wall:.0f} s wall")
    killed = set(report.killed_at)
    missed = [life.kill for life in lives if life.kill not in killed]
    print(f"killed at {len({k.partition('@')[0] for k in killed})} distinct points: {', '.join(sorted(killed))}")
    if missed:
        print(f"kill points never reached: {', '.join(str(m) for m in missed)}")
    rss_ok = report.max_rss_kib / 1024 <= args.rss_limit
    if not rss_ok:
        print(f"agent peak RSS {report.max_rss_kib / 1024:.0f} MiB over the limit {args.rss_limit} MiB")
    for problem in report.problems[:20]:
        print("VIOLATION:", problem)
    return 0 if report.ok and rss_ok and not missed else 1


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--apps", type=int, default=100)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--concurrency", type=int, default=2, help="calls in flight per App")
    parser.add_argument("--rate", type=float, default=0.05, help="share of frames faulted")
    parser.add_argument("--deadline", type=float, default=2.0, help="seconds before an unanswered call expires")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stall", type=float, default=120.0, help="an agent silent this long has stalled")
    parser.add_argument("--rss-limit", type=float, default=1024.0, help="MiB")
    parser.add_argument("--unserializable", action="store_true", help="also the known-bug store fault")
    parser.add_argument("--data-dir", help="keep the run here (default: a temporary directory)")
    args = parser.parse_args(argv)
    if not (1 <= args.apps <= 500 and 1 <= args.calls <= 1000):
        parser.error("--apps is 1..500, --calls 1..1000")
    return args


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse())))
