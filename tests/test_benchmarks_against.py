"""``python -m benchmarks --against REV``: two trees' tables read and set side by side (no timing is asserted)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import against, latency

ROOT = Path(__file__).resolve().parent.parent

TABLE = """CPU: something
load average at start: 0.1

| section | measurement | value | compared | target | verdict |
|---------|-------------|-------|----------|--------|---------|
| 1-4 round trip p50 / p99 | raw websockets echo | 200 / 400 µs (n=10) | the floor | | |
| 1-4 round trip p50 / p99 | direct, store off (MemoryStore) | 1,000 / 2,000 µs (n=5) | 5.00× the echo | | |
| throughput | direct, 1 App, 1 calls in flight | 2,737 calls/s | 39% of a raw echo | | |
| startup | Hermes start with LineUp enabled | 533 ms | | | |
| phone | first card: nothing cached | n/a | | | |
"""


def test_a_round_trip_is_read_as_a_multiple_of_the_echo_of_its_own_run() -> None:
    figures = against.read_table(TABLE)
    assert figures[latency.DIRECT] == against.Figure(5.0, "× the echo", against.ROUND_TRIP)
    assert figures[latency.FLOOR] == against.Figure(200.0, "µs", against.ROUND_TRIP)


def test_other_rows_are_read_as_their_first_number_and_a_row_without_one_is_left_out() -> None:
    figures = against.read_table(TABLE)
    assert figures["direct, 1 App, 1 calls in flight"] == against.Figure(2737.0, "calls/s", "throughput")
    assert figures["Hermes start with LineUp enabled"] == against.Figure(533.0, "ms", "startup")
    assert "first card: nothing cached" not in figures


def test_without_an_echo_row_a_round_trip_has_no_ratio() -> None:
    only = "\n".join(line for line in TABLE.splitlines() if "raw websockets echo" not in line)
    assert str(against.read_table(only)[latency.DIRECT].value) == "nan"


def test_the_comparison_gives_every_run_of_both_trees_and_the_change_of_the_medians() -> None:
    def run(ratio: float, *extra: str) -> dict[str, against.Figure]:
        figures = {latency.DIRECT: against.Figure(ratio, "× the echo", against.ROUND_TRIP)}
        figures.update({name: against.Figure(1.0, "", "x") for name in extra})
        return figures

    rows = against.compare([run(4.0), run(3.0), run(5.0, "gone since")], [run(3.0, "new"), run(2.0), run(4.0)])
    by_name = {row[1]: row for row in rows}
    assert by_name[latency.DIRECT] == [
        "round trip p50, × the echo",
        latency.DIRECT,
        "4.00 / 3.00 / 5.00",
        "3.00 / 2.00 / 4.00",
        "-25.0%",
    ]
    assert by_name["new"][2:] == ["—", "1.00", ""]  # a row only this tree has
    assert by_name["gone since"][2:] == ["1.00", "—", ""]  # and one only the older tree has
    assert [row[1] for row in rows] == [latency.DIRECT, "new", "gone since"]  # this tree's order first


@pytest.mark.parametrize(
    ("rev", "runs", "said"),
    [
        ("no-such-commit-anywhere", 1, "no such commit"),
        ("-v", 1, "not a commit"),
        ("HEAD", 0, "--runs must be at least 1"),
    ],
)
def test_a_side_by_side_that_cannot_be_made_says_why(rev: str, runs: int, said: str) -> None:
    with pytest.raises(against.AgainstError, match=said):
        against.side_by_side(rev, runs, ["--quick"])


def test_the_command_refuses_an_unknown_commit_with_a_clear_message_and_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--against", "no-such-commit-anywhere"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "python -m benchmarks: --against no-such-commit-anywhere: no such commit" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_quick_side_by_side_with_the_last_commit_prints_both_trees_for_every_round_trip() -> None:
    pytest.importorskip("mcp", reason="the benchmarks compare with the MCP SDK (pip install -e '.[dev]')")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--against", "HEAD", "--quick", "--only", "latency", "--runs", "1"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert out.startswith("CPU: ")
    assert "side by side: " in out and "(--against HEAD) and this tree, 1 run(s) each" in out
    rows = {
        cells[1]: cells
        for line in out.splitlines()
        if line.startswith("| ") and not line.startswith("| section")
        for cells in [[cell.strip() for cell in line.strip().strip("|").split("|")]]
    }
    for name in (latency.FLOOR, latency.BARE, latency.DIRECT, latency.NORMAL, latency.MEMORY):
        assert name in rows, f"no row {name!r} in:\n{out}"
        before, now, change = rows[name][2:]
        assert float(before) > 0 and float(now) > 0, rows[name]
        assert change.endswith("%"), rows[name]
    assert rows[latency.DIRECT][0] == "round trip p50, × the echo"
    assert rows[latency.FLOOR][0] == "round trip p50, µs"
    assert "nan" not in out
