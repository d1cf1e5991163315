"""The transports stand apart: the relay (``wukongim/``) imports nothing of the direct server (``direct/``),
nor the direct server anything of the relay; what both need lives in ``transports/__init__``."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "lineup_plugin" / "transports"


def imported(path: Path) -> set[str]:
    """The modules ``path`` imports, resolved to dotted names under ``lineup_plugin.transports``."""
    package = ["lineup_plugin", "transports", *path.parent.relative_to(ROOT).parts]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            found.add(".".join([*base, *(node.module.split(".") if node.module else [])]))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


@pytest.mark.parametrize(("one", "other"), [("wukongim", "direct"), ("direct", "wukongim")])
def test_one_transport_imports_nothing_of_another(one: str, other: str) -> None:
    files = sorted((ROOT / one).glob("*.py"))
    assert files
    crossing = {
        f"{path.name} imports {name}"
        for path in files
        for name in imported(path)
        if name.startswith(f"lineup_plugin.transports.{other}")
    }
    assert not crossing, crossing
