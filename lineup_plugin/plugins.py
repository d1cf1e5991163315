"""The plugin manager: loads built-in and third-party plugins and collects their tools.

Third-party plugins are found through the entry-point group ``lineup``. Set
``LINEUP_BLOCK_PLUGINS`` to a comma-separated list of plugin (entry-point) names to keep them from
loading.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import json
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from . import hookspecs
from .private import write_private
from .tools.agent_schema import function_schema

if TYPE_CHECKING:
    from .tools.registry import Registry

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "lineup"
#: where the function schemas of the installed plugins are kept between starts (in the data dir)
SCHEMA_CACHE = "tool-schemas.json"
BLOCK_ENV = "LINEUP_BLOCK_PLUGINS"
BUILTIN_PLUGINS = ("lineup_plugin.builtin_tools",)


def blocked_names(environ: dict[str, str] | None = None) -> set[str]:
    """The plugin names listed in ``LINEUP_BLOCK_PLUGINS``."""
    value = (os.environ if environ is None else environ).get(BLOCK_ENV, "")
    return {name.strip() for name in value.split(",") if name.strip()}


def get_plugin_manager(*, load_entrypoints: bool = True, environ: dict[str, str] | None = None) -> pluggy.PluginManager:
    """A plugin manager with the hook specs, the built-in tools and (optionally) installed plugins."""
    pm = pluggy.PluginManager("lineup")
    pm.add_hookspecs(hookspecs)
    for name in blocked_names(environ):
        pm.set_blocked(name)

    for module_name in BUILTIN_PLUGINS:
        if not pm.is_blocked(module_name):
            pm.register(importlib.import_module(module_name), name=module_name)
    if load_entrypoints:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    pm.check_pending()
    return pm


def collect_tools(pm: pluggy.PluginManager, registry: Registry | None = None) -> Registry:
    """Call every plugin's ``register_tools`` hook, then its ``register_renderers`` hook, each with a
    ``register`` bound to the plugin's name."""
    if registry is None:
        from .tools.registry import Registry

        registry = Registry()
    _call_each(pm, pm.hook.register_tools, registry.registrar)
    renderers = registry.renderers
    _call_each(pm, pm.hook.register_renderers, lambda name: renderers.registrar(name, registry))
    return registry


def _call_each(pm: pluggy.PluginManager, hook: Any, make_register: Any) -> None:
    """Call ``hook`` of every plugin with ``register=make_register(plugin_name)`` (if it takes it)."""
    for impl in hook.get_hookimpls():
        plugin_name = pm.get_name(impl.plugin) or impl.plugin_name
        kwargs: dict[str, Any] = {"register": make_register(plugin_name)}
        impl.function(**{arg: kwargs[arg] for arg in impl.argnames})


def load_registry(*, load_entrypoints: bool = True, environ: dict[str, str] | None = None) -> Registry:
    """The registry of every tool the built-in and installed (not blocked) plugins register."""
    return collect_tools(get_plugin_manager(load_entrypoints=load_entrypoints, environ=environ))


def third_party_plugins(environ: dict[str, str] | None = None) -> list[str]:
    """The names of the installed, not blocked plugins of the entry-point group ``lineup``.

    Reads the group only (a few ms); the plugin manager scans every distribution's entry points.
    """
    from importlib.metadata import entry_points

    blocked = blocked_names(environ)
    return [ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in blocked]


def builtin_function_schemas(environ: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The function schemas of every tool, without the registry, pydantic or the plugin manager.

    Only when no third-party plugin is installed (its tools are known, and checked, only through
    the registry) and the built-in plugins register plain dicts; otherwise None. The built-in
    tools are constants the registry accepts (a test checks both give the same schemas).
    """
    if third_party_plugins(environ):
        return None
    blocked = blocked_names(environ)
    tools: list[Any] = []

    def record(tool: Any, **overrides: Any) -> None:
        tools.append(tool if isinstance(tool, dict) and not any(overrides.values()) else None)

    for module_name in BUILTIN_PLUGINS:
        if module_name not in blocked:
            importlib.import_module(module_name).register_tools(register=record)
    if not all(tools) or len({tool["name"] for tool in tools}) != len(tools):
        return None
    return [function_schema(tool) for tool in tools]


def plugins_fingerprint(environ: dict[str, str] | None = None) -> str:
    """What the tool schemas depend on, as one hash: this package's version, each installed and not
    blocked plugin (entry point, distribution version, the size and time of each file of its module or package)
    and the blocked names. Reads metadata and file times only; imports no plugin."""
    from importlib.metadata import PackageNotFoundError, entry_points, version

    try:
        lineup = version("lineup-plugin")
    except PackageNotFoundError:  # run from a source tree that is not installed
        lineup = "source"
    blocked = blocked_names(environ)
    plugins: list[list[Any]] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in blocked:
            continue
        dist = f"{ep.dist.name}=={ep.dist.version}" if ep.dist is not None else ""
        stamp: list[Any] = []
        with contextlib.suppress(ImportError, ValueError, OSError):
            spec = importlib.util.find_spec(ep.module.split(".")[0])  # a top-level name: nothing is imported
            if spec is not None:
                stamp = _source_stamp(spec)
        plugins.append([ep.name, ep.value, dist, stamp])
    text = json.dumps({"lineup": lineup, "plugins": plugins, "blocked": sorted(blocked)}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


#: files of one plugin package looked at for its fingerprint (a plugin with more is stamped by these)
STAMP_FILES = 2000


def _source_stamp(spec: importlib.machinery.ModuleSpec) -> list[Any]:
    """The name, size and time of every file a plugin's top-level module or package is made of
    (``__pycache__`` and hidden directories left out): an editable install's submodule that changes
    without a version bump changes the stamp. Stats files only; reads and imports nothing."""
    files: list[str] = [spec.origin] if spec.origin and os.path.exists(spec.origin) else []
    for root in spec.submodule_search_locations or ():
        for folder, dirs, names in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            files.extend(os.path.join(folder, name) for name in sorted(names))
            if len(files) > STAMP_FILES:
                break
    stamp: list[Any] = []
    for path in files[:STAMP_FILES]:
        with contextlib.suppress(OSError):
            info = os.stat(path)
            stamp.append([path, info.st_size, info.st_mtime_ns])
    return stamp


def cached_function_schemas(data_dir: Path, environ: dict[str, str] | None = None) -> list[dict[str, Any]] | None:
    """The function schemas kept by :func:`remember_function_schemas`, if the installed plugins are the same.

    Lets a start with a third-party plugin installed register its tools without loading the
    registry, the plugins or pydantic; the registry is loaded (and the tools checked) on first use.
    """
    try:
        kept = json.loads((data_dir / SCHEMA_CACHE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(kept, dict) or kept.get("key") != plugins_fingerprint(environ):
        return None
    schemas = kept.get("schemas")
    if not isinstance(schemas, list) or not all(isinstance(one, dict) and "name" in one for one in schemas):
        return None
    return schemas  # the shape was checked; the registry checks the tools themselves on first use


def remember_function_schemas(
    data_dir: Path, schemas: list[dict[str, Any]], environ: dict[str, str] | None = None
) -> None:
    """Keep the plugins' function schemas for the next start (best effort: a failure is only logged)."""
    path = data_dir / SCHEMA_CACHE
    data = json.dumps({"key": plugins_fingerprint(environ), "schemas": schemas})
    try:
        write_private(path, data.encode("utf-8"))  # whole or not at all
    except OSError as exc:
        log.debug("lineup: could not keep the tool schemas in %s: %s", path, exc)
