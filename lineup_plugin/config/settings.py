"""LineUp's settings: one strict model, read from a config section and ``LINEUP_*`` variables.

In Hermes the section is ``plugins.entries.lineup`` of ``config.yaml`` (see examples/hermes).
Every field can be set from the environment as ``LINEUP_<FIELD>`` (upper case), e.g.
``LINEUP_PORT=9600`` or ``LINEUP_TOKEN=...``; nested WuKongIM fields as ``LINEUP_WUKONGIM_<FIELD>``.
Environment values win over the file. A bad value raises :class:`~lineup_plugin.errors.ConfigError`
naming the setting.
"""

from __future__ import annotations

import pprint
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ..errors import ConfigError
from ..protocol.history import HISTORY_LIMIT, HISTORY_MAX_AGE, Retention
from ..protocol.messages import MAX_TOKEN
from ..push.services import PUSH_SERVICES
from .check import default_data_dir, given_settings


class WuKongIMSettings(BaseModel):
    """How the relay joins a WuKongIM server (the docs' *Away from home* page)."""

    model_config = ConfigDict(extra="forbid")

    api_url: str = Field(description="the server's HTTP API, e.g. http://im.example.com:5001")
    ws_url: str | None = Field(default=None, description="WebSocket address; found with GET /route when unset")
    uid: str = Field(description="the agent's WuKongIM uid")
    token: str | None = Field(default=None, repr=False, description="the agent uid's token")
    manager_token: str | None = Field(default=None, repr=False, description="to set the agent's token via /user/token")
    app_uid: str = Field(description="the App user's uid; only this user may talk to the agent")
    content_type: int = Field(default=9527, ge=1, le=2**31 - 1, description="custom content type of LineUp envelopes")
    protocol_version: int = Field(default=4, ge=2, le=5, description="the WuKongIM client protocol version spoken")
    device_flag: int = Field(default=2, ge=0, le=2, description="the agent's WuKongIM device flag: 0 app, 1 web, 2 pc")
    e2e: bool = Field(default=True, description="seal envelopes end to end for paired App devices (see lineup pair)")
    app_ws_url: str | None = Field(
        default=None, description="the WebSocket address paired Apps log in to (default: ws_url, else GET /route)"
    )
    text_cards: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="cards as plain text for the App user: auto (until their client sends a LineUp envelope), "
        "always or never",
    )


#: the VAPID contact when ``push_contact`` is not set: an address at ``example.org`` (a domain reserved
#: for examples, RFC 2606: it names nobody, and an address at it is never someone else's), in the
#: ``mailto:`` form every push service takes (Apple's refuses one at ``localhost``). Pushes work with
#: it, but a push service cannot reach the person running the agent: the serving process logs a
#: warning at start and ``lineup doctor`` says to set one's own address
DEFAULT_PUSH_CONTACT = "mailto:lineup@example.org"
PUSH_CONTACT = re.compile(r"^(mailto:[^@\s]+@[^@\s]+\.[^@\s]+|https://[^/\s]+\.[^/\s]+(/\S*)?)$")

#: what the App may send unless ``file_types`` says otherwise: photos, PDFs and plain-text formats
DEFAULT_FILE_TYPES = (
    "image/png",
    "image/jpeg",
    "image/gif",
    "image/webp",
    "image/heic",
    "image/heif",
    "application/pdf",
    "text/plain",
    "text/markdown",
    "text/csv",
    "application/json",
)


class Settings(BaseModel):
    """All of LineUp's settings, with their defaults."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    mode: Literal["direct", "relay", "auto", "both"] = Field(
        default="auto",
        description="direct (the App server on host:port), relay (WuKongIM), both at once, or auto: relay when "
        "a wukongim section is present, else direct",
    )
    host: str = Field(default="0.0.0.0", description="the address the App server listens on (0.0.0.0: every interface)")
    port: int = Field(default=9527, ge=0, le=65535, description="the App server's port (0 picks a free one)")
    token: str | None = Field(
        default=None,
        repr=False,
        min_length=16,
        max_length=MAX_TOKEN,  # what a device.hello carries at most
        description="the token the App must send; unset: generated on first start and kept in <data_dir>/token",
    )
    allowed_origins: list[str] = Field(
        default_factory=list, description="other web origins whose pages may open the App's WebSocket"
    )
    allowed_hosts: list[str] = Field(
        default_factory=list, description="host names besides this machine's that requests may name (DNS rebinding)"
    )
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="where the token, the call store, pairings and files are kept",
    )
    store: Literal["sqlite", "memory"] = Field(
        default="sqlite", description="sqlite keeps calls across restarts; memory keeps nothing"
    )
    store_path: Path | None = Field(default=None, description="the SQLite file (default <data_dir>/lineup.sqlite3)")
    fsync: Literal["full", "normal", "off"] = Field(
        default="normal",
        description="normal survives a crash of the agent, full also a power loss, off leaves flushing to the OS",
    )
    deadline: float = Field(default=600.0, gt=0, description="seconds a card waits for an answer before it expires")
    deadlines: dict[str, float] = Field(
        # the schema states what _positive_deadlines checks (lineup_plugin.config.check reads it)
        default_factory=dict,
        json_schema_extra={"additionalProperties": {"type": "number", "exclusiveMinimum": 0}},
        description="per tool name, seconds its cards wait (overrides deadline)",
    )
    app_grace: float | None = Field(
        default=None,
        ge=0,
        description="seconds a call made just after this process started serving waits for an App to connect "
        "before it ends no_app; unset: 120 on an interactive terminal, else 0",
    )
    handover_grace: float = Field(
        default=15.0,
        ge=0,
        description="seconds a process that takes over serving keeps the calls the one before it left open, for "
        "the processes that forwarded them to claim them again (then they end cancelled)",
    )
    max_frame_bytes: int = Field(
        default=1_048_576, ge=1024, description="the largest message an App may send once its token is accepted"
    )
    max_queue: int = Field(
        default=256, ge=1, description="messages waiting for one App; an App that stops reading is closed past it"
    )
    max_connections: int = Field(default=64, ge=1, description="Apps connected at once")
    heartbeat: float = Field(default=20.0, gt=0, description="seconds between pings to each App")
    agent_id: str = Field(default="lineup-agent", description="the agent's id in the envelopes it sends")
    history_limit: int = Field(
        default=HISTORY_LIMIT,
        ge=0,
        le=10_000_000,
        description="history entries kept for the App (reload, another device); 0 turns the history off",
    )
    history_max_age: float | None = Field(
        default=HISTORY_MAX_AGE, gt=0, description="seconds a history entry is kept; null: no age limit"
    )
    max_file_bytes: int = Field(default=20 * 1024 * 1024, ge=1024, description="the largest file the App may send")
    file_types: list[str] = Field(
        default_factory=lambda: list(DEFAULT_FILE_TYPES),
        description="the media types the App may send (type/* admits a whole type)",
    )
    media_quota_bytes: int = Field(
        default=1024 * 1024 * 1024,
        ge=1024,
        description="the most bytes the files the App sends may take in <data_dir>/media together",
    )
    media_retention_days: float = Field(
        default=30.0, gt=0, description="days a file sent either way is kept in <data_dir>/media"
    )
    wukongim: WuKongIMSettings | None = Field(
        default=None, description="how the relay joins a WuKongIM server (relay and both modes)"
    )
    push: bool = Field(
        default=True, description="Web Push to the Apps that subscribed when a card waits (see Push notifications)"
    )
    push_preview: bool = Field(
        default=True, description='a push names the tool and its question; false: it says only "A card is waiting"'
    )
    push_contact: str = Field(
        default=DEFAULT_PUSH_CONTACT,
        description="the contact a push service may reach you at (the VAPID sub): mailto:you@example.org or an "
        "https:// address; Apple refuses one at localhost. The default is an example address that reaches nobody: "
        "set your own",
    )
    push_services: list[str] = Field(
        default_factory=lambda: list(PUSH_SERVICES),
        description="the push services an App's subscription may name (a host, or a domain whose hosts are all "
        "taken); add your own push service here",
    )
    tls_cert: Path | None = Field(
        default=None, description="HTTPS and wss:// on the direct server: a PEM certificate (chain) file"
    )
    tls_key: Path | None = Field(default=None, description="the key file of tls_cert")

    @model_validator(mode="after")
    def _tls_pair(self) -> Settings:
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert and tls_key go together: set both (a certificate and its key) or neither")
        return self

    @field_validator("push_contact")
    @classmethod
    def _contact(cls, value: str) -> str:
        if not PUSH_CONTACT.match(value):
            raise ValueError(f"expected mailto:you@example.org or an https:// address, not {value[:80]!r}")
        return value

    @field_validator("deadlines")
    @classmethod
    def _positive_deadlines(cls, value: dict[str, float]) -> dict[str, float]:
        for name, seconds in value.items():
            if seconds <= 0:
                raise ValueError(f"deadline of {name!r} must be positive")
        return value

    @property
    def effective_mode(self) -> Literal["direct", "relay", "both"]:
        """``auto`` resolved: relay when WuKongIM settings are present, else direct.

        ``both``: the direct server and the relay at once (a paired App uses whichever it reaches);
        without WuKongIM settings it is direct.
        """
        if self.mode == "auto":
            return "relay" if self.wukongim is not None else "direct"
        if self.mode == "both" and self.wukongim is None:
            return "direct"
        return self.mode

    def describe_mode(self) -> str:
        """One line stating the mode in use and why, for the start-up log (no secrets)."""
        why = f"mode: auto, {'WuKongIM settings present' if self.wukongim else 'no WuKongIM settings'}"
        if self.mode != "auto":
            why = f"mode: {self.mode}"
        if self.effective_mode != "direct":
            assert self.wukongim is not None
            where = f"as uid {self.wukongim.uid!r} on {self.wukongim.api_url} for App user {self.wukongim.app_uid!r}"
            if self.effective_mode == "both":
                return f"lineup: direct and relay ({why}): App server on {self.host}:{self.port}, WuKongIM {where}"
            return f"lineup: relay mode ({why}): WuKongIM {where}"
        return f"lineup: direct mode ({why}): App server on {self.host}:{self.port}"

    @property
    def retention(self) -> Retention:
        """How much history is kept (``history_limit``, ``history_max_age``)."""
        return Retention(self.history_limit, self.history_max_age)

    @property
    def database(self) -> Path:
        """The SQLite file of the durable store."""
        return self.store_path or self.data_dir / "lineup.sqlite3"


def load_settings(section: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from a config ``section`` overlaid with ``LINEUP_*`` environment variables."""
    return validated_settings(given_settings(section, environ))


def validated_settings(data: Mapping[str, Any]) -> Settings:
    """The Settings of ``data`` (from :func:`~lineup_plugin.config.check.given_settings`), or a ConfigError."""
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        problems = []
        for err in exc.errors(include_url=False):
            setting = ".".join(str(p) for p in err["loc"]) or "settings"
            problems.append(f"lineup setting {setting!r}: {err['msg'].lower()}")
        raise ConfigError("; ".join(problems)) from None


def settings_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Settings` that :mod:`lineup_plugin.config.check` checks settings with.

    The nested ``wukongim`` model, the form of ``push_contact`` and the pairing of ``tls_cert`` with
    ``tls_key`` are left to the model itself (the schema admits only their defaults).
    """
    schema = Settings.model_json_schema()
    schema.pop("$defs", None)
    for name in ("wukongim", "tls_cert", "tls_key"):
        schema["properties"][name] = {"default": None, "type": "null"}
    schema["properties"]["push_contact"] = {"default": DEFAULT_PUSH_CONTACT, "enum": [DEFAULT_PUSH_CONTACT]}
    return schema


SCHEMA_MODULE = Path(__file__).with_name("schema.py")


def render_settings_schema() -> str:
    """The text of :mod:`lineup_plugin.config.schema` (``python -m lineup_plugin.config.settings`` writes it)."""
    body = pprint.pformat(settings_schema(), width=110, sort_dicts=False)
    return (
        '"""The JSON Schema of :class:`~lineup_plugin.config.settings.Settings`.\n\n'
        'Generated by ``python -m lineup_plugin.config.settings``.\n"""\n\n'
        "from typing import Any\n\n"
        f"SCHEMA: dict[str, Any] = {body}\n"
    )


if __name__ == "__main__":  # pragma: no cover - a developer command
    SCHEMA_MODULE.write_text(render_settings_schema())
    sys.exit(0)
