"""Web Push for the serving hub: the subscriptions, the rules, sealing and sending, on one loop.

The hub tells :class:`PushService` what happens to cards (:meth:`~PushService.card_opened`,
:meth:`~PushService.card_shown`, :meth:`~PushService.card_ended`) and hands it the subscriptions
the Apps send (:meth:`~PushService.subscribe`). None of these waits or raises because of a push
service: sending happens in the background (:class:`~lineup_plugin.push.sender.PushSender`).
Only the serving process has a hub with devices, so the cards of every process that forwards to
it are pushed from there.

Devices are admitted by their transport: a direct device by the server's token, a relay device
by its pairing. Each transport names the credential a device holds now
(:attr:`PushService.credentials`); a subscription keeps the credential its device had when it
subscribed, and a device whose credential changed (new token, revoked pairing) loses its
subscription before the next push.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..alarm import Alarm
from ..config.settings import DEFAULT_PUSH_CONTACT
from ..errors import PushError
from ..protocol.outputs import Batch, CardShown, CardWaiting, DevicesChanged, PushSubscribed
from .message import CLOSE_TTL, Subscription, card_notice, closed_notice, closes_allowed, push_request
from .plan import SHOWN_GRACE, PushPlan
from .sender import PushSender
from .services import PUSH_SERVICES
from .subscriptions import Subscriptions
from .vapid import VapidKey

log = logging.getLogger(__name__)

#: the prefix of the device ids the relay vouches for (``wukongim:<uid>/<pairing id>``)
RELAY_DEVICE = "wukongim:"
#: device id → the credential its transport admits it with now (None: not admitted any more)
Credential = Callable[[str], "str | None"]


def transport_of(device_id: str) -> str:
    """``relay`` for a device the relay vouches for, else ``direct``."""
    return "relay" if device_id.startswith(RELAY_DEVICE) else "direct"


def token_credential(token: str) -> str:
    """What a subscription keeps of the direct token its device was admitted with (never the token)."""
    return "token:" + hashlib.sha256(b"lineup-push-token\0" + token.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True)
class _Waiting:
    name: str
    arguments: dict[str, Any]
    conversation_id: str | None
    expires_at: float


class PushService:
    """Pushes waiting cards to subscribed devices (see the module docstring).

    Made by the hub from the settings of the same names (:func:`lineup_plugin.hub.push_as_set`).
    ``preview`` (``push_preview``): a push names the tool and question, else only which call;
    ``contact`` (``push_contact``): the VAPID ``sub``; ``services`` (``push_services``): the push
    services a subscription may name. ``clock`` is seconds since the epoch and ``sleep`` waits
    (tests pass fakes); ``grace``: :data:`~lineup_plugin.push.plan.SHOWN_GRACE`.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        preview: bool = True,
        contact: str,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        grace: float = SHOWN_GRACE,
        services: Sequence[str] = PUSH_SERVICES,
    ) -> None:
        self.data_dir = data_dir
        self.preview = preview
        self.contact = contact
        self.clock = clock
        self.plan = PushPlan(grace)
        self.services = tuple(services)
        self.subscriptions = Subscriptions.load(data_dir, self.services)
        self.sender = PushSender(self._gone, clock=clock, sleep=sleep)
        #: transport (``direct``, ``relay``) → the credential a device of it holds now
        self.credentials: dict[str, Credential] = {}
        #: tells the App on a link why its subscription was refused (the hub answers an ``error``)
        self.refuse: Callable[[Any, str], None] = lambda link, why: None
        #: told how many subscriptions there are whenever that may have changed
        self.on_subscriptions: Callable[[int], None] = lambda count: None
        self._vapid: VapidKey | None = None
        self._cards: dict[str, _Waiting] = {}
        self._alarm = Alarm(self.clock, self._on_timer)
        self._told_contact = False

    @property
    def vapid(self) -> VapidKey:
        """The agent's VAPID key (made and kept on first use). PushError if it cannot be kept."""
        if self._vapid is None:
            self._vapid = VapidKey.load_or_create(self.data_dir)
        return self._vapid

    @property
    def public_key(self) -> str:
        """The key an App subscribes with (``applicationServerKey``)."""
        return self.vapid.public_key

    # --------------------------------------------------------------------------- devices

    def _credential(self, device_id: str) -> str | None:
        vouch = self.credentials.get(transport_of(device_id))
        return vouch(device_id) if vouch is not None else ""

    def subscribe(self, device_id: str, subscription: dict[str, Any] | None) -> None:
        """``device_id`` sends its push subscription (``PushSubscription.toJSON()``; None: unsubscribe).

        Raises PushError saying what is wrong with it; nothing is kept then.
        """
        if subscription is None:
            if self.subscriptions.remove_device(device_id):
                log.info("push: device %s unsubscribed", device_id)
                self.on_subscriptions(len(self.subscriptions))
            return
        checked = Subscription.from_json(subscription, self.services)
        credential = self._credential(device_id)
        if credential is None:
            raise PushError("push subscription: this device is not admitted any more")
        self.vapid  # noqa: B018 - the key the App subscribed with must exist before any push
        self.subscriptions.add(device_id, credential, checked, self.clock())
        log.info("push: device %s subscribed (%d subscriptions)", device_id, len(self.subscriptions))
        if self.contact == DEFAULT_PUSH_CONTACT and not self._told_contact:
            self._told_contact = True  # once: the pushes work, but nobody can be reached about them
            log.warning(
                "push: push_contact is the default %s, which reaches nobody: set your own address so that a "
                "push service with a problem about your pushes can tell you",
                DEFAULT_PUSH_CONTACT,
            )
        self.on_subscriptions(len(self.subscriptions))

    def vouch(self, transport: str, credential: Credential) -> None:
        """``transport`` (``direct``, ``relay``) names the credential its devices hold now (see the module
        docstring); the subscriptions of its devices whose credential changed since are dropped at once."""
        self.credentials[transport] = credential
        self.revoke()

    def revoke(self) -> list[str]:
        """Drop the subscriptions of devices whose credential changed; their ids."""
        dropped = self.subscriptions.revoke(lambda device_id, kept: self._credential(device_id) in (kept, ""))
        for device_id in dropped:
            log.info("push: device %s is revoked; its push subscription is dropped", device_id)
        if dropped:
            self.on_subscriptions(len(self.subscriptions))
        return dropped

    def _gone(self, endpoint: str) -> None:
        self.subscriptions.remove(endpoint)
        self.plan.forget(endpoint)
        self.sender.forget(endpoint)
        self.on_subscriptions(len(self.subscriptions))

    # ----------------------------------------------------------------------- the session

    def observe(self, batch: Batch[Any]) -> None:
        """Read one applied batch of the session: cards that wait, are shown, ended; subscriptions sent.

        Never raises: a push must not stop the hub from applying its batch (a bug is logged).
        """
        try:
            self._observe(batch)
        except Exception:
            log.exception("push: reading a batch failed; the calls go on")

    def _observe(self, batch: Batch[Any]) -> None:
        for event in batch.events:
            if isinstance(event, CardWaiting):
                call = event.call
                expires_at = call.expires_at if call.expires_at is not None else self.clock()
                self.card_opened(
                    call.call_id,
                    call.request.name,
                    call.request.arguments,
                    expires_at=expires_at,
                    conversation_id=call.conversation_id,
                )
            elif isinstance(event, CardShown):
                self.card_shown(event.call_id, event.device_id)
            elif isinstance(event, DevicesChanged) and not event.attached:
                self.revoke()  # a revoked pairing's device is detached: its subscription goes now
            elif isinstance(event, PushSubscribed):
                try:
                    self.subscribe(event.device_id, event.subscription)
                except PushError as exc:
                    log.info("push: refused the subscription of device %s: %s", event.device_id, exc)
                    self.refuse(event.link, str(exc))
        for call in batch.ended:
            self.card_ended(call.call_id)

    # ----------------------------------------------------------------------------- cards

    def card_opened(
        self, call_id: str, name: str, arguments: dict[str, Any], *, expires_at: float, conversation_id: str | None
    ) -> None:
        """A card waits until ``expires_at``: the devices not showing it are pushed after the grace."""
        if call_id in self._cards or not self.subscriptions:  # nobody to push to (a device subscribing is here)
            return
        self._cards[call_id] = _Waiting(name, dict(arguments), conversation_id, expires_at)
        self.plan.opened(call_id, self.clock())
        self._arm()

    def card_shown(self, call_id: str, device_id: str) -> None:
        """``device_id`` shows the card ``call_id`` (it acknowledged ``waiting_user``)."""
        self.plan.shown(call_id, device_id)

    def card_ended(self, call_id: str) -> None:
        """The card ended (answered, cancelled, expired): the notifications it caused are closed."""
        if self._cards.pop(call_id, None) is None:
            return
        now = self.clock()
        for push in self.plan.ended(call_id):
            # at Apple's push service the notification stays until the user clears it or opens the App
            if closes_allowed(push.endpoint) and self._send(
                push.endpoint, call_id, closed_notice(call_id), "closed", now, now + CLOSE_TTL
            ):
                continue
            self.sender.forget(push.endpoint, call_id)  # no close goes: the sender keeps nothing of the card

    def tick(self) -> None:
        """Send the card pushes that are due now (the timer calls it)."""
        if not self.subscriptions:
            self.plan.tick(self.clock(), {})
            return
        self.revoke()
        now = self.clock()
        targets = {entry.subscription.endpoint: set(entry.devices) for entry in self.subscriptions}
        for push in self.plan.tick(now, targets):
            card = self._cards.get(push.call_id)
            if card is None or card.expires_at <= now:
                continue
            plaintext = card_notice(
                push.call_id, card.name, card.arguments, conversation_id=card.conversation_id, preview=self.preview
            )
            self._send(push.endpoint, push.call_id, plaintext, "card", now, card.expires_at)

    def _send(
        self,
        endpoint: str,
        call_id: str,
        plaintext: bytes,
        kind: Literal["card", "closed"],
        now: float,
        expires_at: float,
    ) -> bool:
        """Hand a push to the sender; False when none goes (the subscription is gone, the key cannot be kept)."""
        entry = self.subscriptions.entries.get(endpoint)
        if entry is None:
            return False
        try:
            request = push_request(
                entry.subscription,
                plaintext,
                call_id=call_id,
                kind=kind,
                vapid=self.vapid,
                contact=self.contact,
                now=now,
                ttl=expires_at - now,
                urgency="high" if kind == "card" else "normal",
            )
        except PushError as exc:  # the key cannot be kept: no push, the call goes on
            log.warning("push: %s", exc)
            return False
        self.sender.submit(request, expires_at)
        return True

    def _arm(self) -> None:
        """One timer, at the plan's next decision."""
        self._alarm.arm(self.plan.due())

    def _on_timer(self) -> None:
        try:
            self.tick()
        except Exception:  # a push must never take the hub down
            log.exception("push: deciding the pushes failed")
        self._arm()

    async def aclose(self, timeout: float = 2.0) -> None:
        """Stop the timer; let the pushes under way go for up to ``timeout`` seconds, then stop the sender."""
        self._alarm.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.sender.idle(), timeout)
        await self.sender.aclose()
