"""A small run of benchmarks/load.py: every invariant holds, and a broken one makes it exit non-zero."""

from __future__ import annotations

import asyncio
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOAD = ROOT / "benchmarks" / "load.py"
SMALL = ["--apps", "5", "--calls", "10", "--deadline", "0.5", "--max-delay", "0.1", "--timeout", "120"]


async def run_load(*options: str) -> tuple[int, str, str]:
    process = await asyncio.create_subprocess_exec(
        sys.executable, str(LOAD), *options, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=ROOT
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), 180)  # the script gives up at --timeout
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


@pytest.mark.parametrize("store", ["sqlite", "memory"])
async def test_small_load_run_keeps_every_invariant(store: str) -> None:
    code, out, err = await run_load(*SMALL, "--seed", "7", "--store", store, "--p-disconnect", "0.2")
    assert code == 0, out + err
    assert "invariants: ok" in out
    statuses = dict(re.findall(r"(completed|rejected|expired|cancelled|failed|unsupported): (\d+)", out))
    assert sum(int(n) for n in statuses.values()) == 50
    assert re.search(r"calls: 50 ", out)
    assert re.search(r"reconnects: [1-9]", out), out  # the run did drop and reconnect
    assert re.search(r"duplicates refused: [1-9]", out), out


async def test_a_bad_option_is_refused() -> None:
    code, _, err = await run_load("--apps", "0")
    assert code == 2 and "need 1 <= apps" in err


async def test_a_lost_answer_breaks_the_invariants_and_the_exit_status() -> None:
    code, out, _ = await run_load(*SMALL, "--seed", "7", "--p-ignore", "0", "--fault", "lose-answer")
    assert code == 1, out
    assert "invariants BROKEN" in out and "one lost or doubled" in out
