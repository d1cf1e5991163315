"""The public API is exactly what ``lineup_plugin.__all__`` lists, and every name resolves."""

from __future__ import annotations

import ast
import builtins
from pathlib import Path

import lineup_plugin
from lineup_plugin import errors

PACKAGE = Path(lineup_plugin.__file__).parent
#: the names a public exception class could derive from: the built-in exceptions and LineUp's own
EXCEPTIONS = {
    name for name, value in vars(builtins).items() if isinstance(value, type) and issubclass(value, BaseException)
}
EXCEPTIONS |= {
    name for name, value in vars(errors).items() if isinstance(value, type) and issubclass(value, BaseException)
}


def test_every_public_name_resolves() -> None:
    for name in lineup_plugin.__all__:
        assert getattr(lineup_plugin, name) is not None, name


def test_every_exception_is_public_and_a_lineup_error() -> None:
    classes = {n for n, v in vars(errors).items() if isinstance(v, type) and issubclass(v, Exception)}
    assert classes <= set(lineup_plugin.__all__)
    for name in classes:
        assert issubclass(getattr(errors, name), errors.LineUpError)


def test_exceptions_module_docstring_draws_every_class() -> None:
    assert errors.__doc__ is not None
    for name, value in vars(errors).items():
        if isinstance(value, type) and issubclass(value, Exception):
            assert name in errors.__doc__, f"{name} missing from the hierarchy in errors.py"


def test_no_public_exception_is_defined_outside_the_exceptions_module() -> None:
    """``OwnerUnreachable`` lived in runtime/forward.py, derived from ``Exception``: one module holds them all."""
    elsewhere = []
    for path in PACKAGE.rglob("*.py"):
        if path == PACKAGE / "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                bases = {base.id if isinstance(base, ast.Name) else getattr(base, "attr", "") for base in node.bases}
                if bases & EXCEPTIONS:
                    elsewhere.append(f"{path.relative_to(PACKAGE)}: {node.name}")
    assert elsewhere == []
