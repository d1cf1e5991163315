"""Direct mode: the WebSocket server inside the agent (port 9527 by default).

One port serves both:

- ``GET /`` and ``GET /<file>``: the reference App's static files (plain HTTP);
- ``GET /renderers/<sha256>.js``, ``GET /api/...``: plugins' App renderers and the token-checked
  JSON API (:mod:`.api`);
- ``GET /media/<sha256>?key=<key>``: a file sent either way (:mod:`lineup_plugin.media`); the
  key comes with the message that carries the file and is an HMAC of the hash under the token,
  so no file is ever served without it (403). Only raster images are served inline; every other
  type is a download, and media responses carry ``Content-Security-Policy: default-src 'none';
  sandbox``;
- ``/ws``: the App's WebSocket. Its first message must be a ``lineup.v1.device.hello`` carrying
  the token, sent within :attr:`Limits.hello_timeout`. Only then is the device attached to the
  hub and sees anything of the agent.

How a connection ends, and what the App is told (close code and reason):

======  =============================================  ==========================================
code    reason                                         why
======  =============================================  ==========================================
4401    ``wrong token`` / ``missing token``            after an ``error`` ``auth_failed`` message
4400    ``device.hello required`` / ``bad hello``      the first message was not a valid hello
4408    ``no device.hello within 10 s``                nothing was said in time
1013    ``too many connections``                       ``max_connections`` are already open, or
                                                       this one still had to say hello when
                                                       newer ones needed its place (see below)
1009    ``frame with N bytes exceeds limit of M ...``  a message over ``max_frame_bytes``
1008    ``send queue full: the App is not reading``    over ``max_queue`` messages waited unsent and
                                                       none of them was taken for
                                                       :data:`READING_GRACE` seconds
1008    ``rate limit exceeded: too many messages``     the App stayed over the rate after ``rate_limited``
1001    ``the agent is shutting down``                 :meth:`DirectServer.close`
======  =============================================  ==========================================

At most :attr:`Limits.max_unauthenticated` connections may wait for their hello. A new
connection always gets a place: the oldest waiting connection of the address that holds the
most places is ended to make room. Sockets that never say hello, however fast they come back,
therefore cannot keep an App out: the App says hello at once.

A binary frame is answered with an ``error`` ``binary_not_supported`` and the connection stays
open. A browser connection whose ``Origin`` is neither this server nor listed in
``allowed_origins`` is refused at the HTTP handshake with 403. Every breach ends only the
connection at fault; the server keeps serving the others.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections import Counter, deque
from contextlib import suppress
from dataclasses import dataclass
from http import HTTPStatus
from importlib.resources.abc import Traversable
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response
from websockets.protocol import State

from ...errors import TransportError
from ...hub import Hub
from ...media import INLINE_TYPES
from ...protocol.messages import DeviceHello, Error
from ..app_files import packaged_app
from .api import API_PREFIX, SECURITY_HEADERS, HttpApi, response
from .auth import (
    AuthThrottle,
    QuietHandshakes,
    host_allowed,
    load_or_create_token,
    local_names,
    origin_allowed,
    printable,
    token_matches,
)
from .reading import AppConnection, AppReader
from .static import AppFiles
from .tls import certificate_names, server_context

if TYPE_CHECKING:
    from ...config.settings import Settings

log = logging.getLogger(__name__)

WS_PATH = "/ws"
MEDIA_PATH = "/media/"

AUTH_FAILED = 4401
BAD_HELLO = 4400
HELLO_TIMEOUT = 4408
TRY_AGAIN_LATER = 1013
POLICY_VIOLATION = 1008
GOING_AWAY = 1001

#: bytes the socket's buffer may hold before writing waits (websockets' high-water mark, set by us:
#: the one-write path reads it, and websockets names its own copy differently from version to version)
WRITE_LIMIT = 2**15
#: seconds an App with more than ``max_queue`` messages waiting may take no message before it is
#: judged not reading (one that takes some, however slowly, keeps its connection)
READING_GRACE = 0.5
QUEUE_FULL = "send queue full: the App is not reading"
TOO_MANY = "too many connections"

_SECURITY_HEADERS = (*SECURITY_HEADERS, ("Cache-Control", "no-cache"))


@dataclass(frozen=True)
class Limits:
    """Per-connection limits of the direct server that are not user settings.

    ``message_rate``/``message_burst`` form a token bucket per connection: a message over it is
    not dropped (it may be an answer) but waits its turn, so that App is read more slowly, and the
    App is told once with an ``error`` ``rate_limited``; after ``flood_strikes`` waiting messages
    in a row the connection is closed (its live calls are re-sent when it reconnects).
    ``close_timeout`` bounds how long closing a connection may take before it is cut.
    """

    hello_timeout: float = 10.0
    #: the largest first message (the hello) before the token is checked
    hello_bytes: int = 64 * 1024
    #: connections that have not passed their hello yet; past this, the oldest of the address holding most ends
    #: (the more there are, the faster sockets must be re-opened to end an App's before its hello is read)
    max_unauthenticated: int = 64
    #: how long closing every connection may take when the server stops
    shutdown_timeout: float = 1.0
    message_rate: float = 20.0
    message_burst: int = 60
    flood_strikes: int = 30
    close_timeout: float = 5.0
    #: an attached App's connection ended without its close frame (its network dropped, the server
    #: stopped hearing it): for this long, until that device attaches again, a call made while no
    #: App is attached waits for one (the App tries again about 0.5, 1 and 2 s apart) before it
    #: fails ``no_app``
    reconnect_grace: float = 5.0


async def close_connection(connection: ServerConnection, code: int, reason: str, timeout: float) -> None:
    """Close with ``code`` and ``reason`` (cut to the 123 bytes a close frame holds); abort after ``timeout``.

    The bound matters for a peer that stopped reading: its close frame may never be written.
    """
    reason = reason.encode("utf-8")[:123].decode("utf-8", "ignore")
    try:
        await asyncio.wait_for(connection.close(code, reason), timeout)
    except TimeoutError:
        connection.transport.abort()


@dataclass(frozen=True)
class _Close:
    code: int
    reason: str


class DirectLink:
    """One App WebSocket connection, as a :class:`~lineup_plugin.ports.Link`.

    :meth:`send` does not wait on the App: messages go onto a queue. Once per turn of the event
    loop, what the hub queued is written in one go — every message its own WebSocket frame, the
    frames in one write to the socket (a call's outcome and the next call leave together), as
    websockets' own ``broadcast`` writes. While the socket's buffer is over its limit (the App
    is not reading fast enough) a writer task sends the queue message by message, waiting for
    room. A burst (a welcome with many live calls, the closing of every card a hello lists) may
    pass ``max_queue``: while the queue is over it, the App must take some of it every
    :data:`READING_GRACE` seconds. One that takes nothing for that long is not reading: this
    connection alone is closed (1008) and later sends raise TransportError.
    """

    #: a WebSocket message has no limit of its own (the App's frames are bounded by the server)
    max_text: int | None = None

    def __init__(self, connection: ServerConnection, name: str, *, max_queue: int, close_timeout: float) -> None:
        self.name = name
        self.connection = connection
        #: why the connection is closing, once it is (sends fail from then on)
        self.close_reason: str | None = None
        #: the agent closes this connection (:meth:`shut`): what the App sends from then on is not read
        #: (an App that closed it itself is read to its last message)
        self.shutting = False
        self._max_queue = max_queue
        self._close_timeout = close_timeout
        self._queue: deque[str | _Close] = deque()
        self._loop = asyncio.get_running_loop()
        self._check_due = False
        self._write_due = False
        #: how many messages have left the queue (the App's progress, which the reading check watches)
        self._taken = 0
        #: the writer task has the queue (the socket is full, or a close is next): no write in the loop's turn
        self._slow = False
        self._wake = asyncio.Event()
        self._writer = asyncio.create_task(self._write(), name=f"lineup-writer-{name}")
        self._closer: asyncio.Task[None] | None = None

    def send(self, text: str) -> None:
        """Queue one encoded envelope for the App."""
        if self.close_reason is not None:
            raise TransportError(f"{self.name}: connection closing ({self.close_reason})")
        self._queue.append(text)
        self._write_soon()
        if len(self._queue) > self._max_queue and not self._check_due:
            self._check_due = True  # judged READING_GRACE from now, by what the App took meanwhile
            self._loop.call_later(READING_GRACE, self._check_reading, self._taken)

    def _write_soon(self) -> None:
        """Write the queue once what runs now is done, in one callback (unless the writer task has it)."""
        if not self._write_due and not self._slow:
            self._write_due = True
            self._loop.call_soon(self._write_queued)

    def _write_queued(self) -> None:
        """Write what is queued in one write to the socket; the writer task takes over when that cannot be."""
        self._write_due = False
        if self._slow or self._closer is not None or self._writer.done():
            return
        connection, queue = self.connection, self._queue
        transport = connection.transport
        try:
            if connection.protocol.state is State.OPEN and not transport.is_closing():
                protocol = connection.protocol
                room = WRITE_LIMIT - transport.get_write_buffer_size()
                while queue and room >= 0:
                    item = queue[0]
                    if not isinstance(item, str):
                        break
                    queue.popleft()
                    protocol.send_text(item.encode())
                    room -= len(item)
                    self._taken += 1
                frames = protocol.data_to_send()
                if frames:
                    transport.write(b"".join(frames))
        except Exception:  # never strand the queue: the writer task sends what is left, message by message
            log.exception("writing to %s in one go failed; the writer task takes over", self.name)
        if queue:  # a close next, the socket's buffer full or the connection closing: the writer task goes on
            self._slow = True
            self._wake.set()

    def _check_reading(self, taken_before: int) -> None:
        self._check_due = False
        if len(self._queue) <= self._max_queue or self.close_reason is not None:
            return
        if self._taken > taken_before:  # reading, if slowly: judged again later
            self._check_due = True
            self._loop.call_later(READING_GRACE, self._check_reading, self._taken)
            return
        log.warning("closing %s: %d messages wait unsent (it is not reading)", self.name, len(self._queue))
        self.shut(POLICY_VIOLATION, QUEUE_FULL)

    def close(self, code: int, reason: str) -> None:
        """Close with ``code`` and ``reason`` once the messages queued before are written."""
        self.shut(code, reason, flush=True)

    def shut(self, code: int, reason: str, *, flush: bool = False) -> None:
        """Start closing with ``code``/``reason``: after the queue (``flush``) or now; later sends fail."""
        if self.close_reason is not None:
            return
        self.close_reason = reason
        self.shutting = True
        if flush:
            self._queue.append(_Close(code, reason))
            self._write_soon()
            return
        self._writer.cancel()
        self._closer = asyncio.create_task(close_connection(self.connection, code, reason, self._close_timeout))

    async def finish(self) -> None:
        """The connection ended (or the hub refused it): let the writer drain and a pending close complete."""
        if self.close_reason is None:
            self._writer.cancel()
        pending = [task for task in (self._writer, self._closer) if task is not None]
        await asyncio.wait(pending)

    async def _write(self) -> None:
        queue = self._queue
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while queue:
                    item = queue.popleft()
                    if isinstance(item, _Close):
                        await close_connection(self.connection, item.code, item.reason, self._close_timeout)
                        return
                    await self.connection.send(item)  # waits while the socket's buffer is full
                    self._taken += 1
                self._slow = False
        except ConnectionClosed:
            if self.close_reason is None:
                self.close_reason = "the App closed the connection"


def lan_address() -> str:
    """This machine's address on the network its default route uses (no packet is sent), else 127.0.0.1."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # TEST-NET-1: connecting a UDP socket only picks a route
            return str(probe.getsockname()[0])
        except OSError:
            return "127.0.0.1"


@dataclass(frozen=True)
class DirectOptions:
    """What the direct server needs to know (the user's settings of direct mode).

    ``token`` is the configured token, or None for the one kept in ``<data_dir>/token``. The
    fields mean what the settings of the same names mean (see docs/settings.md).
    """

    host: str
    port: int
    data_dir: Path
    token: str | None
    allowed_origins: tuple[str, ...]
    allowed_hosts: tuple[str, ...]
    max_frame_bytes: int
    max_connections: int
    max_queue: int
    heartbeat: float
    #: HTTPS/wss: a PEM certificate chain and its key (None: plain HTTP)
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> DirectOptions:
        """The direct-mode part of ``settings``."""
        return cls(
            host=settings.host,
            port=settings.port,
            data_dir=settings.data_dir,
            token=settings.token,
            allowed_origins=tuple(settings.allowed_origins),
            allowed_hosts=tuple(settings.allowed_hosts),
            max_frame_bytes=settings.max_frame_bytes,
            max_connections=settings.max_connections,
            max_queue=settings.max_queue,
            heartbeat=settings.heartbeat,
            tls_cert=settings.tls_cert,
            tls_key=settings.tls_key,
        )


class DirectServer:
    """The direct transport: serves the App and its WebSocket on ``options.host:options.port``.

    Use as ``async with DirectServer.from_settings(hub, settings) as server:`` or call
    :meth:`start` and :meth:`close`. ``app_dir`` replaces the packaged App (tests); ``throttle``
    and ``limits`` replace the defaults.
    """

    def __init__(
        self,
        hub: Hub,
        options: DirectOptions,
        *,
        app_dir: Traversable | None = None,
        limits: Limits | None = None,
        throttle: AuthThrottle | None = None,
    ) -> None:
        self.hub = hub
        self.options = options
        self.app_dir = app_dir if app_dir is not None else packaged_app()
        self.files = AppFiles(self.app_dir)
        self.limits = limits or Limits()
        #: the wrong-token slow-down, per remote address
        self.throttle = throttle or AuthThrottle()
        self._token: str | None = None
        self._server: Server | None = None
        self._connections: set[ServerConnection] = set()
        #: connections still to pass their hello, oldest first, with their remote address (their own,
        #: smaller budget: Limits.max_unauthenticated)
        self._waiting: dict[ServerConnection, str] = {}
        #: the waiting connections that sent their first message (ended to make room only when no idle one is left)
        self._spoke: set[ServerConnection] = set()
        #: waiting connections being ended to make room for newer ones, with the tasks that close them
        self._ending: dict[ServerConnection, asyncio.Task[None]] = {}
        self._stopping = asyncio.Event()
        self._allowed_hosts = local_names() | {h.lower() for h in options.allowed_hosts}
        #: the names the TLS certificate is for (the first goes in links)
        self._tls_names: list[str] = []
        self.api = HttpApi(hub, lambda: self.token, self.throttle)

    @classmethod
    def from_settings(cls, hub: Hub, settings: Settings, **kwargs: Any) -> DirectServer:
        """The server ``settings`` describe (``kwargs``: ``app_dir``, ``limits``, ``throttle``)."""
        return cls(hub, DirectOptions.from_settings(settings), **kwargs)

    # -------------------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Load or create the token, then listen (over TLS with ``tls_cert``/``tls_key``).

        Raises TransportError if the port cannot be bound, ConfigError if the certificate cannot be used.
        """
        if self._server is not None:
            return
        self._token = load_or_create_token(self.options.token, self.options.data_dir)
        self.hub.add_secret(self._token)  # a generated token is redacted from the audit log too
        if self.hub.media is not None:
            self.hub.media.use_secret(self._token)  # the keys of download links
        if self.hub.push is not None:  # a device keeps its push subscription while the token stays the same
            from ...push.service import token_credential

            self.hub.push.vouch("direct", lambda device_id: token_credential(self.token))
        self._stopping.clear()
        tls = None
        if self.options.tls_cert is not None and self.options.tls_key is not None:
            tls = server_context(self.options.tls_cert, self.options.tls_key)
            self._tls_names = certificate_names(self.options.tls_cert)
            self._allowed_hosts |= set(self._tls_names)
        try:
            self._server = await serve(
                self._handle,
                self.options.host,
                self.options.port,
                process_request=self._process_request,
                create_connection=AppConnection,
                max_size=min(self.limits.hello_bytes, self.options.max_frame_bytes),  # raised after the hello
                logger=QuietHandshakes(logging.getLogger("websockets.server")),
                ping_interval=self.options.heartbeat,
                ping_timeout=self.options.heartbeat,
                close_timeout=self.limits.close_timeout,
                write_limit=WRITE_LIMIT,
                ssl=tls,
            )
        except OSError as exc:
            where = f"{self.options.host}:{self.options.port}"
            raise TransportError(f"cannot listen on {where}: {exc.strerror or exc}") from exc
        log.info("LineUp direct mode listening on %s", self.url)

    async def close(self) -> None:
        """Close every connection (1001 ``the agent is shutting down``) and stop listening.

        Hellos waiting for their slow-down turn are dropped at once; a connection that does not
        answer the close within :attr:`Limits.shutdown_timeout` is cut.
        """
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()
        server.close(close_connections=False)
        closing = [
            close_connection(c, GOING_AWAY, "the agent is shutting down", self.limits.shutdown_timeout)
            for c in list(self._connections)
        ]
        if closing:
            await asyncio.gather(*closing)
        await server.wait_closed()

    async def __aenter__(self) -> DirectServer:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    # ------------------------------------------------------------------------- addresses

    @property
    def token(self) -> str:
        """The token Apps must send (available after :meth:`start`); never log it."""
        if self._token is None:
            raise TransportError("the direct server is not started")
        return self._token

    @property
    def port(self) -> int:
        """The port actually bound (useful with port 0)."""
        if self._server is None:
            raise TransportError("the direct server is not started")
        return int(next(iter(self._server.sockets)).getsockname()[1])

    @property
    def host(self) -> str:
        """The host name to put in links; when listening on every interface, the certificate's name
        with TLS, else the LAN address."""
        host = self.options.host
        if host in ("", "0.0.0.0", "::"):
            host = self._tls_names[0] if self._tls_names else lan_address()
        return f"[{host}]" if ":" in host else host

    @property
    def secure(self) -> bool:
        """Whether the server speaks TLS (``tls_cert`` and ``tls_key`` are set)."""
        return self.options.tls_cert is not None

    @property
    def url(self) -> str:
        """The App's address, ``http://<host>:<port>/`` (``https://`` with TLS)."""
        return f"{'https' if self.secure else 'http'}://{self.host}:{self.port}/"

    @property
    def ws_url(self) -> str:
        """The WebSocket endpoint, ``ws://<host>:<port>/ws`` (``wss://`` with TLS)."""
        return f"{'wss' if self.secure else 'ws'}://{self.host}:{self.port}{WS_PATH}"

    @property
    def connect_link(self) -> str:
        """The App's address with the token in the URL fragment (which browsers never send)."""
        return f"{self.url}#token={quote(self.token, safe='')}"

    def describe(self) -> str:
        """Direct mode: where the App is served (the token stays out of it)."""
        return f"direct mode: the App at {self.url}"

    @property
    def connections(self) -> int:
        """How many WebSocket connections are open (authenticated or not)."""
        return len(self._connections)

    async def wait_for_device(self) -> None:
        """Return once at least one App device is attached to the hub."""
        await self.hub.wait_for_device()

    # ------------------------------------------------------------------------------ HTTP

    async def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        origins = request.headers.get_all("Origin")
        host = request.headers.get_all("Host")
        if len(origins) > 1 or len(host) > 1:
            return connection.respond(HTTPStatus.BAD_REQUEST, "more than one Origin or Host header\n")
        if not host_allowed(host[0] if host else None, self._allowed_hosts):
            name = printable(host[0] if host else "")
            log.info("refused a request for host %s (not this machine, not in allowed_hosts)", name)
            return connection.respond(
                HTTPStatus.MISDIRECTED_REQUEST,
                f"host {name} is not this agent: open the App by this machine's address, "
                "or add the name to lineup's allowed_hosts setting\n",
            )
        path = urlsplit(request.path).path
        if path.startswith(API_PREFIX):
            address = str(connection.remote_address[0]) if connection.remote_address else "unknown"
            return await self.api.answer(request, address)
        if path.startswith(MEDIA_PATH):
            return self._media_file(connection, request)
        if path != WS_PATH:
            return self.api.renderer(path) or self._static_file(connection, request)
        origin = origins[0] if len(origins) == 1 else None
        if not origin_allowed(origin, host[0] if host else None, self.options.allowed_origins):
            log.warning("refused a WebSocket from origin %s (not this server, not in allowed_origins)", origin)
            return connection.respond(
                HTTPStatus.FORBIDDEN,
                f"origin {origin} is not allowed: open the App from this server, "
                "or add the origin to lineup's allowed_origins setting\n",
            )
        return None

    def _media_file(self, connection: ServerConnection, request: Request) -> Response:
        """``/media/<sha256>?key=...``: a kept file, for whoever has its key."""
        media = self.hub.media
        url = urlsplit(request.path)
        sha256 = url.path[len(MEDIA_PATH) :]
        key = parse_qs(url.query).get("key", [""])[0]
        file = media.get(sha256) if media is not None else None
        if media is None or not key or not media.key_matches(sha256, key):
            refused = connection.respond(HTTPStatus.FORBIDDEN, "a file link needs the key the agent sent with it\n")
        elif file is None:
            refused = connection.respond(HTTPStatus.NOT_FOUND, "no such file (it may have expired)\n")
        else:
            inline = file.mime in INLINE_TYPES
            disposition = "inline" if inline else "attachment"
            return response(
                HTTPStatus.OK,
                file.path.read_bytes(),
                file.mime if inline else "application/octet-stream",
                ("Content-Disposition", f"{disposition}; filename*=UTF-8''{quote(file.name, safe='')}"),
                ("Content-Security-Policy", "default-src 'none'; sandbox"),
                ("Cache-Control", "private, max-age=31536000, immutable"),
            )
        refused.headers.update(_SECURITY_HEADERS)
        return refused

    def _static_file(self, connection: ServerConnection, request: Request) -> Response:
        return self.files.serve(request)

    # ------------------------------------------------------------------------- WebSocket

    async def _handle(self, connection: ServerConnection) -> None:
        assert isinstance(connection, AppConnection)  # serve() makes them
        open_now = self._attached()
        if open_now >= self.options.max_connections:
            log.info("refused a connection: %d App connections are open", open_now)
            await close_connection(connection, TRY_AGAIN_LATER, TOO_MANY, self.limits.close_timeout)
            return
        address = str(connection.remote_address[0]) if connection.remote_address else "unknown"
        if len(self._waiting) >= self.limits.max_unauthenticated:
            self._make_room()
        link = DirectLink(
            connection, f"direct:{address}", max_queue=self.options.max_queue, close_timeout=self.limits.close_timeout
        )
        self._connections.add(connection)
        self._waiting[connection] = address
        attached: str | None = None  # the device, once it passed its hello
        try:
            attached = await self._handshake(connection, link, address)
            self._waiting.pop(connection, None)
            if attached and self._attached() > self.options.max_connections:
                log.warning("refused a device: %d App connections are open", self.options.max_connections)
                link.shut(TRY_AGAIN_LATER, TOO_MANY, flush=True)
            elif attached:
                connection.protocol.max_size = self.options.max_frame_bytes  # the hello was small; answers may not be
                limits = self.limits
                reader = AppReader(
                    self.hub, connection, link, rate=limits.message_rate, burst=limits.message_burst,
                    strikes=limits.flood_strikes,
                )  # fmt: skip
                await reader.run()
        except ConnectionClosed:
            pass
        finally:
            self._waiting.pop(connection, None)
            self._spoke.discard(connection)
            await self.hub.disconnect(link)
            if attached and connection.protocol.close_rcvd is None and not self._stopping.is_set():
                # lost, not closed: it may be back in a moment
                self.hub.expect_device(self.limits.reconnect_grace, attached)
            await link.finish()
            ending = self._ending.pop(connection, None)
            if ending is not None:
                await ending
            self._connections.discard(connection)

    def _attached(self) -> int:
        """How many connections passed their hello and are open."""
        return len(self._connections) - len(self._waiting) - len(self._ending)

    def _make_room(self) -> None:
        """Every slot for connections still to say hello is taken: end the oldest one of the address holding most.

        A newcomer always gets a slot, so sockets that never say hello (however fast they are
        re-opened) cannot keep an App out: an App says hello at once and is through long before
        its turn to be ended comes, while the address that holds the most slots loses them first.
        Connections that said nothing yet go first; one whose hello passed is no longer waiting.
        """
        idle = {c: address for c, address in self._waiting.items() if c not in self._spoke}
        pool = idle or self._waiting  # a connection that said something is ended only when no idle one is left
        held = Counter(pool.values())
        busiest = max(held, key=lambda address: held[address])
        oldest = next(c for c, address in pool.items() if address == busiest)
        del self._waiting[oldest]
        self._spoke.discard(oldest)
        log.debug("%d connections wait for their hello: ending the oldest one from %s", len(self._waiting), busiest)
        self._ending[oldest] = asyncio.create_task(
            close_connection(oldest, TRY_AGAIN_LATER, TOO_MANY, self.limits.shutdown_timeout), name="lineup-make-room"
        )

    async def _handshake(self, connection: AppConnection, link: DirectLink, address: str) -> str | None:
        """Hand the first message to the hub's handshake; the device attached (None: not attached).

        The first message may be at most :attr:`Limits.hello_bytes` long. The hub checks the
        hello with this server's token; wrong tokens from one address are slowed down
        (:class:`~lineup_plugin.transports.direct.auth.AuthThrottle`). A connection that goes away
        while it waits for its turn gives up its place at once, as does every waiting one when the
        server stops.
        """
        timeout = self.limits.hello_timeout
        try:
            first = await asyncio.wait_for(connection.next_message(), timeout)
            self._spoke.add(connection)
        except TimeoutError:
            message = f"no device.hello within {timeout:g} s"
            with suppress(ConnectionClosed):
                await connection.send(self.hub.encode(Error(code="hello_timeout", message=message)))
            await close_connection(connection, HELLO_TIMEOUT, message, self.limits.close_timeout)
            return None

        def verify(hello: DeviceHello) -> str | None:
            if not hello.token:
                return "missing token"
            if not token_matches(hello.token, self.token):
                self.throttle.failed(address)
                failures = self.throttle.failures(address)
                device = printable(hello.device_id or "")
                log.warning("refused device %s from %s: wrong token (%d in a row)", device, address, failures)
                return "wrong token"
            self.throttle.succeeded(address)
            self._waiting.pop(connection, None)  # through: no newcomer may end it any more
            self._spoke.discard(connection)
            # raised here, before the welcome leaves: the App may send a large message (a file piece
            # from its outbox) the moment it is welcomed, before this handler runs again
            connection.protocol.max_size = self.options.max_frame_bytes
            return None

        async def in_turn() -> None:
            async with self.throttle.turn(address):
                self.hub.connect(link, verify=verify)
                await self.hub.receive(link, first)

        turn = asyncio.create_task(in_turn(), name=f"lineup-hello-{address}")
        gone = asyncio.create_task(connection.wait_closed())
        stopping = asyncio.create_task(self._stopping.wait())
        try:
            await asyncio.wait({turn, gone, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (turn, gone, stopping):
                task.cancel()
            await asyncio.gather(turn, gone, stopping, return_exceptions=True)
        return self.hub.device_of(link)
