"""Plugins for the whole suite: pytester (tests of the suite's own rules) and the CI skip rule."""

pytest_plugins = ["pytester", "tests.ci_strict"]
