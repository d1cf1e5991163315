"""Web Push through the whole agent: a hub with a real DirectServer, an App on a real WebSocket
that subscribes with ``push.subscribe``, and a local push service that receives what the hub
sends — the rules of who is pushed, once, and when, as a person meets them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from lineup_plugin import Hub, load_registry
from lineup_plugin.config.settings import Settings
from lineup_plugin.hub import push_as_set, use_push
from lineup_plugin.protocol.messages import DeviceWelcome, Error, PushSubscribe, ToolAck, ToolList
from lineup_plugin.push.message import CLOSE_TTL, topic
from lineup_plugin.push.service import PushService, token_credential
from lineup_plugin.transports.direct.server import DirectServer
from tests.wsapp import WsApp, wait_until

from ..fakes.pushservice import FakePushService, Subscriber, push_service

TOKEN = "push-hub-token-0123456789"
CONTACT = "mailto:owner@example.org"
NOW = 1_800_000_000.0
CONFIRM = {"message": "Delete the old backups?"}


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@dataclass
class Agent:
    hub: Hub
    push: PushService
    server: DirectServer
    fake: FakePushService
    clock: Clock

    async def subscribe(self, device_id: str = "phone") -> tuple[WsApp, Subscriber]:
        """An App that connects, subscribes, and knows the agent has its subscription."""
        app = await WsApp.connect(self.server, device_id)
        await app.next("tool.list")  # the one that follows the welcome
        subscriber = Subscriber(self.fake.endpoint(device_id))
        await app.send(PushSubscribe.model_validate({"subscription": subscriber.subscription()}))
        await app.send(ToolList(request=True))  # answered after the subscription was taken
        await app.next("tool.list")
        return app, subscriber

    def due(self) -> None:
        """Let the grace pass: the pushes it decides go."""
        self.clock.now += self.push.plan.grace
        self.push.tick()


@pytest.fixture
async def agent(tmp_path: Path) -> AsyncIterator[Agent]:
    clock = Clock()
    async with push_service() as fake:
        hub = Hub(load_registry(load_entrypoints=False), clock=clock)
        push = PushService(tmp_path, contact=CONTACT, clock=clock, services=("127.0.0.1",))
        use_push(hub, push)
        settings = Settings(host="127.0.0.1", port=0, token=TOKEN, data_dir=tmp_path, store="memory")
        async with DirectServer.from_settings(hub, settings) as server:
            yield Agent(hub, push, server, fake, clock)
            await hub.cancel_all("the test ended")
        await push.aclose()


async def test_the_welcome_carries_the_agents_key_and_the_direct_token_vouches_for_the_subscription(
    agent: Agent,
) -> None:
    app = await WsApp.connect(agent.server, "phone", welcome=False)
    welcome = (await app.next("device.welcome")).payload
    assert isinstance(welcome, DeviceWelcome) and welcome.push_key == agent.push.public_key
    await app.close()
    _, _ = await agent.subscribe()
    [entry] = agent.push.subscriptions
    assert entry.devices == {"phone": token_credential(TOKEN)}


async def test_a_locked_phone_is_pushed_the_card_then_the_close_when_it_is_answered(agent: Agent) -> None:
    app, phone = await agent.subscribe()
    await app.close()  # the phone is locked: the App's connection is gone
    call = asyncio.create_task(agent.hub.call("confirm", CONFIRM, deadline=120))
    await wait_until(lambda: agent.push.plan.waiting)  # it waits: a subscribed device can be told of it
    assert not call.done()
    agent.due()
    [card] = await agent.fake.wait_for(1)
    notice = phone.notice(card)
    assert (notice["kind"], notice["tool"], notice["text"]) == ("card", "confirm", CONFIRM["message"])
    assert card.headers["ttl"] == "115" and card.headers["topic"] == topic(notice["call_id"])

    app = await WsApp.connect(agent.server, "phone")  # the person taps the notification: the App opens
    delivered = await app.next_call()
    assert delivered.call_id == notice["call_id"]
    await app.answer(delivered, approved=True)
    assert (await call).status == "completed"
    _, close = await agent.fake.wait_for(2)
    assert phone.notice(close) == {"v": 1, "kind": "closed", "call_id": delivered.call_id}
    assert close.headers["topic"] == card.headers["topic"] and close.headers["ttl"] == str(CLOSE_TTL)


async def test_a_phone_whose_network_dropped_is_pushed_at_once_not_after_the_reconnect_grace(agent: Agent) -> None:
    app, phone = await agent.subscribe()
    app.ws.transport.abort()  # no goodbye: the server grants the App a grace to come back
    await wait_until(lambda: not agent.hub.connected)
    call = asyncio.create_task(agent.hub.call("confirm", CONFIRM, deadline=120))
    await wait_until(lambda: agent.push.plan.waiting)  # started now: a subscribed device is told of it anyway
    agent.due()
    [card] = await agent.fake.wait_for(1)
    app = await WsApp.connect(agent.server, "phone")
    delivered = await app.next_call()
    assert phone.notice(card)["call_id"] == delivered.call_id
    await app.answer(delivered, approved=True)
    assert (await call).status == "completed"


async def test_no_push_to_a_device_that_shows_the_card(agent: Agent) -> None:
    app, _ = await agent.subscribe()
    call = asyncio.create_task(agent.hub.call("confirm", CONFIRM, deadline=120))
    delivered = await app.next_call()
    await app.send(ToolAck(call_id=delivered.call_id, stage="waiting_user"))  # the App drew the card
    await app.send(ToolList(request=True))
    await app.next("tool.list")  # the ack was taken (this tool.list answers the request)
    agent.due()
    await agent.push.sender.idle()
    assert agent.fake.requests == []
    await app.answer(delivered, approved=True)
    assert (await call).status == "completed"
    await agent.push.sender.idle()
    assert agent.fake.requests == []  # nothing was pushed, so nothing is closed


async def test_one_push_per_card_however_often_the_phone_comes_and_goes(agent: Agent) -> None:
    app, _ = await agent.subscribe()
    await app.close()
    call = asyncio.create_task(agent.hub.call("confirm", CONFIRM, deadline=120))
    await wait_until(lambda: agent.push.plan.waiting)
    agent.due()
    [card] = await agent.fake.wait_for(1)
    for _ in range(3):  # it reconnects and drops again without showing the card
        again = await WsApp.connect(agent.server, "phone")
        await again.next_call()
        await again.close()
    agent.due()
    await agent.push.sender.idle()
    assert len(agent.fake.requests) == 1
    [call_id] = agent.push.plan.waiting
    assert await agent.hub.cancel(call_id, "the agent moved on")
    assert (await call).status == "cancelled"
    _, close = await agent.fake.wait_for(2)  # the cancel closes the notification
    assert close.headers["topic"] == card.headers["topic"]


async def test_a_subscription_the_agent_cannot_take_is_refused_saying_why(agent: Agent) -> None:
    app = await WsApp.connect(agent.server, "phone")
    bad = Subscriber("https://evil.example/x").subscription()
    await app.send(PushSubscribe.model_validate({"subscription": bad}))
    error = (await app.next("error")).payload
    assert isinstance(error, Error) and error.code == "push_refused"
    assert "not a known push service" in error.message
    assert len(agent.push.subscriptions) == 0


async def test_without_a_subscription_a_call_with_no_app_fails_no_app_at_once(agent: Agent) -> None:
    result = await agent.hub.call("confirm", CONFIRM, deadline=120)
    assert result.status == "failed" and result.result["error"] == "no_app"


def test_push_is_made_from_the_settings_and_off_when_they_say_so(tmp_path: Path) -> None:
    on = Settings(data_dir=tmp_path, store="memory", push_preview=False, push_contact=CONTACT)
    hub = push_as_set(Hub(load_registry(load_entrypoints=False)), on)
    assert hub.push is not None and hub.push.preview is False and hub.push.contact == CONTACT
    assert hub.session.push_key == hub.push.public_key
    off = push_as_set(Hub(load_registry(load_entrypoints=False)), Settings(data_dir=tmp_path, push=False))
    assert off.push is None and off.session.push_key is None


async def test_a_new_token_revokes_the_subscriptions_of_the_direct_devices(agent: Agent, tmp_path: Path) -> None:
    app, _ = await agent.subscribe()
    await app.close()
    await agent.server.close()
    settings = Settings(host="127.0.0.1", port=0, token="a-new-token-0123456789", data_dir=tmp_path, store="memory")
    async with DirectServer.from_settings(agent.hub, settings):  # started with the new token
        assert len(agent.push.subscriptions) == 0
        result = await agent.hub.call("confirm", CONFIRM, deadline=120)  # no device can be told any more
        assert result.status == "failed" and result.result["error"] == "no_app"
