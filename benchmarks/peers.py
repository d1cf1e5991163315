"""The far ends of the benchmarks, run as child processes: ``python -m benchmarks.peers <kind> ...``.

Each child prints one JSON line when it is ready, then serves until its stdin closes:

- ``ws TOKEN TARGET...``: WebSocket clients. A target is ``lineup:<url>:<count>`` (LineUp App devices that
  say hello with the token and answer every ``tool.call`` at once; ``lineup+deflate:`` offers
  permessage-deflate as browsers do) or ``echo:<url>:<count>`` (raw clients that send every message
  straight back: the floor).
- ``wukongim [UID SECONDS]``: the fake WuKongIM server of the test suite (UID's SENDACKs SECONDS late);
  prints its addresses.
- ``relay-app WS_URL APP_UID AGENT_UID [PAIRING_JSON]``: the App user on WuKongIM, answering every call at
  once (end-to-end sealed with the pairing).
- ``mcp URL``: an MCP client (official SDK, streamable HTTP) whose elicitation callback accepts at once;
  it calls the server's ``serve`` tool, inside which the agent process times its elicitations.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import uuid
from datetime import UTC, datetime
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

#: what every benchmark App answers to the ``choice`` card
ANSWER = {"selected": "staging", "index": 1}
LINEUP_CONTENT_TYPE = 9527
# one encoder for every answer: json.dumps with options builds a new one per call
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


def answer_text(call: dict[str, Any], device: dict[str, str]) -> str | None:
    """The ``tool.result`` envelope answering the ``tool.call`` envelope ``call`` (None for other kinds)."""
    if call.get("type") != "lineup.v1.tool.call":
        return None
    request = call["payload"]
    return _dumps(
        {
            "v": 1,
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "lineup.v1.tool.result",
            "conversation_id": call["conversation_id"],
            "sender": device,
            "target": call["sender"],
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "payload": {
                "call_id": request["call_id"],
                "name": request["name"],
                "status": "completed",
                "result": ANSWER,
            },
        }
    )


def hello_text(device_id: str, token: str) -> str:
    """The ``device.hello`` envelope a benchmark App opens with."""
    return json.dumps(
        {
            "v": 1,
            "id": f"msg_{uuid.uuid4().hex}",
            "type": "lineup.v1.device.hello",
            "conversation_id": "default",
            "sender": {"kind": "device", "id": device_id},
            "target": {"kind": "agent", "id": "lineup-agent"},
            "timestamp": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "payload": {"device_id": device_id, "token": token, "app_version": "bench"},
        }
    )


async def lineup_app(url: str, token: str, device_id: str, ready: asyncio.Event, *, deflate: bool = False) -> None:
    """One App device: hello, then answer each ``tool.call`` as soon as it arrives.

    With ``deflate`` it offers permessage-deflate, as browsers do.
    """
    device = {"kind": "device", "id": device_id}
    compression = "deflate" if deflate else None
    async with connect(url, compression=compression, max_size=None, ping_interval=None) as ws:
        await ws.send(hello_text(device_id, token))
        async for text in ws:
            message = json.loads(text)
            if message.get("type") == "lineup.v1.device.welcome":
                ready.set()
                continue
            answer = answer_text(message, device)
            if answer is not None:
                await ws.send(answer)


async def echo_client(url: str, ready: asyncio.Event) -> None:
    """A raw client: every message goes straight back, unread."""
    ws: ClientConnection
    async with connect(url, compression=None, max_size=None, ping_interval=None) as ws:
        ready.set()
        async for data in ws:
            await ws.send(data)


async def until_stdin_closes() -> None:
    """Return when the parent closes our stdin (it is done with us); cancellable."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    await reader.read()


def say(**fields: Any) -> None:
    """Tell the parent something (one JSON line on stdout)."""
    print(json.dumps(fields), flush=True)


async def run_ws(targets: list[str], token: str) -> None:
    tasks: list[asyncio.Task[None]] = []
    readies: list[asyncio.Event] = []
    for target in targets:
        kind, _, rest = target.partition(":")
        url, _, count = rest.rpartition(":")
        for index in range(int(count)):
            ready = asyncio.Event()
            readies.append(ready)
            if kind in ("lineup", "lineup+deflate"):
                coro = lineup_app(url, token, f"bench-{len(tasks)}-{index}", ready, deflate=kind == "lineup+deflate")
            else:
                coro = echo_client(url, ready)
            tasks.append(asyncio.create_task(coro))
            await ready.wait()  # one at a time: the server answers hellos from one address in turn
    say(ready=True, connections=len(tasks))
    await until_stdin_closes()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def run_wukongim(late_uid: str | None = None, seconds: str = "0") -> None:
    """The fake WuKongIM; with ``late_uid``, that uid's SENDACKs come ``seconds`` late."""
    sys.path.insert(0, ".")
    from tests.fakes.wukongim import FakeWuKongIM

    async with FakeWuKongIM() as fake:
        if late_uid is not None:
            fake.ack_delays[late_uid] = float(seconds)
        say(ready=True, ws_url=fake.ws_url, api_url=fake.api_url)
        await until_stdin_closes()


async def run_relay_app(ws_url: str, app_uid: str, agent_uid: str, pairing: str | None = None) -> None:
    """The App user on WuKongIM answering every call at once; with ``pairing`` (JSON), end-to-end sealed."""
    from lineup_plugin.transports.wukongim.client import ClientOptions, Message, WuKongIMClient
    from lineup_plugin.transports.wukongim.e2e import Channel
    from lineup_plugin.transports.wukongim.proto import ChannelType
    from lineup_plugin.transports.wukongim.relay import wrap_envelope

    device = {"kind": "human", "id": app_uid}
    pending: set[asyncio.Task[Any]] = set()
    channel = None
    if pairing is not None:
        offer = json.loads(pairing)
        channel = Channel.for_app(offer["secret"], offer["agent_key"], offer["id"], app_uid, agent_uid)

    async def on_message(message: Message) -> None:
        content = json.loads(message.payload)
        if content.get("type") != LINEUP_CONTENT_TYPE:
            return
        envelope = json.loads(channel.open(content["e2e"])) if channel else content.get("envelope")
        answer = answer_text(envelope, device) if isinstance(envelope, dict) else None
        if answer is not None:  # answer in the background: the SENDACK wait must not hold up receiving
            ct = LINEUP_CONTENT_TYPE
            payload = channel.seal(answer, ct) if channel else wrap_envelope(answer, ct)
            task = asyncio.create_task(client.send(agent_uid, ChannelType.PERSON, payload))
            pending.add(task)
            task.add_done_callback(pending.discard)

    client = WuKongIMClient(ClientOptions(uid=app_uid, token=""), ws_url, on_message)
    runner = asyncio.create_task(client.run())
    await client.wait_connected()
    say(ready=True)
    await until_stdin_closes()
    await client.close()
    await runner


async def run_mcp(url: str) -> None:
    from mcp import Client, types

    async def on_elicit(context: Any, params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content=dict(ANSWER))

    async with Client(url, elicitation_callback=on_elicit, mode="legacy", read_timeout_seconds=3600) as client:
        say(ready=True)
        serving = asyncio.create_task(client.call_tool("serve", {}))
        stdin = asyncio.create_task(until_stdin_closes())
        await asyncio.wait({serving, stdin}, return_when=asyncio.FIRST_COMPLETED)
        for task in (serving, stdin):
            task.cancel()


def main(argv: list[str]) -> None:
    """Run the child named by ``argv[0]``."""
    logging.disable(logging.WARNING)
    kind, args = argv[0], argv[1:]
    if kind == "ws":
        coro = run_ws(args[1:], token=args[0])
    elif kind == "wukongim":
        coro = run_wukongim(*args[:2])
    elif kind == "relay-app":
        coro = run_relay_app(*args)
    elif kind == "mcp":
        coro = run_mcp(args[0])
    else:
        raise SystemExit(f"unknown peer kind {kind!r}")
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(coro)


if __name__ == "__main__":
    main(sys.argv[1:])
