"""With ``CI=true``, a test that skips fails the run instead of vanishing, unless it is allowed here.

Tests skip, saying why, where something they need is missing (Chromium, hermes-agent, the Node SDK,
the MCP SDK): right on a developer's machine that lacks one, wrong in CI, where ``scripts/test``
installs everything. So when the ``CI`` variable is set (to anything but ``0``, ``false`` or ``no``),
every skip is reported as a failure naming the skip's reason — a skipped test, and a module or
folder whose collection skipped (a module-level ``pytest.importorskip``, which would otherwise take a
whole suite away silently) — unless :data:`ALLOWED` lists that test with that very reason.

Loaded by ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

#: markers (declared in pyproject.toml) named in the failure, to say what CI failed to install
REQUIRED = ("browser", "hermes", "node")

#: the skips CI accepts: node id (without parameters) -> the skip's exact reason, and why it is right
ALLOWED: dict[str, str] = {
    # CI containers run as root, who can write into a directory whatever its mode: the test cannot
    # make a data directory it is unable to write.
    "tests/transports/test_auth.py::test_unwritable_data_dir_is_a_config_error": "root can write anywhere",
}


def strict() -> bool:
    """Whether skips fail: ``CI`` is set and not false."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def skip_reason(longrepr: object) -> str:
    """The reason a skip report gives (``pytest.skip("why")`` -> ``why``)."""
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return str(reason).removeprefix("Skipped: ")


def allowed(nodeid: str, reason: str) -> bool:
    """Whether :data:`ALLOWED` lists the test ``nodeid`` (parameters aside) with exactly ``reason``."""
    return ALLOWED.get(nodeid.split("[", 1)[0]) == reason


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport]:
    report: pytest.TestReport = yield
    if not report.skipped or hasattr(report, "wasxfail") or not strict():
        return report
    reason = skip_reason(report.longrepr)
    if allowed(item.nodeid, reason):
        return report
    markers = sorted({mark.name for mark in item.iter_markers()} & set(REQUIRED))
    what = f"a {'/'.join(markers)} test" if markers else "this test"
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: {what} must run here, but it was skipped: {reason}"
        " (a skip CI accepts is listed with its reason in tests/ci_strict.py ALLOWED)"
    )
    return report


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Generator[None, pytest.CollectReport]:
    report: pytest.CollectReport = yield
    if not report.skipped or not strict():
        return report
    reason = skip_reason(report.longrepr)
    if allowed(report.nodeid, reason):
        return report
    report.outcome = "failed"
    report.longrepr = (
        f"CI=true: {report.nodeid or 'the suite'} must be collected here, but its collection was skipped: {reason}"
        " (a skip CI accepts is listed with its reason in tests/ci_strict.py ALLOWED)"
    )
    return report
