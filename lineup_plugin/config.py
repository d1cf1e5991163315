"""LineUp's settings: one strict model, read from a config section and ``LINEUP_*`` variables.

In Hermes the section is ``plugins.entries.lineup`` of ``config.yaml`` (see examples/hermes).
Every field can be set from the environment as ``LINEUP_<FIELD>`` (upper case), e.g.
``LINEUP_PORT=9600`` or ``LINEUP_TOKEN=...``; nested WuKongIM fields as ``LINEUP_WUKONGIM_<FIELD>``.
Environment values win over the file. A bad value raises :class:`~lineup_plugin.errors.ConfigError`
naming the setting.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from .errors import ConfigError

ENV_PREFIX = "LINEUP_"


def default_data_dir() -> Path:
    """``$LINEUP_DATA_DIR``, else ``$HERMES_HOME/lineup``, else ``~/.hermes/lineup``."""
    hermes_home = os.environ.get("HERMES_HOME")
    base = Path(hermes_home) if hermes_home else Path.home() / ".hermes"
    return base / "lineup"


class WuKongIMSettings(BaseModel):
    """How the relay joins a WuKongIM server (see the README's relay section)."""

    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(description="the server's HTTP API, e.g. http://im.example.com:5001")
    ws_url: str | None = Field(default=None, description="WebSocket address; found with GET /route when unset")
    uid: str = Field(description="the agent's WuKongIM uid")
    token: str | None = Field(default=None, repr=False, description="the agent uid's token")
    manager_token: str | None = Field(default=None, repr=False, description="to set the agent's token via /user/token")
    app_uid: str = Field(description="the App user's uid; only this user may talk to the agent")
    content_type: int = Field(default=9527, ge=1, le=2**31 - 1, description="custom content type of LineUp envelopes")
    protocol_version: int = Field(default=4, ge=2, le=5)
    device_flag: int = Field(default=2, ge=0, le=2)


class Settings(BaseModel):
    """All of LineUp's settings, with their defaults."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    mode: Literal["direct", "relay", "auto"] = "auto"
    host: str = "0.0.0.0"
    port: int = Field(default=9527, ge=0, le=65535)
    token: str | None = Field(default=None, repr=False, min_length=16)
    allowed_origins: list[str] = Field(default_factory=list)
    data_dir: Path = Field(default_factory=default_data_dir)
    store: Literal["sqlite", "memory"] = "sqlite"
    store_path: Path | None = None
    fsync: Literal["full", "normal", "off"] = "normal"
    deadline: float = Field(default=600.0, gt=0)
    deadlines: dict[str, float] = Field(default_factory=dict)
    max_frame_bytes: int = Field(default=1_048_576, ge=1024)
    max_queue: int = Field(default=256, ge=1)
    max_connections: int = Field(default=64, ge=1)
    heartbeat: float = Field(default=20.0, gt=0)
    agent_id: str = "lineup-agent"
    wukongim: WuKongIMSettings | None = None

    @field_validator("deadlines")
    @classmethod
    def _positive_deadlines(cls, value: dict[str, float]) -> dict[str, float]:
        for name, seconds in value.items():
            if seconds <= 0:
                raise ValueError(f"deadline of {name!r} must be positive")
        return value

    @property
    def effective_mode(self) -> Literal["direct", "relay"]:
        """``auto`` resolved: relay when WuKongIM settings are present, else direct."""
        if self.mode == "auto":
            return "relay" if self.wukongim is not None else "direct"
        return self.mode

    def describe_mode(self) -> str:
        """One line stating the mode in use and why, for the start-up log (no secrets)."""
        why = f"mode: auto, {'WuKongIM settings present' if self.wukongim else 'no WuKongIM settings'}"
        if self.mode != "auto":
            why = f"mode: {self.mode}"
        if self.effective_mode == "relay":
            assert self.wukongim is not None
            where = f"as uid {self.wukongim.uid!r} on {self.wukongim.api_url} for App user {self.wukongim.app_uid!r}"
            return f"lineup: relay mode ({why}): WuKongIM {where}"
        return f"lineup: direct mode ({why}): App server on {self.host}:{self.port}"

    @property
    def database(self) -> Path:
        """The SQLite file of the durable store."""
        return self.store_path or self.data_dir / "lineup.sqlite3"


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
        elif name in Settings.model_fields:
            values[name] = value
    if nested:
        values["wukongim"] = nested
    return values


def load_settings(section: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from a config ``section`` overlaid with ``LINEUP_*`` environment variables."""
    data: dict[str, Any] = dict(section or {})
    overrides = _env_overrides(os.environ if environ is None else environ)
    if "wukongim" in overrides and isinstance(data.get("wukongim"), Mapping):
        overrides["wukongim"] = {**data["wukongim"], **overrides["wukongim"]}
    data.update(overrides)
    if isinstance(data.get("allowed_origins"), str):
        data["allowed_origins"] = [o.strip() for o in data["allowed_origins"].split(",") if o.strip()]
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            setting = ".".join(str(p) for p in err["loc"]) or "settings"
            problems.append(f"lineup setting {setting!r}: {err['msg'].lower()}")
        raise ConfigError("; ".join(problems)) from None
