"""The result table (Markdown, so the README can quote it as is)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class Row:
    """One line of the table."""

    section: str
    name: str
    value: str
    comparison: str
    target: str
    verdict: str


def fmt_ratio(value: float) -> str:
    """``1.23×`` (or ``n/a``)."""
    return "n/a" if math.isnan(value) else f"{value:.2f}×"


def verdict(met: bool) -> str:
    """``met`` or ``MISSED``."""
    return "met" if met else "MISSED"


def render(header: list[str], rows: list[Row]) -> str:
    """The machine lines, then one Markdown table of every row."""
    columns = ["section", "measurement", "value", "compared", "target", "verdict"]
    return render_cells(
        header, columns, [[r.section, r.name, r.value, r.comparison, r.target, r.verdict] for r in rows]
    )


def render_cells(header: list[str], columns: list[str], cells: list[list[str]]) -> str:
    """The ``header`` lines, then one Markdown table with ``columns``, padded to line up."""
    widths = [max(len(c), *(len(line[i]) for line in cells)) for i, c in enumerate(columns)]

    def line(values: list[str]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    out = [*header, "", line(columns), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(c) for c in cells]
    return "\n".join(out)
