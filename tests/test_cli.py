"""The ``lineup`` command line."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from lineup_plugin.cli import main

BUILTIN_ROWS = [
    ["choice", "action", "-", "lineup_plugin.builtin_tools"],
    ["confirm", "action", "-", "lineup_plugin.builtin_tools"],
    ["input", "action", "-", "lineup_plugin.builtin_tools"],
    ["calculator", "toolset", "add,subtract,multiply,divide", "lineup_plugin.builtin_tools"],
    ["canvas", "app", "open,draw,undo,clear,close", "lineup_plugin.builtin_tools"],
]


def test_tools_prints_name_type_actions_and_source_of_each_tool(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()]
    assert rows[0] == ["NAME", "TYPE", "ACTIONS", "SOURCE"]
    assert rows[1:6] == BUILTIN_ROWS


def test_tools_json_prints_the_wire_definitions(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tools", "--json"]) == 0
    definitions = json.loads(capsys.readouterr().out)
    canvas = next(d for d in definitions if d["name"] == "canvas")
    assert canvas["type"] == "app" and [a["name"] for a in canvas["actions"]][:2] == ["open", "draw"]


def test_console_script_runs_tools() -> None:
    script = shutil.which("lineup", path=str(Path(sys.executable).parent))
    assert script is not None, "the lineup console script is not installed"
    done = subprocess.run([script, "tools"], capture_output=True, text=True, timeout=60, check=True)
    assert done.stdout.splitlines()[1].split() == BUILTIN_ROWS[0]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["demo", "--port", "70000"], "lineup setting 'port': input should be less than or equal to 65535"),
        (["demo", "--token", "short"], "lineup setting 'token': string should have at least 16 characters"),
    ],
)
def test_bad_setting_exits_2_naming_it(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    assert capsys.readouterr().err == f"lineup: error: {message}\n"


def test_bad_option_is_an_argparse_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["demo", "--port", "abc"])
    assert exited.value.code == 2
    assert "argument --port: invalid int value: 'abc'" in capsys.readouterr().err


def test_demo_on_a_taken_port_exits_1_saying_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ["demo", "--host", "127.0.0.1", "--port", str(port), "--token", "cli-test-token-0123456789"]
        assert main([*argv, "--data-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith(f"lineup: error: cannot listen on 127.0.0.1:{port}: ")


def test_demo_prints_the_connect_link_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    script = shutil.which("lineup", path=str(Path(sys.executable).parent))
    assert script is not None
    argv = [script, "demo", "--host", "127.0.0.1", "--port", "0", "--data-dir", str(tmp_path)]
    with subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as demo:
        assert demo.stdout is not None
        lines = [demo.stdout.readline() for _ in range(3)]
        assert lines[2].strip().startswith("http://127.0.0.1:") and "/#token=" in lines[2]
        assert lines[2].strip().endswith((tmp_path / "token").read_text().strip())
        demo.send_signal(signal.SIGTERM)
        _, err = demo.communicate(timeout=30)
    assert demo.returncode == 0
    assert err.strip() == "lineup demo stopped"
