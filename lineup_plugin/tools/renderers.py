"""App renderers that plugins ship for their App tools (the ``register_renderers`` hook).

A renderer is one ES module file. It is read once, when the plugins are collected, and kept in
memory with its SHA-256 digest: the direct server serves it at ``/renderers/<digest>.js`` (only
the files registered here can be reached that way, so no request path ever names a file on disk)
and tells an authenticated App which tool each serves (:meth:`Renderers.manifest`). What the
module must export, what it receives and how it answers is the App's side: see docs/plugins.md,
*Renderers for plugin tools*.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..errors import RendererError

#: the largest renderer module served (a renderer is a small UI module, not an application)
MAX_RENDERER_BYTES = 256 * 1024
#: the suffixes of a JavaScript module file
MODULE_SUFFIXES = (".js", ".mjs")
#: where the direct server serves a renderer, by its digest
PATH_PREFIX = "/renderers/"


class _Tool(Protocol):
    @property
    def source(self) -> str: ...
    @property
    def in_process(self) -> bool: ...


class Tools(Protocol):
    """Where a renderer's tool is looked up (the :class:`~lineup_plugin.tools.registry.Registry`)."""

    def get(self, name: str) -> _Tool | None:
        """The tool registered under ``name``, if any."""


class RegisterRenderer(Protocol):
    """The ``register`` callable handed to the ``register_renderers`` hook."""

    def __call__(self, tool: str, module: str | os.PathLike[str]) -> Renderer: ...


@dataclass(frozen=True)
class Renderer:
    """One plugin's renderer module for one of its App tools."""

    tool: str
    #: the plugin that registered it
    source: str
    #: the module's bytes, as read at registration
    body: bytes
    #: the SHA-256 of ``body``, hex: the module's address and its cache key
    digest: str

    @property
    def path(self) -> str:
        """Where the direct server serves the module (same origin as the App)."""
        return f"{PATH_PREFIX}{self.digest}.js"


def read_module(tool: str, module: str | os.PathLike[str], source: str) -> Renderer:
    """The renderer in file ``module`` for ``tool``; raises RendererError if it cannot be served."""
    where = f"plugin {source!r}: the renderer of tool {tool!r}"
    path = Path(module)
    if path.suffix not in MODULE_SUFFIXES:
        raise RendererError(f"{where} must be a .js or .mjs module file, not {path.name!r}")
    try:
        with path.open("rb") as file:
            body = file.read(MAX_RENDERER_BYTES + 1)
    except OSError as exc:
        raise RendererError(f"{where} cannot be read from {path}: {exc.strerror or exc}") from None
    if len(body) > MAX_RENDERER_BYTES:
        raise RendererError(f"{where} is larger than {MAX_RENDERER_BYTES // 1024} KiB ({path})")
    try:
        body.decode("utf-8")
    except UnicodeDecodeError:
        raise RendererError(f"{where} is not UTF-8 text ({path})") from None
    return Renderer(tool, source, body, hashlib.sha256(body).hexdigest())


class Renderers:
    """The renderers of a registry's plugin tools: by tool, and by digest for serving."""

    def __init__(self) -> None:
        self._by_tool: dict[str, Renderer] = {}
        self._by_digest: dict[str, Renderer] = {}

    def __len__(self) -> int:
        return len(self._by_tool)

    def add(self, renderer: Renderer, registry: Tools) -> None:
        """Keep ``renderer``: its tool must be an App tool that its own plugin registered, without a renderer yet."""
        tool = registry.get(renderer.tool)
        where = f"plugin {renderer.source!r}: cannot ship a renderer for tool {renderer.tool!r}"
        if tool is None or tool.source != renderer.source:
            raise RendererError(f"{where}: the plugin registers no tool of that name")
        if tool.in_process:
            raise RendererError(f"{where}: it runs in the agent's process, the App does not render it")
        if renderer.tool in self._by_tool:
            raise RendererError(f"{where}: it has a renderer already")
        self._by_tool[renderer.tool] = renderer
        self._by_digest[renderer.digest] = renderer

    def for_tool(self, tool: str) -> Renderer | None:
        """The renderer of ``tool``, if its plugin ships one."""
        return self._by_tool.get(tool)

    def by_path(self, path: str) -> Renderer | None:
        """The renderer served at request path ``path`` (``/renderers/<digest>.js``), if any."""
        if not path.startswith(PATH_PREFIX) or not path.endswith(".js"):
            return None
        return self._by_digest.get(path[len(PATH_PREFIX) : -len(".js")])

    def manifest(self) -> dict[str, Any]:
        """What the App is told: ``{"renderers": {tool: path}}``."""
        return {"renderers": {name: renderer.path for name, renderer in self._by_tool.items()}}

    def registrar(self, source: str, registry: Tools) -> RegisterRenderer:
        """A ``register`` callable that adds renderers on behalf of plugin ``source``."""

        def register(tool: str, module: str | os.PathLike[str]) -> Renderer:
            if not isinstance(tool, str):
                raise RendererError(f"plugin {source!r}: a renderer's tool must be a tool name, not {tool!r}")
            renderer = read_module(tool, module, source)
            self.add(renderer, registry)
            return renderer

        return register
