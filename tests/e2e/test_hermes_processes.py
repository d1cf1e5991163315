"""Every Hermes process can ask the user: real ``hermes gateway run``, ``hermes chat -q`` and interactive
``hermes`` processes on one Hermes home, one App connection.

Each process is the installed ``hermes`` command in a fresh process, on the scripted LLM (the
only fake part), with LineUp on a fixed 127.0.0.1 port and a SQLite store in the shared data
directory. The App is :class:`tests.wsapp.WsApp`, a real WebSocket client that reconnects as the
reference App does. The interactive CLI runs under a pseudo-terminal (``pty``), typed into and
interrupted with Ctrl+C as a person would.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
import pty
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from lineup_plugin.protocol.messages import AgentStop, Text, ToolCall, ToolCancel
from tests.fakes.llm import ScriptedLLM, call, say, tool_messages
from tests.wsapp import WsApp

from .hermes_harness import COLOURS, TOKEN, ask_then_answer, background, cli_home, within

pytestmark = [
    pytest.mark.hermes,
    pytest.mark.skipif(importlib.util.find_spec("run_agent") is None, reason="needs hermes-agent installed"),
]

HERMES = str(Path(sys.executable).with_name("hermes"))
#: the longest any one test may wait before it fails (instead of hanging)
WAIT = 120.0


bounded = within(WAIT)


@pytest.fixture(scope="module")
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def home(llm: ScriptedLLM, tmp_path: Path) -> tuple[Path, int]:
    """A Hermes home shared by every process of the test: LineUp on a fixed port, a SQLite store."""
    llm.reset(*[ask_then_answer] * 20)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
    path = cli_home(SimpleNamespace(llm=llm), tmp_path / "home", port)  # type: ignore[arg-type]
    config = path / "config.yaml"
    config.write_text(config.read_text(encoding="utf-8").replace("store: memory", "store: sqlite"), encoding="utf-8")
    return path, port


def environ(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LINEUP_", "HERMES_", "_HERMES"))}
    env.update(HERMES_HOME=str(home), **extra)
    return env


def process(*command: str, home: Path, **extra: str) -> AbstractContextManager[subprocess.Popen[str]]:
    """``hermes <command>`` running in the background in ``home``; killed at the end if still running."""
    return background([HERMES, *command], environ(home, **extra))


def chat(prompt: str, home: Path) -> Any:
    """``hermes chat -Q -q <prompt>`` (one-shot, quiet) in the background."""
    return process("chat", "--toolsets", "lineup", "-Q", "-q", prompt, home=home)


async def output(running: subprocess.Popen[str]) -> str:
    """Everything a background process printed, once it exited (it must exit 0)."""
    out, err = await anyio.to_thread.run_sync(functools.partial(running.communicate, timeout=WAIT))
    assert running.returncode == 0, err
    return out


async def app_on(port: int, open_calls: list[str] | None = None) -> WsApp:
    """The App connecting to whichever process serves ``port``, trying again while nothing listens."""
    return await WsApp.reconnecting(port, TOKEN, attempts=2400, open_calls=open_calls)


async def gone(app: WsApp) -> None:
    """Read until the serving process's connection ends (it was killed or stopped)."""
    await app.closed()


async def next_text(app: WsApp, text: str) -> None:
    """Read ``text`` messages until one says ``text``."""
    while (await app.next("text")).payload.text != text:  # type: ignore[union-attr]
        pass


async def cards(app: WsApp, count: int) -> list[ToolCall]:
    return [await app.next_call() for _ in range(count)]


# ---------------------------------------------------------------------------------- tests


@bounded
async def test_a_one_shot_chat_asks_through_the_gateway_and_gets_the_apps_answer(home: tuple[Path, int]) -> None:
    path, port = home
    with process("gateway", "run", home=path):
        app = await app_on(port)
        with chat("pick a colour", path) as asking:
            (card,) = await cards(app, 1)
            assert card.arguments["question"] == "pick a colour?"
            assert card.origin is not None and (card.origin.kind, card.origin.label) == ("chat", "hermes chat")
            await app.answer(card, selected="blue", index=1)
            assert "pick a colour: blue" in await output(asking)
            await next_text(app, "pick a colour: blue")  # the chat's reply is mirrored to the App too
        await app.close()


@bounded
async def test_two_chats_ask_at_once_and_each_model_gets_its_own_answer(home: tuple[Path, int]) -> None:
    path, port = home
    with process("gateway", "run", home=path):
        app = await app_on(port)
        with chat("first", path) as first, chat("second", path) as second:
            for card in await cards(app, 2):
                picked = "red" if card.arguments["question"] == "first?" else "green"
                await app.answer(card, selected=picked, index=COLOURS.index(picked))
            assert "first: red" in await output(first)
            assert "second: green" in await output(second)
        await app.close()


@bounded
async def test_the_gateway_killed_with_a_card_open_the_chat_takes_over_and_the_card_stays_answerable(
    home: tuple[Path, int],
) -> None:
    path, port = home
    with process("gateway", "run", home=path) as gateway:
        app = await app_on(port)
        with chat("after the crash", path) as asking:
            (card,) = await cards(app, 1)
            gateway.send_signal(signal.SIGKILL)
            await gone(app)
            app = await app_on(port, open_calls=[card.call_id])  # now served by the chat process
            (again,) = await cards(app, 1)
            assert again.call_id == card.call_id and again.arguments == card.arguments
            await app.answer(again, selected="green", index=2)
            assert "after the crash: green" in await output(asking)  # the right model got it
        await app.close()
    assert gateway.returncode == -signal.SIGKILL


class Terminal:
    """The interactive ``hermes`` CLI under a pseudo-terminal: type into it, read what it shows.

    What the CLI writes is read at once, on a thread, as a terminal emulator reads it: a CLI whose
    output nobody reads blocks in its next write once the pseudo-terminal's buffer is full, and
    then reads no key either (an Enter typed while a test waited on the App was lost so).
    """

    def __init__(self, home: Path, toolsets: str = "lineup") -> None:
        master, slave = pty.openpty()
        # PYTHONFAULTHANDLER: a CLI that stops answering its keys can be made to print its threads (stacks())
        env = environ(home, TERM="xterm", COLUMNS="120", LINES="40", PYTHONFAULTHANDLER="1")
        self.process = subprocess.Popen(
            [HERMES, "--toolsets", toolsets], env=env, stdin=slave, stdout=slave, stderr=slave, start_new_session=True
        )
        os.close(slave)
        self.master = master
        #: everything the CLI wrote so far
        self.screen = b""
        self._ended = False  # the CLI's side of the terminal is closed: nothing more will come
        self._grew = threading.Condition()
        self._reader = threading.Thread(target=self._read, name="terminal-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:  # EIO: the CLI exited (every copy of its side closed)
                data = b""
            with self._grew:
                self.screen += data
                self._ended = not data
                self._grew.notify_all()
            if not data:
                return

    def read_until(self, text: bytes, timeout: float = WAIT) -> None:
        """Wait until ``text`` appears in what the CLI shows (a prompt, a status line)."""
        with self._grew:
            self._grew.wait_for(lambda: text in self.screen or self._ended, timeout)
            assert text in self.screen, f"the CLI never showed {text!r}: {self.screen[-2000:]!r}"

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def shown(self, last: int = 3000) -> bytes:
        """The end of what the CLI showed, up to now."""
        with self._grew:
            return self.screen[-last:]

    def stacks(self) -> str:
        """Where each of the CLI's threads stands, printed by the CLI as it is killed with SIGABRT."""
        with self._grew:
            before = len(self.screen)
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGABRT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(10)
        self._reader.join(10)  # it ends with the CLI
        with self._grew:
            return self.screen[before:].decode("utf-8", "replace")

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the CLI's group: nothing it started keeps the terminal open
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(30)
        self._reader.join(30)
        os.close(self.master)


@bounded
async def test_the_interactive_cli_asks_through_the_gateway_and_ctrl_c_withdraws_the_card(
    home: tuple[Path, int],
) -> None:
    path, port = home
    with process("gateway", "run", home=path):
        app = await app_on(port)
        terminal = Terminal(path)
        try:
            await anyio.to_thread.run_sync(terminal.read_until, "❯".encode())
            terminal.type(b"interrupt me\r")
            (card,) = await cards(app, 1)
            assert card.origin is not None and card.origin.kind == "cli"
            terminal.type(b"\x03")  # Ctrl+C while the card is open
            cancel = (await app.next("tool.cancel")).payload
            assert isinstance(cancel, ToolCancel) and cancel.call_id == card.call_id
            assert "interrupted" in (cancel.reason or "")
        finally:
            await anyio.to_thread.run_sync(terminal.close)
        await app.close()


@bounded
async def test_the_apps_stop_interrupts_a_one_shot_chat_asking_through_the_gateway(
    home: tuple[Path, int], llm: ScriptedLLM
) -> None:
    # the card is withdrawn, the chat's model is not asked again, and the App is not told "No active task"
    path, port = home
    with process("gateway", "run", home=path):
        app = await app_on(port)
        with chat("stop me", path) as asking:
            (card,) = await cards(app, 1)
            asked = len(llm.requests)
            await app.send(AgentStop())
            said: list[str] = []  # what the App is told until the card closes (the stop is taken in first)
            while not isinstance(payload := (await app.recv()).payload, ToolCancel):
                if isinstance(payload, Text):
                    said.append(payload.text)
            assert payload.call_id == card.call_id
            out, _ = await anyio.to_thread.run_sync(functools.partial(asking.communicate, timeout=WAIT))
        await app.close()
    assert len(llm.requests) == asked, "the chat's model was asked again after the stop"
    assert "stop me: cancelled" not in out, out
    assert not any("No active task" in text for text in said), said


async def from_app(app: WsApp, kind: str, terminal: Terminal) -> Any:
    """The payload of the App's next ``kind`` message; if none comes within half the test's
    bound, the test fails showing what the CLI showed."""
    with anyio.move_on_after(WAIT / 2):
        return (await app.next(kind)).payload
    shown = terminal.shown()
    raise AssertionError(f"no {kind} on the App; the CLI showed {shown!r}; its threads:\n{terminal.stacks()}")


async def cli_approval(path: Path, port: int, llm: ScriptedLLM, target: Path) -> tuple[WsApp, Terminal, ToolCall]:
    """The interactive CLI's model runs ``rm -rf target``: Hermes asks in the terminal, and the App gets the card."""
    target.mkdir()
    llm.reset(call("terminal", command=f"rm -rf {target}"), say("Cleaned up."))
    terminal = Terminal(path, toolsets="lineup,terminal")
    await anyio.to_thread.run_sync(terminal.read_until, "❯".encode())
    try:
        terminal.type(b"clean up\r")
        app = await app_on(port)  # the gateway, or the CLI once its session started
        card = await from_app(app, "tool.call", terminal)
        assert isinstance(card, ToolCall)
        return app, terminal, card
    except BaseException:
        await anyio.to_thread.run_sync(terminal.close)
        raise


def terminal_result(llm: ScriptedLLM) -> dict[str, Any]:
    """What the terminal tool told the model (the last request's last tool message)."""
    (result,) = [m for m in tool_messages(llm.requests[-1]) if m["name"] == "terminal"]
    return dict(result["json"])


@bounded
@pytest.mark.parametrize(
    ("serving", "choice", "shown"),
    [
        ("cli", "once", b"allowed once"),
        ("cli", "session", b"allowed for session"),
        ("gateway", "always", b"added to allowlist"),
        ("gateway", "deny", b"denied"),
    ],
)
async def test_an_interactive_cli_approval_is_an_app_card_and_the_apps_choice_is_hermes_answer(
    home: tuple[Path, int], llm: ScriptedLLM, tmp_path: Path, serving: str, choice: str, shown: bytes
) -> None:
    # served by the CLI itself, or forwarded to the gateway that serves the App
    path, port = home
    target = tmp_path / "old-build"
    with process("gateway", "run", home=path) if serving == "gateway" else contextlib.nullcontext():
        app, terminal, card = await cli_approval(path, port, llm, target)
        try:
            assert card.name == "confirm" and card.arguments["details"] == f"rm -rf {target}"
            assert [c["value"] for c in card.arguments["choices"]] == ["once", "session", "always", "deny"]
            assert card.origin is not None and card.origin.kind == "cli"
            approves = choice != "deny"
            await app.answer(card, "completed" if approves else "rejected", approved=approves, choice=choice)
            await anyio.to_thread.run_sync(terminal.read_until, b"Cleaned up.")  # the prompt closed, the turn went on
        finally:
            await anyio.to_thread.run_sync(terminal.close)
            await app.close()
    outcome = terminal_result(llm)
    if choice == "deny":
        assert target.exists() and outcome["status"] == "blocked", outcome
        assert "denied" in outcome["error"]
    else:
        assert not target.exists() and outcome.get("status") != "blocked", outcome
    assert shown in terminal.screen  # the terminal's prompt closed with the App's choice
    allowlist = (path / "config.yaml").read_text(encoding="utf-8").partition("command_allowlist:")[2]
    kind = str(card.arguments["message"]).rpartition("(")[2].rstrip(")")  # e.g. "delete in root path"
    assert (f"- {kind}" in allowlist) is (choice == "always"), allowlist  # Hermes kept it for good


@bounded
async def test_an_interactive_cli_approval_answered_in_the_terminal_withdraws_the_card(
    home: tuple[Path, int], llm: ScriptedLLM, tmp_path: Path
) -> None:
    path, port = home
    target = tmp_path / "old-build"
    # the card ends with Hermes's approvals.timeout: 30 s was once passed before the keys reached the
    # terminal under load (the card expired); the terminal's answer is what this test is about
    configure(path, "timeout: 30", "timeout: 600")
    app, terminal, card = await cli_approval(path, port, llm, target)
    try:
        await anyio.to_thread.run_sync(terminal.read_until, b"Allow once")  # the terminal's panel takes keys now
        terminal.type(b"\r")  # its first choice: allow once
        cancel = await from_app(app, "tool.cancel", terminal)
        assert isinstance(cancel, ToolCancel) and cancel.call_id == card.call_id
        said = "answered in the terminal: Allow once"  # not "the agent was interrupted"
        assert cancel.reason == said
        assert cancel.outcome is not None and (cancel.outcome.status, cancel.outcome.result) == (
            "cancelled",
            {"message": said},
        )
        await anyio.to_thread.run_sync(terminal.read_until, b"Cleaned up.")
        # a device that comes back asking about the card (a reload) is told the same
        await app.close()
        app = await app_on(port, open_calls=[card.call_id])
        again = (await app.next("tool.cancel")).payload
        assert isinstance(again, ToolCancel) and again.call_id == card.call_id
        assert again.outcome is not None and again.outcome.result == {"message": said}
    finally:
        await anyio.to_thread.run_sync(terminal.close)
        await app.close()
    assert not target.exists()
    assert b"allowed once" in terminal.screen


# ------------------------------------------------------------------ a one-shot chat's approval: the card is the way


def one_shot(prompt: str, home: Path, *flags: str) -> AbstractContextManager[subprocess.Popen[str]]:
    """``hermes chat --toolsets lineup,terminal <flags> -q <prompt>`` in the background, with no terminal."""
    return process("chat", "--toolsets", "lineup,terminal", *flags, "-q", prompt, home=home)


def configure(home: Path, old: str, new: str) -> None:
    """Replace ``old`` with ``new`` in the Hermes home's ``config.yaml``."""
    config = home / "config.yaml"
    text = config.read_text(encoding="utf-8")
    assert old in text, old
    config.write_text(text.replace(old, new), encoding="utf-8")


def two_deletions(llm: ScriptedLLM, tmp_path: Path) -> tuple[Path, Path]:
    """Two new folders; the model deletes one, then the other (each asks approval), then says "Cleaned up."."""
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    llm.reset(
        call("terminal", command=f"rm -rf {first}"), call("terminal", command=f"rm -rf {second}"), say("Cleaned up.")
    )
    return first, second


def terminal_statuses(llm: ScriptedLLM) -> list[str | None]:
    """How each ``terminal`` call of the last request ended, for the model (``blocked`` when denied)."""
    return [m["json"].get("status") for m in tool_messages(llm.requests[-1]) if m["name"] == "terminal"]


@bounded
@pytest.mark.parametrize(
    ("serving", "flags", "choice", "asked"),
    [
        ("chat", (), "once", 2),  # once: the second deletion is asked again (and denied here)
        ("chat", ("-Q",), "session", 1),
        ("gateway", (), "always", 1),
        ("gateway", ("-Q",), "deny", 2),  # a denial is not remembered: the second is asked (and denied)
    ],
)
async def test_a_one_shot_chat_approval_is_an_app_card_and_the_apps_choice_is_hermes_answer(
    home: tuple[Path, int],
    llm: ScriptedLLM,
    tmp_path: Path,
    serving: str,
    flags: tuple[str, ...],
    choice: str,
    asked: int,
) -> None:
    # served by the chat itself (it waits for the App to connect), or forwarded to the gateway that serves it
    path, port = home
    first, second = two_deletions(llm, tmp_path)
    if serving == "chat":
        configure(path, "store: sqlite", "store: sqlite\n      app_grace: 60")
    with process("gateway", "run", home=path) if serving == "gateway" else contextlib.nullcontext():
        app = await app_on(port) if serving == "gateway" else None
        with one_shot("clean up", path, *flags) as asking:
            app = app or await app_on(port)
            card = await app.next_call()
            assert card.name == "confirm" and card.arguments["details"] == f"rm -rf {first}"
            assert [c["value"] for c in card.arguments["choices"]] == ["once", "session", "always", "deny"]
            assert card.origin is not None and (card.origin.kind, card.origin.label) == ("chat", "hermes chat")
            approves = choice != "deny"
            await app.answer(card, "completed" if approves else "rejected", approved=approves, choice=choice)
            if asked == 2:
                again = await app.next_call()
                assert again.arguments["details"] == f"rm -rf {second}"
                await app.answer(again, "rejected", approved=False, choice="deny")
            assert "Cleaned up." in await output(asking)
        await app.close()
    statuses = terminal_statuses(llm)
    assert first.exists() is (choice == "deny")  # the command ran, or Hermes blocked it
    assert second.exists() is (asked == 2)  # approved for the session (or for good), or asked again
    assert (statuses[0] == "blocked") is (choice == "deny"), statuses
    allowlist = (path / "config.yaml").read_text(encoding="utf-8").partition("command_allowlist:")[2]
    kind = str(card.arguments["message"]).rpartition("(")[2].rstrip(")")  # e.g. "recursive delete"
    assert (f"- {kind}" in allowlist) is (choice == "always"), allowlist  # Hermes kept it for good, in config.yaml


@bounded
async def test_a_one_shot_chat_approval_with_no_app_connected_is_denied_at_once(
    home: tuple[Path, int], llm: ScriptedLLM, tmp_path: Path
) -> None:
    # Hermes would wait its approvals.timeout (here far longer than the test may take) and deny: nobody
    # can answer a one-shot chat's prompt but the App, and no App is connected
    path, _ = home
    first, second = two_deletions(llm, tmp_path)
    configure(path, "timeout: 30", "timeout: 3600")
    with one_shot("clean up", path) as asking:
        assert "Cleaned up." in await output(asking)
    assert first.exists() and second.exists()
    assert terminal_statuses(llm) == ["blocked", "blocked"]
