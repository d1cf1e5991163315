"""``lineup doctor``: each check fails with its fix line when its part is broken, and passes when it works.

The checks run against real parts: a real LineUp process serving the App (role ``gateway``), real
sockets on 127.0.0.1, the fake WuKongIM server, and Hermes' own plugin listing in a fresh
``HERMES_HOME`` (in a subprocess: importing Hermes here would fix its home for the other tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from lineup_plugin import doctor
from lineup_plugin.config.settings import Settings
from lineup_plugin.doctor import Context, Finding
from lineup_plugin.doctor import files as doctor_files
from lineup_plugin.runtime.forward import TOKEN_FILE, socket_path
from lineup_plugin.runtime.lock import ServerLock
from tests.fakes.wukongim import FakeWuKongIM

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "doctor-test-token-0123456789"
#: seconds a network step may take in these tests (what fails, fails at once or by this timeout)
STEP = 0.5
#: seconds a network step may take in the tests where it must succeed (the machine may be busy)
ROOMY = 10.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def context(data_dir: Path, *, timeout: float = ROOMY, **settings: Any) -> Context:
    """A doctor context with these settings (no ``LINEUP_*`` variables, no Hermes config)."""
    section = {"host": "127.0.0.1", "port": free_port(), "data_dir": str(data_dir), **settings}
    ctx = Context(environ={}, section=section, timeout=timeout)
    assert doctor.check_settings(ctx).status == "pass"
    return ctx


def clean_environ(hermes_home: Path) -> dict[str, str]:
    """This environment without LineUp or Hermes variables, with ``HERMES_HOME`` set."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    return environ | {"HERMES_HOME": str(hermes_home)}


def write_hermes_config(home: Path, *, enabled: list[str] | None, section: dict[str, Any], **plugins: Any) -> None:
    """A Hermes ``config.yaml`` (JSON is YAML) with ``plugins.enabled`` and LineUp's section."""
    home.mkdir(parents=True, exist_ok=True)
    block: dict[str, Any] = {"entries": {"lineup": section}, **plugins}
    if enabled is not None:
        block["enabled"] = enabled
    (home / "config.yaml").write_text(json.dumps({"plugins": block}), encoding="utf-8")


def lineup_doctor(hermes_home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``lineup doctor`` in a process of its own, reading the Hermes config of ``hermes_home``."""
    return subprocess.run(
        [sys.executable, "-m", "lineup_plugin.cli", "doctor", *args],
        cwd=ROOT,
        env=clean_environ(hermes_home),
        capture_output=True,
        text=True,
        timeout=60,
    )


#: the tests that read a Hermes config.yaml run only where Hermes Agent is installed (CI installs it)
needs_hermes = pytest.mark.skipif(importlib.util.find_spec("hermes_cli") is None, reason="needs hermes-agent")


def by_name(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {finding["name"]: finding for finding in findings}


@pytest.fixture(scope="module")
def serving(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, int, int]]:
    """A real LineUp process serving the App on 127.0.0.1: ``(data dir, port, pid)``."""
    data_dir = tmp_path_factory.mktemp("serving") / "lineup"
    port = free_port()
    command = [sys.executable, "-m", "tests.runtime.fake_runtime", str(data_dir), str(port), TOKEN]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            assert process.stdout is not None and process.stdout.readline().strip() == "serving"
            yield data_dir, port, process.pid
        finally:
            process.kill()


@contextlib.contextmanager
def lock_held(data_dir: Path) -> Iterator[None]:
    """This process holds the server lock of ``data_dir``, as a serving LineUp process (``hermes gateway``) does."""
    lock = ServerLock(data_dir)
    assert lock.acquire("gateway", command="hermes gateway")
    try:
        yield
    finally:
        lock.release()


def serving_context(serving: tuple[Path, int, int]) -> Context:
    data_dir, port, _ = serving
    return context(data_dir, port=port, token=TOKEN)


# ------------------------------------------------------------------------------ settings


def test_bad_settings_fail_naming_the_setting_and_where_to_set_it(tmp_path: Path) -> None:
    ctx = Context(environ={}, section={"port": 70000, "mode": "sideways", "data_dir": str(tmp_path)})
    finding = doctor.check_settings(ctx)
    assert finding.status == "fail"
    assert "'port'" in finding.detail and "'mode'" in finding.detail
    assert "LINEUP_PORT" in finding.fix and "LINEUP_MODE" in finding.fix and "plugins.entries.lineup" in finding.fix


def test_a_bad_lineup_variable_fails_the_settings(tmp_path: Path) -> None:
    ctx = Context(environ={"LINEUP_DEADLINES": "{not json"}, section={"data_dir": str(tmp_path)})
    finding = doctor.check_settings(ctx)
    assert finding.status == "fail" and "LINEUP_DEADLINES" in finding.detail


def test_checks_that_need_settings_are_skipped_when_they_are_bad(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(doctor, "CHECKS", [c for c in doctor.CHECKS if c[0] != "hermes"])
    findings = doctor.run(Context(environ={}, section={"port": -1, "data_dir": str(tmp_path)}))
    assert findings[0].status == "fail"
    assert {f.status for f in findings[1:]} == {"skip"}
    assert all("needs valid settings" in f.detail for f in findings[1:])


# ------------------------------------------------------------------------------ files


def test_a_token_readable_by_others_fails_with_its_chmod(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    data_dir.mkdir(mode=0o700)
    token = data_dir / "token"
    token.write_text(TOKEN)
    token.chmod(0o644)
    (data_dir / "pairing.json").write_text("{}")
    (data_dir / "pairing.json").chmod(0o600)
    finding = doctor.check_files(context(data_dir))
    assert finding.status == "fail"
    assert f"{token} is mode 0644" in finding.detail
    assert finding.fix == f"chmod 600 {token}"


def test_a_data_dir_others_can_list_and_its_secrets_get_one_fix_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    data_dir.mkdir()
    data_dir.chmod(0o755)
    for name in ("forward.token", "pairing.json"):
        (data_dir / name).write_text("x")
        (data_dir / name).chmod(0o640)
    finding = doctor.check_files(context(data_dir))
    assert finding.status == "fail"
    assert finding.fix == f"chmod 700 {data_dir} && chmod 600 {data_dir / 'pairing.json'} {data_dir / 'forward.token'}"


def test_private_files_pass_and_a_missing_data_dir_is_no_failure(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    assert doctor.check_files(context(data_dir)).status == "pass"
    data_dir.mkdir(mode=0o700)
    (data_dir / "token").write_text(TOKEN)
    (data_dir / "token").chmod(0o600)
    assert doctor.check_files(context(data_dir)).status == "pass"


def test_a_secret_file_named_later_is_checked_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    data_dir = tmp_path / "lineup"
    data_dir.mkdir(mode=0o700)
    (data_dir / "new-feature.key").write_text("key")
    (data_dir / "new-feature.key").chmod(0o604)
    assert doctor.check_files(context(data_dir)).status == "pass"
    monkeypatch.setattr(doctor_files, "SECRET_FILES", [*doctor_files.SECRET_FILES, "new-feature.key"])
    assert doctor.check_files(context(data_dir)).fix == f"chmod 600 {data_dir / 'new-feature.key'}"


# ------------------------------------------------------------------------------ port


def test_a_port_taken_by_a_plain_socket_names_the_program(tmp_path: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        finding = doctor.check_port(context(tmp_path, port=port))
    assert finding.status == "fail"
    assert f"127.0.0.1:{port} is held by another program" in finding.detail
    if sys.platform.startswith("linux"):
        assert f"pid {os.getpid()}," in finding.detail
    assert "LINEUP_PORT" in finding.fix


def test_a_free_port_passes(tmp_path: Path) -> None:
    finding = doctor.check_port(context(tmp_path))
    assert finding.status == "pass" and "is free" in finding.detail


def test_a_host_that_is_not_this_machine_fails(tmp_path: Path) -> None:
    finding = doctor.check_port(context(tmp_path, host="192.0.2.1"))  # TEST-NET-1: never a local address
    assert finding.status == "fail" and "not an address of this machine" in finding.detail
    assert "0.0.0.0" in finding.fix


def test_a_port_served_by_a_lineup_process_names_it(serving: tuple[Path, int, int]) -> None:
    _, port, pid = serving
    finding = doctor.check_port(serving_context(serving))
    assert finding.status == "pass"
    assert finding.detail.startswith(f"127.0.0.1:{port} is served by LineUp: pid {pid} (gateway)")


def test_relay_mode_opens_no_port(tmp_path: Path) -> None:
    relay = {"api_url": "http://127.0.0.1:9", "uid": "agent", "app_uid": "me"}
    assert doctor.check_port(context(tmp_path, wukongim=relay)).status == "skip"


# ------------------------------------------------------------------------------ forwarding


def test_the_serving_process_answers_on_its_forwarding_socket(serving: tuple[Path, int, int]) -> None:
    finding = doctor.check_forwarding(serving_context(serving))
    assert finding.status == "pass", finding


def test_a_dead_forwarding_socket_fails_naming_the_process_to_restart(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    with lock_held(data_dir):
        (data_dir / TOKEN_FILE).write_text("a-forwarding-token")
        with socket.socket(socket.AF_UNIX) as dead:  # bound, never listening: the file of a process gone
            dead.bind(os.fspath(socket_path(data_dir)))
        finding = doctor.check_forwarding(context(data_dir))
    assert finding.status == "fail"
    assert "does not answer" in finding.detail
    assert finding.fix.startswith(f"restart the serving process (pid {os.getpid()} (gateway), `hermes gateway`)")


def test_a_forwarding_socket_that_refuses_the_token_fails(serving: tuple[Path, int, int]) -> None:
    data_dir, _, _ = serving
    token_file = data_dir / TOKEN_FILE
    token = token_file.read_text()
    token_file.write_text("not-the-token")  # the server compares with the token it keeps in memory
    try:
        finding = doctor.check_forwarding(serving_context(serving))
    finally:
        token_file.write_text(token)
    assert finding.status == "fail"
    assert "refused the hello: wrong token" in finding.detail
    assert finding.fix.startswith("restart the serving process (pid ")


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (b"\xff\xfe garbage\n", "it answered something that is not the forwarding protocol (not JSON: "),
        (
            b'{"op": "interrupt", "reason": "stop"}\n',
            "it answered a hello with a line of op 'interrupt', which only a call gets",
        ),
        (b"x" * 70_000, "it answered more than 64 KiB"),
    ],
    ids=["not-json", "another-line", "too-long"],
)
def test_a_forwarding_socket_that_answers_nonsense_fails_saying_so_in_words(
    tmp_path: Path, answer: bytes, says: str
) -> None:
    """The doctor read the answer by hand and showed the user ``repr(bytes)``: ``b'\\xff\\xfe garbage\\n'``."""
    data_dir = tmp_path / "lineup"
    with lock_held(data_dir):
        (data_dir / TOKEN_FILE).write_text("a-forwarding-token")
        heard: list[dict[str, Any]] = []
        with socket.socket(socket.AF_UNIX) as server:
            server.bind(os.fspath(socket_path(data_dir)))
            server.listen()

            def serve() -> None:
                peer, _ = server.accept()
                with peer:
                    heard.append(json.loads(peer.makefile("rb").readline()))
                    peer.sendall(answer)

            thread = threading.Thread(target=serve)
            thread.start()
            finding = doctor.check_forwarding(context(data_dir))
            thread.join(30)
    assert heard == [{"op": "hello", "token": "a-forwarding-token", "pid": os.getpid()}]
    assert finding.status == "fail" and f"refused the hello: {says}" in finding.detail
    assert "b'" not in finding.detail and "\\x" not in finding.detail


def test_forwarding_is_skipped_while_nothing_serves(tmp_path: Path) -> None:
    finding = doctor.check_forwarding(context(tmp_path))
    assert finding.status == "skip" and "no LineUp process serves" in finding.detail


# ------------------------------------------------------------------------------ app


def test_the_app_answers_where_it_is_served(serving: tuple[Path, int, int]) -> None:
    _, port, _ = serving
    finding = doctor.check_app(serving_context(serving))
    assert finding.status == "pass"
    assert finding.detail.startswith(f"the App answers at http://127.0.0.1:{port}/")


def test_an_app_that_does_not_answer_fails_with_the_firewall_fix(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    with lock_held(data_dir), socket.socket() as silent:  # it accepts connections (the backlog), never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        finding = doctor.check_app(context(data_dir, port=silent.getsockname()[1], timeout=STEP))
    assert finding.status == "fail"
    assert f"did not answer within {STEP:g} s" in finding.detail
    assert "let phones reach TCP port" in finding.fix


def test_an_app_port_that_refuses_connections_fails(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    with lock_held(data_dir):
        finding = doctor.check_app(context(data_dir))  # a free port: nothing listens there
    assert finding.status == "fail" and "cannot be reached" in finding.detail
    assert "host 0.0.0.0" in finding.fix


# ------------------------------------------------------------------------------ relay


def relay_settings(fake: FakeWuKongIM, **changes: Any) -> dict[str, Any]:
    return {"api_url": fake.api_url, "uid": "agent", "token": "agent-token", "app_uid": "me"} | changes


async def test_the_relay_answers_route_and_takes_the_login() -> None:
    async with FakeWuKongIM(token_auth=True) as fake:
        fake.tokens[("agent", 2)] = "agent-token"
        ctx = context(Path("/nonexistent/lineup"), wukongim=relay_settings(fake))
        finding = await asyncio.to_thread(doctor.check_relay, ctx)
        assert finding.status == "pass", finding
        assert ("agent", 2) in [(uid, flag) for uid, flag, _ in fake.logins]
        assert ("GET", "/route") in [(method, target.partition("?")[0]) for method, target, _ in fake.http_calls]


@pytest.mark.parametrize(
    ("bad_token", "timeout"),
    [("connack", ROOMY), ("close", ROOMY), ("silent", 2.0)],  # silent: WuKongIM v2 never answers a bad token
)
async def test_a_relay_that_refuses_the_login_fails_with_the_token_fix(
    bad_token: Literal["connack", "close", "silent"], timeout: float
) -> None:
    async with FakeWuKongIM(token_auth=True, bad_token=bad_token) as fake:
        fake.tokens[("agent", 2)] = "the-right-token"
        ctx = context(Path("/nonexistent/lineup"), timeout=timeout, wukongim=relay_settings(fake))
        finding = await asyncio.to_thread(doctor.check_relay, ctx)
    assert finding.status == "fail"
    assert (
        finding.fix
        == "check wukongim.uid and wukongim.token: the server must hold that token for uid 'agent' and device_flag 2"
    )


async def test_the_login_is_not_tried_beside_a_serving_process_nor_without_a_token(tmp_path: Path) -> None:
    async with FakeWuKongIM(token_auth=True, manager_token="manager") as fake:
        with lock_held(tmp_path):
            ctx = context(tmp_path, wukongim=relay_settings(fake, manager_token="manager"))
            finding = await asyncio.to_thread(doctor.check_relay, ctx)
        assert finding.status == "pass"
        assert f"login not tried: pid {os.getpid()} (gateway), `hermes gateway` serves the relay" in finding.detail
        ctx = context(tmp_path, wukongim=relay_settings(fake, manager_token="manager", token=None))
        finding = await asyncio.to_thread(doctor.check_relay, ctx)
        assert finding.status == "pass" and "registers its own token" in finding.detail
        assert fake.logins == [] and fake.connects == 0


async def test_an_unreachable_websocket_address_fails_with_the_ws_url_fix() -> None:
    async with FakeWuKongIM() as fake:
        ws_url = f"ws://127.0.0.1:{free_port()}"
        ctx = context(Path("/nonexistent/lineup"), wukongim=relay_settings(fake, ws_url=ws_url))
        finding = await asyncio.to_thread(doctor.check_relay, ctx)
    assert finding.status == "fail" and f"cannot reach wukongim at {ws_url}" in finding.detail
    assert finding.fix == f"check wukongim.ws_url: the server's WebSocket address ({ws_url})"


async def test_an_unreachable_relay_fails_with_the_api_url_fix() -> None:
    ctx = context(
        Path("/nonexistent/lineup"), wukongim={"api_url": f"http://127.0.0.1:{free_port()}", "uid": "a", "app_uid": "b"}
    )
    finding = await asyncio.to_thread(doctor.check_relay, ctx)
    assert finding.status == "fail" and "GET /route" in finding.detail
    assert finding.fix.startswith("check wukongim.api_url")


async def test_a_wrong_manager_token_fails_with_its_fix() -> None:
    async with FakeWuKongIM(manager_token="right") as fake:
        ctx = context(Path("/nonexistent/lineup"), wukongim=relay_settings(fake, manager_token="wrong"))
        finding = await asyncio.to_thread(doctor.check_relay, ctx)
    assert finding.status == "fail" and "manager token" in finding.fix


def test_no_relay_settings_skip_the_relay(tmp_path: Path) -> None:
    assert doctor.check_relay(context(tmp_path)).status == "skip"


# ------------------------------------------------------------------------------ push


class PushSettings(Settings):
    """Settings with a ``push`` switch, as LineUp's own have once push is part of it."""

    push: bool = True


#: settings that have a push switch: LineUp's own once push is part of it
WITH_PUSH: type[Settings] = Settings if "push" in Settings.model_fields else PushSettings


def push_context(data_dir: Path, **settings: Any) -> Context:
    ctx = Context(environ={})
    ctx.settings = WITH_PUSH(data_dir=data_dir, **{"push_contact": "mailto:me@my.example", **settings})
    return ctx


def subscribe(data_dir: Path, count: int) -> None:
    """``count`` App subscriptions kept in the data dir, as push keeps them."""
    entries = [{"endpoint": f"https://push.example/{n}", "keys": {}} for n in range(count)]
    (data_dir / "push.json").write_text(json.dumps({"subscriptions": entries}))


def vapid_key(path: Path, curve: ec.EllipticCurve | None = None) -> None:
    key = ec.generate_private_key(curve or ec.SECP256R1())
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path.write_bytes(pem)


def test_a_missing_push_key_fails_when_apps_subscribed_with_it(tmp_path: Path) -> None:
    subscribe(tmp_path, 2)
    finding = doctor.check_push(push_context(tmp_path))
    assert finding.status == "fail"
    assert finding.detail == f"2 App subscriptions but no {tmp_path / 'vapid.pem'}: every push to them is refused"
    assert finding.fix.startswith("turn notifications off and on again in each App")


def test_no_push_key_before_any_app_subscribed_passes(tmp_path: Path) -> None:
    finding = doctor.check_push(push_context(tmp_path))
    assert finding.status == "pass" and "no App has subscribed yet" in finding.detail


def test_a_push_key_that_is_not_a_p256_key_fails(tmp_path: Path) -> None:
    subscribe(tmp_path, 1)
    vapid_key(tmp_path / "vapid.pem", ec.SECP384R1())
    finding = doctor.check_push(push_context(tmp_path))
    assert finding.status == "fail" and "not a P-256" in finding.detail
    assert finding.fix.startswith(f"remove {tmp_path / 'vapid.pem'}, then turn notifications off and on again")
    (tmp_path / "vapid.pem").write_text("-----BEGIN PRIVATE KEY-----\nbroken\n-----END PRIVATE KEY-----\n")
    assert doctor.check_push(push_context(tmp_path)).status == "fail"


def test_the_default_push_contact_is_named_with_what_to_do(tmp_path: Path) -> None:
    from lineup_plugin.config.settings import DEFAULT_PUSH_CONTACT

    finding = doctor.check_push(push_context(tmp_path, push_contact=DEFAULT_PUSH_CONTACT))
    assert finding.status == "pass"
    assert finding.detail.endswith(
        f"push_contact is the default {DEFAULT_PUSH_CONTACT}, which reaches nobody: set your own address"
    )
    subscribe(tmp_path, 1)
    vapid_key(tmp_path / "vapid.pem")
    assert "set your own address" in doctor.check_push(push_context(tmp_path, push_contact=DEFAULT_PUSH_CONTACT)).detail
    assert "push_contact" not in doctor.check_push(push_context(tmp_path, push_contact="mailto:me@my.example")).detail


def test_a_push_key_and_subscriptions_pass_and_push_off_is_skipped(tmp_path: Path) -> None:
    subscribe(tmp_path, 1)
    vapid_key(tmp_path / "vapid.pem")
    finding = doctor.check_push(push_context(tmp_path))
    assert (finding.status, finding.detail) == ("pass", "push is on, its key is present, 1 App subscription")
    finding = doctor.check_push(push_context(tmp_path, push=False))
    assert (finding.status, finding.detail) == ("skip", "push is off")


def test_push_is_skipped_saying_so_only_while_lineup_has_no_push_setting(tmp_path: Path) -> None:
    finding = doctor.check_push(context(tmp_path))
    if "push" in Settings.model_fields:
        assert finding.status == "pass"  # push on by default, no App subscribed yet
    else:
        assert finding.status == "skip" and "no push setting" in finding.detail


# ------------------------------------------------------------------------------ the run


def test_an_unexpected_error_in_one_check_is_its_failure_and_the_others_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(ctx: Context) -> Finding:
        raise KeyError("surprise")

    checks = [("settings", doctor.check_settings), ("broken", broken), ("files", doctor.check_files)]
    monkeypatch.setattr(doctor, "CHECKS", checks)
    findings = doctor.run(Context(environ={}, section={"data_dir": str(tmp_path)}))
    assert [f.status for f in findings] == ["pass", "fail", "pass"]
    assert findings[1].detail == "unexpected error: KeyError: 'surprise'"


def test_the_report_prints_each_fix_and_exits_1_on_a_failure(capsys: pytest.CaptureFixture[str]) -> None:
    findings = [doctor.passed("a", "fine"), doctor.failed("b", "broken", "mend it"), doctor.skipped("c", "n/a")]
    assert doctor.report(findings) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["ok    a  fine", "FAIL  b  broken", "         fix: mend it", "skip  c  n/a", "1 check failed"]
    assert doctor.report([doctor.passed("a", "fine"), doctor.skipped("c", "n/a")]) == 0


@needs_hermes
def test_hermes_not_enabling_the_plugin_fails_with_the_enable_command(tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    write_hermes_config(home, enabled=[], section={"data_dir": str(tmp_path / "lineup")})
    done = lineup_doctor(home, "--json")
    assert done.returncode == 1, done.stderr
    hermes = by_name(json.loads(done.stdout)["checks"])["hermes"]
    assert hermes["status"] == "fail" and "not in plugins.enabled" in hermes["detail"]
    assert hermes["fix"] == "hermes plugins enable lineup"

    write_hermes_config(home, enabled=["lineup"], section={}, disabled=["lineup"])
    hermes = by_name(json.loads(lineup_doctor(home, "--json").stdout)["checks"])["hermes"]
    assert hermes["status"] == "fail" and "plugins.disabled" in hermes["detail"]


@needs_hermes
def test_bad_settings_in_hermes_config_exit_1_without_a_traceback(tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    write_hermes_config(home, enabled=["lineup"], section={"port": "many", "data_dir": str(tmp_path / "lineup")})
    done = lineup_doctor(home)
    assert done.returncode == 1
    assert done.stderr == ""
    assert "FAIL  settings    lineup setting 'port'" in done.stdout
    assert "Traceback" not in done.stdout


@needs_hermes
def test_all_green_exits_0_and_json_has_one_entry_per_check(serving: tuple[Path, int, int], tmp_path: Path) -> None:
    data_dir, port, pid = serving
    home = tmp_path / "hermes"
    section = {"host": "127.0.0.1", "port": port, "token": TOKEN, "data_dir": str(data_dir)}
    write_hermes_config(home, enabled=["lineup"], section=section)
    done = lineup_doctor(home, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert set(report) == {"ok", "checks"} and report["ok"] is True
    assert [check["name"] for check in report["checks"]] == [name for name, _ in doctor.CHECKS]
    for check in report["checks"]:
        assert set(check) == {"name", "status", "detail", "fix"}
        assert check["fix"] is None
    statuses = {check["name"]: check["status"] for check in report["checks"]}
    assert statuses == {
        "settings": "pass",
        "files": "pass",
        "port": "pass",
        "forwarding": "pass",
        "hermes": "pass",
        "app": "pass",
        "relay": "skip",
        "push": "pass" if "push" in Settings.model_fields else "skip",  # on by default, nothing subscribed
    }
    assert f"pid {pid} (gateway)" in by_name(report["checks"])["port"]["detail"]

    text = lineup_doctor(home)
    assert text.returncode == 0 and text.stdout.splitlines()[-1] == "all checks passed"


#: a program that holds a port (it prints) until its input ends
HOLD_A_PORT = (
    "import socket, sys; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "print(s.getsockname()[1], flush=True); sys.stdin.read()"
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="names the listening process from /proc (Linux)")
def test_a_port_held_by_another_program_while_lineup_serves_elsewhere_fails(tmp_path: Path) -> None:
    data_dir = tmp_path / "lineup"
    command = [sys.executable, "-c", HOLD_A_PORT]
    with (
        lock_held(data_dir),
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as holder,
    ):
        try:
            assert holder.stdout is not None
            port = int(holder.stdout.readline())
            finding = doctor.check_port(context(data_dir, port=port))
        finally:
            holder.kill()
    assert finding.status == "fail"
    assert f"held by another program (pid {holder.pid}, " in finding.detail
    assert f"while LineUp (pid {os.getpid()} (gateway)" in finding.detail


# ------------------------------------------------------------------------------ hostile input


@pytest.mark.parametrize("line", ["", "garbage", "-1 gateway", "0 gateway", "99999999999999999999999 gateway"])
def test_a_lock_file_naming_no_live_process_means_nothing_serves(tmp_path: Path, line: str) -> None:
    (tmp_path / "server.lock").write_text(line)
    assert doctor.serving_owner(tmp_path) is None
    assert doctor.check_forwarding(context(tmp_path)).status == "skip"


@needs_hermes
def test_a_hermes_config_that_is_not_yaml_fails_settings_and_hermes_and_is_left_as_it_is(tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    home.mkdir()
    (home / "config.yaml").write_text("plugins: [unclosed\n  entries: {\n")
    done = lineup_doctor(home, "--json")
    assert done.returncode == 1 and done.stderr == ""
    checks = by_name(json.loads(done.stdout)["checks"])
    assert checks["settings"]["status"] == "fail" and "is not valid YAML" in checks["settings"]["detail"]
    assert checks["settings"]["fix"] == f"fix the YAML of {home / 'config.yaml'}"
    assert checks["hermes"]["status"] == "fail" and "cannot parse" in checks["hermes"]["detail"]
    assert sorted(path.name for path in home.iterdir()) == ["config.yaml"]  # Hermes' reader would save a copy


@needs_hermes
@pytest.mark.skipif(sys.platform == "win32", reason="POSIX paths are bytes")
def test_a_data_dir_that_is_not_text_is_reported_escaped(tmp_path: Path) -> None:
    home = tmp_path / "hermes"
    write_hermes_config(home, enabled=["lineup"], section={})
    data_dir = os.fsdecode(os.fsencode(tmp_path) + b"/\xff")
    for args in (["--json"], []):
        done = lineup_doctor(home, "--data-dir", data_dir, *args)
        assert done.stderr == "" and done.returncode == 0, done.stdout
    assert data_dir in json.loads(lineup_doctor(home, "--data-dir", data_dir, "--json").stdout)["checks"][0]["detail"]


#: ``lineup doctor --json`` where Hermes cannot be imported (LineUp installed for MCP only)
WITHOUT_HERMES = (
    "import sys; sys.modules['hermes_cli'] = None; from lineup_plugin.cli import main; "
    "sys.exit(main(['doctor', '--json']))"
)


def test_without_hermes_the_hermes_check_is_skipped_and_settings_come_from_the_environment(tmp_path: Path) -> None:
    environ = clean_environ(tmp_path / "hermes") | {"LINEUP_DATA_DIR": str(tmp_path / "lineup"), "LINEUP_PORT": "0"}
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_HERMES], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stderr == "", done.stdout + done.stderr
    checks = by_name(json.loads(done.stdout)["checks"])
    assert checks["hermes"]["status"] == "skip" and "not installed" in checks["hermes"]["detail"]
    assert checks["settings"]["detail"] == f"valid: direct mode, data dir {tmp_path / 'lineup'}"
    assert checks["port"]["status"] == "skip"  # port 0
    assert not (tmp_path / "hermes").exists()


def test_every_finding_is_one_line_and_a_path_keeps_its_spaces() -> None:
    finding = doctor.failed("x", "yaml broke\n  at line 2\r\n", "chmod 600 '/a  b/token'")
    assert (finding.detail, finding.fix) == ("yaml broke at line 2", "chmod 600 '/a  b/token'")


def test_relay_settings_are_not_checked_when_the_mode_is_direct(tmp_path: Path) -> None:
    relay = {"api_url": f"http://127.0.0.1:{free_port()}", "uid": "agent", "app_uid": "me"}
    finding = doctor.check_relay(context(tmp_path, mode="direct", wukongim=relay))
    assert finding.status == "skip" and "not used" in finding.detail
