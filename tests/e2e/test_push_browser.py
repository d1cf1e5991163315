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
import contextlib
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from playwright.async_api import Browser, BrowserContext, CDPSession, Page, expect

from lineup_plugin import Hub, load_registry
from lineup_plugin.hub import use_push
from lineup_plugin.push.service import PushService
from lineup_plugin.transports.app_files import packaged_app
from lineup_plugin.transports.direct.static import APP_POLICY

from ..fakes.pushservice import FakePushService, Subscriber, push_service
from .browser import PHONE
from .conftest import Agent, serving
from .relay_rig import APP_UID, relay_agent

pytestmark = pytest.mark.browser

NOTIFICATIONS = "navigator.serviceWorker.ready.then((r) => r.getNotifications())"

#: resolves once the App's service worker is activated (not only activating, as ``ready`` allows)
ACTIVATED = """navigator.serviceWorker.ready.then((registration) => {
  const worker = registration.active;
  if (worker.state === "activated") return true;
  return new Promise((done) => {
    worker.addEventListener("statechange", () => worker.state === "activated" && done(true));
  });
})"""


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
        #: the pushes delivered since the notifications were last as a test expected them
        self.unconfirmed: list[str] = []

    @classmethod
    async def attach(cls, page: Page, origin: str, *, via: Page | None = None) -> Pusher:
        """For the App open in ``page`` (its worker registered), through a CDP session of ``via`` (default ``page``)."""
        cdp = await page.context.new_cdp_session(via or page)
        registered: asyncio.Future[str] = asyncio.get_running_loop().create_future()

        def seen(event: dict[str, Any]) -> None:
            for registration in event["registrations"]:
                if registration["scopeURL"] == origin + "/" and not registration["isDeleted"] and not registered.done():
                    registered.set_result(registration["registrationId"])

        cdp.on("ServiceWorker.workerRegistrationUpdated", seen)
        await cdp.send("ServiceWorker.enable")
        # ``ready`` resolves while the new worker may still be activating; a push Chromium delivers
        # then can be lost (seen once under load), so wait for "activated", as a push service would
        await page.evaluate(ACTIVATED)
        return cls(cdp, origin, await asyncio.wait_for(registered, 10))

    async def push(self, notice: dict[str, Any]) -> None:
        data = json.dumps(notice) + " " * 200  # padded, as the agent sends it
        self.unconfirmed.append(data)
        await self._deliver(data)

    async def _deliver(self, data: str) -> None:
        await self.cdp.send(
            "ServiceWorker.deliverPushMessage",
            {"origin": self.origin, "registrationId": self.registration_id, "data": data},
        )

    async def again(self) -> None:
        """Deliver the unconfirmed pushes again, in order (every notice is idempotent). In about one
        run of this module in eight, a push's notification never showed within 30 s (the first push
        after ``activated`` too), with nothing logged: lost by CDP or by the worker's start, or a look
        that never returned."""
        for data in self.unconfirmed:
            await self._deliver(data)

    def confirmed(self) -> None:
        """The notifications are as the pushes so far should leave them."""
        self.unconfirmed.clear()


async def notifications(page: Page, *tags: str, pusher: Pusher | None = None) -> list[dict[str, Any]]:
    """The App's notifications once they are exactly those of ``tags`` (one each), sorted by tag.

    A page hears of no event when its worker shows or closes a notification, so the page looks
    again every 20 ms (Playwright's ``wait_for_function`` does not wait on promises), for 5 s at a
    time; between two looks ``pusher``'s unconfirmed pushes are delivered again (see
    :meth:`Pusher.again`). Six looks at most: two shared cores, be patient.
    """
    for _ in range(6):
        look = page.evaluate(
            """async ([want, ms]) => {
              const registration = await navigator.serviceWorker.ready;
              const until = Date.now() + ms;
              while (Date.now() < until) {
                const all = await registration.getNotifications();
                if (JSON.stringify(all.map((n) => n.tag).sort()) === JSON.stringify(want)) {
                  return all.map((n) => ({
                    title: n.title, body: n.body, tag: n.tag, data: n.data, icon: n.icon, badge: n.badge,
                  }))
                    .sort((a, b) => (a.tag < b.tag ? -1 : 1));
                }
                await new Promise((next) => setTimeout(next, 20));
              }
              return null;
            }""",
            [sorted(tags), 5000],
        )
        shown: list[dict[str, Any]] | None = None
        with contextlib.suppress(TimeoutError):
            shown = await asyncio.wait_for(look, 10)  # a look that never returns is looked again
        if shown is not None:
            if pusher is not None:
                pusher.confirmed()
            return shown
        if pusher is not None:
            await pusher.again()
    raise AssertionError(f"the notifications never were those of {sorted(tags)}")


async def test_a_push_shows_one_notification_per_card_and_the_follow_up_closes_it(
    agent: Agent, phone: BrowserContext
) -> None:
    page = await phone.new_page()
    await page.goto(agent.link)
    await expect(page.locator("#link")).to_have_text("Connected")
    pusher = await Pusher.attach(page, agent.url.rstrip("/"))

    card = {"v": 1, "kind": "card", "call_id": "call-1", "tool": "confirm", "text": "Delete the old backups?"}
    await pusher.push(card)
    [shown] = await notifications(page, "call-1", pusher=pusher)
    assert shown == {
        "title": "The agent asks for your approval",
        "body": "Delete the old backups?",
        "tag": "call-1",
        "data": {"call_id": "call-1", "conversation_id": None},
        # PNGs: Android's Chrome may draw no SVG in a notification (the icon was icon.svg)
        "icon": f"{agent.url}icon-192.png",
        "badge": f"{agent.url}badge-96.png",
    }
    for image in (shown["icon"], shown["badge"]):
        served = await page.request.get(image)
        assert (served.status, served.headers["content-type"]) == (200, "image/png")
    await pusher.push(card)  # the same card again: still one notification
    await pusher.push({"v": 1, "kind": "card", "call_id": "call-2"})  # preview off: content-free
    shown_now = await notifications(page, "call-1", "call-2", pusher=pusher)
    assert sorted((n["tag"], n["title"]) for n in shown_now) == [
        ("call-1", "The agent asks for your approval"),
        ("call-2", "A card is waiting"),
    ]
    await pusher.push({"v": 1, "kind": "closed", "call_id": "call-1"})
    assert [n["tag"] for n in await notifications(page, "call-2", pusher=pusher)] == ["call-2"]


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
    await notifications(page, call_id, pusher=pusher)

    [worker] = phone.service_workers
    await worker.evaluate(
        """async () => {
          const [notification] = await self.registration.getNotifications();
          self.dispatchEvent(new NotificationEvent("notificationclick", { notification }));
        }"""
    )
    await expect(card).to_be_visible()
    await expect(card).to_be_focused()
    await notifications(page)  # the click closed it
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


# -- the whole way: App subscribes, agent pushes, service worker shows -------------------------------

#: headless Chromium has no push service (``pushManager.subscribe`` is refused there), so the page's
#: PushManager is replaced by one that hands out the subscription the test made (its keys are the
#: test's); everything else — the App's subscribing, the agent's sealing and sending, the service
#: worker — is the real thing
PUSH_MANAGER_STUB = """
window.pushKeyUsed = null;
const made = %s;
let held = null;
const toB64url = (bytes) =>
  btoa(String.fromCharCode(...new Uint8Array(bytes))).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, "");
PushManager.prototype.getSubscription = async function () { return held; };
PushManager.prototype.subscribe = async function (options) {
  if (held) return held;
  const key = new Uint8Array(options.applicationServerKey);
  window.pushKeyUsed = toB64url(key);
  held = {
    endpoint: made.endpoint,
    options: { applicationServerKey: key.buffer, userVisibleOnly: options.userVisibleOnly },
    toJSON: () => ({ endpoint: made.endpoint, expirationTime: null, keys: made.keys }),
    unsubscribe: async () => { held = null; return true; },
  };
  return held;
};
"""


class Watched(PushService):
    """The agent's push service, on a clock the test moves, saying when a card waits and when one is shown."""

    def __init__(self, data_dir: Path) -> None:
        self.now = time.time()
        super().__init__(data_dir, contact="mailto:owner@example.org", services=("127.0.0.1",), clock=lambda: self.now)
        self.opened, self.seen, self.changed = asyncio.Event(), asyncio.Event(), asyncio.Event()
        self.subscribed: list[str] = []

    def card_opened(self, call_id: str, *args: Any, **options: Any) -> None:
        super().card_opened(call_id, *args, **options)
        self.opened.set()

    def card_shown(self, call_id: str, device_id: str) -> None:
        super().card_shown(call_id, device_id)
        self.seen.set()

    def subscribe(self, device_id: str, subscription: dict[str, Any] | None) -> None:
        super().subscribe(device_id, subscription)
        self.subscribed.append(device_id)
        self.changed.set()

    def grace_over(self) -> None:
        """The grace passes: the pushes it decides go."""
        self.now += self.plan.grace
        self.tick()


@pytest.fixture
async def pushing(tmp_path: Path) -> AsyncIterator[tuple[Agent, Watched, FakePushService]]:
    """An agent that pushes (to the local push service only), behind a direct server."""
    async with push_service() as fake:
        hub = Hub(load_registry(load_entrypoints=False))
        push = Watched(tmp_path)
        use_push(hub, push)
        async with serving(hub, tmp_path) as agent:
            yield agent, push, fake
        await push.aclose()


async def test_the_app_subscribes_the_agent_pushes_the_card_and_the_close_and_the_worker_shows_them(
    pushing: tuple[Agent, Watched, FakePushService], browser: Browser
) -> None:
    agent, push, fake = pushing
    phone = Subscriber(fake.endpoint("phone"))
    context = await browser.new_context(**PHONE)
    try:
        await context.grant_permissions(["notifications"], origin=agent.url.rstrip("/"))
        await context.add_init_script(PUSH_MANAGER_STUB % json.dumps(phone.subscription()))
        page = await context.new_page()
        await page.goto(agent.link)
        await expect(page.locator("#link")).to_have_text("Connected")
        await page.wait_for_function("window.pushKeyUsed !== null")
        assert await page.evaluate("window.pushKeyUsed") == push.public_key  # subscribed with the agent's key
        await expect(page.get_by_role("button", name="Notify me of new questions")).to_be_hidden()

        # the card is on the screen: no push
        shown = agent.call("confirm", {"message": "Seen on the screen?"})
        await asyncio.wait_for(push.seen.wait(), 10)  # the App drew it and said so
        push.grace_over()
        await push.sender.idle()
        assert fake.requests == [] and len(push.subscriptions) == 1
        await page.locator('article.card[data-tool="confirm"]').get_by_role("button", name="Approve").click()
        assert (await shown).status == "completed"

        # the App is closed (the phone locked): the card is pushed
        holder = await context.new_page()  # a tab that is not the App: the browser's push service stands in here
        pusher = await Pusher.attach(page, agent.url.rstrip("/"), via=holder)
        await page.close()
        push.opened.clear()
        away = agent.call("choice", {"question": "Which region?", "options": ["eu", "us"]})
        await asyncio.wait_for(push.opened.wait(), 10)
        push.grace_over()
        [card_push] = await fake.wait_for(1)
        notice = phone.notice(card_push)
        assert (notice["tool"], notice["text"]) == ("choice", "Which region?")
        await pusher.push(notice)  # the browser's push service hands the (opened) payload to the worker
        page = await context.new_page()  # a window of the App to read the notifications from
        await page.goto(agent.url)
        [shown_now] = await notifications(page, notice["call_id"], pusher=pusher)
        assert (shown_now["title"], shown_now["tag"]) == ("The agent asks you to choose", notice["call_id"])

        # answered there: the follow-up push closes the notification
        await page.locator(f'article.card[data-call-id="{notice["call_id"]}"]').get_by_role("button", name="eu").click()
        assert (await away).status == "completed"
        _, close_push = await fake.wait_for(2)
        await pusher.push(phone.notice(close_push))
        await notifications(page, pusher=pusher)
    finally:
        await context.close()


async def test_a_paired_app_subscribes_over_the_relay_too_and_loses_that_when_its_pairing_is_revoked(
    browser: Browser, tmp_path: Path
) -> None:
    async with push_service() as fake:
        push = Watched(tmp_path / "push")
        phone = Subscriber(fake.endpoint("phone"))
        async for agent in relay_agent(tmp_path, push=push):
            context = await browser.new_context(**PHONE)
            try:
                await context.grant_permissions(["notifications"], origin=agent.both.direct.url.rstrip("/"))
                await context.add_init_script(PUSH_MANAGER_STUB % json.dumps(phone.subscription()))
                page = await context.new_page()
                await page.goto(agent.link)
                await expect(page.locator(".msg-system")).to_contain_text("Paired")
                await agent.close_direct()  # away from home: the App goes on by relay, end-to-end sealed
                await expect(page.locator("#path")).to_have_text("Relay")
                while not any(device.startswith("wukongim:") for device in push.subscribed):
                    push.changed.clear()
                    await asyncio.wait_for(push.changed.wait(), 20)
                [entry] = push.subscriptions  # one phone: one subscription, named by both its paths
                [pairing_id] = (agent.pairings.state.devices if agent.pairings.state else {}).keys()
                relay_device = f"wukongim:{APP_UID}/{pairing_id}"
                assert entry.devices[relay_device] == f"pairing:{pairing_id}"
                assert any(credential.startswith("token:") for credential in entry.devices.values())

                agent.pairings.revoke()  # lineup pair --revoke
                assert push.revoke() == [relay_device]
                [entry] = push.subscriptions  # still subscribed by the direct path (its token is unchanged)
                assert relay_device not in entry.devices
            finally:
                await context.close()
        await push.aclose()


async def test_a_notification_clicked_with_no_app_window_opens_the_app_on_its_card(
    agent: Agent, phone: BrowserContext
) -> None:
    # with no window of the App, the worker opens ./#card=<call id>; the App opened so shows that card
    page = await phone.new_page()
    await page.goto(agent.link)  # the App keeps its token for the next time
    await expect(page.locator("#link")).to_have_text("Connected")
    call = agent.call("confirm", {"message": "Rotate the keys?"}, conversation_id="ops")
    await expect(page.locator('article.card[data-tool="confirm"]')).to_have_count(1)
    [live] = agent.hub.session.calls.all()
    await page.close()  # then the App is closed; the notification of the card is clicked
    page = await phone.new_page()
    await page.goto(f"{agent.url}#card={quote(live.call_id, safe='')}")
    card = page.locator(f'article.card[data-call-id="{live.call_id}"]')
    await expect(card).to_be_visible()  # its conversation is shown, though another was chosen
    await expect(card).to_be_focused()
    assert "#card=" not in page.url
    await card.get_by_role("button", name="Approve").click()
    assert (await call).status == "completed"


# the browsers that cannot be had here, as the App sees them (only what it reads is changed)
PLAIN_HTTP = 'Object.defineProperty(window, "isSecureContext", { value: false });'
IPHONE_SAFARI_TAB = """
Object.defineProperty(navigator, "userAgent", { value: "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X)" });
delete window.PushManager;
delete window.Notification;
"""


@pytest.mark.parametrize(
    ("script", "said"),
    [
        (PLAIN_HTTP, "need HTTPS: open the App by an https:// address"),
        (IPHONE_SAFARI_TAB, "On iPhone and iPad, notifications need the App on the Home Screen"),
    ],
)
async def test_the_app_says_why_push_cannot_reach_it_here(
    agent: Agent, browser: Browser, script: str, said: str
) -> None:
    context = await browser.new_context(**PHONE)
    try:
        await context.add_init_script(script)
        page = await context.new_page()
        await page.goto(agent.link)
        await expect(page.locator("#link")).to_have_text("Connected")
        await expect(page.locator("#notify-hint")).to_be_visible()
        await expect(page.locator("#notify-hint")).to_contain_text(said)
        assert await page.evaluate("navigator.serviceWorker.getRegistrations().then((r) => r.length)") == 0
    finally:
        await context.close()
