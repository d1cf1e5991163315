"""The wheel works outside the source tree, as a user installs it.

A copy of the source tree is built with ``python -m build`` (the sdist, then the wheel from the
sdist, in an isolated environment: a build-backend warning fails the test). The wheel is installed,
not editable, with its ``hermes`` extra and the example plugin ``examples/lineup-weather`` into a
fresh virtualenv, at the versions of ``constraints.txt``. Every command then runs from that
virtualenv with no ``PYTHONPATH``, so the source tree is out of reach: ``lineup --version``,
``hermes plugins list`` (LineUp enabled by ``config.yaml``), ``lineup tools`` (the built-ins and the
example's tools) and a one-shot ``hermes chat`` whose scripted model asks a choice that
:class:`tests.wsapp.WsApp` answers over the App's WebSocket.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import anyio
import pytest

import lineup_plugin
from tests.fakes.llm import ScriptedLLM
from tests.wsapp import WsApp

from .hermes_harness import TOKEN, ask_then_answer, cli_home, within

pytestmark = [
    pytest.mark.hermes,
    pytest.mark.skipif(importlib.util.find_spec("run_agent") is None, reason="needs hermes-agent installed"),
    pytest.mark.skipif(importlib.util.find_spec("build") is None, reason="needs build (the dev extra)"),
]

ROOT = Path(__file__).resolve().parents[2]
VERSION = lineup_plugin.__version__
#: what a copy of the source tree leaves out: what git ignores, and git itself
NOT_SOURCE = shutil.ignore_patterns(
    ".git",
    ".venv",
    "node_modules",
    "build",
    "dist",
    "site",
    "tmp",
    "*.egg-info",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)
#: the longest a step may take before the test fails (installing Hermes' dependencies is the slowest)
INSTALL_TIMEOUT = 600
WAIT = 120.0
#: where the commands run: not the source tree (``python -c`` puts its working directory first on sys.path)
OUTSIDE = Path(os.sep)


def environ(**extra: str) -> dict[str, str]:
    """This process's environment without what would reach into the source tree or another
    installation (``PYTHONPATH``, an active virtualenv, LineUp's and Hermes' own variables)."""
    dropped = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONDONTWRITEBYTECODE")
    env = {
        k: v for k, v in os.environ.items() if k not in dropped and not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))
    }
    env.update(extra)
    return env


def run(*command: str | Path, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``command`` with :func:`environ`; its output, as text (it must exit 0)."""
    done = subprocess.run(
        [str(part) for part in command],
        env=environ(**extra),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        cwd=OUTSIDE,
    )
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    )
    return done


@dataclass
class Installed:
    """The built files and the virtualenv the wheel was installed into."""

    sdist: Path
    wheel: Path
    build_output: str
    bin: Path

    def home(self, tmp: Path, llm: object, port: int) -> Path:
        """A fresh HERMES_HOME enabling LineUp on 127.0.0.1:``port`` with ``llm`` as its model."""
        return cli_home(SimpleNamespace(llm=llm), tmp, port)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """Build the sdist and the wheel from a copy of the tree; install the wheel into a fresh virtualenv."""
    work = tmp_path_factory.mktemp("wheel")
    source, dist, venv = work / "source", work / "dist", work / "venv"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCE, symlinks=True)
    built = run(sys.executable, "-m", "build", "--outdir", dist, source)
    sdist, wheel = dist / f"lineup_plugin-{VERSION}.tar.gz", dist / f"lineup_plugin-{VERSION}-py3-none-any.whl"
    assert sorted(dist.iterdir()) == [wheel, sdist], f"build made {sorted(p.name for p in dist.iterdir())}"
    run(sys.executable, "-m", "venv", venv)
    python = venv / "bin" / "python"
    constraints = source / "constraints.txt"
    run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-compile",  # the modules a command imports are compiled then (most of Hermes' tree never is)
        "-c",
        constraints,
        f"{wheel}[hermes]",
        source / "examples" / "lineup-weather",
    )
    return Installed(sdist, wheel, built.stdout + built.stderr, venv / "bin")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_build_makes_both_files_without_a_warning_and_ships_what_the_package_needs(installed: Installed) -> None:
    # setuptools says some warnings without the word (distutils' "no previously-included files ... found")
    warnings = [line for line in installed.build_output.splitlines() if re.search(r"warn|no previously", line, re.I)]
    assert warnings == [], "python -m build warned:\n" + "\n".join(warnings)
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
    info = f"lineup_plugin-{VERSION}.dist-info"
    assert {
        "lineup_plugin/py.typed",
        "lineup_plugin/app/index.html",
        "lineup_plugin/app/vendor/relay.js",
        "lineup_plugin/schemas/lineup.v1.tool.call.json",
        f"{info}/licenses/LICENSE",
        f"{info}/entry_points.txt",
    } <= names
    with tarfile.open(installed.sdist) as sdist:
        files = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert {"CHANGELOG.md", "LICENSE", "README.md", "pyproject.toml", "lineup_plugin/__init__.py"} <= files


def test_the_package_comes_from_the_wheel_and_says_its_version(installed: Installed) -> None:
    where = run(installed.bin / "python", "-c", "import lineup_plugin; print(lineup_plugin.__file__)").stdout.strip()
    assert Path(where).is_relative_to(installed.bin.parent), f"lineup_plugin was imported from {where}"
    assert run(installed.bin / "lineup", "--version").stdout == f"lineup {VERSION}\n"


def test_hermes_lists_lineup_enabled_by_its_config(installed: Installed, tmp_path: Path) -> None:
    home = installed.home(tmp_path / "home", SimpleNamespace(base_url="http://127.0.0.1:9/v1"), free_port())
    listed = run(installed.bin / "hermes", "plugins", "list", "--plain", "--no-bundled", HERMES_HOME=str(home)).stdout
    assert re.search(rf"^enabled\s+entrypoint\s+{re.escape(VERSION)}\s+lineup$", listed, re.MULTILINE), listed


def test_lineup_tools_lists_the_builtins_and_the_installed_example_plugin(installed: Installed, tmp_path: Path) -> None:
    listed = run(installed.bin / "lineup", "tools", HOME=str(tmp_path)).stdout
    rows = {line.split()[0]: line.split()[1:] for line in listed.splitlines()[1:]}
    for name in ("choice", "confirm", "input", "calculator", "canvas"):
        assert rows[name][-1] == "lineup_plugin.builtin_tools", listed
    assert rows["weather"] == ["action", "-", "weather"] and rows["rating"] == ["action", "-", "weather"], listed


@within(WAIT)
async def test_a_one_shot_hermes_chat_gets_its_card_answered_over_the_app(installed: Installed, tmp_path: Path) -> None:
    port = free_port()
    with ScriptedLLM() as llm:
        llm.reset(ask_then_answer, ask_then_answer)
        home = installed.home(tmp_path / "home", llm, port)
        # not a terminal, so app_grace would be 0: the call waits for the App that connects below
        chat = functools.partial(
            run, installed.bin / "hermes", "chat", "--toolsets", "lineup", "-Q", "-q", "pick a colour",
            HERMES_HOME=str(home), LINEUP_APP_GRACE="60",
        )  # fmt: skip
        asking = asyncio.ensure_future(anyio.to_thread.run_sync(chat))
        app = await WsApp.reconnecting(port, TOKEN, attempts=2400)
        card = await app.next_call()
        assert (card.name, card.arguments["question"]) == ("choice", "pick a colour?")
        await app.answer(card, selected="blue", index=1)
        done = await asking
        await app.close()
    assert "pick a colour: blue" in done.stdout
    assert not llm.errors
