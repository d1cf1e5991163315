"""Names a package exports but loads only on first use (PEP 562), so that importing it stays cheap."""

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, modules: Mapping[str, str], namespace: dict[str, Any]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package`` (its ``__name__``).

    A name in ``modules`` is imported on first use from the module it maps to (relative to the
    package, e.g. ``".hub"``) and kept in ``namespace`` (the package's ``globals()``), so later
    lookups do not come back here; any other name is an ``AttributeError``, as for a plain module.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        namespace[name] = value
        return value

    return __getattr__
