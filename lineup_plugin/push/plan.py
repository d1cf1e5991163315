"""Who hears about a waiting card, and when — the rules of push, sans I/O.

* A card opens: each subscribed device gets **one** push for it, unless the card is on its screen:
  a device that shows the card acknowledges it (``tool.ack`` ``waiting_user``) as it draws it, so
  the push waits :data:`SHOWN_GRACE` seconds for that, then goes to every subscription none of
  whose devices showed the card. A phone that is locked or has the App closed shows nothing and
  gets the push; an App that is open (even in a background tab) shows the card and gets none (the
  App notifies from the page itself).
* Re-sending a card (a reconnect, a repeated call, a retry of the runtime) never pushes again: the
  subscriptions pushed for a call are remembered until it ends.
* The card ends (answered anywhere, cancelled, expired): every subscription that got its push
  gets a follow-up on the same topic that closes the notification.

Subscriptions are named by endpoint; one subscription may stand for several device ids (the same
phone over the direct server and over the relay). The caller passes the time and the
subscriptions; :meth:`PushPlan.due` says when :meth:`PushPlan.tick` must run next.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal

#: seconds a new card waits for a device to say it shows it before the others are pushed
SHOWN_GRACE = 5.0

#: endpoint → the device ids that subscribed with it
Targets = Mapping[str, Collection[str]]


@dataclass(frozen=True)
class Push:
    """One push to send: the card ``call_id`` is waiting, or its notification is to close."""

    endpoint: str
    call_id: str
    kind: Literal["card", "closed"]


@dataclass
class _Card:
    decide_at: float
    shown_on: set[str] = field(default_factory=set)
    pushed: set[str] = field(default_factory=set)
    decided: bool = False


class PushPlan:
    """The push rules over the cards that wait (see the module docstring)."""

    def __init__(self, grace: float = SHOWN_GRACE) -> None:
        self.grace = grace
        self._cards: dict[str, _Card] = {}

    def opened(self, call_id: str, now: float) -> None:
        """The card ``call_id`` waits from ``now`` (a card already waiting keeps its state)."""
        self._cards.setdefault(call_id, _Card(now + self.grace))

    def shown(self, call_id: str, device_id: str) -> None:
        """``device_id`` shows the card ``call_id``: its subscription is not pushed for it."""
        card = self._cards.get(call_id)
        if card is not None:
            card.shown_on.add(device_id)

    def due(self) -> float | None:
        """When :meth:`tick` must run next (None: nothing to decide)."""
        times = [card.decide_at for card in self._cards.values() if not card.decided]
        return min(times) if times else None

    def tick(self, now: float, targets: Targets) -> list[Push]:
        """The card pushes due at ``now``: one per subscription not showing the card, once per card."""
        pushes = []
        for call_id, card in self._cards.items():
            if card.decided or card.decide_at > now:
                continue
            card.decided = True
            for endpoint, devices in targets.items():
                if endpoint not in card.pushed and not card.shown_on.intersection(devices):
                    card.pushed.add(endpoint)
                    pushes.append(Push(endpoint, call_id, "card"))
        return pushes

    def ended(self, call_id: str) -> list[Push]:
        """The card ``call_id`` ended: a closing push to every subscription that got its card push."""
        card = self._cards.pop(call_id, None)
        if card is None:
            return []
        return [Push(endpoint, call_id, "closed") for endpoint in sorted(card.pushed)]

    def forget(self, endpoint: str) -> None:
        """The subscription ``endpoint`` is gone: nothing more is sent to it."""
        for card in self._cards.values():
            card.pushed.discard(endpoint)

    @property
    def waiting(self) -> list[str]:
        """The call ids of the cards that wait."""
        return list(self._cards)
