"""What the checks share (:class:`Context`): the settings as given and as validated, the serving
process, and where Hermes keeps LineUp's settings."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config.check import given_settings
from ..runtime.lock import Owner, ServerLock
from .findings import Finding, skipped

if TYPE_CHECKING:
    from ..config.settings import Settings

#: seconds any one network step may take
TIMEOUT = 3.0
#: where a setting is written, for fix lines (``WHERE.format("PORT")``)
WHERE = "plugins.entries.lineup in Hermes' config.yaml, or LINEUP_{} in the environment"


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


def needs_settings(name: str) -> Callable[[Callable[[Context, Settings], Finding]], Callable[[Context], Finding]]:
    """Make ``check(ctx, settings)`` a check of ``ctx`` alone, skipped while the settings are not valid."""

    def wrap(check: Callable[[Context, Settings], Finding]) -> Callable[[Context], Finding]:
        @functools.wraps(check)
        def checked(ctx: Context) -> Finding:
            if ctx.settings is None:
                return skipped(name, "needs valid settings (see settings)")
            return check(ctx, ctx.settings)

        return checked

    return wrap


def hermes_section() -> dict[str, Any]:
    """LineUp's section of Hermes' config.yaml (``{}`` when Hermes is not installed here)."""
    try:
        from ..runtime.hermes import compat
        from ..runtime.hermes.common import plugin_section

        if not Path(compat.config_path()).is_file():
            return {}  # Hermes would read only its defaults (and reading them makes its home directory)
        return plugin_section()
    except ModuleNotFoundError as exc:
        if hermes_missing(exc):
            return {}
        raise


def hermes_config_problem() -> tuple[str, str] | None:
    """Hermes' config.yaml and why Hermes cannot parse it; None when it can (or Hermes is not installed here)."""
    try:
        from ..runtime.hermes import compat

        problem = compat.config_problem()
        return (compat.config_path(), problem) if problem else None
    except ModuleNotFoundError as exc:
        if hermes_missing(exc):
            return None
        raise


def hermes_missing(exc: ModuleNotFoundError) -> bool:
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
