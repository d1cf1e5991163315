"""The push subscriptions the Apps gave the agent, kept in ``<data_dir>/push.json`` (mode 0600).

One entry per subscription (a browser's push endpoint and keys). Each names the devices that sent
it — the same phone is one device over the direct server and another over the relay — and, per
device, the credential it was admitted with when it subscribed: the direct token's fingerprint or
its relay pairing. A device whose credential changed since (a new token, a revoked pairing) is
revoked with it: :meth:`Subscriptions.revoke` drops it, and an entry with no device left is gone.

The file is written whole and atomically, so a crash leaves the old one or the new one. It holds
the endpoints (capability addresses: whoever has one and the keys can push to that browser), so
it is never world-readable.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import PushError, PushServiceNotAllowed
from ..private import write_private
from .message import Subscription
from .services import PUSH_SERVICES

log = logging.getLogger(__name__)

FILE_NAME = "push.json"
#: subscriptions kept at most; a new one beyond drops the one used least recently
MAX_SUBSCRIPTIONS = 32
#: devices one subscription may name (a phone is a device per path: direct, relay)
MAX_DEVICES = 8

#: whether a device (its id, the credential it subscribed with) is still admitted with that credential
Admitted = Callable[[str, str], bool]


@dataclass
class Entry:
    """One subscription and the devices (device id → credential) that sent it."""

    subscription: Subscription
    devices: dict[str, str]
    updated: float

    def as_json(self) -> dict[str, Any]:
        """What the file holds for this entry."""
        return {**self.subscription.as_json(), "devices": self.devices, "updated": self.updated}

    @classmethod
    def from_json(cls, data: Any, services: Sequence[str] = PUSH_SERVICES) -> Entry:
        """An entry of the file (at one of ``services``); PushError when it is not one."""
        subscription = Subscription.from_json(data, services)
        try:
            devices = {str(k): str(v) for k, v in dict(data["devices"]).items()}
            return cls(subscription, devices, float(data["updated"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise PushError(f"not a push subscription entry: {exc!r}") from exc


@dataclass
class Subscriptions:
    """The subscriptions of ``data_dir/push.json`` (read at once; written on every change)."""

    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)

    @classmethod
    def load(cls, data_dir: Path, services: Sequence[str] = PUSH_SERVICES) -> Subscriptions:
        """The kept subscriptions; a missing file is none, a damaged one is set aside (logged) and none.

        A subscription at a push service no longer among ``services`` is dropped.
        """
        path = data_dir / FILE_NAME
        found = cls(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = []
            for item in data["subscriptions"]:
                try:
                    entries.append(Entry.from_json(item, services))
                except PushServiceNotAllowed as exc:  # the setting changed: dropped, the App subscribes again
                    log.info("push: %s", exc)
        except FileNotFoundError:
            return found
        except (OSError, ValueError, KeyError, TypeError, PushError) as exc:
            aside = path.with_name(f"{path.name}.damaged")
            with contextlib.suppress(OSError):
                path.replace(aside)
            log.warning("push: %s is damaged (%s); set aside as %s, the Apps subscribe again", path, exc, aside.name)
            return found
        found.entries = {e.subscription.endpoint: e for e in entries}
        return found

    def __iter__(self) -> Iterator[Entry]:
        return iter(list(self.entries.values()))

    def __len__(self) -> int:
        return len(self.entries)

    def of_device(self, device_id: str) -> list[Entry]:
        """The entries ``device_id`` sent."""
        return [e for e in self.entries.values() if device_id in e.devices]

    def add(self, device_id: str, credential: str, subscription: Subscription, now: float) -> Entry:
        """``device_id`` (admitted with ``credential``) subscribed with ``subscription``; saved if it is news.

        A device has one subscription: the one it sent before is dropped for it (a browser that
        subscribed again got a new endpoint). The same subscription sent again (after every
        welcome) writes nothing.
        """
        entry = self.entries.get(subscription.endpoint)
        if entry is not None and entry.subscription == subscription and entry.devices.get(device_id) == credential:
            entry.updated = now  # sent again after a reconnect: nothing to write
            return entry
        for other in self.of_device(device_id):
            if other.subscription.endpoint != subscription.endpoint:
                self._drop_device(other, device_id)
        entry = self.entries.get(subscription.endpoint)
        if entry is None or entry.subscription != subscription:
            devices = dict(entry.devices) if entry is not None else {}
            entry = self.entries[subscription.endpoint] = Entry(subscription, devices, now)
        entry.devices[device_id] = credential
        entry.updated = now
        while len(entry.devices) > MAX_DEVICES:
            del entry.devices[next(iter(entry.devices))]
        while len(self.entries) > MAX_SUBSCRIPTIONS:
            oldest = min(self.entries.values(), key=lambda e: e.updated)
            del self.entries[oldest.subscription.endpoint]
        self.save()
        return entry

    def remove_device(self, device_id: str) -> bool:
        """``device_id`` unsubscribed (or is revoked); saved. Whether it had a subscription."""
        entries = self.of_device(device_id)
        for entry in entries:
            self._drop_device(entry, device_id)
        if entries:
            self.save()
        return bool(entries)

    def remove(self, endpoint: str) -> bool:
        """The push service said ``endpoint`` is gone (404/410); saved. Whether it was kept."""
        if self.entries.pop(endpoint, None) is None:
            return False
        self.save()
        return True

    def revoke(self, admitted: Admitted) -> list[str]:
        """Drop every device no longer ``admitted`` with the credential it subscribed with; the ids dropped (saved)."""
        dropped = [
            device_id
            for entry in self.entries.values()
            for device_id, credential in entry.devices.items()
            if not admitted(device_id, credential)
        ]
        for device_id in dropped:
            for entry in self.of_device(device_id):
                self._drop_device(entry, device_id)
        if dropped:
            self.save()
        return dropped

    def _drop_device(self, entry: Entry, device_id: str) -> None:
        entry.devices.pop(device_id, None)
        if not entry.devices:
            self.entries.pop(entry.subscription.endpoint, None)

    def save(self) -> None:
        """Write the file whole and atomically, mode 0600 (a failure is logged: pushes go on from memory)."""
        data = {"v": 1, "subscriptions": [e.as_json() for e in self.entries.values()]}
        try:
            write_private(self.path, json.dumps(data, ensure_ascii=False).encode("utf-8"))
        except OSError as exc:
            log.warning("push: cannot write %s (%s); the subscriptions are kept in memory", self.path, exc)
