"""The public API is exactly what ``lineup_plugin.__all__`` lists, and every name resolves."""

from __future__ import annotations

import lineup_plugin
from lineup_plugin import errors


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
