"""What a check finds (:class:`Finding`), and the report of them all: a table, or JSON for scripts."""

from __future__ import annotations

import json
import re
import sys
from dataclasses import asdict, dataclass
from typing import Literal, TextIO

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: ``detail`` says what was found, ``fix`` (on a failure) what to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def passed(name: str, detail: str) -> Finding:
    """A check that found nothing wrong."""
    return Finding(name, "pass", _one_line(detail))


def failed(name: str, detail: str, fix: str) -> Finding:
    """A check that found something wrong, and the one line that fixes it."""
    return Finding(name, "fail", _one_line(detail), _one_line(fix))


def skipped(name: str, detail: str) -> Finding:
    """A check that does not apply here (``detail`` says why): it does not fail the run."""
    return Finding(name, "skip", _one_line(detail))


def _one_line(text: str) -> str:
    """``text`` on one line (an error message may span several); other spaces are kept (a path may hold two)."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


def report(findings: list[Finding], *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print ``findings`` (a table, or JSON ``{"ok", "checks": [...]}``); the exit status: 0 only if none failed."""
    out = out or sys.stdout
    ok = all(finding.status != "fail" for finding in findings)
    if as_json:  # ASCII: a path that is not valid text (a lone surrogate) is written escaped
        checks = [asdict(finding) | {"fix": finding.fix or None} for finding in findings]
        print(json.dumps({"ok": ok, "checks": checks}, indent=2), file=out)
        return 0 if ok else 1
    marks = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}
    width = max((len(finding.name) for finding in findings), default=0)
    lines: list[str] = []
    for finding in findings:
        lines.append(f"{marks[finding.status]}  {finding.name.ljust(width)}  {finding.detail}")
        if finding.fix:
            lines.append(f"{'':4}  {'':{width}}  fix: {finding.fix}")
    failures = sum(finding.status == "fail" for finding in findings)
    lines.append("all checks passed" if ok else f"{failures} check{'s' if failures > 1 else ''} failed")
    encoding = getattr(out, "encoding", None) or "utf-8"
    for line in lines:  # what the terminal cannot show (a lone surrogate in a path) is written escaped
        print(line.encode(encoding, "backslashreplace").decode(encoding), file=out)
    return 0 if ok else 1
