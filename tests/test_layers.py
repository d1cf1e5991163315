"""The package's layers, and the imports between its modules that they allow.

Lowest first. A module may import modules of its own layer and of lower ones, never of a higher
one, and no chain of imports may lead back to where it started (a cycle), within a layer too.
Every import of ``lineup_plugin/**/*.py`` counts: at module level, inside functions (lazy imports)
and under ``if TYPE_CHECKING:``. A lazy or typing-only import still ties a module to the other.

=====  ==================================================  =========================================
layer  modules (under ``lineup_plugin/``)                  what they are
=====  ==================================================  =========================================
0      ``errors``, ``qr``, ``private``, ``lazy``,          leaves: they import nothing of the package
       ``alarm``                                           (``qr`` draws the connect link as a QR
                                                           code for the top layers; ``private``
                                                           makes 0700 directories and 0600 files;
                                                           ``lazy`` loads a package's names on
                                                           first use; ``alarm`` is the one loop
                                                           timer of the hub and the push service)
1      ``protocol/``                                       the sans-I/O core: imports nothing of the
                                                           package but ``errors`` and ``lazy``
2      ``tools/``, ``config/``, ``hookspecs``,             what a plugin author sees: the registry,
       ``plugins``, ``builtin_tools/``, ``push/``          argument checks, settings, hooks; Web
                                                           Push (keys, sealing, rules, sending)
3      ``store``, ``stats``, ``media``, ``uploads``        durable calls, seen ids, audit; metering;
                                                           files sent either way
4      ``ports``                                           what the hub and a transport promise each
                                                           other
5      ``hub``, ``agent_side``                             drives the session core, the store, tools;
                                                           the runtime's calls and messages
6      ``transports/``                                     direct, relay (WuKongIM), memory
7      ``runtime/``                                        agent runtimes (the Hermes adapter)
8      ``cli``, ``demo``, ``doctor``, ``hermes``,          entry points, and the public API that
       ``docs_gen``, the package ``__init__``              loads the layers below on first use; the
                                                           generated parts of the docs
=====  ==================================================  =========================================

The table is :data:`LAYERS` (and :data:`ONLY` for the two rules stricter than the layers) below.
The test reads imports with :mod:`ast`: an ``importlib.import_module("...")`` of a name held in
a variable (the plugin manager loading ``builtin_tools``) is not seen.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "lineup_plugin"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

#: the layers, lowest first: each a tuple of the top-level parts of the package (a module, or a
#: subpackage with everything in it); "" is the package's own ``__init__``
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "qr", "private", "lazy", "alarm"),
    ("protocol",),
    ("tools", "config", "hookspecs", "plugins", "builtin_tools", "push"),
    ("store", "stats", "media", "uploads"),
    ("ports",),
    ("hub", "agent_side"),
    ("transports",),
    ("runtime",),
    ("cli", "demo", "doctor", "hermes", "docs_gen", ""),
)

#: parts that may import nothing of the package but themselves and the parts listed
ONLY: dict[str, tuple[str, ...]] = {
    "errors": (),
    "qr": (),
    "lazy": (),
    "alarm": (),
    "protocol": ("errors", "lazy"),
}

#: import cycles that are known and owned elsewhere, each with why it is still there; an entry must
#: go when its cycle does (a test fails while a listed cycle no longer exists)
KNOWN_CYCLES: dict[frozenset[str], str] = {}

LAYER_OF = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


@dataclass(frozen=True)
class Import:
    """One import of a package module by another, where it is written."""

    source: str
    target: str
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.source} imports {self.target}"


def module_name(path: Path) -> str:
    """``lineup_plugin/protocol/codec.py`` → ``lineup_plugin.protocol.codec`` (a package is its ``__init__``)."""
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """The top-level part of the package a module belongs to (``""`` for the package itself)."""
    return module.removeprefix(PACKAGE).removeprefix(".").split(".")[0]


def find_modules() -> dict[str, Path]:
    """Every module of the package by name."""
    return {module_name(path): path for path in sorted(ROOT.rglob("*.py"))}


def in_package(name: str) -> bool:
    return name == PACKAGE or name.startswith(PACKAGE + ".")


def imports_of(module: str, source: str, *, is_package: bool, modules: set[str], file: str) -> list[Import]:
    """The package modules that ``source`` (of ``module``) imports anywhere, each once (at its first line).

    ``from x import y`` imports module ``x.y`` if there is one, else ``x`` (its ``__init__``).
    """

    def known(name: str) -> str:
        while name not in modules:  # `import lineup_plugin.x.y` where y is a name in x, not a module
            name = name.rpartition(".")[0]
        return name

    package = module.split(".") if is_package else module.split(".")[:-1]
    found: dict[str, Import] = {}
    for node in ast.walk(ast.parse(source, file)):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [known(alias.name) for alias in node.names if in_package(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], *([node.module] if node.module else [])])
            if in_package(base):
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else known(base) for a in node.names]
        for target in targets:
            if target != module and target not in found:
                found[target] = Import(module, target, file, node.lineno)
    return sorted(found.values(), key=lambda edge: (edge.line, edge.target))


@functools.cache
def import_graph() -> dict[str, list[Import]]:
    """Every module of the package and the package modules it imports (read once per test run)."""
    modules = find_modules()
    return {
        module: imports_of(
            module,
            path.read_text(),
            is_package=path.name == "__init__.py",
            modules=set(modules),
            file=path.relative_to(ROOT.parent).as_posix(),
        )
        for module, path in modules.items()
    }


def cycles(graph: dict[str, list[Import]]) -> dict[frozenset[str], list[Import]]:
    """Each group of modules that import one another (strongly connected), with one cycle through it.

    Tarjan's algorithm finds the groups; the shortest chain of imports from a group's first module
    (by name) back to it names the cycle.
    """
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[frozenset[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for edge in graph.get(module, []):
            if edge.target not in index:
                visit(edge.target)
                low[module] = min(low[module], low[edge.target])
            elif edge.target in on_stack:
                low[module] = min(low[module], index[edge.target])
        if low[module] == index[module]:
            group = set()
            while module not in group:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
            if len(group) > 1:
                groups.append(frozenset(group))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return {group: shortest_cycle(graph, group) for group in groups}


def shortest_cycle(graph: dict[str, list[Import]], group: frozenset[str]) -> list[Import]:
    """The shortest chain of imports from the group's first module (by name) back to it."""
    start = min(group)
    paths: dict[str, list[Import]] = {start: []}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for edge in graph.get(module, []):
                if edge.target == start:
                    return [*paths[module], edge]
                if edge.target in group and edge.target not in paths:
                    paths[edge.target] = [*paths[module], edge]
                    following.append(edge.target)
        frontier = following
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover - a group always has one


def broken_rules(graph: dict[str, list[Import]]) -> list[str]:
    """Each import that goes up a layer, or out of what a part in :data:`ONLY` may import."""
    broken = []
    for edges in graph.values():
        for edge in edges:
            source, target = part_of(edge.source), part_of(edge.target)
            if source in ONLY and target != source and target not in ONLY[source]:
                allowed = ", ".join(ONLY[source]) or "nothing"
                broken.append(f"{edge}: {source} may import {allowed} of the package")
            elif LAYER_OF[target] > LAYER_OF[source]:
                broken.append(
                    f"{edge}: up from layer {LAYER_OF[source]} ({source or PACKAGE}) "
                    f"to layer {LAYER_OF[target]} ({target or PACKAGE})"
                )
    return broken


def describe(cycle: list[Import]) -> str:
    """``a -> b -> a`` and where each of those imports is written."""
    chain = " -> ".join([cycle[0].source, *(edge.target for edge in cycle)])
    return chain + "".join(f"\n    {edge}" for edge in cycle)


def test_every_part_of_the_package_has_a_layer() -> None:
    unplaced = sorted({part_of(module) for module in find_modules()} - LAYER_OF.keys())
    assert not unplaced, f"place these in LAYERS (tests/test_layers.py): {unplaced}"
    assert len(LAYER_OF) == sum(len(parts) for parts in LAYERS), "a part is in two layers"


def test_no_module_imports_up_a_layer_or_out_of_its_bounds() -> None:
    broken = broken_rules(import_graph())
    assert not broken, "imports against the layers (tests/test_layers.py):\n" + "\n".join(broken)


def test_no_import_cycles() -> None:
    found = [describe(cycle) for group, cycle in cycles(import_graph()).items() if group not in KNOWN_CYCLES]
    assert not found, "import cycles (tests/test_layers.py):\n" + "\n".join(found)


def test_every_known_cycle_is_still_there() -> None:
    gone = [sorted(group) for group in KNOWN_CYCLES.keys() - cycles(import_graph()).keys()]
    assert not gone, f"these cycles are gone: remove them from KNOWN_CYCLES: {gone}"


# ------------------------------------------------------------------------- the checker itself

MODULES = {
    "lineup_plugin",
    "lineup_plugin.errors",
    "lineup_plugin.hub",
    "lineup_plugin.protocol",
    "lineup_plugin.protocol.codec",
    "lineup_plugin.protocol.messages",
    "lineup_plugin.tools.registry",
}


def test_imports_are_found_in_functions_and_under_type_checking_and_resolved_to_modules() -> None:
    source = """
from typing import TYPE_CHECKING
import json
import lineup_plugin.errors
from . import codec, KINDS
from ..errors import ProtocolError

if TYPE_CHECKING:
    from ..tools.registry import Registry

def later():
    from lineup_plugin.hub import Hub
    from .. import Hub as AlsoHub
"""
    edges = imports_of("lineup_plugin.protocol.messages", source, is_package=False, modules=MODULES, file="messages.py")
    assert [(edge.target, edge.line) for edge in edges] == [
        ("lineup_plugin.errors", 4),
        ("lineup_plugin.protocol", 5),  # KINDS: a name in the protocol package's __init__
        ("lineup_plugin.protocol.codec", 5),
        ("lineup_plugin.tools.registry", 9),
        ("lineup_plugin.hub", 12),
        ("lineup_plugin", 13),
    ]
    package = imports_of(
        "lineup_plugin.protocol", "from .codec import decode", is_package=True, modules=MODULES, file=""
    )
    assert [edge.target for edge in package] == ["lineup_plugin.protocol.codec"]


def test_an_upward_import_a_bound_and_a_cycle_are_each_named() -> None:
    def edge(source: str, target: str) -> Import:
        return Import(f"lineup_plugin.{source}", f"lineup_plugin.{target}", f"{source}.py", 1)

    graph = {
        "lineup_plugin.tools.registry": [edge("tools.registry", "hub")],
        "lineup_plugin.hub": [edge("hub", "tools.registry")],
        "lineup_plugin.protocol.codec": [edge("protocol.codec", "qr")],
    }
    assert broken_rules(graph) == [
        "tools.registry.py:1: lineup_plugin.tools.registry imports lineup_plugin.hub: "
        "up from layer 2 (tools) to layer 5 (hub)",
        "protocol.codec.py:1: lineup_plugin.protocol.codec imports lineup_plugin.qr: "
        "protocol may import errors, lazy of the package",
    ]
    assert {group: describe(cycle) for group, cycle in cycles(graph).items()} == {
        frozenset({"lineup_plugin.hub", "lineup_plugin.tools.registry"}): (
            "lineup_plugin.hub -> lineup_plugin.tools.registry -> lineup_plugin.hub"
            "\n    hub.py:1: lineup_plugin.hub imports lineup_plugin.tools.registry"
            "\n    tools.registry.py:1: lineup_plugin.tools.registry imports lineup_plugin.hub"
        )
    }
