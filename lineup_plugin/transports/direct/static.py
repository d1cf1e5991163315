"""The reference App's static files, as the direct server serves them over plain HTTP.

Only files inside the App directory can be reached: every path segment is checked (no ``..``,
no hidden files, no empty segments, no backslashes) before anything is opened, and a directory
on disk is also checked after symlinks are resolved.
"""

from __future__ import annotations

from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urlsplit

#: content types by file suffix; anything else is served as application/octet-stream
CONTENT_TYPES: dict[str, str] = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".mjs": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".json": "application/json",
    ".map": "application/json",
    ".webmanifest": "application/manifest+json",
    ".txt": "text/plain; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
    ".ico": "image/x-icon",
    ".woff2": "font/woff2",
    ".woff": "font/woff",
}


def content_type(name: str) -> str:
    """The Content-Type header value for a file called ``name``."""
    return CONTENT_TYPES.get(PurePosixPath(name).suffix.lower(), "application/octet-stream")


def find_file(root: Traversable, request_path: str) -> Traversable | None:
    """The file under ``root`` that ``request_path`` (as in the HTTP request line) names, or None.

    ``/`` and paths ending in ``/`` mean their ``index.html``; the query string is ignored.
    """
    path = unquote(urlsplit(request_path).path)
    if not path.startswith("/"):
        return None
    if path.endswith("/"):
        path += "index.html"
    segments = path[1:].split("/")
    if any(not s or s.startswith(".") or "\\" in s or "\x00" in s for s in segments):
        return None
    node = root
    for segment in segments:
        node = node.joinpath(segment)
    try:
        if not node.is_file():
            return None
        if isinstance(root, Path) and not Path(str(node)).resolve().is_relative_to(root.resolve()):
            return None
    except (OSError, ValueError):
        return None
    return node
