"""The fault rig in relay mode: a fault proxy between the agent's relay and the fake WuKongIM server.

The relay reaches the server over WebSocket through :class:`~tests.rig.proxy.FaultProxy`, which
drops, delays, duplicates and reorders WuKongIM frames, truncates them mid-frame and cuts the
connection; the App user talks to the server directly and answers every card. Each call the agent
makes ends exactly once, with the same status for the caller and the SQLite store, and the App,
asking once the faults stop with every card it saw, is told the same ending.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from lineup_plugin.config.settings import WuKongIMSettings
from lineup_plugin.hub import Hub
from lineup_plugin.plugins import collect_tools, get_plugin_manager
from lineup_plugin.protocol.calls import TERMINAL
from lineup_plugin.store import SQLiteStore
from lineup_plugin.transports.wukongim.client import ClientOptions, ImSession, Timers
from lineup_plugin.transports.wukongim.relay import Relay, wrap_envelope
from tests.fakes.wukongim import FakeWuKongIM

from .rig.proxy import FaultPlan, FaultProxy

FAST = Timers(connect_timeout=2, send_timeout=1, reconnect_min=0.01, reconnect_max=0.05)
AGENT, APP = "lineup-agent", "app-user"
QUESTION = {"question": "Deploy where?", "options": ["staging", "production"]}
ENDED = re.compile(r"this call already ended \((\w+)\)")
CALLS = 6


class RelayApp:
    """The App user: answers each card once (the same envelope again on redelivery)."""

    def __init__(self, session: ImSession) -> None:
        self.session = session
        self.answers: dict[str, str] = {}
        self.final: dict[str, str] = {}
        self.lists = 0
        self.listed = asyncio.Event()

    async def send(self, kind: str, payload: dict[str, Any], id: str) -> None:
        envelope = {
            "v": 1,
            "id": id,
            "type": f"lineup.v1.{kind}",
            "conversation_id": "default",
            "sender": {"kind": "device", "id": "py-app"},
            "target": {"kind": "agent", "id": AGENT},
            "payload": payload,
        }
        await self.session.send(AGENT, 1, wrap_envelope(json.dumps(envelope), 9527))

    async def run(self) -> None:
        async for message in self.session.messages():
            await self.session.ack(message)
            envelope = json.loads(message.payload)["envelope"]
            kind, payload = envelope["type"].removeprefix("lineup.v1."), envelope["payload"]
            if kind == "tool.call":
                call_id = payload["call_id"]
                self.answers.setdefault(call_id, f"answer-{call_id}")
                result = {"call_id": call_id, "result": {"selected": "production", "index": 1}}
                await self.send("tool.result", result, self.answers[call_id])
            elif kind == "tool.cancel":
                found = ENDED.match(payload.get("reason") or "")
                if found:
                    self.final[payload["call_id"]] = found.group(1)
            elif kind == "tool.list" and payload.get("tools") is not None:
                self.lists += 1
                self.listed.set()


async def test_relay_through_network_faults_loses_nothing(tmp_path: Path) -> None:
    plan = FaultPlan(seed=11, drop=0.05, delay=0.1, duplicate=0.05, reorder=0.05, truncate=0.02, cut=0.03)
    store = SQLiteStore(tmp_path / "lineup.sqlite3")
    hub = Hub(collect_tools(get_plugin_manager(load_entrypoints=False)), store=store, deadline=2.0)
    results: dict[str, list[str]] = {}
    async with FakeWuKongIM() as server:
        proxy = FaultProxy(int(server.ws_url.rsplit(":", 1)[1]), plan)
        await proxy.start()
        config = WuKongIMSettings(
            api_url=server.api_url, ws_url=f"ws://127.0.0.1:{proxy.port}", uid=AGENT, app_uid=APP, text_cards="never"
        )
        relay = Relay(config, hub, timers=FAST)
        session = await ImSession.open(server.ws_url, ClientOptions(uid=APP, token="", device_flag=0, timers=FAST))
        app = RelayApp(session)
        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(relay.run)
                tg.start_soon(app.run)
                for number in range(CALLS):
                    await hub.wait_for_device()
                    call_id = f"relay-call-{number}"
                    result = await hub.call("choice", QUESTION, call_id=call_id)
                    results.setdefault(call_id, []).append(result.status)
                # the faults stop; the App asks how every card it saw ended
                plan.drop = plan.delay = plan.duplicate = plan.reorder = plan.truncate = plan.cut = 0.0
                await hub.wait_for_device()
                app.listed.clear()
                hello = {"device_id": "py-app", "open_calls": sorted(app.answers)}
                await app.send("device.hello", hello, "final-hello")
                await app.send("tool.list", {"request": True}, "final-list")
                while app.lists < 2 or not set(app.answers) <= app.final.keys():
                    app.listed.clear()
                    await app.listed.wait()
                await relay.close()
                await session.close()
                tg.cancel_scope.cancel()
        await proxy.close()
    terminal = Counter(c for event, c, _, _ in store.audit_log if event.removeprefix("call.") in TERMINAL)
    for call_id, statuses in results.items():
        saved = store.get_call(call_id)
        assert saved is not None and len(statuses) == 1
        assert str(saved.state) == statuses[0], call_id
        assert terminal[call_id] == 1, call_id
        if call_id in app.answers:
            assert app.final[call_id] == statuses[0], call_id
    assert store.pending_calls() == []
    assert sum(plan.counts.values()) > 0
