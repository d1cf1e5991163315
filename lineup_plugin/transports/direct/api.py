"""The direct server's small HTTP API beside the App's files: plugin renderers and metering.

- ``GET /renderers/<sha256>.js``: a renderer module a plugin shipped for one of its App tools
  (:mod:`lineup_plugin.tools.renderers`). Only registered modules are served, looked up by their
  digest (no request path names a file), as ``text/javascript``, cached for a year (the address
  changes when the module does). No token: a module ``import()`` cannot carry one, and the address
  is known only from the manifest below.
- ``GET /api/renderers``: ``{"renderers": {tool: path}}``, the tools that have a renderer.
- ``GET /api/stats[?since=<seconds since the epoch>]``: the metering of the store
  (:meth:`lineup_plugin.stats.Stats.as_json`), read by this process, which holds the store.
- ``GET /api/pair`` (when the relay runs too, see :mod:`lineup_plugin.transports.both`): pairs
  the App for the relay. The App sends its X25519 public key as ``X-LineUp-Key``; the answer
  (never stored by caches) is what it needs to reach the agent through WuKongIM, end-to-end
  encrypted (:meth:`Relay.pair <lineup_plugin.transports.wukongim.relay.Relay.pair>`). No relay: 404.
  Without a key it is the App's probe, asked on every connect: ``200 {"relay": true|false}``
  (never an error status, which a browser logs as a console error on every page load).

The ``/api/`` paths need ``Authorization: Bearer <token>`` (the App's token); a wrong token is
answered 401 and slows that address down as a wrong hello does
(:class:`~lineup_plugin.transports.direct.auth.AuthThrottle`). Answers are JSON, never cached.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import math
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from ...errors import LineUpError, TransportError
from ...hub import Hub
from ...stats import Meter, Stats, is_time
from ...store import AuditPages
from .auth import TOKEN_FILE, AuthThrottle, load_or_create_token, token_matches

log = logging.getLogger(__name__)

API_PREFIX = "/api/"
#: headers of every answer (the App's files add their own Cache-Control)
SECURITY_HEADERS = (
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
)
NO_CACHE = ("Cache-Control", "no-cache")
NO_STORE = ("Cache-Control", "no-store")
IMMUTABLE = ("Cache-Control", "public, max-age=31536000, immutable")
MODULE_TYPE = "text/javascript; charset=utf-8"
#: audit records read and counted at a time by GET /api/stats (a few ms each)
STATS_PAGE = 2000


NO_RELAY = "no relay to pair for: set mode both and the wukongim settings"

#: pairs an App device for the relay from its public key (``Relay.pair``)
PairHandler = Callable[[str], Awaitable[dict[str, Any]]]


def response(status: HTTPStatus, body: bytes, content_type: str, *extra: tuple[str, str]) -> Response:
    """A complete answer: status, body, content type, the security headers and ``extra`` headers."""
    headers = Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            *SECURITY_HEADERS,
            *extra,
        ]
    )
    return Response(status.value, status.phrase, headers, body)


def json_response(status: HTTPStatus, data: Any, *extra: tuple[str, str]) -> Response:
    """``data`` as a JSON answer that is never cached."""
    body = json.dumps(data, ensure_ascii=False).encode("utf-8")
    return response(status, body, "application/json", NO_CACHE, *extra)


def problem(status: HTTPStatus, message: str, *extra: tuple[str, str]) -> Response:
    """An error answer: ``{"error": message}``."""
    return json_response(status, {"error": message}, *extra)


class HttpApi:
    """Answers the requests of the module docstring for the direct server of ``hub``.

    ``token()`` is the server's token (known once it started); ``throttle`` is the server's
    wrong-token slow-down, shared with the WebSocket hellos. :attr:`pairing` is set when the
    relay runs too.
    """

    def __init__(self, hub: Hub, token: Callable[[], str], throttle: AuthThrottle) -> None:
        self.hub = hub
        self.token = token
        self.throttle = throttle
        #: answers ``GET /api/pair`` (:meth:`Relay.pair`); None: no relay
        self.pairing: PairHandler | None = None

    def renderer(self, path: str) -> Response | None:
        """The renderer module served at ``path``, or None when no registered module has that address."""
        renderer = self.hub.registry.renderers.by_path(path)
        if renderer is None:
            return None
        return response(HTTPStatus.OK, renderer.body, MODULE_TYPE, IMMUTABLE)

    async def answer(self, request: Request, address: str) -> Response:
        """The answer to ``GET /api/...`` from ``address``: checked token first, then the endpoint."""
        refused = await self._authenticate(request, address)
        if refused is not None:
            return refused
        parts = urlsplit(request.path)
        if parts.path == "/api/renderers":
            return json_response(HTTPStatus.OK, self.hub.registry.renderers.manifest())
        if parts.path == "/api/stats":
            return await self._stats(parts.query)
        if parts.path == "/api/pair":
            return await self._pair(request, address)
        known = "/api/stats, /api/renderers or /api/pair"
        return problem(HTTPStatus.NOT_FOUND, f"no such endpoint {parts.path[:80]!r}; try {known}")

    async def _authenticate(self, request: Request, address: str) -> Response | None:
        given = request.headers.get("Authorization", "")
        scheme, _, token = given.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            message = "missing token: send Authorization: Bearer <token>"
            return problem(HTTPStatus.UNAUTHORIZED, message, ("WWW-Authenticate", "Bearer"))
        async with self.throttle.turn(address):  # after wrong tokens, one at a time and slowed down
            if token_matches(token.strip(), self.token()):
                self.throttle.succeeded(address)
                return None
            self.throttle.failed(address)
        failures = self.throttle.failures(address)
        log.warning("refused an API request from %s: wrong token (%d in a row)", address, failures)
        return problem(HTTPStatus.UNAUTHORIZED, "wrong token", ("WWW-Authenticate", 'Bearer error="invalid_token"'))

    async def _pair(self, request: Request, address: str) -> Response:
        key = request.headers.get("X-LineUp-Key")
        if key is None:  # the App's probe: is there a relay to pair for?
            return json_response(HTTPStatus.OK, {"relay": self.pairing is not None})
        if self.pairing is None:
            return problem(HTTPStatus.NOT_FOUND, NO_RELAY)
        try:
            offer = await self.pairing(key)
        except LineUpError as exc:
            return problem(HTTPStatus.BAD_REQUEST, str(exc)[:500])
        log.info("paired an App device from %s for the relay (%s)", address, offer.get("id"))
        return response(HTTPStatus.OK, json.dumps(offer).encode(), "application/json", NO_STORE)

    async def _stats(self, query: str) -> Response:
        values = parse_qs(query).get("since", [])
        since: float | None = None
        if values:
            try:
                since = float(values[-1])
            except ValueError:
                since = math.nan
            if not is_time(since):  # 1e308 is finite but no date: its ISO form would fail as a 500
                return problem(HTTPStatus.BAD_REQUEST, "since: expected seconds since the epoch, e.g. since=1764547200")
        store = self.hub.store
        if not isinstance(store, AuditPages):
            message = "this agent keeps its calls in memory (store: memory); there is nothing to count"
            return problem(HTTPStatus.SERVICE_UNAVAILABLE, message)
        return json_response(HTTPStatus.OK, (await store_stats(store, since)).as_json())


async def store_stats(store: AuditPages, since: float | None) -> Stats:
    """The metering of the store this process holds, on the hub's loop: the audit log is read and
    counted a page at a time, and the Apps are served between pages."""
    meter = Meter(since=since)
    after: int | None = 0
    while after is not None:
        page, after = store.call_audit_page(since=since, after=after, limit=STATS_PAGE)
        meter.feed(page)
        await asyncio.sleep(0)  # a turn for the hub's other work before the next page
    return meter.stats()


def request_stats(
    host: str, port: int, token: str | None, data_dir: Path, *, since: float | None = None, tls: bool = False
) -> Any:
    """Ask the direct server on ``host:port`` for its metering (``GET /api/stats``), as JSON data.

    How ``lineup stats`` counts while a server holds the store. The token is ``token`` or the one
    in ``<data_dir>/token`` (never created here). A server listening on every interface is asked
    on the loopback address; with ``tls`` over HTTPS, without checking the certificate (it is for
    the server's public name, not the loopback address). Raises TransportError saying why it could
    not be asked.
    """
    import httpx

    if not token and not (data_dir / TOKEN_FILE).is_file():
        raise TransportError(f"no token in {data_dir / TOKEN_FILE}: the serving process has no direct server")
    token = load_or_create_token(token, data_dir)
    address = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    url = f"{'https' if tls else 'http'}://{f'[{address}]' if ':' in address else address}:{port}/api/stats"
    params = {"since": repr(since)} if since is not None else {}
    try:
        # never through a proxy: the token goes along
        with httpx.Client(trust_env=False, timeout=10.0, verify=not tls) as client:
            answer = client.get(url, params=params, headers={"Authorization": f"Bearer {token}"})
    except httpx.HTTPError as exc:
        raise TransportError(f"cannot ask the server at {url}: {exc}") from exc
    try:
        data = answer.json()
    except ValueError:
        data = None
    if answer.status_code != HTTPStatus.OK or not isinstance(data, dict):
        why = data.get("error") if isinstance(data, dict) else None
        raise TransportError(f"the server at {url} answered {answer.status_code}: {why or 'not LineUp metering'}")
    return data
