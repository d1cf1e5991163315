"""With ``CI=true``, a skipped browser, Hermes or Node test fails the run instead of vanishing.

Those tests skip, saying why, where Chromium, hermes-agent or the Node SDK is missing: right on a
developer's machine that lacks one, wrong in CI, where ``scripts/test`` installs all three. So when
the ``CI`` variable is set (to anything but ``0``, ``false`` or ``no``), the skip of a test marked
with one of :data:`REQUIRED` is reported as a failure naming the marker and the skip's reason.
Other skips (say, "root can write anywhere") stay skips.

Loaded by ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

#: the markers (declared in pyproject.toml) of tests that CI must run
REQUIRED = ("browser", "hermes", "node")


def strict() -> bool:
    """Whether skips of :data:`REQUIRED` tests fail: ``CI`` is set and not false."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport]:
    report: pytest.TestReport = yield
    if not report.skipped or hasattr(report, "wasxfail") or not strict():
        return report
    markers = sorted({mark.name for mark in item.iter_markers()} & set(REQUIRED))
    if markers:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        report.outcome = "failed"
        report.longrepr = f"CI=true: a {'/'.join(markers)} test must run here, but it was skipped: {reason}"
    return report
