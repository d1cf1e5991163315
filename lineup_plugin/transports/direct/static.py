"""The reference App's static files, as the direct server serves them over plain HTTP.

Only files inside the App directory can be reached: every path segment is checked (no ``..``,
no hidden files, no empty segments, no backslashes) before anything is opened, and a directory
on disk is also checked after symlinks are resolved.

Made for a phone on a slow network (:class:`AppFiles`):

- **One script.** ``index.html`` is sent with its ``<script type="module" src="app.js">``
  pointing at :data:`BUNDLE_PATH`: the App's modules joined into one script
  (:func:`~lineup_plugin.transports.modules.bundle`, comments left out:
  :func:`~lineup_plugin.transports.modules.lean`), one request instead
  of one per module. The relay library
  (``vendor/relay.js``) is not in it: the App imports it only when it uses the relay. Should the
  modules not bundle, the page keeps ``app.js`` (the browser then fetches each module) and the
  reason is logged. The service worker (:data:`SERVICE_WORKER`) is sent joined with the modules
  it imports the same way, under its own name.
- **Compressed.** Text files go gzip-compressed to a client that accepts it (compressed once per
  content and kept, :data:`GZIP_CACHE` of them).
- **Cached.** Every file has an ETag (a hash of its content); a request with a matching
  ``If-None-Match`` gets ``304 Not Modified``. ``index.html`` names its files with ``?v=<hash>``,
  and a file asked for with its current hash is cacheable for a year (``immutable``): a reload
  revalidates the page alone. Anything else is ``no-cache`` (revalidated each time).
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import re
from collections import OrderedDict
from dataclasses import dataclass
from http import HTTPStatus
from importlib.resources.abc import Traversable
from pathlib import Path, PurePosixPath
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.http11 import Request, Response

from ...errors import RendererError
from ..app_files import SERVICE_WORKER
from ..modules import script
from .api import IMMUTABLE, NO_CACHE, response

log = logging.getLogger(__name__)

#: where the App's modules are served joined into one script
BUNDLE_PATH = "/app.bundle.js"
#: the App's entry module (what the bundle starts from, and what index.html names)
ENTRY = "app.js"
#: how many compressed bodies are kept (one per file content: old ones go first)
GZIP_CACHE = 64
#: bodies smaller than this are sent as they are (compressing would gain nothing)
MIN_GZIP_BYTES = 512
#: the media types compressed (and any ``text/*``)
COMPRESSIBLE = frozenset({"application/json", "application/manifest+json", "image/svg+xml"})
#: a relative file an attribute of index.html names (no scheme, query or fragment)
_REFERENCE = re.compile(r'\b(src|href)="([A-Za-z0-9_][A-Za-z0-9_./-]*)"')

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


#: the App's Content-Security-Policy (index.html states it in a meta tag). A service worker does not
#: take its page's policy: ``sw.js`` is served with this one as a header, so it runs under the same rules
APP_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob:; "
    "connect-src 'self' ws: wss:; base-uri 'none'; form-action 'none'"
)
#: headers of particular App files, beside the content type
FILE_HEADERS: dict[str, tuple[tuple[str, str], ...]] = {
    "sw.js": (("Content-Security-Policy", APP_POLICY),),
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


def etag_of(body: bytes) -> str:
    """The version of ``body`` that URLs and ETags carry: 20 hex digits of its SHA-256."""
    return hashlib.sha256(body).hexdigest()[:20]


def accepts_gzip(value: str) -> bool:
    """Whether an ``Accept-Encoding`` header value accepts gzip (named, or ``*``, with a q above 0)."""
    for item in value.split(","):
        coding, _, params = item.strip().partition(";")
        if coding.strip().lower() not in ("gzip", "*"):
            continue
        quality = params.strip().lower().removeprefix("q=")
        try:
            return not params.strip() or float(quality) > 0
        except ValueError:
            return False
    return False


def _matches(value: str, etag: str) -> bool:
    """Whether an ``If-None-Match`` header value names ``etag`` (weakly compared, ``*`` included)."""
    tags = {t.strip().removeprefix("W/") for t in value.split(",")}
    return "*" in tags or f'"{etag}"' in tags


@dataclass(frozen=True)
class Asset:
    """A file as it is sent: its bytes, media type and version (the ETag's value)."""

    body: bytes
    content_type: str
    etag: str


class AppFiles:
    """The App's files as the direct server sends them: bundled, compressed, validated, cached.

    ``root`` is the App's directory. Files are read on each request (a changed App is served
    at once); what costs time is kept per content: the gzip of a body by its ETag, the bundle
    with the module sources it was made from (while every one reads the same, it is the same).
    """

    def __init__(self, root: Traversable) -> None:
        self.root = root
        self._gzip: OrderedDict[str, bytes] = OrderedDict()
        self._told: set[str] = set()
        self._bundled: dict[str, tuple[dict[str, str], Asset]] = {}

    def serve(self, request: Request) -> Response:
        """The answer to ``GET`` of ``request.path``: the file (maybe 304, maybe gzip) or 404."""
        asset = self.asset(request.path)
        if asset is None:
            return response(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain; charset=utf-8", NO_CACHE)
        version = parse_qs(urlsplit(request.path).query).get("v", [""])[-1]
        caching = IMMUTABLE if version == asset.etag else NO_CACHE
        own = FILE_HEADERS.get(PurePosixPath(unquote(urlsplit(request.path).path)).name, ())
        validators = (("ETag", f'W/"{asset.etag}"'), caching, ("Vary", "Accept-Encoding"), *own)
        if _matches(request.headers.get("If-None-Match", ""), asset.etag):
            unchanged = response(HTTPStatus.NOT_MODIFIED, b"", asset.content_type, *validators)
            del unchanged.headers["Content-Length"]
            del unchanged.headers["Content-Type"]
            return unchanged
        if accepts_gzip(request.headers.get("Accept-Encoding", "")) and self._compressible(asset):
            body = self._gzipped(asset)
            return response(HTTPStatus.OK, body, asset.content_type, *validators, ("Content-Encoding", "gzip"))
        return response(HTTPStatus.OK, asset.body, asset.content_type, *validators)

    def asset(self, request_path: str) -> Asset | None:
        """What ``request_path`` names: a file, the rewritten index page, the bundle; None if nothing."""
        path = unquote(urlsplit(request_path).path)
        if path == BUNDLE_PATH:
            return self.bundle()
        if path == "/" + SERVICE_WORKER and (worker := self.bundle(SERVICE_WORKER)) is not None:
            return worker
        node = find_file(self.root, request_path)
        if node is None:
            return None
        body = node.read_bytes()
        if node.name == "index.html":
            body = self.index_page(body, PurePosixPath(path if not path.endswith("/") else path + "index.html"))
        return Asset(body, content_type(node.name), etag_of(body))

    def bundle(self, entry: str = ENTRY) -> Asset | None:
        """Module ``entry`` (the App's by default) joined with every module it imports into one script
        (see :mod:`lineup_plugin.transports.modules`), or None if they do not bundle."""
        sources: dict[str, str] = {}

        def read(path: str) -> str:
            if path not in sources:
                node = find_file(self.root, "/" + path)
                if node is None:
                    raise RendererError(f"the App has no module {path}")
                sources[path] = node.read_text(encoding="utf-8")
            return sources[path]

        if find_file(self.root, "/" + entry) is None:
            return None
        if entry in self._bundled:
            made_from, made = self._bundled[entry]
            try:
                if all(read(path) == text for path, text in made_from.items()):
                    return made  # the same sources make the same bundle
            except (RendererError, UnicodeDecodeError, OSError):
                pass  # a module went or changed: bundle again, and say why if it fails
            sources.clear()
        try:
            body = script(read, entry).encode()
        except (RendererError, UnicodeDecodeError, OSError) as exc:
            if str(exc) not in self._told:
                self._told.add(str(exc))
                log.warning("the App's modules do not bundle (%s is served module by module): %s", entry, exc)
            return None
        asset = Asset(body, content_type(entry), etag_of(body))
        self._bundled[entry] = (dict(sources), asset)
        return asset

    def index_page(self, body: bytes, where: PurePosixPath) -> bytes:
        """``index.html`` with its files named by version (``?v=<hash>``) and the bundle for its entry."""
        text = body.decode("utf-8", errors="replace")
        folder = where.parent

        def versioned(match: re.Match[str]) -> str:
            attribute, name = match.group(1), match.group(2)
            target = folder / name
            if target == PurePosixPath("/", ENTRY) and (script := self.bundle()) is not None:
                return f'{attribute}="{BUNDLE_PATH.lstrip("/")}?v={script.etag}"'
            node = find_file(self.root, str(target))
            if node is None or node.name == "index.html":
                return match.group(0)
            return f'{attribute}="{name}?v={etag_of(node.read_bytes())}"'

        return _REFERENCE.sub(versioned, text).encode("utf-8")

    @staticmethod
    def _compressible(asset: Asset) -> bool:
        kind = asset.content_type.split(";")[0].strip()
        return len(asset.body) >= MIN_GZIP_BYTES and (
            kind.startswith("text/") or kind in COMPRESSIBLE or kind.endswith("javascript")
        )

    def _gzipped(self, asset: Asset) -> bytes:
        cached = self._gzip.get(asset.etag)
        if cached is not None:
            self._gzip.move_to_end(asset.etag)
            return cached
        body = gzip.compress(asset.body, compresslevel=9, mtime=0)
        self._gzip[asset.etag] = body
        if len(self._gzip) > GZIP_CACHE:
            self._gzip.popitem(last=False)
        return body
