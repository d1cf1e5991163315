"""With ``CI=true`` every skip fails the run unless tests/ci_strict.py allows it with its reason."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import ci_strict

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
    pytest.skip("somebody forgot to install it")

def test_allowed():
    pytest.skip("root can write anywhere")

@pytest.mark.parametrize("n", [1, 2])
def test_allowed_with_another_reason(n):
    pytest.skip("something else")
"""

#: a whole module that vanishes: its import needs a package that is not there
MODULE_SKIP = """
import pytest

pytest.importorskip("lineup_no_such_package_for_the_test")

def test_never_collected():
    pass
"""


def run_suite(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    markers = "".join(f"\n    {name}: needs something" for name in ci_strict.REQUIRED)
    pytester.makeini(f"[pytest]\nmarkers ={markers}\n")
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setattr(
        ci_strict,
        "ALLOWED",
        {
            "test_suite.py::test_allowed": "root can write anywhere",
            "test_suite.py::test_allowed_with_another_reason": "root can write anywhere",
        },
    )
    return pytester.runpytest("-p", "tests.ci_strict", "-rA")


def test_with_ci_true_every_skip_fails_but_one_listed_with_its_reason(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = run_suite(pytester, monkeypatch)
    result.assert_outcomes(passed=1, skipped=1, failed=4, errors=1)  # the skipif acts in setup: an error
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    for line in [
        "CI=true: a browser test must run here, but it was skipped: chromium is missing*",
        "CI=true: a node test must run here, but it was skipped: node is not installed*",
        "CI=true: this test must run here, but it was skipped: somebody forgot to install it*",
        "CI=true: this test must run here, but it was skipped: something else*",
        "SKIPPED * root can write anywhere",
    ]:
        result.stdout.fnmatch_lines([line], consecutive=False)


@pytest.mark.parametrize("ci", ["true", None])
def test_with_ci_true_a_module_level_importorskip_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makepyfile(test_module_skip=MODULE_SKIP, test_other="def test_other():\n    pass\n")
    result = pytester.runpytest("-p", "tests.ci_strict", "-rA")
    if ci is None:
        result.assert_outcomes(passed=1, skipped=1)
        return
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error stops the run
    result.stdout.fnmatch_lines(
        [
            "*CI=true: test_module_skip.py must be collected here, but its collection was skipped:"
            " could not import 'lineup_no_such_package_for_the_test'*",
        ],
        consecutive=False,
    )


def test_with_ci_true_a_folder_conftest_importorskip_fails_the_run(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.mkpydir("suite")
    pytester.makepyfile(
        **{
            "suite/conftest": 'import pytest\npytest.importorskip("lineup_no_such_package_for_the_test")\n',
            "suite/test_in_it": "def test_a():\n    pass\n",
        }
    )
    result = pytester.runpytest("-p", "tests.ci_strict", "-rA")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*CI=true: suite* must be collected here, but its collection was skipped*"], consecutive=False
    )


@pytest.mark.parametrize("ci", [None, "false"])
def test_outside_ci_every_skip_stays_a_skip(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci: str | None
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = run_suite(pytester, monkeypatch)
    result.assert_outcomes(passed=1, skipped=6)
    assert result.ret == pytest.ExitCode.OK


def test_each_allowed_skip_names_a_test_that_exists_with_that_reason() -> None:
    for nodeid, reason in ci_strict.ALLOWED.items():
        path, name = nodeid.split("::")
        source = (Path(__file__).parents[1] / path).read_text()
        assert f"def {name}(" in source and f'reason="{reason}"' in source, nodeid
