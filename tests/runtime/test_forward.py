"""Every process can ask: calls forwarded to the process that serves the App, and the hand-over when it goes.

Two :class:`LineUpService` instances on one data directory are two processes as far as LineUp
knows (the server lock is an OS file lock per open file); the hand-over after a SIGKILL runs
the serving side in a real child process. The App is a real WebSocket client; the store is a
real SQLite file shared through the data directory.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lineup_plugin import load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.protocol.forward import MAX_REASON
from lineup_plugin.protocol.messages import MAX_TEXT, AgentStop, Text, ToolCall, ToolCancel, ToolResult
from lineup_plugin.protocol.session import RESTARTED
from lineup_plugin.runtime import forward
from lineup_plugin.runtime.base import Conversation
from lineup_plugin.runtime.service import STOPPED_BY_USER, LineUpService
from lineup_plugin.store import read_call_audit
from tests.runtime.fake_runtime import FakeRuntime
from tests.wsapp import WsApp

TOKEN = "forward-test-token-0123456789"
CHOICE = {"question": "Ship it?", "options": ["yes", "no"]}
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def port() -> int:
    return free_port()


def make_service(data_dir: Path, port: int, role: str, **settings: Any) -> LineUpService:
    options: dict[str, Any] = {"host": "127.0.0.1", "port": port, "token": TOKEN, "data_dir": data_dir}
    registry = load_registry(load_entrypoints=False)
    return LineUpService(FakeRuntime(), Settings(**options | settings), registry, role=role)


@pytest.fixture
def services(tmp_path: Path, port: int) -> Iterator[tuple[LineUpService, LineUpService]]:
    """The gateway (serves) and a one-shot chat (forwards), on one data directory and SQLite store."""
    gateway, chat = make_service(tmp_path, port, "gateway"), make_service(tmp_path, port, "process")
    assert gateway.ensure_started("test")
    yield gateway, chat
    chat.stop()
    gateway.stop()


class Withdrawn:
    """An interrupt check that says why (as the CLI's approval prompt answered at the keyboard does)."""

    def __init__(self, event: threading.Event, reason: str) -> None:
        self.event = event
        self.reason = reason

    def __call__(self) -> bool:
        return self.event.is_set()


class Asking:
    """A tool call made on a thread of the forwarding process, which a test may interrupt."""

    def __init__(
        self,
        service: LineUpService,
        name: str = "choice",
        args: dict[str, Any] | None = None,
        *,
        reason: str | None = None,
    ) -> None:
        self.interrupted = threading.Event()
        self.service = service
        check = Withdrawn(self.interrupted, reason) if reason is not None else self.interrupted.is_set
        self.task = asyncio.create_task(
            asyncio.to_thread(
                service.call_blocking,
                name,
                CHOICE if args is None else args,
                is_interrupted=check,
                heartbeat=lambda: None,
                deadline=60,
            )
        )

    async def result(self) -> Any:
        return await asyncio.wait_for(self.task, 60)


@pytest.fixture
def owner(tmp_path: Path, port: int) -> Iterator[subprocess.Popen[str]]:
    """A real process that serves the App from ``tmp_path`` on ``port`` until it is killed."""
    command = [sys.executable, "-m", "tests.runtime.fake_runtime", str(tmp_path), str(port), TOKEN]
    with subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()


async def connect(port: int, **options: Any) -> WsApp:
    """The App connecting to whichever process serves ``port`` (trying again while none does)."""
    return await WsApp.reconnecting(port, TOKEN, **options)


async def asked(service: LineUpService, port: int) -> tuple[WsApp, Asking, ToolCall]:
    """The App connected, and a card ``service`` (a forwarding process) asked, shown on it."""
    app = await connect(port)
    asking = Asking(service)
    return app, asking, await app.next_call()


async def test_a_call_in_another_process_reaches_the_app_and_its_answer_comes_back(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    gateway, chat = services
    app, asking, call = await asked(chat, port)
    assert call.origin is not None and call.origin.kind == "process"  # (``hermes chat`` would be "chat")
    await app.answer(call, selected="yes", index=0)
    result = await asking.result()
    assert (result.status, result.call_id) == ("completed", call.call_id)
    assert result.result == {"selected": "yes", "index": 0}
    assert not chat.serving and gateway.serving
    await app.close()


async def test_the_forwarding_process_gets_the_same_failure_statuses(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    _, chat = services
    no_app = await Asking(chat).result()
    assert (no_app.status, no_app.result.get("error")) == ("failed", "no_app")
    bad = await Asking(chat, args={"question": "?"}).result()
    assert (bad.status, bad.result.get("error")) == ("failed", "invalid_arguments")
    app, asking, call = await asked(chat, port)
    await app.answer(call, "rejected")
    assert (await asking.result()).status == "rejected"
    await app.close()


async def test_an_interrupt_in_the_forwarding_process_cancels_the_card_on_the_app(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    _, chat = services
    app, asking, call = await asked(chat, port)
    asking.interrupted.set()
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.call_id == call.call_id
    result = await asking.result()
    assert (result.status, result.call_id) == ("cancelled", call.call_id)
    await app.close()


async def test_an_interrupt_that_says_why_reaches_the_card_through_the_serving_process(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    _, chat = services
    app = await connect(port)
    said = "answered in the terminal: Deny"
    asking = Asking(chat, reason=said)
    call = await app.next_call()
    asking.interrupted.set()
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and (cancel.call_id, cancel.reason) == (call.call_id, said)
    assert cancel.outcome is not None and cancel.outcome.result == {"message": said}
    assert (await asking.result()).status == "cancelled"
    await app.close()


async def test_an_interrupt_whose_reason_is_over_the_lines_bound_is_cut_not_a_crash(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    """A cancel line's reason is at most MAX_REASON characters: the forwarder cuts a check's longer one."""
    _, chat = services
    app = await connect(port)
    asking = Asking(chat, reason="x" * (MAX_REASON * 3))
    call = await app.next_call()
    asking.interrupted.set()
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.call_id == call.call_id
    assert cancel.reason is not None and len(cancel.reason) == MAX_REASON and cancel.reason.startswith("xxx")
    assert (await asking.result()).status == "cancelled"
    await app.close()


async def test_the_apps_stop_button_interrupts_the_forwarding_process_and_closes_its_card(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    gateway, chat = services
    app, asking, call = await asked(chat, port)
    await app.send(AgentStop())
    result = await asking.result()
    assert (result.status, result.call_id) == ("cancelled", call.call_id)
    assert STOPPED_BY_USER in result.result["message"]
    assert await asyncio.to_thread(chat.runtime.interrupted.wait, 30)  # type: ignore[attr-defined]
    assert gateway.runtime.interrupts  # type: ignore[attr-defined]
    await app.close()


async def test_two_processes_ask_at_once_and_each_gets_its_own_answer(tmp_path: Path, port: int) -> None:
    gateway, first, second = (make_service(tmp_path, port, role) for role in ("gateway", "cli", "process"))
    try:
        assert gateway.ensure_started("test")
        app = await connect(port)
        asks = {
            "first": Asking(first, args={"question": "first?", "options": ["a", "b"]}),
            "second": Asking(second, args={"question": "second?", "options": ["c", "d"]}),
        }
        calls = [await app.next_call(), await app.next_call()]
        for call in calls:
            await app.answer(call, selected=call.arguments["options"][1], index=1)
        assert (await asks["first"].result()).result == {"selected": "b", "index": 1}
        assert (await asks["second"].result()).result == {"selected": "d", "index": 1}
        assert {call.origin.kind for call in calls if call.origin} == {"cli", "process"}
        await app.close()
    finally:
        for service in (first, second, gateway):
            service.stop()


async def test_when_the_serving_process_stops_a_waiting_process_takes_over_and_the_card_stays_answerable(
    services: tuple[LineUpService, LineUpService], port: int, tmp_path: Path
) -> None:
    gateway, chat = services
    app, asking, call = await asked(chat, port)
    await asyncio.to_thread(gateway.stop)
    assert "tool.cancel" not in [message.kind for message in (await app.closed())[2]]  # handed over, not ended
    app = await connect(port, open_calls=[call.call_id])  # the App reconnects by itself
    again = await app.next_call()
    assert again.call_id == call.call_id and chat.serving
    await app.answer(again, selected="no", index=1)
    result = await asking.result()
    assert (result.status, result.result.get("selected"), result.call_id) == ("completed", "no", call.call_id), result
    await app.close()


async def test_a_clean_hand_over_logs_no_error(
    services: tuple[LineUpService, LineUpService], port: int, caplog: pytest.LogCaptureFixture
) -> None:
    gateway, chat = services
    caplog.set_level(logging.WARNING)
    app, asking, call = await asked(chat, port)
    await asyncio.to_thread(gateway.stop)
    gc.collect()  # a task whose exception nobody read says so when it is collected
    app = await connect(port, open_calls=[call.call_id])
    await app.answer(await app.next_call(), selected="yes", index=0)
    assert (await asking.result()).status == "completed"
    await app.close()
    gc.collect()
    errors = [record for record in caplog.records if record.levelno >= logging.ERROR]
    assert errors == [], [record.getMessage() for record in errors]


async def test_when_the_serving_process_is_killed_a_waiting_process_takes_over_from_the_store(
    tmp_path: Path, port: int, owner: subprocess.Popen[str]
) -> None:
    chat = make_service(tmp_path, port, "process")
    try:
        assert owner.stdout is not None and await asyncio.to_thread(owner.stdout.readline) == "serving\n"
        app = await connect(port)
        asking = Asking(chat)
        call = await app.next_call()
        assert call.origin is not None
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        await app.closed()
        app = await connect(port, open_calls=[call.call_id])
        again = await app.next_call()
        assert again.call_id == call.call_id and again.arguments == call.arguments
        await app.answer(again, selected="yes", index=0)
        result = await asking.result()
        assert (result.status, result.result["selected"], result.call_id) == ("completed", "yes", call.call_id)
        assert chat.serving
        await app.close()
    finally:
        chat.stop()
    events = [record.event for record in read_call_audit(tmp_path / "lineup.sqlite3") if record.call_id == call.call_id]
    assert "call.recovered" in events and events[-1] == "call.completed"


def forward_raw(data_dir: Path, call_id: str) -> socket.socket:
    """A forwarding process speaking the socket's protocol by hand; its call is ``choice`` with ``call_id``."""
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(str(forward.socket_path(data_dir)))
    token = (data_dir / forward.TOKEN_FILE).read_text()
    hello = {"op": "hello", "token": token, "pid": 1}
    request = {"op": "call", "call_id": call_id, "name": "choice", "arguments": CHOICE}
    sock.sendall((json.dumps(hello) + "\n" + json.dumps(request) + "\n").encode())
    return sock


async def test_a_call_left_open_by_a_killed_process_that_nobody_claims_is_closed_after_the_grace(
    tmp_path: Path, port: int, owner: subprocess.Popen[str]
) -> None:
    other = make_service(tmp_path, port, "process", handover_grace=0.5)
    try:
        assert owner.stdout is not None and await asyncio.to_thread(owner.stdout.readline) == "serving\n"
        app = await connect(port)
        orphan = await asyncio.to_thread(forward_raw, tmp_path, "call-nobody-waits-for")
        assert (await app.next_call()).call_id == "call-nobody-waits-for"
        owner.send_signal(signal.SIGKILL)
        owner.wait(30)
        orphan.close()
        await app.closed()
        assert await asyncio.to_thread(other.ensure_started, "take over")
        app = await connect(port, open_calls=["call-nobody-waits-for"])
        assert (await app.next_call()).call_id == "call-nobody-waits-for"  # still open meanwhile
        cancel = (await app.next("tool.cancel")).payload
        assert isinstance(cancel, ToolCancel)
        assert (cancel.call_id, cancel.reason) == ("call-nobody-waits-for", RESTARTED)
        await app.close()
    finally:
        other.stop()


async def card_by_hand(app: WsApp, data_dir: Path, call_id: str) -> socket.socket:
    """A card asked by a forwarder speaking the socket by hand (:func:`forward_raw`), once the App shows it."""
    sock = await asyncio.to_thread(forward_raw, data_dir, call_id)
    assert (await app.next_call()).call_id == call_id
    sock.settimeout(30)
    return sock


@pytest.mark.parametrize("last", [b"", b'{"op": "cancel", "rea'], ids=["between-lines", "in-the-middle-of-a-line"])
async def test_a_forwarding_process_that_dies_has_its_card_cancelled(
    services: tuple[LineUpService, LineUpService], port: int, tmp_path: Path, last: bytes
) -> None:
    app = await connect(port)
    sock = await card_by_hand(app, tmp_path, "call-from-a-dying-process")
    sock.sendall(last)  # what it was writing when it was killed
    sock.close()
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.reason == forward.ASKER_GONE
    await app.close()


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ({"op": "cancel", "reason": {"html": "<b>"}}, "reason: input should be a valid string"),
        ({"op": "cancel", "reason": "x" * (MAX_REASON + 1)}, f"reason: string should have at most {MAX_REASON}"),
        ({"op": "cancel", "call_id": "another-call"}, "'another-call' is not this connection's call"),
        ({"op": "shout"}, "expected a cancel or an answer"),
        ({"op": "call", "call_id": "c2", "name": "choice"}, "expected a cancel or an answer"),
        ({"op": "answer", "surface": "mcp-host", "result": {"status": "maybe"}}, "result"),
    ],
    ids=["reason-object", "reason-too-long", "another-call", "unknown-op", "second-call", "bad-answer"],
)
async def test_a_bad_line_during_a_forwarded_call_is_refused_saying_why_and_its_card_withdrawn(
    services: tuple[LineUpService, LineUpService], port: int, tmp_path: Path, line: dict[str, Any], says: str
) -> None:
    """A cancel's reason went unchecked into the result, the store and every App; unknown ops were ignored."""
    app = await connect(port)
    sock = await card_by_hand(app, tmp_path, "call-of-a-broken-forwarder")
    sock.sendall(json.dumps(line).encode() + b"\n")
    refused = json.loads(await asyncio.to_thread(sock.recv, 65536))
    sock.close()
    assert refused["op"] == "error" and says in refused["message"]
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.reason == forward.ASKER_REFUSED
    await app.close()


async def test_a_forwarders_cancel_shows_its_reason_on_the_app(
    services: tuple[LineUpService, LineUpService], port: int, tmp_path: Path
) -> None:
    app = await connect(port)
    sock = await card_by_hand(app, tmp_path, "call-cancelled-with-a-reason")
    cancel_line = {"op": "cancel", "call_id": "call-cancelled-with-a-reason", "reason": "the CLI was closed"}
    sock.sendall(json.dumps(cancel_line).encode() + b"\n")
    cancel = (await app.next("tool.cancel")).payload
    assert isinstance(cancel, ToolCancel) and cancel.reason == "the CLI was closed"
    result = json.loads(await asyncio.to_thread(sock.recv, 65536))
    sock.close()
    assert result["op"] == "result" and result["result"]["status"] == "cancelled"
    await app.close()


# ------------------------------------------------------------------------ hostile peers


def exchange(path: Path, data: bytes) -> dict[str, Any]:
    """Send ``data`` on the forwarding socket; the one line the server answers (it then closes)."""
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(30)
        sock.connect(str(path))
        sock.sendall(data)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return dict(json.loads(answer)) if answer else {}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'{"op": "hello", "token": "wrong"}\n', "wrong token"),
        (b'{"op": "call"}\n', "hello with the token first"),
        (b"[1, 2]\n", "not a JSON object"),
        (b"\xff\xfe\n", "not JSON"),
        (b'{"op": "hello", "token": "\\ud800"}\n', "token: lone surrogate"),
        (b"x" * (forward.MAX_LINE + 10), "longer than"),
    ],
    ids=["wrong-token", "no-hello", "not-an-object", "not-utf8", "lone-surrogate", "huge-line"],
)
async def test_the_forwarding_socket_refuses_bad_peers_saying_why(
    services: tuple[LineUpService, LineUpService], tmp_path: Path, data: bytes, says: str
) -> None:
    answer = await asyncio.to_thread(exchange, forward.socket_path(tmp_path), data)
    assert answer["op"] == "error" and says in answer["message"]


@pytest.mark.parametrize(
    ("request_", "says"),
    [
        ({"op": "call", "call_id": "", "name": "choice"}, "call_id"),
        ({"op": "call", "call_id": "c1", "name": "choice", "arguments": []}, "arguments"),
        ({"op": "call", "call_id": "c1", "name": "choice", "deadline": -1}, "deadline"),
        ({"op": "call", "call_id": "c1", "name": "choice", "origin": {"kind": "martian"}}, "origin"),
        ({"op": "call", "call_id": "c1", "name": "choice", "arguments": {"q": "\ud800"}}, "lone surrogate"),
        ({"op": "status", "state": "dancing"}, "state: input should be 'idle'"),
        ({"op": "status", "state": "idle", "detail": 5}, "detail"),
        ({"op": "text", "text": ""}, "text: string should have at least 1 character"),
        ({"op": "shout"}, "expected a call, a status or a text"),
        ({"op": "text", "text": "hi", "conversation": {"id": ""}}, "conversation.id"),
        ({"op": "call", "call_id": "c1", "name": "choice", "conversation": "cli"}, "conversation: input should be"),
    ],
    ids=[
        "empty-id",
        "arguments-list",
        "negative-deadline",
        "unknown-origin",
        "lone-surrogate",
        "unknown-state",
        "detail-number",
        "empty-text",
        "unknown-op",
        "empty-conversation-id",
        "conversation-not-an-object",
    ],
)
async def test_a_bad_request_on_the_forwarding_socket_is_refused_naming_the_field(
    services: tuple[LineUpService, LineUpService], tmp_path: Path, request_: dict[str, Any], says: str
) -> None:
    token = (tmp_path / forward.TOKEN_FILE).read_text()
    data = (json.dumps({"op": "hello", "token": token}) + "\n" + json.dumps(request_) + "\n").encode()
    answer = await asyncio.to_thread(exchange, forward.socket_path(tmp_path), data)
    assert answer["op"] == "error" and says in answer["message"]


async def test_a_line_nested_thousands_deep_is_refused_with_a_reply_and_the_server_serves_on(
    services: tuple[LineUpService, LineUpService], tmp_path: Path, port: int
) -> None:
    """JSON nested 5,000 deep made the decoder raise RecursionError: no reply, a task error logged."""
    deep = b"[" * 5_000 + b"]" * 5_000 + b"\n"
    answer = await asyncio.to_thread(exchange, forward.socket_path(tmp_path), deep)
    assert answer["op"] == "error" and "nested too deep" in answer["message"]
    token = (tmp_path / forward.TOKEN_FILE).read_text()
    hello = json.dumps({"op": "hello", "token": token}).encode() + b"\n"
    text = b'{"op": "text", "text": ' + b"[" * 5_000 + b"]" * 5_000 + b"}\n"
    answer = await asyncio.to_thread(exchange, forward.socket_path(tmp_path), hello + text)
    assert answer["op"] == "error" and "nested too deep" in answer["message"]
    app, asking, _ = await asked(services[1], port)  # the server still serves
    await app.close()
    asking.interrupted.set()
    await asking.result()


async def test_a_forwarded_text_over_100000_characters_is_refused_and_the_forwarder_cuts_its_own(
    services: tuple[LineUpService, LineUpService], tmp_path: Path, port: int
) -> None:
    token = (tmp_path / forward.TOKEN_FILE).read_text()
    request = {"op": "text", "text": "x" * (MAX_TEXT + 1)}
    data = (json.dumps({"op": "hello", "token": token}) + "\n" + json.dumps(request) + "\n").encode()
    answer = await asyncio.to_thread(exchange, forward.socket_path(tmp_path), data)
    assert answer["op"] == "error" and f"text: string should have at most {MAX_TEXT} characters" in answer["message"]
    app = await connect(port)
    await asyncio.to_thread(services[1].send_text, "y" * (MAX_TEXT + 5_000))  # a long reply of a CLI
    text = (await app.next("text")).payload
    assert isinstance(text, Text) and text.text == "y" * MAX_TEXT
    await app.close()


async def test_a_forwarder_cannot_claim_another_forwarders_call_nor_cancel_it_by_leaving(
    services: tuple[LineUpService, LineUpService], tmp_path: Path, port: int
) -> None:
    app = await connect(port)
    first = await asyncio.to_thread(forward_raw, tmp_path, "call-of-the-first")
    call = await app.next_call()
    assert call.call_id == "call-of-the-first"
    second = await asyncio.to_thread(forward_raw, tmp_path, "call-of-the-first")  # the same id, another connection
    second.settimeout(30)
    refused = json.loads(await asyncio.to_thread(second.recv, 65536))
    assert refused["op"] == "error" and "another connection's call" in refused["message"]
    second.close()
    await app.send(ToolResult(call_id=call.call_id, status="completed", result={"selected": "yes", "index": 0}))
    first.settimeout(30)
    answer = json.loads(await asyncio.to_thread(first.recv, 65536))  # the answer reaches its own asker
    assert answer["op"] == "result" and answer["result"]["status"] == "completed"
    first.close()
    asking = Asking(services[0])  # the serving process's own call: no forwarder may wait on it
    own = await app.next_call()
    claim = await asyncio.to_thread(forward_raw, tmp_path, own.call_id)
    claim.settimeout(30)
    refused = json.loads(await asyncio.to_thread(claim.recv, 65536))
    assert refused["op"] == "error" and "not a forwarded one" in refused["message"]
    claim.close()
    await app.send(ToolResult(call_id=own.call_id, status="completed", result={"selected": "no", "index": 1}))
    assert (await asking.result()).status == "completed"  # the claim that left cancelled nothing
    await app.close()


def test_the_socket_and_its_token_are_private_to_this_user(
    services: tuple[LineUpService, LineUpService], tmp_path: Path
) -> None:
    path = forward.socket_path(tmp_path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / forward.TOKEN_FILE).stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o077 == 0


def test_a_data_dir_too_deep_for_a_socket_path_gets_a_private_one_elsewhere(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    path = forward.socket_path(deep)
    assert len(os.fsencode(path)) <= 100 and path == forward.socket_path(deep)
    assert path != forward.socket_path(tmp_path / "other")


@pytest.mark.usefixtures("impatient")
def test_when_the_serving_process_cannot_be_reached_the_call_fails_naming_it(tmp_path: Path, port: int) -> None:
    from lineup_plugin.runtime.lock import ServerLock

    lock = ServerLock(tmp_path)
    assert lock.acquire("gateway", command="old-lineup")  # holds the lock, never listens
    chat = make_service(tmp_path, port, "process")
    try:
        result = chat.call_blocking("choice", CHOICE, is_interrupted=lambda: False, heartbeat=lambda: None, deadline=1)
    finally:
        lock.release()
    assert (result.status, result.result["error"]) == ("failed", "not_owner")
    assert "cannot reach" in result.result["message"] and "old-lineup" in result.result["message"]


async def test_a_forwarding_process_s_status_and_replies_reach_the_app(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    _, chat = services
    app = await connect(port)
    await asyncio.to_thread(chat.report_status, "thinking", "the one-shot chat")
    while (status := (await app.next("agent.status")).payload).state != "thinking":  # type: ignore[union-attr]
        pass
    assert status.detail == "the one-shot chat"  # type: ignore[union-attr]
    await asyncio.to_thread(chat.send_text, "Deploying to staging.")
    assert (await app.next("text")).payload.text == "Deploying to staging."  # type: ignore[union-attr]
    await asyncio.to_thread(chat.report_status, "failed", "d" * (MAX_REASON + 500))  # a long error: cut, not lost
    while (status := (await app.next("agent.status")).payload).state != "failed":  # type: ignore[union-attr]
        pass
    assert status.detail is not None and status.detail.startswith("ddd") and len(status.detail) == MAX_REASON  # type: ignore[union-attr]
    await app.close()


async def test_a_forwarding_process_s_session_is_a_conversation_of_its_own_on_the_app(
    services: tuple[LineUpService, LineUpService], port: int
) -> None:
    _, chat = services
    app = await connect(port)
    cli = Conversation("hermes-20261201_cli", "Hermes cli · 20261201_cli")
    await asyncio.to_thread(chat.send_text, "Drafting the notes.", conversation=cli)
    told = await app.next("text")
    asking = asyncio.create_task(
        asyncio.to_thread(
            chat.call_blocking,
            "choice",
            CHOICE,
            is_interrupted=lambda: False,
            heartbeat=lambda: None,
            deadline=60,
            conversation=cli,
        )
    )
    card = await app.next("tool.call")
    assert isinstance(card.payload, ToolCall)
    await app.answer(card.payload, selected="yes", index=0)
    result = await asyncio.wait_for(asking, 60)
    await app.close()
    assert (told.conversation_id, card.conversation_id) == (cli.id, cli.id)
    assert result.status == "completed"
    titled = app_conversations(services[0])
    assert titled[cli.id] == cli.title


def app_conversations(service: LineUpService) -> dict[str, str | None]:
    """The conversations the serving process keeps, by id: their titles."""
    assert service.runner is not None
    session = service.runner.hub.session
    return {info.conversation_id: info.title for info in session.history.conversations()}


@pytest.mark.parametrize("line", [b"not json\n", b'{"op": "result", "result": {"status": "maybe"}}\n'])
def test_a_serving_process_that_answers_nonsense_gives_a_clear_error_not_a_crash(tmp_path: Path, line: bytes) -> None:
    from lineup_plugin.errors import LineUpError

    path = forward.socket_path(tmp_path)
    (tmp_path / forward.TOKEN_FILE).write_text("t")
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(path))
        server.listen()

        def answer() -> None:
            peer, _ = server.accept()
            with peer:
                peer.recv(65536)
                peer.sendall(line)
                peer.recv(1)  # until the forwarder hangs up

        thread = threading.Thread(target=answer)
        thread.start()
        with pytest.raises(LineUpError, match="not valid"):
            forward.Forwarder(tmp_path).call(
                "choice", CHOICE, call_id="c1", deadline=5, origin=None, is_interrupted=lambda: False
            )
        thread.join(10)


def test_a_forwarding_connection_is_a_link_of_the_serving_hub() -> None:
    link = forward.ForwardLink.__new__(forward.ForwardLink)  # mypy checks the class against the port
    assert link.max_text == forward.MAX_LINE and callable(link.send) and callable(link.close)
