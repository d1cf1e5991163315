"""Every process's cards push: a card asked by a process that forwards to the serving one (a
one-shot chat beside the gateway, as Hermes runs them) is pushed by the serving process, with
the App away, and closed when it is answered. Two LineUpService instances on one data directory,
a real WebSocket App, a real SQLite store, a local push service."""

from __future__ import annotations

from pathlib import Path

from lineup_plugin.protocol.messages import PushSubscribe, ToolList
from tests.runtime.test_forward import CHOICE, Asking, connect, free_port, make_service
from tests.wsapp import WsApp

from ..fakes.pushservice import Subscriber, push_service

PUSH = {"push_services": ["127.0.0.1"], "push_contact": "mailto:owner@example.org"}


async def subscribed(port: int, endpoint: str) -> tuple[WsApp, Subscriber]:
    app = await connect(port)
    await app.next("tool.list")  # the one after the welcome
    subscriber = Subscriber(endpoint)
    await app.send(PushSubscribe.model_validate({"subscription": subscriber.subscription()}))
    await app.send(ToolList(request=True))
    await app.next("tool.list")  # the subscription was taken before this answer
    return app, subscriber


async def test_a_card_another_process_asks_is_pushed_by_the_serving_one(tmp_path: Path) -> None:
    port = free_port()
    async with push_service() as fake:
        gateway = make_service(tmp_path, port, "gateway", **PUSH)
        chat = make_service(tmp_path, port, "process", **PUSH)
        try:
            assert gateway.ensure_started("test")
            assert gateway.runner is not None
            push = gateway.runner.hub.push
            assert push is not None
            push.plan.grace = 0.0  # no App shows anything here: push at once
            app, phone = await subscribed(port, fake.endpoint("phone"))
            await app.close()  # the phone is locked

            asking = Asking(chat)  # a one-shot chat asks; it forwards the call to the gateway
            [card] = await fake.wait_for(1)
            notice = phone.notice(card)
            assert (notice["tool"], notice["text"]) == ("choice", CHOICE["question"])
            assert not chat.serving

            app = await connect(port)  # the notification was tapped
            call = await app.next_call()
            assert call.call_id == notice["call_id"]
            await app.answer(call, selected="yes", index=0)
            assert (await asking.result()).status == "completed"
            _, close = await fake.wait_for(2)
            assert phone.notice(close)["kind"] == "closed" and close.headers["topic"] == card.headers["topic"]
            await app.close()
        finally:
            chat.stop()
            gateway.stop()
