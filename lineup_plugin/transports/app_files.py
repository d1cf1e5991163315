"""Where the reference App's files are: shared by every transport that hands them out."""

from __future__ import annotations

import importlib.resources
from importlib.resources.abc import Traversable


def packaged_app() -> Traversable:
    """The reference App shipped inside the package (``lineup_plugin/app``): served by the direct
    server, exported for a static host by the relay's pairing command, bundled into MCP Apps cards."""
    return importlib.resources.files("lineup_plugin") / "app"
