"""Direct mode over real WebSockets and real HTTP on 127.0.0.1, port 0."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.errors import TransportError
from lineup_plugin.protocol.messages import CallOutcome, Error, Text, ToolCancel, ToolList, ToolResult
from lineup_plugin.transports.app_files import packaged_app
from lineup_plugin.transports.direct.auth import AuthThrottle
from lineup_plugin.transports.direct.reading import FLOODED
from lineup_plugin.transports.direct.server import QUEUE_FULL, DirectServer, Limits
from tests.wsapp import WsApp, encode_from, hello_text, wait_until

TOKEN = "direct-test-token-0123456789"
CHOICE = {"question": "Deploy where?", "options": ["test", "staging", "production"]}


def make_settings(tmp_path: Path, **changes: Any) -> Settings:
    values: dict[str, Any] = {"host": "127.0.0.1", "port": 0, "token": TOKEN, "data_dir": tmp_path / "data"}
    return Settings(**{**values, **changes})


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    """A small App with a secret next to (outside) it."""
    root = tmp_path / "app"
    (root / "cards").mkdir(parents=True)
    (root / "index.html").write_text("<!doctype html><title>LineUp test</title>")
    (root / "main.js").write_text("export const answer = 42;\n")
    (root / "style.css").write_text("body { margin: 0 }\n")
    (root / "cards" / "choice.js").write_text("export default 1;\n")
    (root / ".hidden").write_text("hidden")
    (tmp_path / "secret.txt").write_text("do not serve me")
    return root


@asynccontextmanager
async def running(tmp_path: Path, **options: Any) -> AsyncIterator[DirectServer]:
    settings_changes = options.pop("settings", {})
    hub = options.pop("hub", None) or Hub(load_registry(load_entrypoints=False))
    server = DirectServer.from_settings(hub, make_settings(tmp_path, **settings_changes), **options)
    async with server:
        yield server


async def http_get(port: int, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP/1.1 GET, so the request path reaches the server exactly as written."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    extra = "".join(f"{name}: {value}\r\n" for name, value in (headers or {}).items())
    writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{extra}\r\n".encode())
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in header_lines)
    return int(status_line.split()[1]), {k.lower(): v for k, v in headers.items()}, body


# ------------------------------------------------------------------------------------ auth


async def test_right_token_opens_a_session_with_welcome_tools_and_status(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "phone", welcome=False)
        kinds = [(await app.recv()).kind for _ in range(3)]
        assert kinds == ["device.welcome", "tool.list", "agent.status"]
        assert [p.device_id for p in server.hub.peers] == ["phone"]
        await app.close()


async def test_wrong_token_gets_auth_failed_then_4401_and_nothing_else(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "intruder", token="not-the-token-at-all", welcome=False)
        code, reason, before = await app.closed()
        assert (code, reason) == (4401, "wrong token")
        assert [m.kind for m in before] == ["error"]
        assert before[0].payload == Error(code="auth_failed", message="wrong token")
        assert server.hub.peers == []


async def test_missing_token_is_refused_like_a_wrong_one(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "no-token", token="", welcome=False)
        code, reason, before = await app.closed()
        assert (code, reason) == (4401, "missing token")
        assert [m.payload.code for m in before] == ["auth_failed"]  # type: ignore[union-attr]


async def test_repeated_wrong_tokens_from_one_address_are_slowed_down_and_reset_on_success(tmp_path: Path) -> None:
    throttle = AuthThrottle(base=0.001, cap=0.004)
    async with running(tmp_path, throttle=throttle) as server:
        for attempt in range(1, 5):
            app = await WsApp.connect(server, "guesser", token=f"guess-{attempt}", welcome=False)
            assert (await app.closed())[:2] == (4401, "wrong token")
            assert throttle.failures("127.0.0.1") == attempt
        assert throttle.delay("127.0.0.1") == 0.004  # 0.001 * 2**3 = 0.008, capped
        app = await WsApp.connect(server, "owner")
        assert (throttle.failures("127.0.0.1"), throttle.delay("127.0.0.1")) == (0, 0.0)
        await app.close()


async def test_first_message_must_be_a_hello(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(encode_from("phone", Text(text="hi, no hello")))
            app = WsApp(ws, "phone")
            code, reason, before = await app.closed()
        assert (code, reason) == (4400, "device.hello required")
        assert [m.payload.code for m in before] == ["hello_required"]  # type: ignore[union-attr]


async def test_malformed_hello_is_refused_with_the_field_named(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send('{"v": 1, "id": "x", "type": "lineup.v1.device.hello"}')
            code, reason, before = await WsApp(ws, "phone").closed()
        assert code == 4400 and reason.startswith("bad hello: conversation_id")
        assert [m.payload.code for m in before] == ["bad_message"]  # type: ignore[union-attr]


async def test_silence_after_connecting_ends_with_hello_timeout(tmp_path: Path) -> None:
    async with running(tmp_path, limits=Limits(hello_timeout=0.05)) as server:
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            code, reason, before = await WsApp(ws, "phone").closed()
        assert (code, reason) == (4408, "no device.hello within 0.05 s")
        assert [m.payload.code for m in before] == ["hello_timeout"]  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- origins


async def test_foreign_browser_origin_is_refused_at_the_handshake_with_403(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        with pytest.raises(InvalidStatus) as refused:
            await connect(f"ws://127.0.0.1:{server.port}/ws", origin="http://evil.example")  # type: ignore[arg-type]
        assert refused.value.response.status_code == 403
        assert b"origin http://evil.example is not allowed" in refused.value.response.body
        assert server.connections == 0


@pytest.mark.parametrize(
    ("origin", "allowed"),
    [
        (None, []),
        ("same", []),
        ("http://phone.example:8080", ["http://phone.example:8080"]),
    ],
    ids=["no-origin-non-browser", "same-origin", "listed-in-allowed_origins"],
)
async def test_allowed_origins_connect_and_still_need_the_token(
    tmp_path: Path, origin: str | None, allowed: list[str]
) -> None:
    async with running(tmp_path, settings={"allowed_origins": allowed}) as server:
        if origin == "same":
            origin = f"http://127.0.0.1:{server.port}"
        app = await WsApp.connect(server, "phone", origin=origin)
        await app.close()
        intruder = await WsApp.connect(server, "intruder", token="wrong-token-here", welcome=False, origin=origin)
        assert (await intruder.closed())[:2] == (4401, "wrong token")


# ------------------------------------------------------------------------------- static App


async def test_get_root_serves_the_app_html(tmp_path: Path, app_dir: Path) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        status, headers, body = await http_get(server.port, "/")
    assert status == 200
    assert headers["content-type"] == "text/html; charset=utf-8"
    assert body == b"<!doctype html><title>LineUp test</title>"
    assert headers["x-frame-options"] == "DENY" and headers["referrer-policy"] == "no-referrer"


@pytest.mark.parametrize(
    ("path", "content_type"),
    [
        ("/main.js", "text/javascript; charset=utf-8"),
        ("/cards/choice.js?v=2", "text/javascript; charset=utf-8"),
        ("/style.css", "text/css; charset=utf-8"),
    ],
)
async def test_get_file_serves_it_with_its_content_type(
    tmp_path: Path, app_dir: Path, path: str, content_type: str
) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        status, headers, body = await http_get(server.port, path)
    assert (status, headers["content-type"]) == (200, content_type)
    assert body == (app_dir / path.split("?")[0].lstrip("/")).read_bytes()


async def test_large_file_is_served_whole(tmp_path: Path, app_dir: Path) -> None:
    (app_dir / "big.js").write_text("// " + secrets.token_hex(1_500_000) + "\n")
    async with running(tmp_path, app_dir=app_dir) as server:
        status, headers, body = await http_get(server.port, "/big.js")
    assert (status, int(headers["content-length"])) == (200, len(body))
    assert body == (app_dir / "big.js").read_bytes()


@pytest.mark.parametrize(
    "path",
    [
        "/missing.js",
        "/cards/",
        "/../secret.txt",
        "/%2e%2e/secret.txt",
        "/cards/../../secret.txt",
        "/..%2fsecret.txt",
        "/cards%2f..%2f..%2fsecret.txt",
        "//secret.txt",
        "/.hidden",
        "/cards\\..\\..\\secret.txt",
        "/index.html%00.js",
    ],
)
async def test_unknown_paths_and_traversal_get_404(tmp_path: Path, app_dir: Path, path: str) -> None:
    async with running(tmp_path, app_dir=app_dir) as server:
        status, _, body = await http_get(server.port, path)
    assert (status, body) == (404, b"not found\n")


async def test_symlink_out_of_the_app_dir_is_not_followed(tmp_path: Path, app_dir: Path) -> None:
    (app_dir / "leak.txt").symlink_to(tmp_path / "secret.txt")
    async with running(tmp_path, app_dir=app_dir) as server:
        status, _, _ = await http_get(server.port, "/leak.txt")
    assert status == 404


async def test_packaged_app_index_is_served(tmp_path: Path) -> None:
    index = packaged_app() / "index.html"
    if not index.is_file():
        pytest.skip("the packaged App has no index.html yet")
    async with running(tmp_path) as server:
        status, headers, body = await http_get(server.port, "/")
    assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
    # the page names its files by version, and its entry module as the bundle (tests/transports/test_static.py)
    unversioned = re.sub(r"\?v=[0-9a-f]{20}", "", body.decode()).replace("app.bundle.js", "app.js")
    assert unversioned == index.read_text()


# ------------------------------------------------------------------------------------ calls


async def test_choice_round_trip(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "phone")
        task = asyncio.create_task(server.hub.agent_call("choice", CHOICE))
        call = await app.next_call()
        assert (call.name, call.arguments) == ("choice", CHOICE)
        await app.answer(call, selected="staging", index=1)
        result = await task
        assert (result.status, result.result) == ("completed", {"selected": "staging", "index": 1})
        await app.close()


async def test_two_devices_first_answer_wins_and_both_are_told_the_verdict(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        phone = await WsApp.connect(server, "phone")
        laptop = await WsApp.connect(server, "laptop")
        task = asyncio.create_task(server.hub.agent_call("choice", CHOICE))
        call = await phone.next_call()
        assert (await laptop.next_call()).call_id == call.call_id
        await phone.answer(call, selected="test", index=0)
        assert (await task).result == {"selected": "test", "index": 0}
        verdict = CallOutcome(status="completed", result={"selected": "test", "index": 0}, device_id="phone")
        cancel = (await laptop.next("tool.cancel")).payload
        assert cancel == ToolCancel(call_id=call.call_id, reason="answered on another device", outcome=verdict)
        told = (await phone.next("tool.cancel")).payload  # the device that won is told the verdict too
        assert isinstance(told, ToolCancel) and told.outcome == verdict
        await laptop.answer(call, selected="production", index=2)
        refused = (await laptop.next("error")).payload
        assert isinstance(refused, Error) and refused.code == "call_closed"
        await phone.close()
        await laptop.close()


async def test_reconnecting_app_gets_its_pending_call_again_and_answers_it_once(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone")
        task = asyncio.create_task(hub.agent_call("choice", CHOICE))
        call = await app.next_call()
        await app.close()

        again = await WsApp.connect(server, "phone", open_calls=[call.call_id])
        resent = await again.next_call()
        assert resent.call_id == call.call_id and resent.arguments == CHOICE
        await again.answer(resent, selected="production", index=2)
        assert (await task).result == {"selected": "production", "index": 2}
        await again.answer(resent, selected="test", index=0)
        assert (await again.next("error")).payload.code == "call_closed"  # type: ignore[union-attr]
        completed = [e for e in hub.store.audit_log if e[0] == "call.completed"]  # type: ignore[attr-defined]
        assert [(e[1], e[2]) for e in completed] == [(call.call_id, "phone")]
        await again.close()


async def network_dropped(app: WsApp, hub: Hub) -> None:
    """``app``'s network drops (its socket ends, no close frame) and the hub has seen it go."""
    app.ws.transport.abort()
    await wait_until(lambda: not hub.connected)


async def test_a_call_made_while_the_only_app_is_back_from_a_dropped_network_reaches_it(tmp_path: Path) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=60.0)) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone")
        await network_dropped(app, hub)
        task = asyncio.create_task(hub.agent_call("choice", CHOICE))  # before it is back: not no_app at once
        again = await WsApp.connect(server, "phone")
        call = await again.next_call()
        await again.answer(call, selected="test", index=0)
        result = await task
        assert (result.status, result.result) == ("completed", {"selected": "test", "index": 0})
        await again.close()


async def test_a_phone_whose_network_dropped_while_a_laptop_stayed_is_waited_for_once_the_laptop_closes(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=60.0)) as server:
        hub = server.hub
        phone = await WsApp.connect(server, "phone")
        laptop = await WsApp.connect(server, "laptop")
        phone.ws.transport.abort()
        await wait_until(lambda: [peer.device_id for peer in hub.peers] == ["laptop"])
        await laptop.close()  # closed by the user: the laptop is not coming back, the phone may be
        await wait_until(lambda: not hub.connected)
        task = asyncio.create_task(hub.agent_call("choice", CHOICE))
        await asyncio.sleep(0)  # one step: the call is checked and waits for a device
        assert not task.done()
        again = await WsApp.connect(server, "phone")
        call = await asyncio.wait_for(again.next_call(), 30)  # a guard, not a measure
        await again.answer(call, selected="test", index=0)
        assert (await task).status == "completed"
        await again.close()


async def test_another_device_coming_and_going_does_not_end_the_wait_for_the_lost_one(tmp_path: Path) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=60.0)) as server:
        hub = server.hub
        await network_dropped(await WsApp.connect(server, "phone"), hub)
        laptop = await WsApp.connect(server, "laptop")
        await laptop.close()
        await wait_until(lambda: not hub.connected)
        task = asyncio.create_task(hub.agent_call("choice", CHOICE))
        await asyncio.sleep(0)  # one step: the call is checked and waits for a device
        assert not task.done()
        again = await WsApp.connect(server, "phone")
        await again.answer(await asyncio.wait_for(again.next_call(), 30), selected="test", index=0)
        assert (await task).status == "completed"
        await again.close()


async def test_a_lost_connection_of_a_device_already_back_on_another_is_not_waited_for(tmp_path: Path) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=3600.0)) as server:
        hub = server.hub
        old = await WsApp.connect(server, "phone")
        new = await WsApp.connect(server, "phone")  # back on a new connection before the old one is seen to end
        old.ws.transport.abort()
        await wait_until(lambda: server.connections == 1)  # the server is done with the old one
        await new.close()  # then the person closed it
        await wait_until(lambda: not hub.connected)
        gone = await asyncio.wait_for(hub.agent_call("choice", CHOICE), 30)  # a guard, not a measure
        assert (gone.status, gone.result["error"]) == ("failed", "no_app")


async def test_a_call_interrupted_while_it_waits_for_the_lost_app_is_never_sent(tmp_path: Path) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=60.0)) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone")
        await network_dropped(app, hub)
        interrupted = asyncio.create_task(hub.agent_call("choice", CHOICE, call_id="call-interrupted"))
        await asyncio.sleep(0)  # one step: the call is checked and waits for a device
        assert not interrupted.done()
        interrupted.cancel()
        with pytest.raises(asyncio.CancelledError):
            await interrupted
        assert hub.stored_call("call-interrupted") is None  # never started: nothing to withdraw
        again = await WsApp.connect(server, "phone")
        task = asyncio.create_task(hub.agent_call("choice", CHOICE, call_id="call-after"))
        call = await again.next_call()
        assert call.call_id == "call-after"  # the first card it gets
        await again.answer(call, selected="test", index=0)
        assert (await task).status == "completed"
        await again.close()


async def test_a_call_after_the_app_closed_or_past_the_calls_deadline_fails_no_app_without_waiting_for_it(
    tmp_path: Path,
) -> None:
    async with running(tmp_path, limits=Limits(reconnect_grace=3600.0)) as server:
        hub = server.hub
        stranger = WsApp(await connect(f"ws://127.0.0.1:{server.port}/ws"), "phone")
        await stranger.ws.send(hello_text("phone", "not-the-token"))
        refused = (await stranger.next("error")).payload
        assert isinstance(refused, Error) and refused.code == "auth_failed"
        stranger.ws.transport.abort()  # gone without a goodbye, but it never was an App: nobody is expected back
        app = await WsApp.connect(server, "phone")
        await app.close()  # closed by the user: nobody is coming back
        await wait_until(lambda: not hub.connected)
        closed = await asyncio.wait_for(hub.agent_call("choice", CHOICE), 30)  # a guard, not a measure
        assert (closed.status, closed.result["error"]) == ("failed", "no_app")

        app = await WsApp.connect(server, "phone")
        await network_dropped(app, hub)
        lost = await asyncio.wait_for(hub.agent_call("choice", CHOICE, deadline=0.2), 30)  # the deadline bounds it
        assert (lost.status, lost.result["error"]) == ("failed", "no_app")

        back = await WsApp.connect(server, "phone")  # the lost App came back: nobody else is expected
        await back.close()  # then the person closed it
        await wait_until(lambda: not hub.connected)
        gone = await asyncio.wait_for(hub.agent_call("choice", CHOICE), 30)
        assert (gone.status, gone.result["error"]) == ("failed", "no_app")


# ----------------------------------------------------------------------------------- bounds


async def test_oversized_frame_closes_that_connection_with_1009_and_others_keep_working(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"max_frame_bytes": 1024}) as server:
        big = await WsApp.connect(server, "big")
        small = await WsApp.connect(server, "small")
        await big.ws.send(secrets.token_hex(2048))
        code, reason, _ = await big.closed()
        assert code == 1009 and "exceeds limit of 1024 bytes" in reason
        await small.send(ToolList(request=True))
        assert (await small.next("tool.list")).kind == "tool.list"
        await small.close()


async def test_binary_frame_gets_an_error_and_the_connection_stays_open(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "phone")
        await app.ws.send(b"\x00\x01binary")
        error = (await app.next("error")).payload
        assert isinstance(error, Error) and error.code == "binary_not_supported"
        await app.send(ToolList(request=True))
        assert (await app.next("tool.list")).kind == "tool.list"
        await app.close()


async def test_connection_over_max_connections_is_refused_with_1013(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"max_connections": 2}) as server:
        first = await WsApp.connect(server, "one")
        second = await WsApp.connect(server, "two")
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            with pytest.raises(ConnectionClosed) as refused:
                await ws.recv()
        assert refused.value.rcvd is not None
        assert (refused.value.rcvd.code, refused.value.rcvd.reason) == (1013, "too many connections")
        await first.close()
        await wait_until(lambda: server.connections == 1)
        third = await WsApp.connect(server, "three")
        await third.close()
        await second.close()


async def test_slow_reader_overflows_its_queue_and_alone_is_closed(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"max_queue": 4}) as server:
        hub = server.hub
        slow = await WsApp.connect(server, "slow", max_queue=1, compression=None)
        good = await WsApp.connect(server, "good", compression=None)
        slow_link = next(p.link for p in hub.peers if p.device_id == "slow")
        for _ in range(1000):  # until the kernel buffers towards the slow App are full
            if slow_link.close_reason is not None:  # type: ignore[attr-defined]
                break
            await hub.send_text(secrets.token_urlsafe(74_000))
            await good.next("text")
        assert slow_link.close_reason == QUEUE_FULL  # type: ignore[attr-defined]
        code, reason, _ = await slow.closed()
        assert (code, reason) == (1008, QUEUE_FULL)
        await hub.send_text("still here")
        assert (await good.next("text")).payload.text == "still here"  # type: ignore[union-attr]
        await wait_until(lambda: [p.device_id for p in hub.peers] == ["good"])
        await good.close()


def socket_writes(server: DirectServer, device_id: str) -> list[bytes]:
    """Every write the server makes to the socket of ``device_id``'s connection from now on."""
    link = next(p.link for p in server.hub.peers if p.device_id == device_id)
    transport = link.connection.transport  # type: ignore[attr-defined]
    writes: list[bytes] = []
    write = transport.write

    def counted(data: bytes) -> None:
        writes.append(data)
        write(data)

    transport.write = counted
    return writes


async def test_what_one_turn_of_the_loop_queues_leaves_in_one_write_each_message_its_own_frame(
    tmp_path: Path,
) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "phone", compression=None)
        await app.next("agent.status")  # the end of the welcome
        writes = socket_writes(server, "phone")
        for index in range(3):  # no await yields between them: one turn of the loop
            await server.hub.send_text(f"line {index}")
        texts = [(await app.next("text")).payload.text for _ in range(3)]  # type: ignore[union-attr]
        assert texts == ["line 0", "line 1", "line 2"]
        assert len(writes) == 1
        await app.close()


CHOICE = {"question": "Deploy where?", "options": ["test", "staging"]}
ANSWER = {"selected": "staging", "index": 1}


async def test_a_calls_verdict_and_the_callers_next_call_leave_in_one_write(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone", compression=None)
        await app.next("agent.status")  # the end of the welcome
        writes = socket_writes(server, "phone")

        async def answer_two() -> None:
            for _ in range(2):
                call = await app.next_call()
                await app.send(ToolResult(call_id=call.call_id, status="completed", result=ANSWER))

        async def two_calls() -> tuple[ToolResult, ToolResult]:
            first = await hub.call("choice", CHOICE)
            return first, await hub.call("choice", CHOICE)  # made as the first returns, in the same task

        answering = asyncio.create_task(answer_two())
        first, second = await asyncio.wait_for(two_calls(), 30)  # a backstop, not a timing
        await asyncio.wait_for(answering, 30)
        assert first.status == second.status == "completed"
        verdict = next(index for index, data in enumerate(writes) if b'"lineup.v1.tool.cancel"' in data)
        assert first.call_id.encode() in writes[verdict]
        assert second.call_id.encode() in writes[verdict]  # the verdict and the next call: one write
        await app.close()


async def test_an_answer_sent_just_before_the_app_closed_is_applied_though_a_send_to_it_failed_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The App answers and goes away at once; before the server reads the answer, it tries to send
    # the App something and finds the connection closed. That closing is the App's, not the
    # agent's: the answer it sent before must still be read (it was dropped as "draining").
    async with running(tmp_path) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone", compression=None)
        calling = asyncio.create_task(hub.call("choice", CHOICE))
        call = await app.next_call()
        link = next(p.link for p in hub.peers if p.device_id == "phone")
        held, release = asyncio.Event(), asyncio.Event()

        async def holding(device_id: str, text: str) -> None:  # the runtime takes the text: what follows waits
            held.set()
            await release.wait()

        monkeypatch.setattr(hub, "on_text", holding)
        await app.send(Text(text="one moment"))
        await held.wait()
        await app.send(ToolResult(call_id=call.call_id, status="completed", result=ANSWER))
        await app.close()  # the answer is read by the server's websockets, not yet by the hub
        hub.reply(link, Error(code="notice", message="sent after the App left"))
        await wait_until(lambda: link.close_reason is not None)  # type: ignore[attr-defined]
        release.set()

        result = await asyncio.wait_for(calling, 30)  # a backstop, not a timing
        assert (result.status, result.result) == ("completed", ANSWER)


async def test_messages_in_one_read_are_applied_in_order_taken_at_once_or_queued(tmp_path: Path) -> None:
    # One write holds many messages: the first is handled as it arrives; it is a text, and while the
    # runtime is still taking it everything after it queues, to be read in order.
    async with running(tmp_path, limits=Limits(message_rate=1e6, message_burst=1000)) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone", compression=None)
        calling = asyncio.create_task(hub.call("choice", CHOICE))
        call = await app.next_call()
        seen: list[str] = []  # the texts the runtime took, in the order it was done with them
        taking_t0, release = asyncio.Event(), asyncio.Event()

        async def taking(device_id: str, text: str) -> None:
            if text == "t0":  # the runtime takes its time with the first text
                taking_t0.set()
                await release.wait()
            seen.append(text)

        hub.on_text = taking
        frames = [encode_from("phone", Text(text=f"t{index}")) for index in range(20)]
        frames.insert(10, encode_from("phone", ToolResult(call_id=call.call_id, status="completed", result=ANSWER)))
        for frame in frames:
            app.ws.protocol.send_text(frame.encode())
        app.ws.transport.write(b"".join(app.ws.protocol.data_to_send()))  # one write, every frame
        await taking_t0.wait()
        try:
            assert not calling.done() and not seen  # the answer and the texts wait behind the text before them
        finally:
            release.set()
        assert (await asyncio.wait_for(calling, 30)).result == ANSWER  # a backstop, not a timing
        await wait_until(lambda: len(seen) == 20)
        assert seen == [f"t{index}" for index in range(20)]
        while "t19" not in (await app.next("history")).model_dump_json():  # the App reads what it was sent
            pass
        await app.close()


async def test_answers_in_one_read_are_applied_in_order_behind_a_fragmented_one_and_past_the_burst(
    tmp_path: Path,
) -> None:
    # Ten answers in one write. The first is handled as it arrives; the second comes in two frames
    # and queues, so every later one queues behind it, however ready; past the App's burst (3) the
    # rest wait their turn at its rate. All are applied, in the order they were sent.
    async with running(tmp_path, limits=Limits(message_rate=100, message_burst=3)) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone", compression=None)
        ended: list[str] = []
        callings = []
        for _ in range(10):
            calling = asyncio.create_task(hub.call("choice", CHOICE))
            calling.add_done_callback(lambda task: ended.append(task.result().call_id))
            callings.append(calling)
        calls = [await app.next_call() for _ in range(10)]
        protocol = app.ws.protocol
        for index, call in enumerate(calls):
            text = encode_from("phone", ToolResult(call_id=call.call_id, status="completed", result=ANSWER)).encode()
            if index == 1:
                protocol.send_text(text[:20], fin=False)
                protocol.send_continuation(text[20:], fin=True)
            else:
                protocol.send_text(text)
        app.ws.transport.write(b"".join(protocol.data_to_send()))  # one write, every frame
        results = await asyncio.wait_for(asyncio.gather(*callings), 30)  # a backstop, not a timing
        assert [result.result for result in results] == [ANSWER] * 10
        assert ended == [call.call_id for call in calls]
        await app.close()


async def test_a_failure_in_the_hub_costs_one_message_not_the_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running(tmp_path) as server:
        hub = server.hub
        app = await WsApp.connect(server, "phone")
        receive_now = hub.receive_now

        def failing_once(link: Any, text: Any, **options: Any) -> Any:
            monkeypatch.setattr(hub, "receive_now", receive_now)
            raise RuntimeError("a bug")

        monkeypatch.setattr(hub, "receive_now", failing_once)
        await app.send(Text(text="lost to the bug"))
        error = (await app.next("error")).payload
        assert isinstance(error, Error)
        assert (error.code, error.message) == ("internal_error", "the agent could not handle this message")
        calling = asyncio.create_task(hub.call("choice", CHOICE))
        await app.answer(await app.next_call(), **ANSWER)
        assert (await asyncio.wait_for(calling, 30)).result == ANSWER  # a backstop, not a timing
        await app.close()


async def test_burst_larger_than_the_queue_reaches_an_app_that_reads(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"max_queue": 2}) as server:
        app = await WsApp.connect(server, "phone")
        for index in range(20):
            await server.hub.send_text(f"line {index}")
        texts = [(await app.next("text")).payload.text for _ in range(20)]  # type: ignore[union-attr]
        assert texts == [f"line {index}" for index in range(20)]
        await app.close()


async def test_a_burst_past_the_queue_and_the_sockets_buffer_reaches_an_app_that_reads(tmp_path: Path) -> None:
    # as when a hello lists hundreds of cards that ended meanwhile: each gets its closing in one turn
    async with running(tmp_path, settings={"max_queue": 4}) as server:
        app = await WsApp.connect(server, "phone")
        link = next(p.link for p in server.hub.peers if p.device_id == "phone")
        for index in range(400):  # in one turn of the loop: nothing is written until it is done
            await server.hub.send_text(f"{index:04d} " + "x" * 2000)
        texts = [(await app.next("text")).payload.text[:4] for _ in range(400)]  # type: ignore[union-attr]
        assert texts == [f"{index:04d}" for index in range(400)]
        assert link.close_reason is None  # type: ignore[attr-defined]
        await app.close()


async def test_a_burst_over_the_rate_is_slowed_down_not_dropped(tmp_path: Path) -> None:
    limits = Limits(message_rate=500, message_burst=3, flood_strikes=100)
    async with running(tmp_path, limits=limits) as server:
        app = await WsApp.connect(server, "eager")
        await app.next("agent.status")  # the end of the welcome
        for _ in range(20):
            await app.send(ToolList(request=True))
        errors = []
        for _ in range(20):  # every message is handled: 20 answers
            while (message := await app.recv()).kind == "error":
                errors.append(message.payload.code)  # type: ignore[union-attr]
            assert message.kind == "tool.list"
        assert errors and set(errors) == {"rate_limited"}
        await app.close()


async def test_flood_gets_rate_limited_then_closed(tmp_path: Path) -> None:
    limits = Limits(message_rate=20, message_burst=3, flood_strikes=5)
    async with running(tmp_path, limits=limits) as server:
        app = await WsApp.connect(server, "flooder")
        for index in range(20):
            await app.send(Text(text=f"spam {index}"))
        code, reason, before = await app.closed()
        assert (code, reason) == (1008, FLOODED)
        errors = [m.payload for m in before if m.kind == "error"]
        assert errors and {e.code for e in errors} == {"rate_limited"}  # type: ignore[union-attr]


# -------------------------------------------------------------------------------- lifecycle


async def test_generated_token_is_stored_0600_and_reused_next_start(tmp_path: Path) -> None:
    async with running(tmp_path, settings={"token": None}) as server:
        token = server.token
        token_file = tmp_path / "data" / "token"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert token_file.read_text().strip() == token and len(token) >= 40
        app = await WsApp.connect(server, "phone")
        await app.close()
    async with running(tmp_path, settings={"token": None}) as again:
        assert again.token == token


async def test_connect_link_carries_the_token_in_the_fragment(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        assert server.url == f"http://127.0.0.1:{server.port}/"
        assert server.connect_link == f"http://127.0.0.1:{server.port}/#token={TOKEN}"
        assert server.ws_url == f"ws://127.0.0.1:{server.port}/ws"


async def test_closing_the_server_tells_apps_it_is_shutting_down(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        app = await WsApp.connect(server, "phone")
        await server.close()
        assert (await app.closed())[:2] == (1001, "the agent is shutting down")
        assert server.hub.peers == []


async def test_port_in_use_is_a_clear_transport_error(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        with pytest.raises(TransportError, match=rf"cannot listen on 127.0.0.1:{server.port}: "):
            async with running(tmp_path, settings={"port": server.port}):
                pass


async def test_wait_for_device_returns_once_an_app_is_attached(tmp_path: Path) -> None:
    async with running(tmp_path) as server:
        waiting = asyncio.create_task(server.wait_for_device())
        await asyncio.sleep(0)
        assert not waiting.done()
        async with connect(f"ws://127.0.0.1:{server.port}/ws") as ws:
            await ws.send(hello_text("phone", server.token))
            await waiting


async def test_a_new_apps_welcome_does_not_wait_behind_the_texts_other_apps_already_sent(tmp_path: Path) -> None:
    """30 Apps sending text at 19/s kept a new App's welcome back 5-12 s: each App's messages read
    already were handled without a turn for anyone else. Judged by events: how many of the texts
    waiting when the new App connects were handled before its welcome."""
    apps_count, each = 10, 100
    handled: list[str] = []
    all_handled = asyncio.Event()

    def on_text(device: str, text: str) -> None:
        handled.append(text)
        if len(handled) == apps_count * each:
            all_handled.set()

    settings = make_settings(tmp_path, max_queue=100_000)
    hub = Hub(load_registry(load_entrypoints=False), on_text=on_text)
    unlimited = Limits(message_rate=1e9, message_burst=1_000_000_000)  # the Apps' pace is not the point here
    async with DirectServer.from_settings(hub, settings, limits=unlimited) as server:
        apps = [await WsApp.connect(server, f"busy-{i}") for i in range(apps_count)]

        async def drain(app: WsApp) -> None:
            with contextlib.suppress(ConnectionClosed):
                while True:
                    await app.ws.recv()

        readers = [asyncio.create_task(drain(app)) for app in apps]
        for i, app in enumerate(apps):  # every App's texts sent at once: they wait at the server
            for n in range(each):
                await app.ws.send(encode_from(app.device_id, Text(text=f"{i}-{n}")))
        waiting = apps_count * each - len(handled)
        assert waiting > apps_count * each // 2
        newcomer = await WsApp.connect(server, "newcomer")  # returns once its welcome is read
        before_welcome = len(handled) - (apps_count * each - waiting)
        assert before_welcome < waiting // 2, f"{before_welcome} of {waiting} waiting texts went before the welcome"
        readers.append(asyncio.create_task(drain(newcomer)))
        await asyncio.wait_for(all_handled.wait(), 60)  # and nothing was lost
        for app in [*apps, newcomer]:
            await app.close()
        await asyncio.gather(*readers)
