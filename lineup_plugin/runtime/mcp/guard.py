"""The Host and Origin rules of ``lineup mcp --http``, on whatever address it listens (against DNS rebinding).

The MCP SDK checks these headers only when it serves ``127.0.0.1``, ``localhost`` or ``::1``; on
any other address (``127.0.0.2``, a LAN address) a web page could rebind its own name to the
server and ask the user's phone. :class:`HostOriginGuard` applies LineUp's own rules to every
request, as the direct server does (:mod:`lineup_plugin.transports.direct.auth`):

- ``Host`` must be an IP address, one of this machine's names, or listed in ``allowed_hosts``
  (else 421);
- ``Origin``, when a browser sends one, must be this server (the ``Host``), a page served on
  loopback (local software, which can reach the port anyway), or listed in ``allowed_origins``
  (else 403).

A WebSocket handshake is held to the same rules (a browser sends ``Origin`` on every one): it is
refused with the same status and words where the server can send a response to a handshake (the
ASGI ``websocket.http.response`` extension), else closed with 1008 before it is accepted (an
HTTP 403).
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Sequence
from http import HTTPStatus
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from starlette.websockets import WebSocketClose

from ...transports.direct.auth import LOOPBACK_NAMES, host_allowed, local_names, origin_allowed, printable

log = logging.getLogger(__name__)

#: the close code of a WebSocket refused for its Host or Origin (policy violation)
WS_POLICY_VIOLATION = 1008


def loopback_origin(origin: str) -> bool:
    """Whether ``origin`` is a page served on this machine's loopback (``http://localhost:5173``, ``http://[::1]``)."""
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in ("http", "https") or parts.path not in ("", "/"):
        return False
    try:
        name = parts.hostname
    except ValueError:
        return False
    if name is None:
        return False
    if name in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostOriginGuard:
    """ASGI middleware: refuses requests and WebSocket handshakes whose ``Host`` or ``Origin`` break the rules
    above."""

    def __init__(self, app: ASGIApp, *, allowed_hosts: Sequence[str] = (), allowed_origins: Sequence[str] = ()) -> None:
        self.app = app
        self.allowed_hosts = local_names() | {h.lower() for h in allowed_hosts}
        self.allowed_origins = tuple(allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve the request or handshake, or answer 400/421/403 without passing it on."""
        if scope["type"] not in ("http", "websocket"):  # lifespan: no headers to judge
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(Headers(scope=scope))
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, text = refusal
        if scope["type"] == "http" or "websocket.http.response" in scope.get("extensions", {}):
            await PlainTextResponse(text, status_code=status)(scope, receive, send)
        else:
            await WebSocketClose(WS_POLICY_VIOLATION)(scope, receive, send)

    def refusal(self, headers: Headers) -> tuple[int, str] | None:
        """Why a request with these headers is refused (status, text), or None if it may be served."""
        hosts, origins = headers.getlist("host"), headers.getlist("origin")
        if len(hosts) > 1 or len(origins) > 1:
            return HTTPStatus.BAD_REQUEST, "more than one Origin or Host header\n"
        host = hosts[0] if hosts else None
        if not host_allowed(host, self.allowed_hosts):
            name = printable(host or "")
            log.warning("refused an MCP request for host %s (not this machine, not in allowed_hosts)", name)
            return (
                HTTPStatus.MISDIRECTED_REQUEST,
                f"host {name} is not this MCP server: use this machine's address, "
                "or add the name to lineup's allowed_hosts setting\n",
            )
        origin = origins[0] if origins else None
        if origin is None or loopback_origin(origin) or origin_allowed(origin, host, self.allowed_origins):
            return None
        shown = printable(origin)
        log.warning("refused an MCP request from origin %s (not this server, not in allowed_origins)", shown)
        return (
            HTTPStatus.FORBIDDEN,
            f"origin {shown} is not allowed: add it to lineup's allowed_origins setting to let that page in\n",
        )
