"""``lineup doctor``: what stands between this machine and a working LineUp, each with its fix.

Each check looks at one thing and ends ``pass``, ``fail`` (with a one-line fix) or ``skip`` (not
applicable here, and why):

- ``settings``: Hermes' config.yaml parses and LineUp's settings (``plugins.entries.lineup``
  overlaid with ``LINEUP_*`` variables) are valid (:mod:`.config`);
- ``files``: the data directory is 0700 and the secret files in it (:data:`.files.SECRET_FILES`,
  and the call store) are readable by this user only (:mod:`.files`);
- ``port``: the App's port is free, or served by a LineUp process (named from the server lock),
  or held by another program (:mod:`.server`);
- ``forwarding``: the serving LineUp process answers on its forwarding socket (:mod:`.server`);
- ``hermes``: Hermes finds the plugin and enables it, as ``hermes plugins list`` says (:mod:`.config`);
- ``app``: the App answers at the address LineUp prints (the LAN address when it listens on
  every interface) (:mod:`.server`);
- ``relay``: the WuKongIM server answers ``GET /route`` and accepts the agent's login (:mod:`.relay`);
- ``push``: with push on, the key the Apps subscribed with is present and sound (:mod:`.files`).

Every network step has a timeout (:data:`TIMEOUT`); a check that raises unexpectedly fails with
the error's message, and the others still run. :func:`run` returns the findings;
:func:`report` prints them, as text or JSON.
"""

from __future__ import annotations

from collections.abc import Callable

from .config import check_hermes, check_settings
from .context import TIMEOUT, Context, serving_owner
from .files import check_files, check_push
from .findings import Finding, Status, failed, passed, report, skipped
from .relay import check_relay
from .server import check_app, check_forwarding, check_port

__all__ = [
    "CHECKS",
    "TIMEOUT",
    "Context",
    "Finding",
    "Status",
    "check_app",
    "check_files",
    "check_forwarding",
    "check_hermes",
    "check_port",
    "check_push",
    "check_relay",
    "check_settings",
    "failed",
    "passed",
    "report",
    "run",
    "serving_owner",
    "skipped",
]

#: every check, in the order they run (``settings`` first: the others need what it validates)
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


def run(ctx: Context | None = None) -> list[Finding]:
    """Every check, in order; an unexpected error in one becomes its failure and the others still run."""
    ctx = ctx or Context()
    findings: list[Finding] = []
    for name, check in CHECKS:
        try:
            findings.append(check(ctx))
        except Exception as exc:  # a doctor reports every failure, it never raises
            fix = "report it with the output of `lineup doctor --json`"
            findings.append(failed(name, f"unexpected error: {type(exc).__name__}: {exc}", fix))
    return findings
