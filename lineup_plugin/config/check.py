"""LineUp's settings as given, and a check of them that needs no pydantic.

:func:`given_settings` merges a config section with the ``LINEUP_*`` environment variables, as
:func:`lineup_plugin.config.settings.load_settings` reads them. :func:`surely_valid` says whether the
:class:`~lineup_plugin.config.settings.Settings` model will accept them, without loading pydantic (~60 ms,
most of what the Hermes plugin would otherwise add to every Hermes start): it checks them against
the model's JSON Schema (generated into :mod:`lineup_plugin.config.schema`) with the fast check
of :mod:`lineup_plugin.tools.argcheck`. It errs only on the strict side: False means "ask the model",
which then accepts or raises the ConfigError naming the setting.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..tools.argcheck import compile_schema
from .schema import SCHEMA

ENV_PREFIX = "LINEUP_"
#: the numbers written as text that the model (in lax mode) reads as the same int or float
_INTEGER = re.compile(r"0|-?[1-9][0-9]{0,17}")
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})\.[0-9]{1,17}")
_check = compile_schema(SCHEMA)


def default_data_dir() -> Path:
    """``$LINEUP_DATA_DIR``, else ``$HERMES_HOME/lineup``, else ``~/.hermes/lineup``."""
    hermes_home = os.environ.get("HERMES_HOME")
    base = Path(hermes_home) if hermes_home else Path.home() / ".hermes"
    return base / "lineup"


def _env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    nested: dict[str, Any] = {}
    for key, raw in environ.items():
        if not key.startswith(ENV_PREFIX) or key == "LINEUP_BLOCK_PLUGINS":
            continue
        name = key[len(ENV_PREFIX) :].lower()
        value: Any = raw
        if raw[:1] in "[{":
            try:
                value = json.loads(raw)
            except ValueError:
                raise ConfigError(f"{key}: not valid JSON: {raw[:40]!r}") from None
        if name.startswith("wukongim_"):
            nested[name[len("wukongim_") :]] = value
        elif name in SCHEMA["properties"]:
            values[name] = value
    if nested:
        values["wukongim"] = nested
    return values


def given_settings(
    section: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """A config ``section`` overlaid with ``LINEUP_*`` variables (``os.environ`` by default), not yet validated.

    Raises ConfigError for a variable that should hold JSON and does not.
    """
    data: dict[str, Any] = dict(section or {})
    overrides = _env_overrides(os.environ if environ is None else environ)
    if "wukongim" in overrides and isinstance(data.get("wukongim"), Mapping):
        overrides["wukongim"] = {**data["wukongim"], **overrides["wukongim"]}
    data.update(overrides)
    for key in ("allowed_origins", "allowed_hosts", "push_services"):  # comma-separated in LINEUP_* variables
        if isinstance(data.get(key), str):
            data[key] = [item.strip() for item in data[key].split(",") if item.strip()]
    return data


#: stands for a value the fast check must not pass (it passes only JSON's own types)
_ASK_THE_MODEL = object()


def _as_json(name: str, value: Any) -> Any:
    """``value`` with a number written as text (``LINEUP_PORT=9600``) read as the model reads it.

    A float where an integer belongs is left to the model unless it is small: JSON Schema calls
    ``1e20`` an integer, the model takes ``2.0`` but no float beyond 64 bits.
    """
    kind = SCHEMA["properties"].get(name, {}).get("type")
    if type(value) is str:
        if kind in ("integer", "number") and _INTEGER.fullmatch(value):
            return int(value)
        if kind == "number" and _DECIMAL.fullmatch(value):
            return float(value)
    elif type(value) is float and kind == "integer" and not abs(value) < 2**53:
        return _ASK_THE_MODEL
    return value


def surely_valid(data: Mapping[str, Any]) -> bool:
    """True only if the Settings model accepts ``data`` (from :func:`given_settings`); False if it may not."""
    if _check is None:  # pragma: no cover - a test keeps the schema within what the fast check compiles
        return False
    return _check({name: _as_json(name, value) for name, value in data.items()})
