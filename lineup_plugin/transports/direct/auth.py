"""Who may talk to the direct server, and how much: the shared token, the slow-down for wrong
tokens, browser origins, the Host header, the per-connection message rate, and what of it is logged.

Nothing here does network I/O; :class:`AuthThrottle` only sleeps.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import logging
import os
import secrets
import socket
import stat
import sys
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ...errors import ConfigError

log = logging.getLogger(__name__)

TOKEN_FILE = "token"
MIN_TOKEN_LENGTH = 16


def load_or_create_token(configured: str | None, data_dir: Path) -> str:
    """The token the server accepts: ``configured`` if set, else the one stored in ``<data_dir>/token``.

    On first use a random token (``secrets.token_urlsafe(32)``) is written there, readable by the
    owner only (mode 0600), and reused on every later start. A stored file that others can read is
    tightened to 0600. Raises ConfigError when the file cannot be read or written, or holds a token
    shorter than 16 characters.
    """
    if configured:
        return configured
    path = data_dir / TOKEN_FILE
    try:
        return _read_token(path)
    except FileNotFoundError:
        pass
    token = secrets.token_urlsafe(32)
    try:
        data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process created it first: use theirs
        return _read_token(path)
    except OSError as exc:
        raise ConfigError(f"lineup setting 'data_dir': cannot create the token file {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


def _read_token(path: Path) -> str:
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
        if mode & 0o077:
            log.warning("token file %s was readable by others (mode %o); setting it to 0600", path, mode)
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise ConfigError(f"lineup setting 'data_dir': cannot read the token file {path}: {exc.strerror}") from None
    if len(token) < MIN_TOKEN_LENGTH:
        raise ConfigError(
            f"token file {path}: the token is shorter than {MIN_TOKEN_LENGTH} characters; delete the file for a new one"
        )
    return token


def token_matches(given: str | None, expected: str) -> bool:
    """Whether ``given`` is the token, compared in constant time."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8"), expected.encode("utf-8"))


def origin_allowed(origin: str | None, host: str | None, allowed: Sequence[str] = ()) -> bool:
    """Whether a WebSocket handshake with this ``Origin`` header may proceed.

    No Origin (a non-browser client) is allowed: it still needs the token. A browser's Origin
    must be the page this server served (``http(s)://`` + the ``Host`` header) or one of
    ``allowed`` (exact ``scheme://host[:port]`` values; ``"null"`` must be listed to allow it).
    This stops other web sites from opening a socket to the agent in the user's browser.
    """
    if origin is None:
        return True
    normalized = origin.strip().rstrip("/").lower()
    if normalized in {a.strip().rstrip("/").lower() for a in allowed}:
        return True
    if not host:
        return False
    parts = urlsplit(normalized)
    return parts.scheme in ("http", "https") and parts.netloc == host.strip().lower() and not parts.path


@dataclass
class _Penalty:
    failures: int
    last: float
    lock: asyncio.Lock


class AuthThrottle:
    """Slows down repeated wrong tokens from one address.

    After ``n`` failures an address waits ``base * 2 ** (n - 1)`` seconds (at most ``cap``) before
    any further hello of it is answered, and its hellos are answered one at a time, so parallel
    guessing gains nothing. A success resets the address; an address quiet for ``forget_after``
    seconds is forgotten. At most ``max_addresses`` addresses are remembered (oldest dropped).
    """

    def __init__(
        self,
        *,
        base: float = 0.5,
        cap: float = 30.0,
        forget_after: float = 900.0,
        max_addresses: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.base = base
        self.cap = cap
        self.forget_after = forget_after
        self.max_addresses = max_addresses
        self.clock = clock
        self._penalties: OrderedDict[str, _Penalty] = OrderedDict()

    def failures(self, address: str) -> int:
        """How many wrong tokens ``address`` sent since its last success (or since it was forgotten)."""
        penalty = self._current(address)
        return penalty.failures if penalty else 0

    def delay(self, address: str) -> float:
        """Seconds the next hello from ``address`` waits before it is answered."""
        failures = self.failures(address)
        return 0.0 if failures == 0 else min(self.cap, self.base * 2 ** (failures - 1))

    @asynccontextmanager
    async def turn(self, address: str) -> AsyncIterator[None]:
        """Wait for ``address``'s turn: one hello at a time, after its current penalty delay."""
        penalty = self._current(address)
        if penalty is None:
            yield
            return
        async with penalty.lock:
            delay = self.delay(address)
            if delay > 0:
                await asyncio.sleep(delay)
            yield

    def failed(self, address: str) -> None:
        """Record a wrong token from ``address``."""
        penalty = self._current(address)
        if penalty is None:
            penalty = _Penalty(0, self.clock(), asyncio.Lock())
            self._penalties[address] = penalty
        penalty.failures += 1
        penalty.last = self.clock()
        self._penalties.move_to_end(address)
        while len(self._penalties) > self.max_addresses:
            self._penalties.popitem(last=False)

    def succeeded(self, address: str) -> None:
        """``address`` sent the right token: forget its failures."""
        self._penalties.pop(address, None)

    def _current(self, address: str) -> _Penalty | None:
        penalty = self._penalties.get(address)
        if penalty is not None and self.clock() - penalty.last > self.forget_after and not penalty.lock.locked():
            del self._penalties[address]
            return None
        return penalty


class TokenBucket:
    """A message-rate limit: ``burst`` messages at once, refilled at ``rate`` per second."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.burst = burst
        self.clock = clock
        self._tokens = float(burst)
        self._stamp = clock()

    def take(self) -> bool:
        """Spend one token; False when the bucket is empty (the message is over the limit)."""
        self._refill()
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return True
        return False

    def delay(self) -> float:
        """Spend one token, borrowing it when the bucket is empty: the seconds until the debt is repaid.

        0.0 while within the limit. A reader that waits this long before reading on is held to
        ``rate`` without dropping anything.
        """
        self._refill()
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0.0 else -self._tokens / self.rate

    def _refill(self) -> None:
        now = self.clock()
        self._tokens = min(float(self.burst), self._tokens + (now - self._stamp) * self.rate)
        self._stamp = now


# ------------------------------------------------------------------------------ Host header

#: names that always mean this machine
LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


def local_names() -> set[str]:
    """This machine's own names: loopback, its host name (and ``<name>.local``) and fully qualified name."""
    names = set(LOOPBACK_NAMES)
    for name in (socket.gethostname(), socket.getfqdn()):
        if name:
            names |= {name.lower(), f"{name.lower()}.local"}
    return names


def host_allowed(host: str | None, names: set[str]) -> bool:
    """Whether a request for ``Host: host`` may be served (against DNS rebinding).

    An IP address is always allowed (a page loaded from an address cannot be rebound to another
    one); a name only if it is one of ``names`` (this machine's names and the configured
    ``allowed_hosts``). No Host header (HTTP/1.0, a non-browser client) is allowed: the token
    still guards the WebSocket.
    """
    if host is None:
        return True
    name = host.strip().lower()
    if name.startswith("["):  # [v6]:port
        name = name[1 : name.find("]")] if "]" in name else name
    elif name.count(":") == 1:
        name = name.rsplit(":", 1)[0]
    name = name.rstrip(".")
    try:
        ipaddress.ip_address(name)
        return True
    except ValueError:
        return name in names


# ------------------------------------------------------------------------------------- logs


def printable(text: str, limit: int = 80) -> str:
    """``text`` safe for one log line: control characters escaped, at most ``limit`` characters."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit])
    return shown + ("…" if len(text) > limit else "")


class QuietHandshakes(logging.LoggerAdapter):  # type: ignore[type-arg]
    """The websockets server's logger, with failed opening handshakes as one short INFO line.

    Port scanners, bare TCP connections, ``HEAD`` or ``POST`` requests make websockets log
    "opening handshake failed" at ERROR with a traceback; under Hermes that fills
    ``errors.log``. Here each becomes one line at INFO, at most one per ``every`` seconds (the
    ones in between are counted in the next line), on LineUp's own logger.
    """

    def __init__(self, logger: logging.Logger, *, every: float = 10.0, clock: Callable[[], float] = time.monotonic):
        super().__init__(logger, {})
        self.every = every
        self.clock = clock
        self._last = -every
        self._skipped = 0

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        """Pass every record on, but a failed opening handshake (see the class docstring)."""
        if msg != "opening handshake failed":
            super().log(level, msg, *args, **kwargs)
            return
        now = self.clock()
        if now - self._last < self.every:
            self._skipped += 1
            return
        exc = sys.exc_info()[1]
        reason = printable(f"{type(exc).__name__}: {exc}" if exc is not None else "unknown", 160)
        more = f" (and {self._skipped} more since the last one)" if self._skipped else ""
        log.info("a client failed the WebSocket handshake: %s%s", reason, more)
        self._last, self._skipped = now, 0
