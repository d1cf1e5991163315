"""Web Push end to end against a local push service on 127.0.0.1: the agent's real requests are
received, opened with the subscription's private key (made by the test) and checked — the VAPID
JWT (aud, exp, sub, signature), TTL, Urgency, Topic, padding — and the service's answers (201,
404/410, 429 with Retry-After, no answer at all) have the effects they must."""

from __future__ import annotations

import asyncio
import json
import logging
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from lineup_plugin.config.settings import DEFAULT_PUSH_CONTACT
from lineup_plugin.errors import ProtocolError, PushError, PushServiceNotAllowed
from lineup_plugin.protocol.base import validate
from lineup_plugin.protocol.messages import PushSubscribe
from lineup_plugin.push import message
from lineup_plugin.push.message import CLOSE_TTL, PADDED_SIZE, closes_allowed, topic
from lineup_plugin.push.service import PushService, token_credential
from lineup_plugin.push.subscriptions import FILE_NAME, Subscriptions
from lineup_plugin.push.vapid import JWT_LIFETIME, KEY_FILE

from ..fakes.pushservice import FakePushService, Subscriber, push_service, vapid_claims

CONTACT = "mailto:owner@example.org"
#: the push services these tests use: the fake one on 127.0.0.1, and push.example for subscriptions never pushed to
SERVICES = ("127.0.0.1", "push.example")
NOW = 1_800_000_000.0


class Clock:
    """A clock the test moves; ``sleep`` moves it instead of waiting, and records how long."""

    def __init__(self) -> None:
        self.now = NOW
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
async def fake() -> AsyncIterator[FakePushService]:
    async with push_service() as service:
        yield service


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def push(tmp_path: Path, clock: Clock) -> AsyncIterator[PushService]:
    service = PushService(tmp_path, contact=CONTACT, services=SERVICES, clock=clock, sleep=clock.sleep, grace=5.0)
    yield service
    await service.aclose()


def open_card(push: PushService, call_id: str = "call-1", **arguments: object) -> None:
    push.card_opened(
        call_id,
        "confirm",
        arguments or {"message": "Delete the old backups?"},
        expires_at=NOW + 120,
        conversation_id="default",
    )


async def test_the_default_contact_is_named_once_when_an_app_subscribes(
    tmp_path: Path, fake: FakePushService, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    told = f"push: push_contact is the default {DEFAULT_PUSH_CONTACT}, which reaches nobody"
    for contact, times in ((DEFAULT_PUSH_CONTACT, 1), (CONTACT, 0)):
        caplog.clear()
        service = PushService(tmp_path / contact, contact=contact, services=SERVICES, clock=clock, sleep=clock.sleep)
        with caplog.at_level(logging.WARNING, logger="lineup_plugin.push.service"):
            for device in ("phone", "tablet"):
                service.subscribe(device, Subscriber(fake.endpoint(device)).subscription())
        assert sum(r.getMessage().startswith(told) for r in caplog.records) == times, contact
        await service.aclose()


def pushed_after(
    push: PushService, fake: FakePushService, clock: Clock, *answers: tuple[int, dict[str, str]]
) -> Subscriber:
    """A subscribed phone, and a card pushed to it once the grace passed; the push service answers ``answers`` first."""
    phone = Subscriber(fake.endpoint("phone"))
    push.subscribe("phone", phone.subscription())
    fake.answers.extend(answers)
    open_card(push)
    clock.now += 5.0
    push.tick()
    return phone


async def test_a_waiting_card_is_pushed_sealed_signed_and_padded(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = pushed_after(push, fake, clock)
    [request] = await fake.wait_for(1)

    assert request.method == "POST" and request.path == "/push/phone"
    plaintext = phone.open(request.body)
    assert len(plaintext) == PADDED_SIZE
    assert json.loads(plaintext) == {
        "v": 1,
        "kind": "card",
        "call_id": "call-1",
        "tool": "confirm",
        "text": "Delete the old backups?",
        "conversation_id": "default",
    }
    headers = request.headers
    assert headers["content-encoding"] == "aes128gcm"
    assert headers["ttl"] == "115"  # what is left of the call's deadline
    assert headers["urgency"] == "high"
    assert headers["topic"] == topic("call-1")
    assert len(headers["topic"]) <= 32 and headers["topic"].replace("-", "").replace("_", "").isalnum()
    assert "call-1" not in headers["topic"]
    claims = vapid_claims(headers["authorization"], push.public_key)
    assert claims["aud"] == fake.origin
    assert claims["sub"] == CONTACT
    assert NOW < claims["exp"] <= clock.now + JWT_LIFETIME <= clock.now + 24 * 3600
    assert b"Delete" not in request.body  # the push service sees ciphertext only


async def test_with_preview_off_a_push_says_only_that_a_card_waits(
    tmp_path: Path, fake: FakePushService, clock: Clock
) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES, clock=clock, grace=0.0, preview=False)
    try:
        phone = Subscriber(fake.endpoint("phone"))
        push.subscribe("phone", phone.subscription())
        open_card(push)
        push.tick()
        [request] = await fake.wait_for(1)
        assert phone.notice(request) == {"v": 1, "kind": "card", "call_id": "call-1", "conversation_id": "default"}
    finally:
        await push.aclose()


async def test_every_push_has_the_same_length_whatever_it_says(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = Subscriber(fake.endpoint("phone"))
    push.subscribe("phone", phone.subscription())
    open_card(push, "short", message="Ok?")
    open_card(push, "long", message="Deploy to production? " * 40)
    open_card(push, "wide", message="是否部署到生产环境？" * 60)
    clock.now += 5.0
    push.tick()
    await fake.wait_for(3)
    push.card_ended("short")
    requests = await fake.wait_for(4)
    assert {len(r.body) for r in requests} == {PADDED_SIZE + 103}
    texts = {phone.notice(r)["call_id"]: phone.notice(r).get("text", "") for r in requests[:3]}
    assert texts["short"] == "Ok?"
    assert texts["long"].endswith("…") and len(texts["long"]) == 300
    assert texts["wide"].endswith("…")


async def test_a_card_on_the_screen_of_a_device_is_not_pushed_to_it(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone, laptop = Subscriber(fake.endpoint("phone")), Subscriber(fake.endpoint("laptop"))
    push.subscribe("phone", phone.subscription())
    push.subscribe("laptop", laptop.subscription())
    open_card(push)
    push.card_shown("call-1", "laptop")
    clock.now += 5.0
    push.tick()
    await push.sender.idle()
    assert [r.path for r in fake.requests] == ["/push/phone"]


async def test_one_push_per_device_per_card(push: PushService, fake: FakePushService, clock: Clock) -> None:
    phone = Subscriber(fake.endpoint("phone"))
    push.subscribe("phone", phone.subscription())
    push.subscribe("wukongim:me/pair_1", phone.subscription())  # the same phone over the relay
    open_card(push)
    clock.now += 5.0
    push.tick()
    open_card(push)  # delivered again
    clock.now += 60.0
    push.tick()
    await push.sender.idle()
    assert len(fake.requests) == 1


async def test_the_end_of_a_card_closes_its_notification_on_the_same_topic(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = pushed_after(push, fake, clock)
    await fake.wait_for(1)
    await push.sender.idle()
    push.card_ended("call-1")
    card, close = await fake.wait_for(2)
    assert phone.notice(close) == {"v": 1, "kind": "closed", "call_id": "call-1"}
    assert close.headers["topic"] == card.headers["topic"]
    assert close.headers["ttl"] == str(CLOSE_TTL)


async def test_a_card_that_ends_before_its_push_left_sends_nothing(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = Subscriber(fake.endpoint("phone"))
    push.subscribe("phone", phone.subscription())
    open_card(push)
    push.card_ended("call-1")  # answered within the grace
    clock.now += 5.0
    push.tick()
    await push.sender.idle()
    assert fake.requests == []


@pytest.fixture
def apple_like(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake push service takes no closes, as Apple's does (a push that shows nothing counts against it)."""
    monkeypatch.setattr(message, "SILENT_PUSH_PUNISHED", ("127.0.0.1",))


async def test_cards_ended_at_a_push_service_that_takes_no_closes_leave_nothing_behind(
    push: PushService, fake: FakePushService, clock: Clock, apple_like: None
) -> None:
    """The sender kept (endpoint, call id) of every card push until its close was delivered, and no
    close goes to Apple: the set grew by one per card per iPhone for the life of the process."""
    phone = Subscriber(fake.endpoint("phone"))
    push.subscribe("phone", phone.subscription())
    for n in range(20):
        open_card(push, f"call-{n}")
        clock.now += 5.0
        push.tick()
        await push.sender.idle()
        assert push.sender.closable == {(phone.endpoint, f"call-{n}")}
        push.card_ended(f"call-{n}")
        assert push.sender.closable == set()
    open_card(push, "call-under-way")
    clock.now += 5.0
    push.tick()
    push.card_ended("call-under-way")  # ended while its push is still under way
    await push.sender.idle()
    assert push.sender.closable == set()
    assert len(fake.requests) == 21 and all(phone.notice(r)["kind"] == "card" for r in fake.requests)


async def test_a_close_that_fails_or_a_subscription_gone_leaves_nothing_behind(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = pushed_after(push, fake, clock)
    await fake.wait_for(1)
    await push.sender.idle()
    fake.answers.append((500, {}))
    push.card_ended("call-1")
    await fake.wait_for(2)
    await push.sender.idle()
    assert push.sender.closable == set()  # the close was tried: no other follows
    open_card(push, "call-2")
    open_card(push, "call-3")
    clock.now += 5.0
    fake.answers.extend([(200, {}), (410, {})])
    push.tick()
    await fake.wait_for(4)
    await push.sender.idle()
    assert len(push.subscriptions) == 0  # gone: the card push it took is forgotten with it
    assert push.sender.closable == set()
    push.card_ended("call-2")
    push.card_ended("call-3")
    await push.sender.idle()
    assert len(fake.requests) == 4 and phone.notice(fake.requests[1])["kind"] == "closed"


@pytest.mark.parametrize("status", [404, 410])
async def test_a_subscription_the_push_service_calls_gone_is_dropped(
    push: PushService, fake: FakePushService, clock: Clock, tmp_path: Path, status: int
) -> None:
    pushed_after(push, fake, clock, (status, {}))
    await fake.wait_for(1)
    await push.sender.idle()
    assert len(push.subscriptions) == 0
    assert len(Subscriptions.load(tmp_path)) == 0
    push.card_ended("call-1")
    await push.sender.idle()
    assert len(fake.requests) == 1  # no close to a subscription that is gone


async def test_429_retry_after_is_honoured_and_the_ttl_shrinks(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    phone = pushed_after(push, fake, clock, (429, {"Retry-After": "30"}))
    first, second = await fake.wait_for(2)
    assert clock.slept == [30.0]
    assert (first.headers["ttl"], second.headers["ttl"]) == ("115", "85")
    assert push.sender.blocked_until[fake.origin] == NOW + 5.0 + 30.0
    assert phone.notice(second)["call_id"] == "call-1"


async def test_a_retry_after_beyond_the_deadline_drops_the_push(
    push: PushService, fake: FakePushService, clock: Clock
) -> None:
    pushed_after(push, fake, clock, (429, {"Retry-After": "3600"}))
    await fake.wait_for(1)
    await push.sender.idle()
    assert clock.slept == [] and len(fake.requests) == 1
    assert len(push.subscriptions) == 1  # kept: only this push was dropped


async def test_a_push_service_that_does_not_answer_never_touches_the_call(tmp_path: Path, clock: Clock) -> None:
    async with push_service() as gone:
        endpoint = gone.endpoint("phone")
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES, clock=clock, grace=0.0)
    try:
        push.subscribe("phone", Subscriber(endpoint).subscription())
        open_card(push)
        push.tick()  # returns at once; the connection is refused in the background
        await push.sender.idle()
        push.card_ended("call-1")
        assert len(push.subscriptions) == 1
    finally:
        await push.aclose()


async def test_the_timer_pushes_after_the_grace_on_its_own(tmp_path: Path, fake: FakePushService) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES, grace=0.0)
    try:
        phone = Subscriber(fake.endpoint("phone"))
        push.subscribe("phone", phone.subscription())
        push.card_opened("call-1", "choice", {"question": "Which?"}, expires_at=push.clock() + 60, conversation_id=None)
        [request] = await fake.wait_for(1)
        assert phone.notice(request)["text"] == "Which?"
    finally:
        await push.aclose()


# ------------------------------------------------------------------------ subscriptions


@pytest.mark.parametrize(
    ("subscription", "why"),
    [
        ({"endpoint": "http://push.example/x", "keys": {}}, "keys.p256dh: field required; keys.auth: field required"),
        ({"keys": {"p256dh": "a", "auth": "b"}}, "push subscription: endpoint: field required"),
        ({"endpoint": "http://192.168.1.9/x", "keys": {"p256dh": "P", "auth": "A"}}, "must be an https:// address"),
        ({"endpoint": "ftp://push.example/x", "keys": {"p256dh": "P", "auth": "A"}}, "must be an https:// address"),
        ({"endpoint": "https://u:p@push.example/x", "keys": {"p256dh": "P", "auth": "A"}}, "must be https://host"),
        ({"endpoint": "https://push.example/" + "x" * 3000, "keys": {"p256dh": "P", "auth": "A"}}, "at most 2048"),
        ({"endpoint": "https://push.example/x", "keys": {"p256dh": "!!", "auth": "A"}}, "p256dh is not base64url"),
        ({"endpoint": "https://push.example/\ud800", "keys": {"p256dh": "P", "auth": "A"}}, "endpoint: input should"),
        ({"endpoint": "https://push.example/é", "keys": {"p256dh": "P", "auth": "A"}}, "plain ASCII"),
        ({"endpoint": "https://push.example/a b", "keys": {"p256dh": "P", "auth": "A"}}, "no blanks"),
        ({"endpoint": "https://push.example/x", "keys": {"p256dh": "AAAA", "auth": "A"}}, "p256dh must be 65 bytes"),
        ({"endpoint": "https://push.example/x", "keys": {"p256dh": "B" + "A" * 86, "auth": "A"}}, "not a P-256"),
    ],
)
def test_a_bad_subscription_is_refused_saying_why(tmp_path: Path, subscription: dict[str, object], why: str) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    with pytest.raises(PushError, match=why.replace("{", r"\{").replace("(", r"\(")):
        push.subscribe("phone", subscription)
    assert len(push.subscriptions) == 0
    assert not (tmp_path / FILE_NAME).exists()


def test_the_wire_the_service_and_the_file_read_a_subscription_one_way(tmp_path: Path) -> None:
    """One reader (``Subscription.from_json``, with the wire's model): a key that is not a string is
    refused alike from a ``push.subscribe``, by the service, and in the file (which once took ``str(5)``)."""
    bad = Subscriber("https://push.example/x").subscription()
    bad["keys"]["p256dh"] = 5
    why = "keys.p256dh: input should be a valid string"
    with pytest.raises(ProtocolError, match=f"subscription.{why}"):
        validate(PushSubscribe, {"subscription": bad})
    with pytest.raises(PushError, match=f"push subscription: {why}"):
        PushService(tmp_path, contact=CONTACT, services=SERVICES).subscribe("phone", bad)
    (tmp_path / FILE_NAME).write_text(json.dumps({"v": 1, "subscriptions": [{**bad, "devices": {}, "updated": 1.0}]}))
    assert len(PushService(tmp_path, contact=CONTACT, services=SERVICES).subscriptions) == 0
    assert (tmp_path / f"{FILE_NAME}.damaged").exists()


def test_a_bad_auth_secret_is_refused(tmp_path: Path) -> None:
    subscription = Subscriber("https://push.example/x").subscription()
    subscription["keys"]["auth"] = "AAAA"
    with pytest.raises(PushError, match="auth must be 16 bytes"):
        PushService(tmp_path, contact=CONTACT, services=SERVICES).subscribe("phone", subscription)


def test_subscriptions_are_kept_0600_and_survive_a_restart(tmp_path: Path) -> None:
    phone = Subscriber("https://push.example/phone")
    PushService(tmp_path, contact=CONTACT, services=SERVICES).subscribe("phone", phone.subscription())
    assert stat.S_IMODE((tmp_path / FILE_NAME).stat().st_mode) == 0o600
    again = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    [entry] = again.subscriptions
    assert entry.subscription.endpoint == phone.endpoint and set(entry.devices) == {"phone"}
    again.subscribe("phone", None)
    assert len(PushService(tmp_path, contact=CONTACT, services=SERVICES).subscriptions) == 0


def test_a_damaged_subscriptions_file_is_set_aside(tmp_path: Path) -> None:
    (tmp_path / FILE_NAME).write_text('{"v": 1, "subscriptions": [{"endpoint": 3}]}')
    assert len(PushService(tmp_path, contact=CONTACT, services=SERVICES).subscriptions) == 0
    assert (tmp_path / f"{FILE_NAME}.damaged").exists()


def test_a_device_that_subscribes_again_replaces_its_subscription(tmp_path: Path) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    push.subscribe("phone", Subscriber("https://push.example/old").subscription())
    push.subscribe("phone", Subscriber("https://push.example/new").subscription())
    assert [e.subscription.endpoint for e in push.subscriptions] == ["https://push.example/new"]


def test_a_revoked_device_loses_its_subscription(tmp_path: Path) -> None:
    paired = {"pair_1"}
    token = ["token-one-0123456789"]
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    push.credentials["relay"] = lambda device_id: pairing if (pairing := device_id.rsplit("/")[-1]) in paired else None
    push.credentials["direct"] = lambda device_id: token_credential(token[0])
    phone = Subscriber("https://push.example/phone")
    push.subscribe("wukongim:me/pair_1", phone.subscription())
    push.subscribe("phone-direct", phone.subscription())
    laptop = Subscriber("https://push.example/laptop")
    push.subscribe("laptop", laptop.subscription())
    assert push.revoke() == []

    paired.clear()  # lineup pair --revoke
    assert push.revoke() == ["wukongim:me/pair_1"]
    assert len(push.subscriptions) == 2

    token[0] = "token-two-0123456789"  # a new direct token
    assert sorted(push.revoke()) == ["laptop", "phone-direct"]
    assert len(push.subscriptions) == 0
    with pytest.raises(PushError, match="not admitted"):
        push.subscribe("wukongim:me/pair_1", phone.subscription())
    assert "token-two" not in (tmp_path / FILE_NAME).read_text()


# ------------------------------------------------------------------------------ the key


def test_the_vapid_key_is_made_on_first_use_0600_and_kept(tmp_path: Path) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    assert not (tmp_path / KEY_FILE).exists()
    key = push.public_key
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert PushService(tmp_path, contact=CONTACT, services=SERVICES).public_key == key


def test_a_damaged_vapid_key_is_said_plainly(tmp_path: Path) -> None:
    (tmp_path / KEY_FILE).write_text("not a key")
    with pytest.raises(PushError, match="damaged: delete it"):
        PushService(tmp_path, contact=CONTACT, services=SERVICES).public_key  # noqa: B018


async def test_two_processes_making_the_key_at_once_get_the_same_key(tmp_path: Path) -> None:
    keys = await asyncio.gather(
        *(
            asyncio.to_thread(lambda: PushService(tmp_path, contact=CONTACT, services=SERVICES).public_key)
            for _ in range(8)
        )
    )
    assert len(set(keys)) == 1


def test_no_close_goes_to_apples_push_service() -> None:
    # WebKit revokes a subscription after three pushes that show no notification: a close would count
    assert not closes_allowed("https://web.push.apple.com/QF8w7V0M5Z3")
    assert closes_allowed("https://fcm.googleapis.com/fcm/send/abc")
    assert closes_allowed("https://updates.push.services.mozilla.com/wpush/v2/abc")
    assert closes_allowed("https://push.apple.com.example/x")


def test_an_endpoint_off_the_known_push_services_is_refused(tmp_path: Path) -> None:
    # the App cannot make the agent post wherever it likes
    push = PushService(tmp_path, contact=CONTACT)
    for endpoint in ("https://evil.example/x", "https://fcm.googleapis.com.evil.example/x", "http://127.0.0.1:9/x"):
        with pytest.raises(
            PushServiceNotAllowed, match="not a known push service; add it to the push_services setting"
        ):
            push.subscribe("phone", Subscriber(endpoint).subscription())
    for endpoint in ("https://fcm.googleapis.com/fcm/send/x", "https://web.push.apple.com/x"):
        push.subscribe("phone", Subscriber(endpoint).subscription())
    assert [e.subscription.endpoint for e in push.subscriptions] == ["https://web.push.apple.com/x"]


def test_a_kept_subscription_off_the_push_services_now_set_is_dropped(tmp_path: Path) -> None:
    PushService(tmp_path, contact=CONTACT, services=SERVICES).subscribe(
        "phone", Subscriber("https://push.example/x").subscription()
    )
    assert len(PushService(tmp_path, contact=CONTACT, services=SERVICES).subscriptions) == 1
    assert len(PushService(tmp_path, contact=CONTACT).subscriptions) == 0
    assert not (tmp_path / f"{FILE_NAME}.damaged").exists()  # dropped by its error's type, not set aside


def test_a_kept_subscription_with_a_bad_key_sets_the_file_aside_rather_than_being_dropped(tmp_path: Path) -> None:
    """Only a subscription at a push service no longer allowed is dropped (told by its error's type,
    :class:`PushServiceNotAllowed`, once by the words of its message); any other bad entry is damage."""
    PushService(tmp_path, contact=CONTACT, services=SERVICES).subscribe(
        "phone", Subscriber("https://push.example/x").subscription()
    )
    kept = json.loads((tmp_path / FILE_NAME).read_text())
    kept["subscriptions"][0]["keys"]["p256dh"] = "not-a-key"
    (tmp_path / FILE_NAME).write_text(json.dumps(kept))
    assert len(PushService(tmp_path, contact=CONTACT, services=SERVICES).subscriptions) == 0
    assert (tmp_path / f"{FILE_NAME}.damaged").exists()


def test_the_same_subscription_sent_again_writes_nothing(tmp_path: Path) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)
    phone = Subscriber("https://push.example/phone")
    push.subscribe("phone", phone.subscription())
    written = (tmp_path / FILE_NAME).stat().st_ino  # every write replaces the file (a new inode)
    push.subscribe("phone", phone.subscription())  # after a reconnect
    assert (tmp_path / FILE_NAME).stat().st_ino == written
    push.subscribe("laptop", phone.subscription())  # news: written
    assert (tmp_path / FILE_NAME).stat().st_ino != written
    assert len(push.subscriptions) == 1


def test_a_bug_while_reading_a_batch_never_reaches_the_hub(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    push = PushService(tmp_path, contact=CONTACT, services=SERVICES)

    class Broken:
        events = property(lambda self: 1 / 0)
        ended = ()

    push.observe(Broken())  # type: ignore[arg-type]
    assert "reading a batch failed" in caplog.text
