"""``scripts/demo`` on a fresh checkout: it installs LineUp into ``.venv`` and starts, with no warning banner.

A copy of the source tree, no virtualenv yet; ``scripts/demo --help`` makes ``.venv``, installs the
package (editable) and runs ``lineup demo --help``. Whatever it prints must be LineUp's: the
build backend's informational banners ("Editable installation. Please be careful with folders in
your working directory...") are the first thing a new user would read.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from .test_wheel import NOT_SOURCE, ROOT, run

#: what a line of a build backend's warning banner looks like
BANNER_MARKS = ("Warning", "!!", "********", "setuptools")


def test_scripts_demo_installs_and_starts_without_a_setuptools_banner(tmp_path: Path) -> None:
    source = tmp_path / "lineup-plugin"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    done = run(source / "scripts" / "demo", "--help", PYTHON=sys.executable)
    assert "lineup demo" in done.stdout
    # pip's own notes about this machine's package index configuration are not the project's
    said = [line for line in (done.stdout + done.stderr).splitlines() if not line.startswith("WARNING: Location")]
    banner = [line for line in said if any(mark in line for mark in BANNER_MARKS)]
    assert banner == [], "\n".join(said)
