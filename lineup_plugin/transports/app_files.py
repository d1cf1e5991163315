"""Where the reference App's files are: shared by every transport that hands them out."""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable

from ..errors import RendererError
from .modules import script

#: the App's service worker: always sent (and exported) with the modules it imports joined in, since
#: a service worker runs as a classic script (not every browser takes a module one)
SERVICE_WORKER = "sw.js"


def packaged_app() -> Traversable:
    """The reference App shipped inside the package (``lineup_plugin/app``): served by the direct
    server, exported for a static host by the relay's pairing command, bundled into MCP Apps cards."""
    return importlib.resources.files("lineup_plugin") / "app"


def service_worker(root: Traversable) -> bytes | None:
    """The App's service worker under ``root`` joined with the modules it imports (what ``lineup app
    export`` writes as ``sw.js``), or None when there is none or it does not bundle."""
    try:
        return script(lambda path: root.joinpath(*path.split("/")).read_text(encoding="utf-8"), SERVICE_WORKER).encode()
    except (RendererError, UnicodeDecodeError, OSError):
        return None
