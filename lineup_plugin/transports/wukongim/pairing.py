"""Pairing: what the agent keeps so that its App can reach it through WuKongIM, end-to-end encrypted.

The state lives in ``<data_dir>/pairing.json`` (mode 0600, written whole and atomically):

* the App user's WuKongIM token (the agent registers it for ``app_uid`` with the manager token),
* the agent's X25519 key (see :mod:`~lineup_plugin.transports.wukongim.e2e`),
* one entry per paired App device: its pairing id, its public key, when it paired, and its
  replay floor,
* the ids of revoked pairings (a revoked App is told so, once per process, in clear).

A device pairs over the direct server (``GET /api/pair``, authenticated with the App token: the App
sends its public key, the agent answers with :meth:`Pairings.offer`), or through a link whose
fragment carries a key pair the agent made for it (``lineup pair --link``). ``lineup pair
--revoke`` drops every device and the agent key and makes a new App token. The file is re-read
whenever it changes, so a running agent sees a revocation made by the ``lineup`` command at once.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import time
from collections import deque
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from lineup_plugin.errors import ConfigError, RelayError, RelayProtocolError
from lineup_plugin.private import write_private

from .e2e import AgentKey, Channel, b64url, from_b64url

FILE_NAME = "pairing.json"
#: revoked pairing ids remembered (to tell such an App why it is refused)
REVOKED_KEPT = 64
#: paired devices at most; pairing one more drops the oldest that never sent a message
MAX_DEVICES = 16
#: new devices paired at most per :data:`PAIR_WINDOW` seconds, per process (pairing again is free)
PAIR_RATE = 8
PAIR_WINDOW = 60.0
#: seconds between writes of the replay floors (and at close); the store's envelope ids dedupe the rest
FLOOR_WRITE_EVERY = 1.0


@dataclass
class Device:
    """One paired App device."""

    pairing_id: str
    app_key: str
    created: float
    floor: int = 0
    sent: int = 0


@dataclass
class PairingState:
    """Everything in the pairing file."""

    app_token: str
    agent_key: str
    devices: dict[str, Device] = field(default_factory=dict)
    revoked: list[str] = field(default_factory=list)

    @classmethod
    def new(cls, revoked: list[str] | None = None) -> PairingState:
        """A fresh state: a new App token and agent key, no device."""
        return cls(secrets.token_urlsafe(24), AgentKey().dump(), revoked=list(revoked or []))

    def as_json(self) -> dict[str, Any]:
        """What the file holds."""
        return {"v": 1, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any) -> PairingState:
        """The state of the file's JSON; ConfigError when it is not one."""
        try:
            devices = {k: Device(**v) for k, v in data["devices"].items()}
            state = cls(str(data["app_token"]), str(data["agent_key"]), devices, [str(i) for i in data["revoked"]])
            AgentKey.load(state.agent_key)
        except (KeyError, TypeError, AttributeError, RelayProtocolError, ValueError) as exc:
            raise ConfigError(
                f"the pairing file is damaged ({exc!r}); run `lineup pair --revoke` to start over"
            ) from None
        return state


class Pairings:
    """The pairing file of ``data_dir`` for the agent ``agent_uid`` and its App user ``app_uid``."""

    def __init__(self, data_dir: Path, agent_uid: str, app_uid: str) -> None:
        self.path = data_dir / FILE_NAME
        self.agent_uid = agent_uid
        self.app_uid = app_uid
        self._stamp: tuple[int, int] | None = None
        self._state: PairingState | None = None
        self._channels: dict[str, Channel] = {}
        self._floors_written = 0.0
        self._paired_at: deque[float] = deque()  # monotonic times of the last new pairings

    # -- the file ------------------------------------------------------------------------------

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        return st.st_mtime_ns, st.st_size

    @property
    def state(self) -> PairingState | None:
        """The current state (re-read when the file changed), or None when nothing was ever paired."""
        stamp = self._file_stamp()
        if stamp != self._stamp:
            self._stamp = stamp
            self._channels.clear()
            self._state = None
            if stamp is not None:
                self._state = PairingState.from_json(json.loads(self.path.read_text()))
        return self._state

    def save(self, state: PairingState) -> None:
        """Write ``state`` whole (a temporary file renamed over the old one), mode 0600."""
        write_private(self.path, json.dumps(state.as_json(), indent=1).encode("utf-8"))
        self._stamp, self._state = self._file_stamp(), state
        self._channels.clear()

    # -- pairing -------------------------------------------------------------------------------

    def pair(self, app_key: str) -> tuple[PairingState, Device]:
        """Pair the device whose public key is ``app_key`` (again: the same pairing); saved.

        A flood of pairings cannot drop a device in use: at most :data:`PAIR_RATE` new devices
        per :data:`PAIR_WINDOW` seconds, and past :data:`MAX_DEVICES` only the oldest device that
        never sent a message goes; when every device has, the new one is refused (RelayError).
        """
        from_b64url(app_key, "the App key", 32)
        state = self.state or PairingState.new()
        for device in state.devices.values():
            if device.app_key == app_key:
                return state, device
        now = time.monotonic()
        while self._paired_at and self._paired_at[0] <= now - PAIR_WINDOW:
            self._paired_at.popleft()
        if len(self._paired_at) >= PAIR_RATE:
            wait = self._paired_at[0] + PAIR_WINDOW - now
            raise RelayError(f"too many new pairings: at most {PAIR_RATE} devices a minute; try again in {wait:.0f} s")
        self.keep_floors(now=True)  # the counters of the open channels first: saving drops the channels
        state = self.state or state
        if len(state.devices) >= MAX_DEVICES:
            unused = [d for d in state.devices.values() if not self._used(d)]
            if not unused:
                raise RelayError(
                    f"{MAX_DEVICES} devices are paired and each has been used: run `lineup pair --revoke` "
                    "to start over, then pair the devices you keep"
                )
            oldest = min(unused, key=lambda d: d.created)
            del state.devices[oldest.pairing_id]
            state.revoked = [*state.revoked, oldest.pairing_id][-REVOKED_KEPT:]
        device = Device(f"pair_{secrets.token_hex(8)}", app_key, time.time())
        state.devices[device.pairing_id] = device
        self.save(state)
        self._paired_at.append(now)
        return state, device

    def _used(self, device: Device) -> bool:
        """Whether ``device`` ever sent the agent a message it took (its replay floor moved)."""
        channel = self._channels.get(device.pairing_id)
        return device.floor > 0 or (channel is not None and channel.window.highest > 0)

    def pair_link(self) -> tuple[PairingState, Device, str]:
        """Pair a device whose key pair the agent makes (for a link); also returns its private key."""
        private = X25519PrivateKey.generate()
        state, device = self.pair(b64url(private.public_key().public_bytes_raw()))
        return state, device, b64url(private.private_bytes_raw())

    def revoke(self) -> PairingState:
        """Drop every device and the agent key, with a new App token; the new state (saved)."""
        old = self.state
        revoked = (old.revoked + list(old.devices)) if old else []
        state = PairingState.new(revoked[-REVOKED_KEPT:])
        self.save(state)
        return state

    def offer(self, state: PairingState, device: Device, ws_url: str, content_type: int) -> dict[str, Any]:
        """What the App device keeps: where and as whom to log in to WuKongIM, and whom to trust."""
        return {
            "v": 1,
            "id": device.pairing_id,
            "ws": ws_url,
            "uid": self.app_uid,
            "token": state.app_token,
            "agent": self.agent_uid,
            "agent_key": AgentKey.load(state.agent_key).public,
            "content_type": content_type,
        }

    # -- channels ------------------------------------------------------------------------------

    def channel(self, pairing_id: str) -> Channel | None:
        """The channel of a paired device, or None (not paired, or revoked)."""
        state = self.state
        if state is None or pairing_id not in state.devices:
            return None
        channel = self._channels.get(pairing_id)
        if channel is None:
            device = state.devices[pairing_id]
            key = AgentKey.load(state.agent_key)
            channel = Channel(
                key, device.app_key, pairing_id, self.agent_uid, self.app_uid, floor=device.floor, sent=device.sent
            )
            self._channels[pairing_id] = channel
        return channel

    def channels(self) -> list[Channel]:
        """The channels of every paired device (the agent seals one copy of each message per device)."""
        state = self.state
        if state is None:
            return []
        return [c for pairing_id in list(state.devices) if (c := self.channel(pairing_id)) is not None]

    def revoked(self, pairing_id: str) -> bool:
        """Whether ``pairing_id`` was paired once and revoked since."""
        state = self.state
        return state is not None and pairing_id in state.revoked

    def keep_floors(self, *, now: bool = False) -> None:
        """Write the counters of the open channels (at most every :data:`FLOOR_WRITE_EVERY` s).

        The floor kept is the highest counter accepted: after a restart nothing older is taken.
        The last counter sent is kept too: after a restart with the clock set back, counters
        still go up (a second's worth lost to kill -9 is covered by the clock).
        """
        state = self.state
        if state is None or (not now and time.monotonic() - self._floors_written < FLOOR_WRITE_EVERY):
            return
        changed = False
        for pairing_id, channel in self._channels.items():
            device = state.devices.get(pairing_id)
            if device is None:
                continue
            kept = (max(device.floor, channel.window.highest), max(device.sent, channel.sent))
            if kept != (device.floor, device.sent):
                (device.floor, device.sent), changed = kept, True
        self._floors_written = time.monotonic()
        if changed:
            channels = dict(self._channels)
            with contextlib.suppress(OSError):
                self.save(state)
            self._channels.update(channels)
