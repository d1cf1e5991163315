"""The session core stays in small parts and the hub stays thin, measured with :mod:`ast`.

- every class of ``lineup_plugin/protocol/`` is at most :data:`PROTOCOL_LINES` lines and
  :data:`PROTOCOL_METHODS` methods (properties count);
- :class:`~lineup_plugin.hub.Hub` is at most :data:`HUB_LINES` lines;
- a class name is used once in the package (two classes named ``Session`` read as one).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "lineup_plugin"
PROTOCOL_LINES = 400
PROTOCOL_METHODS = 30
HUB_LINES = 250


def classes(path: Path) -> list[ast.ClassDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return [node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def size(node: ast.ClassDef) -> tuple[int, int]:
    """Lines (decorators and docstring included) and methods of a class."""
    assert node.end_lineno is not None
    methods = sum(isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) for item in node.body)
    return node.end_lineno - node.lineno + 1, methods


def test_no_class_of_the_protocol_core_is_over_400_lines_or_30_methods() -> None:
    measured = {
        f"{path.name}:{node.name}": size(node)
        for path in sorted((ROOT / "protocol").glob("*.py"))
        for node in classes(path)
    }
    assert "session.py:Session" in measured  # the test reads the right files
    too_big = {name: s for name, s in measured.items() if s[0] > PROTOCOL_LINES or s[1] > PROTOCOL_METHODS}
    assert not too_big, f"(lines, methods) over {PROTOCOL_LINES} lines or {PROTOCOL_METHODS} methods: {too_big}"


def test_the_hub_is_at_most_250_lines() -> None:
    [hub] = [node for node in classes(ROOT / "hub.py") if node.name == "Hub"]
    lines, _ = size(hub)
    assert lines <= HUB_LINES, f"Hub is {lines} lines (at most {HUB_LINES}: feed, commit, send, timers)"


def test_one_class_per_name_in_the_package() -> None:
    where: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for node in classes(path):
            where[node.name].append(str(path.relative_to(ROOT)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, f"classes with the same name: {twice}"
