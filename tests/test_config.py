"""Settings: defaults, environment overrides and errors that name the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from lineup_plugin.config.settings import (
    DEFAULT_PUSH_CONTACT,
    PUSH_CONTACT,
    SCHEMA_MODULE,
    load_settings,
    render_settings_schema,
)
from lineup_plugin.errors import ConfigError


def test_defaults_are_direct_on_9527() -> None:
    settings = load_settings({}, {})
    assert (settings.port, settings.effective_mode, settings.token) == (9527, "direct", None)


def test_the_default_push_contact_is_a_mailto_address_at_a_domain_reserved_for_examples() -> None:
    # a VAPID sub must be mailto: or https: (RFC 8292); the default named a package page that does not exist
    contact = load_settings({}, {}).push_contact
    assert contact == DEFAULT_PUSH_CONTACT == "mailto:lineup@example.org" and PUSH_CONTACT.match(contact)
    assert load_settings({}, {"LINEUP_PUSH_CONTACT": "mailto:me@my.example"}).push_contact == "mailto:me@my.example"


def test_environment_wins_over_the_file() -> None:
    settings = load_settings(
        {"port": 1000, "deadlines": {"choice": 5}},
        {"LINEUP_PORT": "2000", "LINEUP_DEADLINES": '{"confirm": 7}', "LINEUP_ALLOWED_ORIGINS": "http://a, http://b"},
    )
    assert settings.port == 2000 and settings.deadlines == {"confirm": 7}
    assert settings.allowed_origins == ["http://a", "http://b"]


def test_auto_mode_picks_relay_when_wukongim_is_configured() -> None:
    env = {"LINEUP_WUKONGIM_API_URL": "http://im:5001", "LINEUP_WUKONGIM_UID": "agent", "LINEUP_WUKONGIM_APP_UID": "me"}
    settings = load_settings({}, env)
    assert settings.effective_mode == "relay"
    assert settings.wukongim is not None and settings.wukongim.content_type == 9527


def test_database_lives_in_the_data_dir(tmp_path: Path) -> None:
    assert load_settings({"data_dir": str(tmp_path)}, {}).database == tmp_path / "lineup.sqlite3"


@pytest.mark.parametrize(
    ("section", "env", "message"),
    [
        ({"port": "http"}, {}, "lineup setting 'port': input should be a valid integer"),
        ({}, {"LINEUP_PORT": "70000"}, "lineup setting 'port': input should be less than or equal to 65535"),
        ({"mode": "carrier-pigeon"}, {}, "lineup setting 'mode': input should be 'direct', 'relay', 'auto' or 'both'"),
        ({"token": "short"}, {}, "lineup setting 'token': string should have at least 16 characters"),
        # longer than a device.hello carries: no App could ever connect
        ({"token": "t" * 1025}, {}, "lineup setting 'token': string should have at most 1024 characters"),
        (
            {"deadlines": {"choice": -1}},
            {},
            "lineup setting 'deadlines': value error, deadline of 'choice' must be positive",
        ),
        ({"colour": "blue"}, {}, "lineup setting 'colour': extra inputs are not permitted"),
        ({}, {"LINEUP_DEADLINES": "{oops"}, "LINEUP_DEADLINES: not valid JSON"),
        ({"wukongim": {"uid": "a"}}, {}, "lineup setting 'wukongim.api_url': field required"),
    ],
)
def test_bad_value_names_the_setting(section: dict[str, object], env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(section, env)
    assert message in str(info.value)


def test_the_settings_schema_module_is_up_to_date() -> None:
    assert SCHEMA_MODULE.read_text() == render_settings_schema(), "run python -m lineup_plugin.config.settings"


def test_token_is_not_in_repr() -> None:
    assert "abcdefghijklmnopq" not in repr(load_settings({"token": "abcdefghijklmnopq"}, {}))


def test_start_up_line_states_the_mode_and_why() -> None:
    assert load_settings({"port": 9600}, {}).describe_mode() == (
        "lineup: direct mode (mode: auto, no WuKongIM settings): App server on 0.0.0.0:9600"
    )
    relay = load_settings(
        {"wukongim": {"api_url": "http://im:5001", "uid": "agent", "app_uid": "me", "token": "s3cret-s3cret-s3cret"}},
        {},
    )
    line = relay.describe_mode()
    assert line == (
        "lineup: relay mode (mode: auto, WuKongIM settings present): "
        "WuKongIM as uid 'agent' on http://im:5001 for App user 'me'"
    )
    assert "s3cret" not in line
    assert load_settings({"mode": "direct"}, {}).describe_mode().startswith("lineup: direct mode (mode: direct)")
