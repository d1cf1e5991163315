"""``lineup_plugin.runtime`` is the whole seam an adapter needs: every name in ``__all__`` resolves, every
type an :class:`AgentRuntime` method or the :class:`LineUpService` constructor names is exported, and
importing the seam loads no protocol model (a runtime's start stays cheap)."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys

import lineup_plugin.runtime as seam
from lineup_plugin.runtime import base, service

#: names in annotations that are not the seam's to export
NOT_OURS = {"None", "Any", "str", "bool", "int", "float", "dict", "list", "tuple", "Callable", "Self", "T"}


def names_in(annotation: str) -> set[str]:
    return set(re.findall(r"[A-Za-z_][A-Za-z_0-9]*", annotation)) - NOT_OURS


def test_every_exported_name_resolves_and_is_documented() -> None:
    for name in seam.__all__:
        assert getattr(seam, name) is not None, name
        assert name in (seam.__doc__ or ""), f"{name} is exported but not described in the package docstring"


def test_every_type_an_adapter_meets_is_exported() -> None:
    needed: set[str] = set()
    for _, method in inspect.getmembers(base.AgentRuntime, inspect.isfunction):
        needed |= {n for a in method.__annotations__.values() for n in names_in(str(a))}
    needed |= {n for a in service.LineUpService.__init__.__annotations__.values() for n in names_in(str(a))}
    assert needed, "no annotations read"
    missing = sorted(needed - set(seam.__all__))
    assert not missing, f"types an adapter meets but the seam does not export: {missing}"


def test_every_public_name_of_base_and_service_an_adapter_uses_is_exported() -> None:
    public = {
        name
        for module in (base, service)
        for name, value in vars(module).items()
        if not name.startswith("_") and getattr(value, "__module__", None) == module.__name__
    }
    assert public - {"T"} <= set(seam.__all__) | {"log"}, sorted(public - set(seam.__all__))


def test_importing_the_seam_loads_no_protocol_model() -> None:
    code = "import sys, lineup_plugin.runtime\nprint('pydantic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
