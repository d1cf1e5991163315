"""The App's JavaScript is type-checked: every module says ``// @ts-check`` and ``tsc --noEmit`` passes.

TypeScript is pinned in ``tests/js/package.json`` (``npm ci --prefix tests/js`` installs it); the
project is ``tests/js/tsconfig.json``. The committed vendor bundles are not checked.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "lineup_plugin" / "app"
JS = ROOT / "tests" / "js"
TSC = JS / "node_modules" / "typescript" / "bin" / "tsc"


def app_modules() -> list[Path]:
    """The App's own modules (everything under app/ but the generated vendor bundles)."""
    return sorted(path for path in APP.rglob("*.js") if "vendor" not in path.relative_to(APP).parts)


def test_every_app_module_is_type_checked() -> None:
    modules = app_modules()
    assert len(modules) > 20
    unchecked = [
        str(path.relative_to(APP)) for path in modules if path.read_text().splitlines()[:1] != ["// @ts-check"]
    ]
    assert not unchecked, f"these App modules lack `// @ts-check` on their first line: {unchecked}"


def test_typescript_is_pinned_exactly() -> None:
    wanted = json.loads((JS / "package.json").read_text())["dependencies"]["typescript"]
    assert wanted[0].isdigit(), f"typescript must be pinned to one version, not {wanted!r}"
    locked = json.loads((JS / "package-lock.json").read_text())["packages"]["node_modules/typescript"]["version"]
    assert locked == wanted


@pytest.mark.node  # CI must run it (tests/ci_strict.py)
@pytest.mark.skipif(shutil.which("node") is None or not TSC.is_file(), reason="run `npm ci --prefix tests/js`")
def test_tsc_finds_no_type_error_in_the_app() -> None:
    done = subprocess.run(
        ["node", str(TSC), "--noEmit", "-p", str(JS)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, f"tsc --noEmit -p tests/js:\n{done.stdout}{done.stderr}"
