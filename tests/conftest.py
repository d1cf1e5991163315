"""Plugins for the whole suite: pytester (tests of the suite's own rules) and the CI skip rule.

``tests/nanobot`` needs ``nanobot-ai``, which cannot share the dev environment (it pins ``mcp<2``):
where it is not installed those tests are not collected at all (not skipped); ``scripts/test`` runs
them in their own virtualenv.
"""

import importlib.util

pytest_plugins = ["pytester", "tests.ci_strict"]

collect_ignore = [] if importlib.util.find_spec("nanobot") else ["nanobot"]
