"""The checks of the App's server: its port, the forwarding socket, and the App answering where LineUp says."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from .context import WHERE, Context, needs_settings
from .findings import Finding, failed, passed, skipped

if TYPE_CHECKING:
    from ..config.settings import Settings


@needs_settings("port")
def check_port(ctx: Context, settings: Settings) -> Finding:
    """The App's port is free, served by a LineUp process, or held by another program (which)."""
    if settings.effective_mode == "relay":
        return skipped("port", "relay mode opens no port")
    host, port = settings.host, settings.port
    if port == 0:
        return skipped("port", "port 0: a free port is picked at each start")
    where = f"{host}:{port}"
    error = _try_bind(host, port, ctx.timeout)
    if error is None:
        owner = ctx.owner
        note = f" (the serving LineUp process, {owner}, has no App server on it)" if owner else ""
        return passed("port", f"{where} is free: LineUp can listen on it{note}")
    if error.errno == errno.EADDRINUSE:
        owner = ctx.owner
        holder = _listener(port)
        if owner is not None and (holder is None or holder[0] == owner.pid):
            return passed("port", f"{where} is served by LineUp: {owner}")
        who = f" (pid {holder[0]}, {holder[1]})" if holder else ""
        if owner is not None:
            who += f", while LineUp ({owner}) serves elsewhere"
        return failed(
            "port",
            f"{where} is held by another program{who}, not by LineUp",
            f"stop that program, or give LineUp another port: port in {WHERE.format('PORT')}",
        )
    if error.errno == errno.EADDRNOTAVAIL:
        return failed(
            "port",
            f"host {host!r} is not an address of this machine",
            f"set host to 0.0.0.0 (every interface) or one of this machine's addresses in {WHERE.format('HOST')}",
        )
    if error.errno == errno.EACCES:
        return failed("port", f"{where}: {error.strerror}", f"use a port from 1024 up: port in {WHERE.format('PORT')}")
    return failed("port", f"{where}: {error}", f"check host and port in {WHERE.format('HOST/PORT')}")


@needs_settings("forwarding")
def check_forwarding(ctx: Context, settings: Settings) -> Finding:
    """The serving process answers on its forwarding socket (the other agent processes ask through it)."""
    from ..runtime.forward import TOKEN_FILE, platform_supported, socket_path

    if not platform_supported():
        return skipped("forwarding", "this system has no Unix sockets for forwarding")
    owner = ctx.owner
    if owner is None:
        return skipped("forwarding", "no LineUp process serves now: the socket opens with the server")
    path = socket_path(settings.data_dir)
    restart = f"restart the serving process ({owner}): the other agent processes cannot reach it"
    try:
        token = (settings.data_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
    except OSError as exc:
        return failed("forwarding", f"{owner} serves, but its forwarding token is unreadable: {exc}", restart)
    try:
        answer = _say_hello(path, token, ctx.timeout)
    except TimeoutError:
        return failed("forwarding", f"{path} did not answer within {ctx.timeout:g} s", restart)
    except OSError as exc:
        return failed("forwarding", f"{owner} serves, but {path} does not answer: {exc.strerror or exc}", restart)
    if answer:
        return failed("forwarding", f"{path} refused the hello: {answer}", restart)
    return passed("forwarding", f"{path} answers ({owner})")


@needs_settings("app")
def check_app(ctx: Context, settings: Settings) -> Finding:
    """The App answers ``GET /`` at the address LineUp prints for it."""
    from ..transports.direct.server import lan_address

    if settings.effective_mode == "relay":
        return skipped("app", "relay mode: the App connects through the relay, not to this machine")
    owner = ctx.owner
    if owner is None:
        return skipped("app", "no LineUp process serves the App now (this check runs while one does)")
    host = settings.host if settings.host not in ("", "0.0.0.0", "::") else lan_address()
    url = f"http://{f'[{host}]' if ':' in host else host}:{settings.port}/"
    firewall = f"let phones reach TCP port {settings.port} (firewall, e.g. `sudo ufw allow {settings.port}/tcp`)"
    try:
        _resolve(host, settings.port, ctx.timeout)
        status, kind = asyncio.run(_get(url, ctx.timeout))
    except TimeoutError:
        return failed("app", f"{url} did not answer within {ctx.timeout:g} s ({owner} serves)", firewall)
    except OSError as exc:
        if settings.host in ("", "0.0.0.0", "::"):
            fix = f"restart the serving process ({owner}): it does not listen on every interface as the settings say"
        else:
            fix = f"make LineUp listen where phones reach it: host 0.0.0.0 in {WHERE.format('HOST')}"
        return failed("app", f"{url} cannot be reached: {os.strerror(exc.errno) if exc.errno else exc}", fix)
    if status == 421:
        fix = f"add {host} to allowed_hosts in {WHERE.format('ALLOWED_HOSTS')}"
        return failed("app", f"{url} refused its own address", fix)
    if status != 200 or "html" not in kind:
        return failed("app", f"{url} answered {status} {kind}, not the App", f"restart the serving process ({owner})")
    only_here = " (from this machine only: host is loopback)" if host in ("127.0.0.1", "localhost", "::1") else ""
    return passed("app", f"the App answers at {url}{only_here}")


# ---------------------------------------------------------------------------- helpers


def _try_bind(host: str, port: int, timeout: float) -> OSError | None:
    """Bind ``host:port`` as the App server would (address reuse on, as asyncio sets it), then let go."""
    try:
        if host:
            _resolve(host, port, timeout)
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, TimeoutError) as exc:
        return OSError(errno.EADDRNOTAVAIL, str(exc))
    for family, kind, proto, _, address in infos:
        with socket.socket(family, kind, proto) as sock:
            if sys.platform != "win32":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(address)
            except OSError as exc:
                return exc
    return None


def _resolve(host: str, port: int, timeout: float) -> None:
    """Look ``host`` up within ``timeout`` (a name server that never answers must not hang the doctor).

    Raises TimeoutError, or OSError when the name is unknown. The lookup runs on a daemon thread
    that is left behind on a timeout.
    """
    outcome: list[BaseException | None] = []
    done = threading.Event()

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            outcome.append(None)
        except OSError as exc:
            outcome.append(exc)
        done.set()

    threading.Thread(target=look_up, name="lineup-doctor-lookup", daemon=True).start()
    if not done.wait(timeout):
        raise TimeoutError(f"looking up {host} took longer than {timeout:g} s")
    if outcome[0] is not None:
        raise outcome[0]


async def _get(url: str, timeout: float) -> tuple[int, str]:
    """``GET url``: its status and content type, all within ``timeout`` (the body is not read)."""
    import httpx

    try:
        async with (
            asyncio.timeout(timeout),
            httpx.AsyncClient(trust_env=False) as http,
            http.stream("GET", url) as response,
        ):
            return response.status_code, response.headers.get("content-type", "")
    except httpx.TimeoutException:
        raise TimeoutError from None
    except httpx.HTTPError as exc:
        cause: BaseException | None = exc
        while cause is not None and not (isinstance(cause, OSError) and cause.errno):
            cause = cause.__cause__ or cause.__context__
        raise cause if isinstance(cause, OSError) else OSError(str(exc)) from exc


def _listener(port: int) -> tuple[int, str] | None:
    """Which of this user's processes listens on TCP ``port``: pid and name (Linux ``/proc``; None when unknown)."""
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cells = row.split()
            if len(cells) > 9 and cells[3] == "0A" and int(cells[1].rpartition(":")[2], 16) == port:
                inodes.add(f"socket:[{cells[9]}]")
    if not inodes:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in inodes:
                    name = (proc / "comm").read_text(encoding="utf-8", errors="replace").strip()
                    return int(proc.name), name
    return None


#: the most a forwarding socket may answer a hello with (an error line is far shorter)
_MAX_ANSWER = 65536


def _say_hello(path: Path, token: str, timeout: float) -> str:
    """Say hello on the forwarding socket and nothing more; "" when the server took it, else why not, in words."""
    from ..errors import ProtocolError
    from ..protocol.forward import FORWARDER, ErrorLine, Hello, decode_line, encode_line

    hello = Hello.model_construct(op="hello", token=token, pid=os.getpid())  # the server judges the token
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        sock.sendall(encode_line(hello))
        sock.shutdown(socket.SHUT_WR)  # no request follows: the server ends the connection
        answer = b""
        deadline = time.monotonic() + timeout
        while chunk := sock.recv(4096):
            answer += chunk
            if len(answer) > _MAX_ANSWER:
                return f"it answered more than {_MAX_ANSWER // 1024} KiB, which is not the forwarding protocol"
            if time.monotonic() > deadline:
                raise TimeoutError
    if not answer:
        return ""
    first, newline, _ = answer.partition(b"\n")
    try:
        line = decode_line(first + newline, *FORWARDER)
    except ProtocolError as exc:
        return f"it answered something that is not the forwarding protocol ({exc})"
    if isinstance(line, ErrorLine):
        return line.message
    return f"it answered a hello with a line of op {line.op!r}, which only a call gets"
