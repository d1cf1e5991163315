"""Token storage, token comparison, the wrong-token throttle, origins and the message-rate bucket."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from lineup_plugin.errors import ConfigError
from lineup_plugin.transports.direct.auth import (
    AuthThrottle,
    TokenBucket,
    load_or_create_token,
    origin_allowed,
    token_matches,
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_configured_token_is_used_and_nothing_is_written(tmp_path: Path) -> None:
    assert load_or_create_token("configured-token-123456", tmp_path / "data") == "configured-token-123456"
    assert not (tmp_path / "data").exists()


def test_generated_token_file_is_private_in_a_private_dir(tmp_path: Path) -> None:
    token = load_or_create_token(None, tmp_path / "data")
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "data" / "token").stat().st_mode) == 0o600
    assert load_or_create_token(None, tmp_path / "data") == token


def test_token_file_readable_by_others_is_tightened(tmp_path: Path) -> None:
    path = tmp_path / "token"
    path.write_text("a-token-someone-wrote-by-hand\n")
    path.chmod(0o644)
    assert load_or_create_token(None, tmp_path) == "a-token-someone-wrote-by-hand"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_short_token_in_the_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("short\n")
    with pytest.raises(ConfigError, match="shorter than 16 characters"):
        load_or_create_token(None, tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_data_dir_is_a_config_error(tmp_path: Path) -> None:
    tmp_path.chmod(0o500)
    try:
        with pytest.raises(ConfigError, match="cannot create the token file"):
            load_or_create_token(None, tmp_path)
    finally:
        tmp_path.chmod(0o700)


def test_data_dir_that_is_a_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "data").write_text("not a directory")
    with pytest.raises(ConfigError, match="lineup setting 'data_dir'"):
        load_or_create_token(None, tmp_path / "data")


@pytest.mark.parametrize(
    ("given", "expected"),
    [("the-right-token-1234", True), ("the-wrong-token-1234", False), (None, False), ("", False), ("ü-token", False)],
)
def test_token_matches_only_the_exact_token(given: str | None, expected: bool) -> None:
    assert token_matches(given, "the-right-token-1234") is expected


@pytest.mark.parametrize(
    ("origin", "host", "allowed", "expected"),
    [
        (None, "agent.lan:9527", [], True),
        ("http://agent.lan:9527", "agent.lan:9527", [], True),
        ("https://Agent.LAN:9527/", "agent.lan:9527", [], True),
        ("http://agent.lan:9528", "agent.lan:9527", [], False),
        ("http://evil.example", "agent.lan:9527", [], False),
        ("http://evil.example", "agent.lan:9527", ["http://evil.example/"], True),
        ("null", "agent.lan:9527", [], False),
        ("null", "agent.lan:9527", ["null"], True),
        ("file://agent.lan:9527", "agent.lan:9527", [], False),
        ("http://agent.lan:9527/path", "agent.lan:9527", [], False),
        ("http://agent.lan:9527", None, [], False),
    ],
)
def test_origin_allowed(origin: str | None, host: str | None, allowed: list[str], expected: bool) -> None:
    assert origin_allowed(origin, host, allowed) is expected


def test_throttle_delay_doubles_per_failure_up_to_the_cap_and_resets_on_success() -> None:
    throttle = AuthThrottle(base=0.5, cap=4.0, clock=Clock())
    delays = []
    for _ in range(6):
        throttle.failed("10.0.0.9")
        delays.append(throttle.delay("10.0.0.9"))
    assert delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert throttle.delay("10.0.0.10") == 0.0
    throttle.succeeded("10.0.0.9")
    assert (throttle.failures("10.0.0.9"), throttle.delay("10.0.0.9")) == (0, 0.0)


def test_throttle_forgets_a_quiet_address() -> None:
    clock = Clock()
    throttle = AuthThrottle(forget_after=60.0, clock=clock)
    throttle.failed("10.0.0.9")
    clock.now += 61.0
    assert throttle.failures("10.0.0.9") == 0


def test_throttle_remembers_a_bounded_number_of_addresses() -> None:
    throttle = AuthThrottle(max_addresses=2, clock=Clock())
    for address in ("a", "b", "c"):
        throttle.failed(address)
    assert [throttle.failures(a) for a in ("a", "b", "c")] == [0, 1, 1]


def test_token_bucket_allows_a_burst_then_refills_at_its_rate() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=3, clock=clock)
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]
    clock.now += 0.5
    assert [bucket.take(), bucket.take()] == [True, False]
    clock.now += 100.0
    assert [bucket.take() for _ in range(4)] == [True, True, True, False]


def test_token_bucket_delay_borrows_and_says_how_long_to_wait() -> None:
    clock = Clock()
    bucket = TokenBucket(rate=2.0, burst=2, clock=clock)
    assert [bucket.delay(), bucket.delay()] == [0.0, 0.0]
    assert [bucket.delay(), bucket.delay()] == [0.5, 1.0]  # each message over the burst waits its turn
    clock.now += 1.0  # the reader waited: the debt is repaid
    assert bucket.delay() == 0.5
