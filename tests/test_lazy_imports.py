"""Function-level imports are kept to the places that need them, each for a stated reason.

Ordinary code imports at the top of its module. An import inside a function is allowed only in
the places listed here: mostly the Hermes start path (importing the plugin and ``register(ctx)``
must not load pydantic, the protocol models or jsonschema; ``tests/runtime/test_hermes.py``
measures it), and what one mode or platform alone needs. A new one fails this test until it is
listed with its reason.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "lineup_plugin"

START_PATH = "on the Hermes start path: loads its dependency on first use, not at import"
ALLOWED: dict[str, str] = {
    "hermes.py": START_PATH,
    "plugins.py": START_PATH + " (the registry, importlib.metadata)",
    "runtime/service.py": START_PATH + " (the hub, the protocol, forwarding)",
    "runtime/hermes/install.py": START_PATH,
    "runtime/hermes/common.py": START_PATH + " (the protocol models, anyio)",
    "runtime/hermes/compat.py": "Hermes internals, each imported where used (a module Hermes lacks fails one feature)",
    "tools/registry.py": START_PATH + " (jsonschema, only when a schema needs the full validator)",
    "cli.py": "each `lineup` subcommand loads only what it runs",
    "runtime/mcp/server.py": "the transport of one MCP mode (stdio, or HTTP with uvicorn)",
    "runtime/lock.py": "the platform's file lock (fcntl or msvcrt)",
    "transports/__init__.py": "the transport the settings choose, and only it",
    "transports/direct/api.py": "httpx, for the `lineup stats` client only (not the server)",
    "transports/direct/server.py": "Web Push's credential, only when push is on",
    "transports/direct/tls.py": "cryptography, only when a certificate is made",
    "hub.py": "the Web Push service, only when push is on",
    "push/sender.py": "httpx, only when a push is sent",
    "runtime/nanobot/runtime.py": "nanobot itself, only inside a nanobot process",
    "docs_gen.py": "the settings model, only when the docs are generated",
    "doctor/config.py": "each check loads what it examines, so a broken install still gets its report",
    "doctor/context.py": "each check loads what it examines, so a broken install still gets its report",
    "doctor/files.py": "each check loads what it examines, so a broken install still gets its report",
    "doctor/relay.py": "each check loads what it examines, so a broken install still gets its report",
    "doctor/server.py": "each check loads what it examines, so a broken install still gets its report",
}


def lazy_imports() -> dict[str, list[str]]:
    """The modules (relative to the package) with imports inside functions, and those functions."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            nested = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
                isinstance(inner, ast.Import | ast.ImportFrom) for inner in ast.walk(node)
            )
            if nested:
                found[path.relative_to(ROOT).as_posix()].append(node.name)
    return dict(found)


def test_imports_inside_functions_are_only_where_they_are_needed() -> None:
    unlisted = {module: names for module, names in lazy_imports().items() if module not in ALLOWED}
    assert not unlisted, f"import at the top of the module, or list it with its reason: {unlisted}"


def test_every_listed_place_still_has_one() -> None:
    stale = sorted(set(ALLOWED) - set(lazy_imports()))
    assert not stale, f"no import inside a function any more: drop from ALLOWED {stale}"
