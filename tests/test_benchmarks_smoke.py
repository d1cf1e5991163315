"""The benchmark command runs end to end and prints every row (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import latency, phone, throughput

ROOT = Path(__file__).resolve().parent.parent


def expected_rows() -> list[str]:
    names = [
        latency.FLOOR,
        latency.BARE,
        latency.BARE_VERDICT,
        latency.DIRECT,
        latency.NORMAL,
        latency.FULL,
        latency.SPACED_FLOOR,
        latency.SPACED_DIRECT,
        latency.SPACED_NORMAL,
        latency.DEFLATE,
        latency.RUNNER,
        latency.FORWARDED,
        latency.RELAY,
        latency.RELAY_E2E,
        latency.RELAY_FAR,
        latency.MEMORY,
        latency.MCP_MEMORY,
        latency.MCP_HTTP,
    ]
    names += [f"direct, 1 App, {n} calls in flight" for n in throughput.INFLIGHT]
    names += [f"direct, {n} App" for n in throughput.APPS]
    names += [
        "memory per connected App (agent process)",
        "memory per connected App, permessage-deflate",
        "Hermes start without LineUp",
        "Hermes start with LineUp enabled",
        "LineUp import + register(ctx) inside that start",
        "the same with Hermes' slash-command module already loaded",
        "import lineup_plugin.hermes + register(fake ctx)",
    ]
    names += [f"first card: {load}" for load in phone.LOADS]
    return names


@pytest.mark.hermes
def test_quick_benchmark_run_prints_every_row() -> None:
    pytest.importorskip("mcp", reason="the benchmarks compare with the MCP SDK (pip install -e '.[dev]')")
    pytest.importorskip("run_agent", reason="the benchmarks start Hermes (pip install -e '.[hermes]')")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("CPU: ")
    table = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| section")]
    for name in expected_rows():
        assert any(name in line for line in table), f"no row {name!r} in:\n{out}"
    assert len(table) == len(expected_rows())
    assert "nan" not in out
