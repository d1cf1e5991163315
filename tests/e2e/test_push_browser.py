"""The App's service worker in real Chromium: a push delivered through CDP
(``ServiceWorker.deliverPushMessage``) shows a notification (read back with
``registration.getNotifications()``), a follow-up push closes it, and a click opens the App on the
card.

What the click test proves, exactly: headless Chromium has no way to click a system notification,
so the test dispatches a ``notificationclick`` event carrying the real notification inside the
service worker. The worker's handler runs as on a click: it closes the notification, finds the
App's window and tells it which card; the App shows that card's conversation and focuses the card.
``WindowClient.focus()`` itself is refused there (it needs the user activation of a real click),
so bringing the window to the front is the one step not exercised.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, CDPSession, Page, expect

from lineup_plugin.transports.direct.static import APP_POLICY, packaged_app

from .browser import PHONE
from .conftest import Agent

pytestmark = pytest.mark.browser

NOTIFICATIONS = "navigator.serviceWorker.ready.then((r) => r.getNotifications())"


@pytest.fixture
async def phone(browser: Browser, agent: Agent) -> AsyncIterator[BrowserContext]:
    """A phone-sized context where notifications are allowed for the App's origin."""
    context = await browser.new_context(**PHONE)
    await context.grant_permissions(["notifications"], origin=agent.url.rstrip("/"))
    yield context
    await context.close()


class Pusher:
    """Delivers pushes to the App's service worker through CDP, as the browser's push service would."""

    def __init__(self, cdp: CDPSession, origin: str, registration_id: str) -> None:
        self.cdp, self.origin, self.registration_id = cdp, origin, registration_id

    @classmethod
    async def attach(cls, page: Page, origin: str) -> Pusher:
        cdp = await page.context.new_cdp_session(page)
        registered: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def seen(event: dict[str, Any]) -> None:
            for registration in event["registrations"]:
                if registration["scopeURL"] == origin + "/" and not registration["isDeleted"] and not registered.done():
                    registered.set_result(registration["registrationId"])

        cdp.on("ServiceWorker.workerRegistrationUpdated", seen)
        await cdp.send("ServiceWorker.enable")
        await page.evaluate("navigator.serviceWorker.ready.then(() => true)")
        return cls(cdp, origin, await asyncio.wait_for(registered, 10))

    async def push(self, notice: dict[str, Any]) -> None:
        data = json.dumps(notice) + " " * 200  # padded, as the agent sends it
        await self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": self.registration_id, "data": data},
        )


async def notifications(page: Page, count: int) -> list[dict[str, Any]]:
    """The App's notifications once there are ``count`` of them."""
    await page.wait_for_function(f"{NOTIFICATIONS}.then((shown) => shown.length === {count})")
    shown: list[dict[str, Any]] = await page.evaluate(
        f"{NOTIFICATIONS}.then((all) => all.map((n) => ({{title: n.title, body: n.body, tag: n.tag, data: n.data}})))"
    )
    return shown


async def test_a_push_shows_one_notification_per_card_and_the_follow_up_closes_it(
    agent: Agent, phone: BrowserContext
) -> None:
    page = await phone.new_page()
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    pusher = await Pusher.attach(page, agent.url.rstrip("/"))

    card = {"v": 1, "kind": "card", "call_id": "call-1", "tool": "confirm", "text": "Delete the old backups?"}
    await pusher.push(card)
    [shown] = await notifications(page, 1)
    assert shown == {
        "title": "The agent asks for your approval",
        "body": "Delete the old backups?",
        "tag": "call-1",
        "data": {"call_id": "call-1", "conversation_id": None},
    }
    await pusher.push(card)  # the same card again: still one notification
    await pusher.push({"v": 1, "kind": "card", "call_id": "call-2"})  # preview off: content-free
    shown_now = await notifications(page, 2)
    assert sorted((n["tag"], n["title"]) for n in shown_now) == [
        ("call-1", "The agent asks for your approval"),
        ("call-2", "A card is waiting"),
    ]
    await pusher.push({"v": 1, "kind": "closed", "call_id": "call-1"})
    assert [n["tag"] for n in await notifications(page, 1)] == ["call-2"]


async def test_clicking_a_notification_opens_the_app_on_its_card(agent: Agent, phone: BrowserContext) -> None:
    page = await phone.new_page()
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    call = agent.call("confirm", {"message": "Restart the database?"}, conversation_id="ops")
    card = page.locator('article.card[data-tool="confirm"]')
    await expect(card).to_have_count(1)
    call_id = await card.get_attribute("data-call-id")
    assert call_id and await card.is_hidden()  # it waits in conversation "ops", not the one shown
    pusher = await Pusher.attach(page, agent.url.rstrip("/"))
    await pusher.push({"v": 1, "kind": "card", "call_id": call_id, "tool": "confirm", "text": "Restart the database?"})
    await notifications(page, 1)

    [worker] = phone.service_workers
    await worker.evaluate(
        """async () => {
          const [notification] = await self.registration.getNotifications();
          self.dispatchEvent(new NotificationEvent("notificationclick", { notification }));
        }"""
    )
    await expect(card).to_be_visible()
    await expect(card).to_be_focused()
    await notifications(page, 0)  # the click closed it
    await card.get_by_role("button", name="Approve").click()
    assert (await call).status == "completed"


async def test_the_service_worker_is_served_under_the_apps_content_security_policy(agent: Agent) -> None:
    index = (packaged_app() / "index.html").read_text()
    assert f'content="{APP_POLICY}"' in " ".join(index.split())  # the header says what the page's meta says
    async with httpx.AsyncClient(trust_env=False) as client:
        answer = await client.get(f"{agent.url}sw.js")
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/javascript")
    assert answer.headers["content-security-policy"] == APP_POLICY
