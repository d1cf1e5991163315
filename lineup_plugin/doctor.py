"""``lineup doctor``: what stands between this machine and a working LineUp, each with its fix.

Each check looks at one thing and ends ``pass``, ``fail`` (with a one-line fix) or ``skip`` (not
applicable here, and why):

- ``settings``: LineUp's settings (``plugins.entries.lineup`` of Hermes' config.yaml overlaid with
  ``LINEUP_*`` variables) are valid;
- ``files``: the data directory is 0700 and the secret files in it (:data:`SECRET_FILES`, and
  the call store) are readable by this user only;
- ``port``: the App's port is free, or served by a LineUp process (named from the server lock),
  or held by another program;
- ``forwarding``: the serving LineUp process answers on its forwarding socket;
- ``hermes``: Hermes finds the plugin and enables it, as ``hermes plugins list`` says;
- ``app``: the App answers at the address LineUp prints (the LAN address when it listens on
  every interface);
- ``relay``: the WuKongIM server answers ``GET /route`` and accepts the agent's login;
- ``push``: the push keys are present when push is on.

Every network step has a timeout (:data:`TIMEOUT`); a check that raises unexpectedly fails with
the error's message, and the others still run. :func:`run` returns the findings;
:func:`report` prints them, as text or JSON.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import json
import os
import re
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

from .config.check import given_settings
from .config.schema import SCHEMA
from .errors import ConfigError, RelayAuthError, RelayError, RelayTimeoutError
from .runtime.lock import Owner, ServerLock

if TYPE_CHECKING:
    from .config.settings import Settings, WuKongIMSettings

#: seconds any one network step may take
TIMEOUT = 3.0
#: files in the data directory that hold secrets (mode 0600); a feature that keeps a secret there adds its name
SECRET_FILES: list[str] = ["token", "pairing.json", "forward.token", "vapid.pem", "push.json"]
#: the key files push signs with (VAPID, a PEM private key), made when the first App subscribes
PUSH_KEY_FILES: list[str] = ["vapid.pem"]
#: the push subscriptions the Apps gave, ``{"subscriptions": [...]}``
PUSH_SUBSCRIPTIONS_FILE = "push.json"
#: the plugin's name in Hermes
PLUGIN = "lineup"
#: where a setting is written, for fix lines
WHERE = "plugins.entries.lineup in Hermes' config.yaml, or LINEUP_{} in the environment"

Status = Literal["pass", "fail", "skip"]


@dataclass(frozen=True)
class Finding:
    """The outcome of one check: ``detail`` says what was found, ``fix`` (on a failure) what to do."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def passed(name: str, detail: str) -> Finding:
    """A check that found nothing wrong."""
    return Finding(name, "pass", _one_line(detail))


def failed(name: str, detail: str, fix: str) -> Finding:
    """A check that found something wrong, and the one line that fixes it."""
    return Finding(name, "fail", _one_line(detail), _one_line(fix))


def skipped(name: str, detail: str) -> Finding:
    """A check that does not apply here (``detail`` says why): it does not fail the run."""
    return Finding(name, "skip", _one_line(detail))


def _one_line(text: str) -> str:
    """``text`` on one line (an error message may span several); other spaces are kept (a path may hold two)."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text).strip()


@dataclass
class Context:
    """What the checks share: the settings as given, and what the earlier checks learned.

    ``section`` is LineUp's section of Hermes' config (None: read it from Hermes, if installed);
    ``data_dir`` overrides the data directory setting (``--data-dir``).
    """

    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    section: Mapping[str, Any] | None = None
    data_dir: Path | None = None
    timeout: float = TIMEOUT
    #: the validated settings, once the ``settings`` check accepted them
    settings: Settings | None = None

    def given(self) -> dict[str, Any]:
        """The settings as given (not validated); raises ConfigError for a malformed section or variable."""
        section = self.section
        if section is None:
            section = hermes_section()
        data = given_settings(section, self.environ)
        if self.data_dir is not None:
            data["data_dir"] = str(self.data_dir)
        return data

    @functools.cached_property
    def owner(self) -> Owner | None:
        """The LineUp process that serves now for this data directory (from the server lock), or None."""
        assert self.settings is not None
        return serving_owner(self.settings.data_dir)


def hermes_section() -> dict[str, Any]:
    """LineUp's section of Hermes' config.yaml (``{}`` when Hermes is not installed here)."""
    try:
        from .runtime.hermes import compat
        from .runtime.hermes.common import plugin_section

        if not Path(compat.config_path()).is_file():
            return {}  # Hermes would read only its defaults (and reading them makes its home directory)
        return plugin_section()
    except ModuleNotFoundError as exc:
        if _hermes_missing(exc):
            return {}
        raise


def hermes_config_problem() -> tuple[str, str] | None:
    """Hermes' config.yaml and why Hermes cannot parse it; None when it can (or Hermes is not installed here)."""
    try:
        from .runtime.hermes import compat

        problem = compat.config_problem()
        return (compat.config_path(), problem) if problem else None
    except ModuleNotFoundError as exc:
        if _hermes_missing(exc):
            return None
        raise


def _hermes_missing(exc: ModuleNotFoundError) -> bool:
    """Whether ``exc`` says Hermes Agent is not installed (rather than a module of it failing to import)."""
    return (exc.name or "").split(".")[0] in ("hermes_cli", "hermes_constants")


def serving_owner(data_dir: Path) -> Owner | None:
    """The process the server lock names, if it is alive (a killed owner leaves its line behind)."""
    owner = ServerLock(data_dir).owner()
    return owner if owner is not None and _alive(owner.pid) else None


def _alive(pid: int) -> bool:
    if sys.platform == "win32":  # pragma: no cover - os.kill(pid, 0) would end the process there
        return True
    if pid <= 0:  # 0 and -1 would ask about whole process groups, not one process
        return False
    try:
        os.kill(pid, 0)
    except PermissionError:
        return True  # alive, another user's
    except (OSError, OverflowError):
        return False
    return True


# ---------------------------------------------------------------------------- the checks


def check_settings(ctx: Context) -> Finding:
    """LineUp's settings are valid (what the plugin reads at every Hermes start)."""
    from .config.settings import validated_settings

    broken = hermes_config_problem() if ctx.section is None else None
    if broken is not None:  # Hermes ignores the whole file, LineUp's section with it
        path, problem = broken
        return failed("settings", f"{path} is not valid YAML: {problem}", f"fix the YAML of {path}")
    try:
        ctx.settings = validated_settings(ctx.given())
    except ConfigError as exc:
        named = dict.fromkeys(re.findall(r"lineup setting '([^']+)'", str(exc)))
        names = [name for name in named if name.split(".")[0] in SCHEMA["properties"]]
        if not names:  # the config file, its section, or a LINEUP_* variable as a whole
            return failed("settings", str(exc), "correct what it names (Hermes' config.yaml or a LINEUP_* variable)")
        variables = ", ".join("LINEUP_" + name.replace(".", "_").upper() for name in names)
        fix = f"correct {', '.join(names)} in plugins.entries.lineup of Hermes' config.yaml, or {variables}"
        return failed("settings", str(exc), fix)
    s = ctx.settings
    return passed("settings", f"valid: {s.effective_mode} mode, data dir {s.data_dir}")


def check_files(ctx: Context) -> Finding:
    """The data directory is 0700 and its secret files 0600, all this user's."""
    settings = _needs_settings(ctx)
    data_dir = settings.data_dir
    if not data_dir.exists():
        return passed("files", f"{data_dir} does not exist yet (LineUp makes it 0700 at its first start)")
    if not data_dir.is_dir():
        return failed(
            "files", f"{data_dir} is not a directory", f"set data_dir to a directory in {WHERE.format('DATA_DIR')}"
        )
    problems: list[str] = []
    chmods: dict[str, list[str]] = {"700": [], "600": []}
    uid = os.getuid() if hasattr(os, "getuid") else None
    paths = [(data_dir, 0o700)] + [(data_dir / name, 0o600) for name in SECRET_FILES]
    if settings.store == "sqlite":  # the calls and the conversation, and SQLite's files beside them
        database = settings.database
        paths += [(database.with_name(database.name + suffix), 0o600) for suffix in ("", "-wal", "-shm")]
    for path, wanted in paths:
        try:
            info = path.stat()
        except FileNotFoundError:
            continue
        except OSError as exc:
            problems.append(f"{path} cannot be read: {exc.strerror or exc}")
            continue
        mode = stat.S_IMODE(info.st_mode)
        if uid is not None and info.st_uid != uid:
            problems.append(f"{path} belongs to uid {info.st_uid}, not this user ({uid})")
        elif mode & 0o077:
            problems.append(f"{path} is mode {mode:04o}: other users can {'list' if wanted == 0o700 else 'read'} it")
            chmods[f"{wanted:o}"].append(_quote(path))
    if not problems:
        return passed("files", f"{data_dir} is 0700 and its secret files 0600")
    fixes = [f"chmod {mode} {' '.join(paths)}" for mode, paths in chmods.items() if paths]
    fix = " && ".join(fixes) if fixes else f"chown -R $(id -un) {_quote(data_dir)}"
    return failed("files", "; ".join(problems), fix)


def check_port(ctx: Context) -> Finding:
    """The App's port is free, served by a LineUp process, or held by another program (which)."""
    settings = _needs_settings(ctx)
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


def check_forwarding(ctx: Context) -> Finding:
    """The serving process answers on its forwarding socket (the other agent processes ask through it)."""
    from .runtime.forward import TOKEN_FILE, platform_supported, socket_path

    settings = _needs_settings(ctx)
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


def check_hermes(ctx: Context) -> Finding:
    """Hermes finds the plugin and enables it (as ``hermes plugins list`` shows it)."""
    try:
        from .runtime.hermes import compat

        config = compat.config_path()
        problem = compat.config_problem()
        if problem:
            detail = f"Hermes cannot parse {config}, so it runs on its defaults with no plugin enabled"
            return failed("hermes", detail, f"fix the YAML of {config} (see settings)")
        standing = compat.plugin_status(PLUGIN)
    except ModuleNotFoundError as exc:
        if not _hermes_missing(exc):
            raise
        return skipped("hermes", f"Hermes Agent is not installed in this Python ({sys.executable})")
    if standing is None:
        return failed(
            "hermes",
            "Hermes does not find the lineup plugin",
            f"install lineup-plugin into the Python Hermes runs from ({sys.executable} here), e.g. "
            "`pip install lineup-plugin` in Hermes' virtualenv",
        )
    status, source = standing
    if status != "enabled":
        why = "it is in plugins.disabled" if status == "disabled" else "it is not in plugins.enabled"
        return failed("hermes", f"Hermes finds lineup ({source}) but {why} of {config}", "hermes plugins enable lineup")
    return passed("hermes", f"Hermes finds lineup ({source}) and enables it ({config})")


def check_app(ctx: Context) -> Finding:
    """The App answers ``GET /`` at the address LineUp prints for it."""
    from .transports.direct.server import lan_address

    settings = _needs_settings(ctx)
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


def check_relay(ctx: Context) -> Finding:
    """The WuKongIM server answers ``GET /route`` and accepts the agent's login."""
    settings = _needs_settings(ctx)
    relay = settings.wukongim
    if relay is None:
        return skipped("relay", "no relay settings (wukongim): the App connects directly")
    if settings.effective_mode == "direct":
        return skipped("relay", "mode is direct: the relay settings (wukongim) are not used")
    owner = ctx.owner if settings.effective_mode in ("relay", "both") else None
    return asyncio.run(_check_relay(relay, ctx.timeout, owner))


def check_push(ctx: Context) -> Finding:
    """With push on, the key the Apps subscribed with is present and sound."""
    settings = _needs_settings(ctx)
    if "push" not in type(settings).model_fields:
        return skipped("push", "this LineUp has no push setting (Web Push is not part of it yet)")
    push = getattr(settings, "push", None)
    if not (push if isinstance(push, bool) else getattr(push, "enabled", push)):
        return skipped("push", "push is off")
    subscribed = _subscriptions(settings.data_dir / PUSH_SUBSCRIPTIONS_FILE)
    apps = f"{subscribed} App subscription{'s' if subscribed != 1 else ''}"
    resubscribe = "turn notifications off and on again in each App: it subscribes again with the new key"
    for name in PUSH_KEY_FILES:
        path = settings.data_dir / name
        if not path.is_file():
            if subscribed:
                return failed("push", f"{apps} but no {path}: every push to them is refused", resubscribe)
            return passed("push", "push is on; no App has subscribed yet (the key is made when one does)")
        problem = _not_a_signing_key(path)
        if problem:
            return failed("push", f"{path} is not a usable key: {problem}", f"remove {path}, then {resubscribe}")
    return passed("push", f"push is on, its key is present, {apps}")


CHECKS: list[tuple[str, Callable[[Context], Finding]]] = [
    ("settings", check_settings),
    ("files", check_files),
    ("port", check_port),
    ("forwarding", check_forwarding),
    ("hermes", check_hermes),
    ("app", check_app),
    ("relay", check_relay),
    ("push", check_push),
]


class _NoSettings(Exception):
    """A check needs the settings, which are not valid."""


def _needs_settings(ctx: Context) -> Settings:
    if ctx.settings is None:
        raise _NoSettings
    return ctx.settings


def run(ctx: Context | None = None) -> list[Finding]:
    """Every check, in order; an unexpected error in one becomes its failure and the others still run."""
    ctx = ctx or Context()
    findings: list[Finding] = []
    for name, check in CHECKS:
        try:
            findings.append(check(ctx))
        except _NoSettings:
            findings.append(skipped(name, "needs valid settings (see settings)"))
        except Exception as exc:  # a doctor reports every failure, it never raises
            findings.append(
                failed(name, f"unexpected error: {type(exc).__name__}: {exc}", "report it with `lineup doctor --json`")
            )
    return findings


def report(findings: list[Finding], *, as_json: bool = False, out: TextIO | None = None) -> int:
    """Print ``findings`` (a table, or JSON ``{"ok", "checks": [...]}``); the exit status: 0 only if none failed."""
    out = out or sys.stdout
    ok = all(finding.status != "fail" for finding in findings)
    if as_json:  # ASCII: a path that is not valid text (a lone surrogate) is written escaped
        checks = [asdict(finding) | {"fix": finding.fix or None} for finding in findings]
        print(json.dumps({"ok": ok, "checks": checks}, indent=2), file=out)
        return 0 if ok else 1
    marks = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}
    width = max(len(finding.name) for finding in findings)
    lines: list[str] = []
    for finding in findings:
        lines.append(f"{marks[finding.status]}  {finding.name.ljust(width)}  {finding.detail}")
        if finding.fix:
            lines.append(f"{'':4}  {'':{width}}  fix: {finding.fix}")
    failures = sum(finding.status == "fail" for finding in findings)
    lines.append("all checks passed" if ok else f"{failures} check{'s' if failures > 1 else ''} failed")
    encoding = getattr(out, "encoding", None) or "utf-8"
    for line in lines:  # what the terminal cannot show (a lone surrogate in a path) is written escaped
        print(line.encode(encoding, "backslashreplace").decode(encoding), file=out)
    return 0 if ok else 1


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


def _say_hello(path: Path, token: str, timeout: float) -> str:
    """Say hello on the forwarding socket and nothing more; "" when the server took it, else its error message."""
    hello = json.dumps({"op": "hello", "token": token, "pid": os.getpid()}) + "\n"
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        sock.connect(os.fspath(path))
        sock.sendall(hello.encode())
        sock.shutdown(socket.SHUT_WR)  # no request follows: the server ends the connection
        answer = b""
        deadline = time.monotonic() + timeout
        while chunk := sock.recv(4096):
            answer += chunk
            if len(answer) > 65536:
                return "an answer too long"
            if time.monotonic() > deadline:
                raise TimeoutError
    if not answer:
        return ""
    try:
        return str(json.loads(answer.splitlines()[0]).get("message") or answer[:200])
    except (ValueError, AttributeError):
        return repr(answer[:200])


async def _check_relay(relay: WuKongIMSettings, timeout: float, owner: Owner | None) -> Finding:
    import httpx

    from .transports.wukongim.client import ClientOptions, Session, Timers
    from .transports.wukongim.proto import DeviceFlag
    from .transports.wukongim.relay import WuKongIMApi

    headers = {"token": relay.manager_token} if relay.manager_token else {}
    try:
        async with asyncio.timeout(timeout), httpx.AsyncClient(base_url=relay.api_url, headers=headers) as http:
            routed = await WuKongIMApi(http).route(relay.uid, secure=relay.api_url.startswith("https:"))
    except TimeoutError:
        return failed("relay", f"{relay.api_url} did not answer GET /route within {timeout:g} s", _API_FIX)
    except RelayAuthError as exc:
        return failed("relay", str(exc), f"set the server's manager token in {WHERE.format('WUKONGIM_MANAGER_TOKEN')}")
    except RelayError as exc:
        return failed("relay", str(exc), _API_FIX)
    address = relay.ws_url or routed
    done = f"GET /route answered ({routed})"
    if owner is not None:
        return passed("relay", f"{done}; login not tried: {owner} is logged in with these credentials now")
    if relay.token is None and relay.manager_token:
        return passed("relay", f"{done}; login not tried: the agent registers its own token at start (manager_token)")
    options = ClientOptions(
        uid=relay.uid,
        token=relay.token or "",
        device_flag=DeviceFlag(relay.device_flag),
        protocol_version=relay.protocol_version,
        timers=Timers(connect_timeout=timeout),
    )
    try:
        async with asyncio.timeout(2 * timeout):  # connecting, then the CONNACK: each within timeout
            session = await Session.open(address, options)
    except TimeoutError:
        return failed("relay", f"{address} did not take the login within {2 * timeout:g} s", _LOGIN_FIX.format(relay))
    except (RelayAuthError, RelayTimeoutError) as exc:
        return failed("relay", str(exc), _LOGIN_FIX.format(relay))
    except RelayError as exc:
        return failed("relay", str(exc), f"check wukongim.ws_url: the server's WebSocket address ({address})")
    with contextlib.suppress(Exception):
        async with asyncio.timeout(timeout):
            await session.close()
    return passed("relay", f"{done}; {relay.uid!r} logged in at {address}")


_LOGIN_FIX = (
    "check wukongim.uid and wukongim.token: the server must hold that token for uid {0.uid!r} "
    "and device_flag {0.device_flag}"
)
_API_FIX = "check wukongim.api_url: the WuKongIM HTTP API (port 5001 by default) must be reachable from here"


def _subscriptions(path: Path) -> int:
    """How many push subscriptions ``path`` holds (0 when there is no such file or it is not readable)."""
    try:
        entries = json.loads(path.read_text(encoding="utf-8")).get("subscriptions")
    except (OSError, ValueError, AttributeError):
        return 0
    return len(entries) if isinstance(entries, list) else 0


def _not_a_signing_key(path: Path) -> str:
    """Why ``path`` is not a P-256 private key in PEM ("" when it is one)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        return str(exc) or type(exc).__name__
    if not isinstance(key, ec.EllipticCurvePrivateKey) or key.curve.name != "secp256r1":
        return "not a P-256 (secp256r1) private key"
    return ""


def _quote(path: Path) -> str:
    import shlex

    return shlex.quote(os.fspath(path))
