"""The checks of what is configured: LineUp's settings, and Hermes finding and enabling the plugin."""

from __future__ import annotations

import re
import sys

from ..config.schema import SCHEMA
from ..errors import ConfigError
from .context import Context, hermes_config_problem, hermes_missing
from .findings import Finding, failed, passed, skipped

#: the plugin's name in Hermes
PLUGIN = "lineup"


def check_settings(ctx: Context) -> Finding:
    """LineUp's settings are valid (what the plugin reads at every Hermes start)."""
    from ..config.settings import validated_settings

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


def check_hermes(ctx: Context) -> Finding:
    """Hermes finds the plugin and enables it (as ``hermes plugins list`` shows it)."""
    try:
        from ..runtime.hermes import compat

        config = compat.config_path()
        problem = compat.config_problem()
        if problem:
            detail = f"Hermes cannot parse {config}, so it runs on its defaults with no plugin enabled"
            return failed("hermes", detail, f"fix the YAML of {config} (see settings)")
        standing = compat.plugin_status(PLUGIN)
    except ModuleNotFoundError as exc:
        if not hermes_missing(exc):
            raise
        return skipped("hermes", f"Hermes Agent is not installed in this Python ({sys.executable})")
    if standing is None:
        return failed(
            "hermes",
            "Hermes does not find the lineup plugin",
            f"install lineup-plugin with the pip of the Python Hermes runs from ({sys.executable} here), "
            "as the install instructions say",
        )
    status, source = standing
    if status != "enabled":
        why = "it is in plugins.disabled" if status == "disabled" else "it is not in plugins.enabled"
        return failed("hermes", f"Hermes finds lineup ({source}) but {why} of {config}", "hermes plugins enable lineup")
    return passed("hermes", f"Hermes finds lineup ({source}) and enables it ({config})")
