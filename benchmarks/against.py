"""``python -m benchmarks --against REV``: this tree and commit ``REV`` measured side by side.

``REV`` is unpacked with ``git archive`` into a temporary directory. Then each tree runs its own
``python -m benchmarks`` (with the same ``--only``, ``--quick`` and ``--one-core``) in turn, with
this interpreter, ``runs`` times, the order swapped every run, so that load from elsewhere on the
machine hits both alike. Each run's table is read row by row: a round trip as its p50 over the
p50 of the raw echo of the same run (the machine's speed cancels out), any other row as the first
number of its value. The table printed has, for every row either tree has, each run's figure for
``REV`` and for this tree, and how far the median moved.
"""

from __future__ import annotations

import math
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .report import render_cells

ROOT = Path(__file__).resolve().parent.parent
#: the row every round trip is divided by (the same name in every tree that has the benchmarks)
FLOOR = "raw websockets echo"
#: the section of the round trips (``1-4 round trip p50 / p99``, or ``round trip p50 / p99`` in older trees)
ROUND_TRIP = "round trip p50"
_NUMBER = re.compile(r"^\s*([\d,]+(?:\.\d+)?)(?:\s*/\s*[\d,]+(?:\.\d+)?)?\s*([^\s(;]*)")


class AgainstError(Exception):
    """The side-by-side run cannot be made (no git checkout, an unknown commit, a run that failed)."""


@dataclass(frozen=True)
class Figure:
    """One row of one run, as compared: its number and what it counts."""

    value: float
    unit: str
    #: the row's section (round trips: :data:`ROUND_TRIP`)
    section: str = ""


def read_table(out: str) -> dict[str, Figure]:
    """The figures of a ``python -m benchmarks`` table, by measurement (each names one row).

    Round trips are × the echo of the same run; rows without a leading number are left out.
    """
    numbers: dict[str, Figure] = {}
    for line in out.splitlines():
        if not line.startswith("| ") or line.startswith("| section"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        match = _NUMBER.match(cells[2]) if len(cells) >= 3 else None
        if match is not None:
            section = ROUND_TRIP if ROUND_TRIP in cells[0] else cells[0]
            numbers[cells[1]] = Figure(float(match.group(1).replace(",", "")), match.group(2), section)
    floor = numbers.get(FLOOR)
    echo = floor.value if floor is not None and floor.value else math.nan
    return {
        name: Figure(figure.value / echo, "× the echo", ROUND_TRIP)
        if figure.section == ROUND_TRIP and name != FLOOR
        else figure
        for name, figure in numbers.items()
    }


def compare(before: list[dict[str, Figure]], now: list[dict[str, Figure]]) -> list[list[str]]:
    """The rows of the side-by-side table: what is counted, the measurement, each run's figure in
    the older tree and in this one, and how far the median moved."""
    names: list[str] = []
    for run in [*now, *before]:
        names += [name for name in run if name not in names]
    rows: list[list[str]] = []
    for name in names:
        first = next(run[name] for run in [*now, *before] if name in run)
        then = [run[name].value for run in before if name in run]
        here = [run[name].value for run in now if name in run]
        change = ""
        if then and here and statistics.median(then):
            change = f"{(statistics.median(here) / statistics.median(then) - 1) * 100:+.1f}%"
        counted = f"{first.section}, {first.unit}" if first.unit else first.section
        rows.append([counted, name, _runs(then), _runs(here), change])
    return rows


def _runs(values: list[float]) -> str:
    if not values:
        return "—"
    return " / ".join(f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}" for value in values)


def unpack(rev: str, into: Path) -> str:
    """Unpack commit ``rev`` of this checkout into ``into``; returns its short id and subject (cut to 80 characters)."""
    if rev.startswith("-"):
        raise AgainstError(f"--against {rev}: not a commit")
    git = ["git", "-C", str(ROOT)]
    found = subprocess.run(
        [*git, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], capture_output=True, text=True
    )
    if found.returncode != 0:
        raise AgainstError(f"--against {rev}: no such commit in {ROOT} (a git checkout with its history is needed)")
    commit = found.stdout.strip()
    archive = into / "tree.tar"
    with archive.open("wb") as out:
        made = subprocess.run([*git, "archive", "--format=tar", commit], stdout=out, stderr=subprocess.PIPE, text=False)
    if made.returncode != 0:
        raise AgainstError(f"git archive {rev} failed: {made.stderr.decode(errors='replace').strip()}")
    tree = into / "tree"
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    archive.unlink()
    if not (tree / "benchmarks" / "__main__.py").exists():
        raise AgainstError(f"--against {rev}: that commit has no benchmarks/ to run")
    described = subprocess.run([*git, "log", "-1", "--format=%h %s", commit], capture_output=True, text=True)
    line = described.stdout.strip() or commit[:7]
    return line if len(line) <= 80 else line[:79] + "…"


def run_once(tree: Path, args: list[str], label: str) -> dict[str, Figure]:
    """One ``python -m benchmarks`` run of ``tree``, read."""
    done = subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise AgainstError(f"the benchmarks of {label} failed (exit {done.returncode}):\n{tail}")
    figures = read_table(done.stdout)
    if not figures:
        raise AgainstError(f"the benchmarks of {label} printed no table:\n{done.stdout[-2000:]}")
    return figures


def side_by_side(rev: str, runs: int, args: list[str]) -> str:
    """Run both trees ``runs`` times each, alternately; the table to print."""
    if runs < 1:
        raise AgainstError("--runs must be at least 1")
    with tempfile.TemporaryDirectory(prefix="lineup-against-") as tmp:
        described = unpack(rev, Path(tmp))
        tree = Path(tmp) / "tree"
        before: list[dict[str, Figure]] = []
        now: list[dict[str, Figure]] = []
        for index in range(runs):
            order = [(tree, before, rev), (ROOT, now, "this tree")]
            for where, into, label in order if index % 2 == 0 else order[::-1]:
                into.append(run_once(where, args, label))
    header = [
        f"side by side: {described} (--against {rev}) and this tree, {runs} run(s) each, alternately, "
        f"each `{' '.join(['python -m benchmarks', *args])}`",
        "round trips: p50 over the p50 of the raw echo of the same run; other rows: the first number of their value",
    ]
    columns = ["section", "measurement", f"{rev}, run by run", "this tree, run by run", "change of the median"]
    return render_cells(header, columns, compare(before, now))
