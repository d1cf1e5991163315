"""With ``CI=true`` a skipped browser, Hermes or Node test fails the run; other skips, and skips outside CI, stay."""

from __future__ import annotations

import pytest

from .ci_strict import REQUIRED

SUITE = """
import pytest

@pytest.mark.node
def test_node_sdk():
    pytest.skip("node is not installed")

@pytest.mark.browser
@pytest.mark.skipif(True, reason="chromium is missing")
def test_app_in_chromium():
    pass

@pytest.mark.hermes
def test_hermes_that_runs():
    pass

def test_unmarked():
    pytest.skip("root can write anywhere")
"""


def run_suite(pytester: pytest.Pytester) -> pytest.RunResult:
    markers = "".join(f"\n    {name}: needs something" for name in REQUIRED)
    pytester.makeini(f"[pytest]\nmarkers ={markers}\n")
    pytester.makepyfile(SUITE)
    return pytester.runpytest("-p", "tests.ci_strict", "-rA")


def test_with_ci_true_skipped_browser_and_node_tests_fail_and_other_skips_stay(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = run_suite(pytester)
    result.assert_outcomes(passed=1, skipped=1, failed=1, errors=1)  # the skipif acts in setup: an error
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "CI=true: a browser test must run here, but it was skipped: chromium is missing",
            "CI=true: a node test must run here, but it was skipped: node is not installed",
            "SKIPPED * root can write anywhere",
        ],
        consecutive=False,
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = run_suite(pytester)
    result.assert_outcomes(passed=1, skipped=3)
    assert result.ret == pytest.ExitCode.OK
